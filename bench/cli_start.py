"""How fast the command line answers: the wall time of ``elrwatch <command> --help`` (a fresh interpreter each
run, as an operator or a container's probe starts it), best of ``--repeat`` runs, beside the interpreter's own start
(``python -c pass``: what no change of elrwatch can take off), and the modules ``import elrwatch.cli`` loads.

The light commands (`bridge`, `agent`, `produce`, `api`, `restart-check`) and every ``--help`` import none of numpy,
pandas, pyarrow or pyspark (tests/test_cli_imports.py checks it); this prints what that leaves.

Run: python bench/cli_start.py [--repeat 7] [--commands agent,bridge,stream]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

HEAVY = ("numpy", "pandas", "pyarrow", "pyspark", "sqlalchemy", "fastapi")


def interpreter() -> list[str]:
    """This interpreter, with ``-P`` when it runs with it (a checkout's layout put on PYTHONPATH)."""
    return [sys.executable, "-P"] if sys.flags.safe_path else [sys.executable]


def best_wall_time(argv: list[str], repeat: int) -> float:
    """The shortest wall time of ``repeat`` runs of ``argv``, in seconds (each must exit 0)."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        best = min(best, time.perf_counter() - started)
    return best


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
    bare = best_wall_time([*interpreter(), "-c", "pass"], args.repeat)
    count, heavy = cli_modules()
    print(f"import elrwatch.cli: {count} modules; heavy among them: {', '.join(heavy) or 'none'}")
    print(f"{'python -c pass':32s} {bare:6.3f} s")
    for command in args.commands.split(","):
        took = best_wall_time([*interpreter(), "-m", "elrwatch.cli", command, "--help"], args.repeat)
        print(f"{'elrwatch ' + command + ' --help':32s} {took:6.3f} s   ({took - bare:+.3f} s over python's start)")


if __name__ == "__main__":
    main()
