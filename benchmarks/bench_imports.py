"""How quick the house is to enter: each entry command as a whole fresh process (not a test;
run by hand).

Commands: ``python -c 'import stagewise'``, ``stagewise --help``, ``--version``, ``labs``,
``config ntp``, ``config disentangled``, ``claims ntp``. Each is run ``--repeats`` times
(median, seconds) with the sources of this checkout; with ``--before SRC`` (the ``src``
folder of an earlier copy, e.g. ``cp -r src /tmp/before/``) the same commands run against
those sources too, side by side in one table. A command that exits non-zero (e.g.
``--version`` before it existed) shows as ``n/a``. The CLI runs as the console script does
(``from stagewise.cli import main; main()``), with ``PYTHONPATH`` pointing at the sources.

Targets (the issue): ``--help`` <= 0.5 s, the others <= 1.5 s.

Usage: python benchmarks/bench_imports.py [--before /tmp/before/src] [--repeats 5] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
HELP_TARGET_S = 0.5
OTHER_TARGET_S = 1.5
CLI = "import sys; sys.argv[0] = 'stagewise'; from stagewise.cli import main; main()"
COMMANDS: dict[str, list[str]] = {
    "import stagewise": ["-c", "import stagewise"],
    "stagewise --help": ["-c", CLI, "--help"],
    "stagewise --version": ["-c", CLI, "--version"],
    "stagewise labs": ["-c", CLI, "labs"],
    "stagewise config ntp": ["-c", CLI, "config", "ntp"],
    "stagewise config disentangled": ["-c", CLI, "config", "disentangled"],
    "stagewise claims ntp": ["-c", CLI, "claims", "ntp"],
}


def time_command(args: list[str], src: Path, repeats: int) -> float | None:
    """Median wall time (s) of ``python ARGS`` with ``src`` first on the path; None when it fails."""
    env = {**os.environ, "PYTHONPATH": str(src), "COLUMNS": "120"}
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            return None
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="src folder of an earlier copy, measured too")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    rows = []
    for name, command in COMMANDS.items():
        before = time_command(command, args.before, args.repeats) if args.before else None
        after = time_command(command, SRC, args.repeats)
        target = HELP_TARGET_S if name == "stagewise --help" else OTHER_TARGET_S
        rows.append({"command": name, "before_s": before, "after_s": after, "target_s": target})
    fmt = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
    print(f"median of {args.repeats} fresh processes, seconds ({os.cpu_count()} cores, Python {sys.version.split()[0]})")
    head = f"{'command':32} {'before':>8} {'after':>8} {'target':>7}  met"
    print(head)
    print("-" * len(head))
    for row in rows:
        met = "" if row["after_s"] is None else "yes" if row["after_s"] <= row["target_s"] else "NO"
        before = fmt(row["before_s"]) if args.before else "-"
        print(f"{row['command']:32} {before:>8} {fmt(row['after_s']):>8} {row['target_s']:>7.1f}  {met}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
