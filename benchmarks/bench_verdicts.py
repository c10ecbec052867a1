"""What the verdict engine (report/verdicts.py) costs in a run's summary and in a report (issue 38;
not a test; run by hand).

For each case the run is made in-process with the engine's entry points wrapped by a timer
(:func:`decide`, :func:`decide_arm`; nested calls counted once), and so is the lab's summarize
(where the claims are judged, at the run's end) and the report of the folder (in-process, then
``stagewise report DIR`` in a fresh process, the command a user runs). Printed: the claims decided,
the engine's seconds and its share of (a) the ``stagewise report`` command, (b) the run, and (c)
summarize + the in-process report alone (the strictest denominator: a few tenths of a second of
pure Python). The issue's budget: the engine adds < 1 % to a report (a).

Usage: python benchmarks/bench_verdicts.py [--out benchmarks/results/verdicts.json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

CASES: dict[str, tuple[str, str | None, list[str]]] = {
    "ntp default (1 seed, 1800 steps)": ("ntp", None, []),
    "ntp paper, 16 seeds": ("ntp", "paper", ["n_seeds=16"]),
    "disentangled two-stage (4 seeds, 2000 steps, floors off)": ("disentangled", "two-stage",
                                                                 ["n_seeds=4", "train.steps=2000", "experiment.floors=false"]),
    "disentangled default (8 seeds, 6000 steps)": ("disentangled", None, []),
    "lm counterfact-tiny (1 seed, 3 epochs)": ("lm", "counterfact-tiny", ["train.epochs=3", "data.root=../shared/data"]),
}
QUICK = ["ntp default (1 seed, 1800 steps)", "disentangled two-stage (4 seeds, 2000 steps, floors off)"]


class Clock:
    """Seconds spent inside the wrapped functions (outermost calls only) and the calls made."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0
        self._depth = 0

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self._depth += 1
            start = time.perf_counter() if self._depth == 1 else 0.0
            try:
                return fn(*args, **kwargs)
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self.seconds += time.perf_counter() - start
                    self.calls += 1
        return timed


def _patch_engine(clock: Clock) -> None:
    """Wrap the engine's entry points (every caller reaches them as ``verdicts.NAME``)."""
    from stagewise.report import verdicts

    for name in ("decide", "decide_arm"):
        original = getattr(verdicts, name)
        setattr(verdicts, name, clock.wrap(original))


def case(label: str, lab_name: str, preset: str | None, sets: list[str], root: Path) -> dict[str, Any]:
    import dataclasses

    from stagewise.config import resolve
    from stagewise.labs import get_lab
    from stagewise.orchestrate import execute, prepare
    from stagewise.orchestrate.reporting import write_report

    summary_clock = Clock()
    lab = get_lab(lab_name)
    presets = getattr(lab, "presets", None) or lab.PRESETS
    config = resolve(lab.Config, presets[preset][1] if preset else {}, None, sets, None)
    timed_lab = dataclasses.replace(lab, summarize=summary_clock.wrap(lab.summarize))
    folder = root / label.split(" (")[0].replace(" ", "-")
    start = time.perf_counter()
    paths = prepare(timed_lab, config, folder)
    execute(timed_lab, config, paths, progress=False)
    run_s = time.perf_counter() - start
    report_start = time.perf_counter()
    write_report(folder)
    report_s = time.perf_counter() - report_start
    command_start = time.perf_counter()
    subprocess.run([str(Path(sys.executable).parent / "stagewise"), "report", str(folder)], check=True, capture_output=True)
    command_s = time.perf_counter() - command_start
    claims = json.loads((folder / "summary.json").read_text())["claims"]
    return {"case": label, "claims": len(claims), "summary_s": summary_clock.seconds, "report_s": report_s, "run_s": run_s,
            "report_command_s": command_s}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    clock = Clock()
    _patch_engine(clock)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label in (QUICK if args.quick else list(CASES)):
            lab_name, preset, sets = CASES[label]
            before_s, before_calls = clock.seconds, clock.calls
            row = case(label, lab_name, preset, sets, Path(tmp))
            row["engine_s"], row["engine_calls"] = clock.seconds - before_s, clock.calls - before_calls
            # the engine ran in the run's summarize and in the in-process report; `stagewise report` (fresh process)
            # runs the same report code, so the engine's share of that command is at most its in-process seconds over it
            row["share_of_report_command"] = row["engine_s"] / row["report_command_s"]
            row["share_of_run"] = row["engine_s"] / row["run_s"]
            row["share_of_summarize_and_report"] = row["engine_s"] / (row["summary_s"] + row["report_s"])
            rows.append(row)
            print(f"{label}: {row['claims']} claims, engine {row['engine_s'] * 1e3:.1f} ms in {row['engine_calls']} calls; "
                  f"report command {row['report_command_s']:.2f} s ({row['share_of_report_command']:.3%}), run "
                  f"{row['run_s']:.1f} s ({row['share_of_run']:.4%}), summarize + report {row['summary_s'] + row['report_s']:.2f} s "
                  f"({row['share_of_summarize_and_report']:.2%})", flush=True)
    print()
    print("| case | claims | engine calls | engine ms | `stagewise report` s | share | run s | share | summarize + report s | share |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['case']} | {r['claims']} | {r['engine_calls']} | {r['engine_s'] * 1e3:.1f} | {r['report_command_s']:.2f} | "
              f"{r['share_of_report_command']:.3%} | {r['run_s']:.1f} | {r['share_of_run']:.4%} | "
              f"{r['summary_s'] + r['report_s']:.2f} | {r['share_of_summarize_and_report']:.2%} |")
    if args.out is not None:
        args.out.write_text(json.dumps({"python": sys.version.split()[0], "rows": rows}, indent=1) + "\n")
    worst = max(r["share_of_report_command"] for r in rows)
    print(f"\nlargest engine share of a report: {worst:.3%} (budget 1 %)")
    return 0 if worst < 0.01 else 1


if __name__ == "__main__":
    sys.exit(main())
