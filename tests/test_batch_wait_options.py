"""`--min-records-per-batch` and `--max-batch-delay` reach Spark's Kafka source as ``minOffsetsPerTrigger`` and
``maxTriggerDelay``; unset, the source gets neither (Spark's default: no wait)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from elrwatch.cli import app
from elrwatch.kafkaio.jvm import native_kafka_options
from elrwatch.streaming.config import JobConfig, KafkaSettings

WAIT_OPTIONS = ("minOffsetsPerTrigger", "maxTriggerDelay")


def _native(config: JobConfig) -> dict[str, str]:
    return native_kafka_options(config.source_options())


def test_unset_the_source_gets_no_wait() -> None:
    config = JobConfig(kafka=KafkaSettings(bootstrap_servers="b:9092"), topic="t", max_records_per_batch=500)
    native = _native(config)
    assert native["maxOffsetsPerTrigger"] == "500"
    assert not set(WAIT_OPTIONS) & set(native)


@pytest.mark.parametrize(
    ("delay", "spark_delay"), [(None, None), ("2s", "2000ms"), ("500ms", "500ms"), ("1.5s", "1500ms")]
)
def test_a_minimum_and_a_delay_reach_spark(delay: str | None, spark_delay: str | None) -> None:
    config = JobConfig(
        kafka=KafkaSettings(bootstrap_servers="b:9092"), topic="t", min_records_per_batch=50_000, max_batch_delay=delay
    )
    native = _native(config)
    assert native["minOffsetsPerTrigger"] == "50000"
    assert native.get("maxTriggerDelay") == spark_delay


def test_available_now_reads_without_a_wait() -> None:
    config = JobConfig(
        kafka=KafkaSettings(bootstrap_servers="b:9092"),
        topic="t",
        available_now=True,
        min_records_per_batch=50_000,
        max_batch_delay="1s",
    )
    assert not set(WAIT_OPTIONS) & set(_native(config))


@pytest.mark.parametrize(
    ("values", "error"),
    [
        ({"max_batch_delay": "1s"}, "needs --min-records-per-batch"),
        ({"min_records_per_batch": 10, "max_batch_delay": "soon"}, "a duration"),
        ({"min_records_per_batch": 10, "source": "kafka"}, "need --source kafka-native"),
    ],
)
def test_a_wait_spark_would_ignore_is_refused(values: dict[str, object], error: str) -> None:
    config = JobConfig(kafka=KafkaSettings(bootstrap_servers="b:9092"), topic="t", **values)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=error):
        config.source_options()


def test_the_cli_and_the_environment_set_them(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from elrwatch.streaming import query

    seen: list[JobConfig] = []
    monkeypatch.setattr(query, "run", lambda config, **_kwargs: seen.append(config) or 0)
    args = ["stream", "--bootstrap-servers", "b:9092", "--topic", "t", "--checkpoint", str(tmp_path / "ck")]
    args += ["--store", f"sqlite:///{tmp_path}/s.db"]
    result = CliRunner().invoke(app, [*args, "--min-records-per-batch", "20000", "--max-batch-delay", "1s"])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(
        app, args, env={"ELRWATCH_MIN_RECORDS_PER_BATCH": "300", "ELRWATCH_MAX_BATCH_DELAY": "250ms"}
    )
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert [(c.min_records_per_batch, c.max_batch_delay) for c in seen] == [(20000, "1s"), (300, "250ms"), (None, None)]
    assert seen[0].batch_wait_options() == {"minOffsetsPerTrigger": "20000", "maxTriggerDelay": "1000ms"}
