"""Every option of every `elrwatch` command can be set from the environment, and `--help` says how."""

from __future__ import annotations

import click
import pytest
import typer.main
from typer.testing import CliRunner

from elrwatch.cli import app

COMMAND = typer.main.get_command(app)
COMMANDS = sorted(COMMAND.commands)  # type: ignore[attr-defined]


def _options(name: str) -> list[click.Option]:
    command = COMMAND.commands[name]  # type: ignore[attr-defined]
    return [p for p in command.params if isinstance(p, click.Option) and p.name != "help"]


def test_the_cli_has_its_commands() -> None:
    assert {"replay", "status", "produce", "stream", "api", "demo"} <= set(COMMANDS)


@pytest.mark.parametrize("name", COMMANDS)
def test_every_option_has_an_env_var_shown_in_help(name: str) -> None:
    result = CliRunner().invoke(app, [name, "--help"], env={"COLUMNS": "400", "NO_COLOR": "1"}, terminal_width=400)
    assert result.exit_code == 0, result.output
    for option in _options(name):
        envvars = [option.envvar] if isinstance(option.envvar, str) else list(option.envvar or [])
        assert envvars, f"{name} {option.opts[0]}: no env var"
        assert all(e.startswith("ELRWATCH_") for e in envvars), (name, option.opts, envvars)
        for envvar in envvars:
            assert envvar in result.output, f"{name} --help does not show {envvar}"


def test_stream_env_vars_reach_the_job_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Spark settings that were once read straight from the environment now go through the options."""
    from elrwatch.streaming import query
    from elrwatch.streaming.config import JobConfig

    seen: dict[str, JobConfig] = {}

    def fake_run(config: JobConfig, **_kwargs: object) -> int:
        seen["config"] = config
        return 0

    monkeypatch.setattr(query, "run", fake_run)
    env = {
        "ELRWATCH_SPARK_DRIVER_MEMORY": "3g",
        "ELRWATCH_SPARK_JARS_PACKAGES": "org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0",
        "ELRWATCH_SPARK_LOG_LEVEL": "WARN",
        "ELRWATCH_CHANGELOG_CHECKPOINTING": "false",
        "ELRWATCH_STATE_CACHE": "false",
        "ELRWATCH_KEEP_WORKERS_WARM": "false",
        "ELRWATCH_JVM_QUICK_START": "false",
        "ELRWATCH_JVM_CLASS_ARCHIVE": "false",
        "ELRWATCH_JVM_CLASS_ARCHIVE_DIR": "/var/lib/elrwatch/jvm",
        "ELRWATCH_BUCKETS": "5",
    }
    args = ["stream", "--source", "files", "--path", "/nonexistent"]
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 0, result.output
    config = seen["config"]
    assert config.spark_driver_memory == "3g"
    assert config.spark_jars_packages == "org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0"
    assert config.spark_log_level == "WARN"
    assert config.changelog_checkpointing is False
    assert config.state_cache is False
    assert config.local.keep_workers_warm is False
    assert config.local.jvm_quick_start is False
    assert config.local.jvm_class_archive is False and config.local.jvm_class_archive_dir == "/var/lib/elrwatch/jvm"
    assert config.buckets == 5
    # and the defaults when nothing is set
    result = CliRunner().invoke(app, args, env={k: "" for k in env} | {"ELRWATCH_BUCKETS": "2"})
    assert result.exit_code == 0, result.output
    config = seen["config"]
    assert (config.spark_driver_memory, config.spark_jars_packages, config.spark_log_level) == ("2g", None, None)
    assert config.changelog_checkpointing is True and config.state_cache is True and config.local.keep_workers_warm
    assert config.local.jvm_quick_start and config.local.jvm_class_archive and config.local.jvm_class_archive_dir is None
