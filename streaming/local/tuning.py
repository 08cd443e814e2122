"""The knobs of the local-mode accelerators (``elrwatch stream`` options), one default each."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class LocalTuning:
    """How the job speeds itself up; each one is off or moot on a cluster unless said otherwise."""

    keep_workers_warm: bool = True  # warm.py: keep Python workers alive through idle periods (any master)
    jvm_quick_start: bool = True  # the driver JVM compiles with C1 only (jvm.driver_java_options; any master)
    jvm_class_archive: bool = True  # jvm_archive.py: local mode maps (or writes) an archive of Spark's classes
    jvm_class_archive_dir: str | None = None  # None: jvm_archive.default_archive_dir()
