"""What the developer tools and benchmarks run: an ``elrwatch`` command's command line, ending a child process
(SIGTERM, then SIGKILL), a run's work directory."""

from __future__ import annotations

import os
import shutil
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


def remove_workdir(workdir: str | os.PathLike, keep: bool) -> None:
    """After a run that succeeded: remove its work directory, or say where it is when ``keep`` (--keep-workdir)."""
    if keep:
        print(f"work directory kept (--keep-workdir): {workdir}", flush=True)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
