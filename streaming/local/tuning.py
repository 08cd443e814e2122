"""Where the local-mode accelerators keep their files (an ``elrwatch stream`` option).

The accelerators themselves are fixed behaviour, each kept because a benchmark showed it pays
(docs/PERFORMANCE.md, "The local-mode accelerators"): the Python workers kept warm through idle periods, the
driver JVM compiling with C1 only, and in local mode an archive of Spark's classes. The C1-only compilation is
overridden with ``--spark-conf spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=4`` (later flags win).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class LocalTuning:
    """Where the local-mode accelerators keep their files."""

    jvm_class_archive_dir: str | None = None  # None: jvm_archive.default_archive_dir()
