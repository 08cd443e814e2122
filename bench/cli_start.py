"""How fast the command line answers: the wall time of ``elrwatch <command> --help`` (a fresh interpreter each
run, as an operator or a container's probe starts it), best of ``--repeat`` runs, and its CPU time (user + system,
best of the same runs: what the wall time comes down to on an idle machine), beside the interpreter's own start
(``python -c pass``: what no change of elrwatch can take off), and the modules ``import elrwatch.cli`` loads.

The light commands (`bridge`, `agent`, `produce`, `api`, `restart-check`) and every ``--help`` import none of numpy,
pandas, pyarrow or pyspark (tests/test_cli_imports.py checks it); this prints what that leaves.

Run: python bench/cli_start.py [--repeat 7] [--commands agent,bridge,stream]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

HEAVY = ("numpy", "pandas", "pyarrow", "pyspark", "sqlalchemy", "fastapi")


def interpreter() -> list[str]:
    """This interpreter, with ``-P`` when it runs with it (a checkout's layout put on PYTHONPATH)."""
    return [sys.executable, "-P"] if sys.flags.safe_path else [sys.executable]


def best_times(argv: list[str], repeat: int) -> tuple[float, float]:
    """The shortest wall time and the shortest CPU time (user + system) of ``repeat`` runs of ``argv``, in seconds
    (each must exit 0)."""
    wall = cpu = float("inf")
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        wall = min(wall, time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = min(cpu, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return wall, cpu


def cli_modules() -> tuple[int, list[str]]:
    """How many modules ``import elrwatch.cli`` leaves loaded in a fresh interpreter, and the heavy ones among them."""
    probe = (
        "import json, sys; import elrwatch.cli; "
        f"print(json.dumps([len(sys.modules), [m for m in {HEAVY!r} if m in sys.modules]]))"
    )
    out = subprocess.run([*interpreter(), "-c", probe], check=True, capture_output=True, text=True).stdout
    count, heavy = json.loads(out)
    return count, heavy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7, help="runs per command; the best is printed")
    parser.add_argument(
        "--commands", default="agent,bridge,produce,api,restart-check,stream", help="comma-separated commands"
    )
    args = parser.parse_args()
    bare, bare_cpu = best_times([*interpreter(), "-c", "pass"], args.repeat)
    count, heavy = cli_modules()
    print(f"import elrwatch.cli: {count} modules; heavy among them: {', '.join(heavy) or 'none'}")
    print(f"{'':32s} {'wall':>7s} {'cpu':>7s}")
    print(f"{'python -c pass':32s} {bare:6.3f}s {bare_cpu:6.3f}s")
    for command in args.commands.split(","):
        wall, cpu = best_times([*interpreter(), "-m", "elrwatch.cli", command, "--help"], args.repeat)
        print(f"{'elrwatch ' + command + ' --help':32s} {wall:6.3f}s {cpu:6.3f}s")


if __name__ == "__main__":
    main()
