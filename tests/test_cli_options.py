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
    """The command's options (typer builds them with its own copy of click: not `click.Option` instances)."""
    command = COMMAND.commands[name]  # type: ignore[attr-defined]
    return [p for p in command.params if p.param_type_name == "option" and p.name != "help"]


def test_the_cli_has_its_commands() -> None:
    assert {"replay", "status", "produce", "stream", "api", "bridge", "agent", "recover"} <= set(COMMANDS)
    assert "demo" not in COMMANDS  # developer tooling: python -m elrwatch.devtools.demo (make demo)


@pytest.mark.parametrize("name", COMMANDS)
def test_every_option_has_an_env_var_shown_in_help(name: str) -> None:
    result = CliRunner().invoke(app, [name, "--help"], env={"COLUMNS": "400", "NO_COLOR": "1"}, terminal_width=400)
    assert result.exit_code == 0, result.output
    assert _options(name) or name == "conformance"  # the options are seen (conformance has none)
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
    assert config.local.jvm_class_archive_dir == "/var/lib/elrwatch/jvm"
    assert config.buckets == 5
    # and the defaults when nothing is set
    result = CliRunner().invoke(app, args, env={k: "" for k in env} | {"ELRWATCH_BUCKETS": "2"})
    assert result.exit_code == 0, result.output
    config = seen["config"]
    assert (config.spark_driver_memory, config.spark_jars_packages, config.spark_log_level) == ("2g", None, None)
    assert config.local.jvm_class_archive_dir is None


def _declaration(option: click.Option) -> tuple:
    return (tuple(option.opts), tuple(option.secondary_opts), option.envvar, option.help, option.default)


def test_option_groups_are_the_same_in_every_command() -> None:
    """The Kafka connection, the store and the metrics endpoint are declared once (elrwatch/options.py groups)."""
    from elrwatch.options import KAFKA, METRICS, STORE

    for group, commands in (
        (KAFKA, ("stream", "produce", "bridge", "agent", "recover")),
        (STORE, ("stream", "status", "api", "recover")),
        (METRICS, ("stream", "bridge", "agent")),
    ):
        names = [p.name for p in group.parameters()]
        declared = {name: [_declaration(o) for o in _options(name) if o.name in names] for name in commands}
        assert len(declared[commands[0]]) == len(names)
        assert all(d == declared[commands[0]] for d in declared.values()), group


def test_stream_groups_reach_the_job_as_typed_objects(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from elrwatch.kafkaio.config import KafkaSettings
    from elrwatch.streaming import query
    from elrwatch.streaming.config import JobConfig, MetricsEndpoint, StoreSettings, options_summary

    seen: dict[str, JobConfig] = {}
    monkeypatch.setattr(query, "run", lambda config, **_kwargs: seen.setdefault("config", config))
    password = tmp_path / "sasl"
    password.write_text("s3cret\n")
    env = {
        "ELRWATCH_BOOTSTRAP_SERVERS": "b:9093",
        "ELRWATCH_SASL_MECHANISM": "PLAIN",
        "ELRWATCH_METRICS_PORT": "0",
        "ELRWATCH_STORE": "sqlite:////tmp/x.db",
        "ELRWATCH_SASL_PASSWORD_FILE": str(password),
    }
    result = CliRunner().invoke(app, ["stream", "--topic", "t", "--sasl-username", "u"], env=env)
    assert result.exit_code == 0, result.output
    config = seen["config"]
    assert config.kafka == KafkaSettings(
        "b:9093", sasl_mechanism="PLAIN", sasl_username="u", sasl_password_file=str(password)
    )
    assert config.store == StoreSettings("sqlite:////tmp/x.db")
    assert config.metrics == MetricsEndpoint(0, "127.0.0.1")
    summary = options_summary(config)
    assert summary["bootstrap_servers"] == "b:9093" and summary["metrics_port"] == 0
    assert "sasl_password_file" not in summary and "s3cret" not in repr(summary)


def test_a_bad_option_of_a_group_is_one_line() -> None:
    result = CliRunner().invoke(app, ["stream", "--spark-conf", "novalue"])
    assert result.exit_code == 2
    assert result.output.strip() == "elrwatch: error: --spark-conf takes KEY=VALUE, got 'novalue'"
    result = CliRunner().invoke(app, ["stream", "--source", "nope"])
    assert result.exit_code == 2 and "--source must be kafka, kafka-native or files" in result.output


@pytest.mark.parametrize("removed", ["--state-tasks=2", "--no-state-cache", "--no-changelog-checkpointing"])
def test_removed_tuning_options_are_unknown(removed: str) -> None:
    """One state task locally, the bucket cache and changelog checkpointing are no longer options."""
    result = CliRunner().invoke(app, ["stream", removed])
    assert result.exit_code == 2 and "No such option" in result.output


def test_grouped_needs_a_group() -> None:
    from elrwatch.options import grouped

    def command(name: str = "x") -> None:
        """A command without groups."""

    with pytest.raises(TypeError, match="no parameter that defaults to an OptionGroup"):
        grouped(command)


def test_one_engine_in_both_state_modes_and_no_engine_option(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """The job has one state engine (the columnar store): --state-mode picks snapshot or blob, by option or by
    environment; --state-engine is not an option of the product."""
    from elrwatch.streaming import query
    from elrwatch.streaming.config import JobConfig

    args = ["stream", "--source", "files", "--path", str(tmp_path), "--checkpoint", str(tmp_path / "ck")]
    args += ["--store", f"sqlite:///{tmp_path}/s.db"]
    seen: dict[str, JobConfig] = {}
    with monkeypatch.context() as patched:
        patched.setattr(query, "run", lambda config, **_kwargs: seen.setdefault("config", config))
        for extra, env, want in (
            ([], {}, "snapshot"),
            (["--state-mode", "blob"], {}, "blob"),
            ([], {"ELRWATCH_STATE_MODE": "blob"}, "blob"),
        ):
            seen.clear()
            result = CliRunner().invoke(app, args + extra, env=env)
            assert result.exit_code == 0, result.output
            assert seen["config"].state_mode == want, (extra, env)
            assert not hasattr(seen["config"], "state_engine")
    result = CliRunner().invoke(app, [*args, "--state-engine", "objects"])
    assert result.exit_code == 2 and "No such option: --state-engine" in result.output


def test_stream_help_shows_its_options_in_panels() -> None:
    """`elrwatch stream` takes some 35 options: each is shown under a panel of its kind, the groups several commands
    share under the same panel in each of them."""
    panels = {option.rich_help_panel for option in _options("stream")}  # type: ignore[attr-defined]
    assert None not in panels and len(panels) >= 7, panels
    result = CliRunner().invoke(app, ["stream", "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"}, terminal_width=200)
    assert result.exit_code == 0, result.output
    assert all(f"─ {panel} ─" in result.output for panel in panels), result.output
    for name in ("produce", "bridge", "agent"):
        kafka = {o.rich_help_panel for o in _options(name) if o.name == "bootstrap_servers"}  # type: ignore[attr-defined]
        assert kafka == {"Kafka connection"}, (name, kafka)


@pytest.mark.parametrize("name", COMMANDS)
def test_help_reads_as_a_unix_usage(name: str) -> None:
    """A flag takes no value, so its row shows none; arguments read in capitals, optional ones in brackets."""
    result = CliRunner().invoke(app, [name, "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"}, terminal_width=200)
    assert result.exit_code == 0, result.output
    command = COMMAND.commands[name]  # type: ignore[attr-defined]
    flags = {opt for p in command.params if getattr(p, "is_flag", False) for opt in p.opts if opt.startswith("--")}
    flags.add("--help")  # typer adds it when it builds the help, not among the params
    rows = [line for line in result.output.splitlines() if any(f" {flag} " in line for flag in flags)]
    assert len(rows) >= len(flags), rows
    for row in rows:
        assert "<bool>" not in row and "BOOLEAN" not in row, row
    usage = next(line for line in result.output.splitlines() if "Usage:" in line)
    assert "{" not in usage, usage


def test_restart_check_usage_names_its_arguments() -> None:
    result = CliRunner().invoke(app, ["restart-check", "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert "restart-check [OPTIONS] BROKER [FILE]" in result.output, result.output


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("name", COMMANDS)
def test_help_crops_no_option_name(name: str, width: int) -> None:
    """At a normal terminal width every option's names stand whole in its row, and nothing is cut off with "…"
    (an environment variable longer than the help column folds onto the next line instead)."""
    result = CliRunner().invoke(
        app, [name, "--help"], env={"COLUMNS": str(width), "NO_COLOR": "1"}, terminal_width=width
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= width, result.output
    command = COMMAND.commands[name]  # type: ignore[attr-defined]
    params = [p for p in command.params if not getattr(p, "hidden", False)]
    for param in params:
        for opt in (*param.opts, *param.secondary_opts):
            if opt.startswith("-"):
                assert any(f" {opt} " in f"{line} " for line in lines), f"{name} --help crops {opt}:\n{result.output}"
    ellipses_in_help_texts = sum((getattr(p, "help", None) or "").count("…") for p in params)
    assert result.output.count("…") == ellipses_in_help_texts, f"{name} --help crops a cell:\n{result.output}"


def test_the_top_level_help_crops_nothing() -> None:
    """`elrwatch --help` lists every command whole at 80 columns."""
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "80", "NO_COLOR": "1"}, terminal_width=80)
    assert result.exit_code == 0 and "…" not in result.output and "restart-check" in result.output, result.output
