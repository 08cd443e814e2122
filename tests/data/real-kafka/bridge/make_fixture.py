"""Write this folder's fixture from a real Kafka 4.4.0 cluster: ``python tests/data/real-kafka/bridge/make_fixture.py``.

Runs tests/test_bridge_real.py's SCENARIO (kills, restarts, min ISR changes, ELR, an unclean election) on a fresh
cluster and copies:

* ``controller.log``: the controller's whole metadata log (one segment) and ``controller.dump``, Kafka's
  ``DumpLogSegments --cluster-metadata-decoder`` output for it;
* ``broker1.checkpoint``: broker 1's newest snapshot and ``broker1-checkpoint.dump``.

tests/test_bridge.py checks the decoder against them without a JVM.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # tests/


def main() -> None:
    from test_bridge_real import SCENARIO, SNAPSHOT_PROPS

    from elrwatch.devtools.kafka_cluster import KafkaCluster

    cluster = KafkaCluster(brokers=3)
    cluster.brokers[1].extra_props.update(SNAPSHOT_PROPS)
    with cluster:
        for name, step in SCENARIO:
            print("step:", name, flush=True)
            step(cluster)
        cluster.wait_metadata_quiet()
        (segment,) = cluster.metadata_log_files()
        shutil.copy(segment, HERE / "controller.log")
        (HERE / "controller.dump").write_text(cluster.dump_log_segments([segment]))
        snapshot = cluster.metadata_snapshot_files(cluster.brokers[1])[-1]
        shutil.copy(snapshot, HERE / "broker1.checkpoint")
        (HERE / "broker1-checkpoint.dump").write_text(cluster.dump_log_segments([snapshot]))
        print("snapshot:", snapshot.name)


if __name__ == "__main__":
    main()
