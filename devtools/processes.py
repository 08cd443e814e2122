"""The child processes of the developer tools and benchmarks: an ``elrwatch`` command's command line, and ending a
process (SIGTERM, then SIGKILL)."""

from __future__ import annotations

import subprocess
import sys


def cli_options(**options: object) -> list[str]:
    """Command-line options from keywords, in their order: ``state_file=p`` is ``--state-file p``, ``True`` the flag
    alone, a list or tuple the option repeated once per item; ``None`` and ``False`` are left out."""
    out: list[str] = []
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            out.append(flag)
        elif isinstance(value, list | tuple):
            for item in value:
                out += [flag, str(item)]
        else:
            out += [flag, str(value)]
    return out


def elrwatch_command(command: str, *args: str, **options: object) -> list[str]:
    """The command line of ``elrwatch COMMAND ARGS OPTIONS`` run by this interpreter (``options`` as
    :func:`cli_options` writes them)."""
    return [sys.executable, "-P", "-m", "elrwatch.cli", command, *args, *cli_options(**options)]


def end(proc: subprocess.Popen | None, timeout: float = 15.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout`` s (nothing for None or a process that has ended)."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
