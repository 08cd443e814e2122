"""Where `--source kafka-native` finds Spark's Kafka connector, and the one line naming a missing jar."""

from __future__ import annotations

from pathlib import Path

import pytest

from elrwatch.streaming import connector
from elrwatch.streaming.connector import ConnectorError, missing_artifacts, parse_jar, resolve, spark_version

VERSION = spark_version()
FULL = (
    f"spark-sql-kafka-0-10_2.13-{VERSION}.jar",
    f"spark-token-provider-kafka-0-10_2.13-{VERSION}.jar",
    "kafka-clients-3.9.2.jar",
    "commons-pool2-2.13.1.jar",
)


def _folder(path: Path, names: tuple[str, ...]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for name in names:
        (path / name).write_bytes(b"")
    return path


@pytest.fixture(autouse=True)
def _pyspark_without_connector(monkeypatch, tmp_path):
    """pyspark's own jars folder as installed here: without the connector (tests may put it there)."""
    monkeypatch.setattr(connector, "pyspark_jars_dir", lambda: str(tmp_path / "pyspark-jars"))


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("spark-sql-kafka-0-10_2.13-4.2.0.jar", ("spark-sql-kafka-0-10_2.13", "4.2.0")),
        ("kafka-clients-3.9.2.jar", ("kafka-clients", "3.9.2")),
        ("hive-exec-2.3.10-core.jar", ("hive-exec", "2.3.10-core")),
        ("README.txt", None),
    ],
)
def test_jar_names_split_into_artifact_and_version(name, parsed):
    assert parse_jar(name) == parsed


def test_a_connector_of_another_spark_version_is_missing():
    files = [n.replace(VERSION, "3.5.1") if n.startswith("spark-") else n for n in FULL]
    assert missing_artifacts(files, VERSION) == [
        f"spark-sql-kafka-0-10_2.13-{VERSION}.jar",
        f"spark-token-provider-kafka-0-10_2.13-{VERSION}.jar",
    ]
    assert missing_artifacts(FULL, VERSION) == []


def test_given_folder_is_used_and_checked(tmp_path):
    jars = _folder(tmp_path / "given", FULL)
    found = resolve(str(jars), None, cwd=str(tmp_path))
    assert sorted(Path(j).name for j in found.jars) == sorted(FULL) and found.packages is None
    (jars / "kafka-clients-3.9.2.jar").unlink()
    with pytest.raises(ConnectorError) as error:
        resolve(str(jars), None, cwd=str(tmp_path))
    message = str(error.value)
    assert "kafka-clients-*.jar not in --spark-jars" in message and "make spark-jars" in message
    assert "\n" not in message


def test_given_list_of_files(tmp_path):
    jars = _folder(tmp_path / "given", FULL)
    found = resolve(",".join(str(jars / n) for n in FULL), None)
    assert len(found.jars) == 4
    with pytest.raises(ConnectorError, match="is not a file or a folder"):
        resolve(str(jars / "nope.jar"), None)


def test_wrong_version_is_named(tmp_path):
    jars = _folder(tmp_path / "given", tuple(n.replace(VERSION, "3.5.1") for n in FULL))
    with pytest.raises(ConnectorError, match=f"is for another Spark version than pyspark's {VERSION}"):
        resolve(str(jars), None)


def test_pyspark_jars_then_packages_then_the_checkout(tmp_path):
    # the checkout's folder (make spark-jars) when nothing else is given
    _folder(tmp_path / ".tools" / "spark" / "jars", FULL)
    assert resolve(None, None, cwd=str(tmp_path)).origin.endswith(".tools/spark/jars")
    # Maven coordinates take precedence over the checkout
    coordinates = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{VERSION}"
    assert resolve(None, coordinates, cwd=str(tmp_path)).packages == coordinates
    # an image with the connector in pyspark's own jars needs neither
    _folder(tmp_path / "pyspark-jars", FULL)
    found = resolve(None, coordinates, cwd=str(tmp_path))
    assert found.jars == () and found.packages is None and "pyspark's jars" in found.origin


def test_nothing_found_names_every_missing_jar(tmp_path):
    with pytest.raises(ConnectorError) as error:
        resolve(None, None, cwd=str(tmp_path))
    message = str(error.value)
    for name in (f"spark-sql-kafka-0-10_2.13-{VERSION}.jar", "kafka-clients-*.jar", "commons-pool2-*.jar"):
        assert name in message
    assert f"--spark-jars-packages org.apache.spark:spark-sql-kafka-0-10_2.13:{VERSION}" in message
