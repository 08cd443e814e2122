"""The JVM class archive (streaming/jvm_archive.py), against the real java of this machine."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from elrwatch.streaming import jvm_archive
from elrwatch.streaming.jvm_archive import ClassArchive

JAVA = jvm_archive.java_executable()
pytestmark = pytest.mark.skipif(JAVA is None, reason="needs java (make test installs it)")

# A JVM that lives until its stdin closes, as Spark's gateway JVM does, then exits with the given status.
WAIT_FOR_EOF = """
public class WaitForEof {
    public static void main(String[] args) throws Exception {
        while (System.in.read() != -1) { }
        System.exit(Integer.parseInt(args[0]));
    }
}
"""


def _jars(tmp_path) -> str:
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "spark-core.jar").write_bytes(b"x" * 10)
    return str(jars)


def _gateway_like(tmp_path, archive: ClassArchive, status: int) -> subprocess.Popen:
    source = tmp_path / "WaitForEof.java"
    source.write_text(WAIT_FOR_EOF)
    options = archive.java_options().split()
    return subprocess.Popen([JAVA, *options, str(source), str(status)], stdin=subprocess.PIPE, cwd=tmp_path)


def test_fingerprint_follows_spark_s_jars(tmp_path):
    jars = _jars(tmp_path)
    before = jvm_archive.fingerprint(JAVA, jars)
    assert jvm_archive.fingerprint(JAVA, jars) == before
    (tmp_path / "jars" / "spark-sql.jar").write_bytes(b"y")
    assert jvm_archive.fingerprint(JAVA, jars) != before, "an upgraded Spark writes a new archive"


def test_first_run_writes_at_a_clean_exit_and_the_next_maps_it(tmp_path):
    directory, jars = str(tmp_path / "archive"), _jars(tmp_path)
    first = jvm_archive.prepare(directory, jars)
    assert first is not None and first.writing == f"{first.path}.tmp-{os.getpid()}"
    assert "-XX:ArchiveClassesAtExit=" in first.java_options()
    assert first.finish(_gateway_like(tmp_path, first, 0))
    assert os.path.getsize(first.path) > 0 and not os.path.exists(first.writing)
    second = jvm_archive.prepare(directory, jars)
    assert second == ClassArchive(first.path), "an archive that maps is used as it is"
    assert f"-XX:SharedArchiveFile={first.path}" in second.java_options()
    assert not second.finish(None), "nothing to write: the JVM is left alone"


def test_a_job_that_completed_no_batch_writes_no_archive(tmp_path):
    """Its JVM has not loaded the streaming classes: it is killed before it writes, the next run writes one."""
    jars = _jars(tmp_path)
    archive = jvm_archive.prepare(str(tmp_path / "archive"), jars)
    jvm = _gateway_like(tmp_path, archive, 0)
    assert not archive.finish(jvm, write=False)
    assert jvm.returncode is not None and jvm.returncode != 0, "killed, not exited"
    assert not os.path.exists(archive.path) and not os.path.exists(archive.writing)
    assert jvm_archive.prepare(str(tmp_path / "archive"), jars).writing is not None


def test_a_jvm_failing_at_exit_leaves_no_archive(tmp_path):
    archive = jvm_archive.prepare(str(tmp_path / "archive"), _jars(tmp_path))
    assert not archive.finish(_gateway_like(tmp_path, archive, 3))
    assert not os.path.exists(archive.path) and not os.path.exists(archive.writing)


def test_a_truncated_archive_is_set_aside_instead_of_crashing_spark(tmp_path):
    """A partial archive kills the JVM that maps it (SIGBUS): the check finds it before Spark starts."""
    directory, jars = str(tmp_path / "archive"), _jars(tmp_path)
    good = jvm_archive.prepare(directory, jars)
    assert good.finish(_gateway_like(tmp_path, good, 0))
    with open(good.path, "rb") as fh:
        whole = fh.read()
    os.chmod(good.path, 0o644)
    with open(good.path, "wb") as fh:
        fh.write(whole[: len(whole) // 2])
    assert not jvm_archive.archive_usable(JAVA, good.path)
    again = jvm_archive.prepare(directory, jars)
    assert again.writing is not None and not os.path.exists(good.path) and os.path.exists(good.path + ".bad")
    assert not [name for name in os.listdir(tmp_path) if name.startswith("hs_err")]


def test_leftovers_of_killed_writers_are_removed_but_not_a_live_writer_s(tmp_path):
    directory, jars = str(tmp_path / "archive"), _jars(tmp_path)
    path = jvm_archive.prepare(directory, jars).path
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    for pid in (dead.pid, os.getppid()):
        with open(f"{path}.tmp-{pid}", "wb") as fh:
            fh.write(b"partial")
    jvm_archive.prepare(directory, jars)
    assert not os.path.exists(f"{path}.tmp-{dead.pid}") and os.path.exists(f"{path}.tmp-{os.getppid()}")


def test_an_unwritable_directory_means_no_archive(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    assert jvm_archive.prepare(str(blocked / "archive"), _jars(tmp_path)) is None


def test_archives_of_other_builds_unread_for_a_week_are_removed(tmp_path):
    directory, jars = tmp_path / "archive", _jars(tmp_path)
    directory.mkdir()
    old, recent = directory / "spark-classes-0ld.jsa", directory / "spark-classes-recent.jsa"
    for other in (old, recent):
        other.write_bytes(b"archive")
    week_ago = os.stat(old).st_mtime - jvm_archive.UNUSED_FOR_S - 60
    os.utime(old, (week_ago, week_ago))
    ours = jvm_archive.prepare(str(directory), jars)
    assert not old.exists() and recent.exists()
    assert ours.writing is not None
