"""Spark's JVM class archive (AppCDS): a restarting job's JVM maps the classes an earlier run loaded instead of
parsing and verifying them again.

Spark's start is CPU-bound on small machines: most of a restarting driver JVM's CPU before its first batch goes
to compiling code (see `accelerators.driver_java_options`) and to loading about 20k classes, which an archive of
those classes spares (figures in docs/PERFORMANCE.md#restart).

Java 17 writes a dynamic archive only when the JVM exits normally (``-XX:ArchiveClassesAtExit``), so:

* no archive yet: the JVM is started with ``-XX:ArchiveClassesAtExit=<archive>.tmp-<driver pid>``; at the stop
  of a job that completed a batch (its streaming classes loaded) the driver ends the JVM and waits for it, and
  moves the file into place only if the JVM exited with status 0 (a partial archive crashes a JVM that maps it:
  SIGBUS, checked);
* an archive: the JVM maps it (``-XX:SharedArchiveFile``). Each start first checks it with a ``java -version``
  that maps it (≈ 0.2 s); one that fails is set aside as ``.bad`` and the job starts without, writing a new one.

The archive's name carries a fingerprint of the java executable and Spark's jars, so an upgraded image or JDK
writes a new one instead of the JVM silently ignoring the old one. Only for a JVM this process starts in local
mode (on a cluster spark-submit starts it). No Spark import.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import logging
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("elrwatch.stream")

ARCHIVE_PREFIX = "spark-classes-"
# The JVM's own CDS messages (hundreds of "Skipping ...: Signed JAR" lines while it dumps) stay out of the log.
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
CHECK_TIMEOUT_S = 30.0
DUMP_TIMEOUT_S = 60.0
# Archives of other builds (an older image, another installation sharing the directory) not read for this long
# are removed: each is ≈ 175 MB. One still in use is at worst written again at its job's next clean stop.
UNUSED_FOR_S = 7 * 24 * 3600


def default_archive_dir() -> str:
    """``$XDG_CACHE_HOME/elrwatch`` (``~/.cache/elrwatch``): one archive per machine and fingerprint."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "elrwatch")


def java_executable() -> str | None:
    """The java Spark's launcher runs: ``$JAVA_HOME/bin/java``, else the first on the PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    return shutil.which("java")


def spark_jars_dir() -> str:
    """The jars of the installed pyspark (its SPARK_HOME in local mode)."""
    import pyspark

    return os.path.join(os.path.dirname(pyspark.__file__), "jars")


def fingerprint(java: str, jars_dir: str) -> str:
    """What the archive depends on: the JVM's binary and Spark's jars (names, sizes, times)."""
    digest = hashlib.sha256()
    real = os.path.realpath(java)
    stat = os.stat(real)
    digest.update(f"{real}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    for name in sorted(os.listdir(jars_dir)):
        jar = os.stat(os.path.join(jars_dir, name))
        digest.update(f"{name}\0{jar.st_size}\0{jar.st_mtime_ns}\0".encode())
    return digest.hexdigest()[:16]


def archive_path(directory: str, java: str, jars_dir: str) -> str:
    """The archive of this java and these jars in ``directory``."""
    return os.path.join(directory, f"{ARCHIVE_PREFIX}{fingerprint(java, jars_dir)}.jsa")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def archive_usable(java: str, path: str) -> bool:
    """Whether a JVM that maps ``path`` starts (a truncated archive kills it with SIGBUS)."""
    # the crash report of a JVM killed by a bad archive goes nowhere (not into the working directory)
    command = [java, f"-XX:SharedArchiveFile={path}", "-Xshare:auto", *QUIET.split(), "-XX:ErrorFile=/dev/null"]
    try:
        done = subprocess.run(
            [*command, "-version"],
            capture_output=True,
            timeout=CHECK_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@dataclass
class ClassArchive:
    """The archive of one job's JVM: mapped (``writing`` None) or being written at the JVM's exit."""

    path: str
    writing: str | None = None

    def java_options(self) -> str:
        """The driver JVM's options for this archive."""
        if self.writing is not None:
            return f"-XX:ArchiveClassesAtExit={self.writing} {QUIET}"
        return f"-XX:SharedArchiveFile={self.path} -Xshare:auto {QUIET}"

    def finish(self, jvm: Any, write: bool = True) -> bool:
        """After the job's stop: end the JVM (``jvm``: its ``Popen``; Spark's gateway JVM exits when its stdin
        closes), wait for it to write the archive, then move it into place. True if an archive was written.
        ``write`` False (a job that never completed a batch has not loaded the streaming classes, and an archive
        is never rewritten for the same build): the JVM is killed instead, before it writes. The JVM is ended
        only when an archive was pending: the caller's process cannot start Spark again after that."""
        if self.writing is None or jvm is None:
            return False
        if not write:
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                jvm.kill()
                jvm.wait(DUMP_TIMEOUT_S)
            with contextlib.suppress(OSError):
                os.remove(self.writing)
            return False
        began = time.monotonic()
        # a warning so that it shows wherever the stop does (`make demo` shows warnings only): the wait is the news
        log.warning("writing the JVM class archive before exiting (once per JDK and Spark build, ≈ 15 s on 2 cores)")
        try:
            if jvm.stdin is not None:
                jvm.stdin.close()
            code = jvm.wait(DUMP_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.warning("Spark's JVM did not exit to write its class archive (%s); the next start writes it", exc)
            return False
        size = os.path.getsize(self.writing) if os.path.exists(self.writing) else 0
        if code != 0 or size == 0:
            log.warning("Spark's JVM exited with status %s without a class archive; the next start tries again", code)
            with contextlib.suppress(OSError):
                os.remove(self.writing)
            return False
        os.replace(self.writing, self.path)
        log.info(
            "JVM class archive written in %.1fs (%.0f MB, %s): later starts of Spark take less CPU",
            time.monotonic() - began,
            size / 1e6,
            self.path,
        )
        return True


def prepare(directory: str, jars_dir: str) -> ClassArchive | None:
    """The archive to map or to write for a JVM this process is about to start; None when there is no java or
    the directory cannot be written (logged; the job starts without)."""
    java = java_executable()
    if java is None:
        return None
    try:
        os.makedirs(directory, exist_ok=True)
        path = archive_path(directory, java, jars_dir)
        for stale in glob.glob(f"{glob.escape(path)}.tmp-*"):  # left by a job killed while its JVM wrote
            suffix = stale.rsplit("-", 1)[-1]
            if not suffix.isdigit() or not _alive(int(suffix)):
                os.remove(stale)
        now = time.time()
        for other in glob.glob(os.path.join(glob.escape(directory), f"{ARCHIVE_PREFIX}*.jsa*")):
            if not other.startswith(path) and ".tmp-" not in other and now - os.stat(other).st_atime > UNUSED_FOR_S:
                os.remove(other)
        if os.path.exists(path):
            if archive_usable(java, path):
                return ClassArchive(path)
            log.warning("JVM class archive %s is unusable: set aside as .bad, a new one is written", path)
            os.replace(path, path + ".bad")
        probe = os.path.join(directory, f".write-check-{os.getpid()}")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as exc:
        log.warning("no JVM class archive in %s (%s): Spark starts without", directory, exc)
        return None
    return ClassArchive(path, writing=f"{path}.tmp-{os.getpid()}")  # this process's JVM writes it
