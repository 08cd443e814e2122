"""The columnar partition store (the runtime's): `store.ColumnarPartitions` and its parts, one concern a module.

* `table`: the columns (a row per partition) and the interned broker-id lists;
* `store`: the store itself: lookups, the handlers the registry names, the segment and its flush, reactions;
* `derive`, `elections`, `audit`: status, election counters and the invariant audit as vectors;
* `parse`, `lines`, `admission`: partition-record lines parsed as Arrow columns with a per-line proof, a block of
  them as segment inputs, and their admission as vectors;
* `output`: what a bucket emits after a batch, from the columns; `snapshot`: the Arrow IPC snapshot.
"""

from elrwatch.state.partitions.columnar.store import ColumnarPartitions

__all__ = ["ColumnarPartitions"]
