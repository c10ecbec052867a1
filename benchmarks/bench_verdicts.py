"""What the verdict engine (report/verdicts.py) costs in a run's summary and in a report (issue 38;
not a test; run by hand).

For each case the run (or reproduce) is made in-process with the engine's entry points wrapped by a
timer (:func:`decide`, :func:`decide_arm`; nested calls counted once), and so is the lab's summary
(claims judged at the run's end) and ``stagewise report`` of the folder. Printed: the claims
decided, the engine's seconds, the summary's and the report's, the whole command's, and the
engine's share of each. The engine's share of the summary + report must stay under 1 %.

Usage: python benchmarks/bench_verdicts.py [--out benchmarks/results/verdicts.json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

CASES: dict[str, tuple[str, str | None, list[str]]] = {
    "ntp default (1 seed, 1800 steps)": ("ntp", None, []),
    "ntp paper, 16 seeds": ("ntp", "paper", ["n_seeds=16"]),
    "disentangled default (8 seeds, 6000 steps)": ("disentangled", None, []),
    "lm counterfact-tiny (1 seed, 3 epochs)": ("lm", "counterfact-tiny", ["train.epochs=3", "data.root=../shared/data"]),
}
QUICK = ["ntp default (1 seed, 1800 steps)", "disentangled default (8 seeds, 6000 steps)"]


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
    timed_lab = dataclasses.replace(lab, summary=summary_clock.wrap(lab.summary))
    folder = root / label.split(" (")[0].replace(" ", "-")
    start = time.perf_counter()
    paths = prepare(timed_lab, config, folder)
    execute(timed_lab, config, paths, progress=False)
    run_s = time.perf_counter() - start
    report_start = time.perf_counter()
    write_report(folder)
    report_s = time.perf_counter() - report_start
    claims = json.loads((folder / "summary.json").read_text())["claims"]
    return {"case": label, "claims": len(claims), "summary_s": summary_clock.seconds, "report_s": report_s, "run_s": run_s}


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
            judged = row["summary_s"] + row["report_s"]
            row["engine_share_of_summary_and_report"] = row["engine_s"] / judged
            row["engine_share_of_run"] = row["engine_s"] / row["run_s"]
            rows.append(row)
            print(f"{label}: {row['claims']} claims, engine {row['engine_s'] * 1e3:.1f} ms in {row['engine_calls']} calls; "
                  f"summary {row['summary_s']:.2f} s, report {row['report_s']:.2f} s, run {row['run_s']:.1f} s; engine "
                  f"{row['engine_share_of_summary_and_report']:.3%} of summary + report, {row['engine_share_of_run']:.4%} "
                  "of the run", flush=True)
    print()
    print("| case | claims | engine calls | engine ms | summary s | report s | run s | engine / (summary + report) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['case']} | {r['claims']} | {r['engine_calls']} | {r['engine_s'] * 1e3:.1f} | {r['summary_s']:.2f} | "
              f"{r['report_s']:.2f} | {r['run_s']:.1f} | {r['engine_share_of_summary_and_report']:.3%} |")
    if args.out is not None:
        args.out.write_text(json.dumps({"python": sys.version.split()[0], "rows": rows}, indent=1) + "\n")
    worst = max(r["engine_share_of_summary_and_report"] for r in rows)
    print(f"\nlargest engine share: {worst:.3%} (budget 1 %)")
    return 0 if worst < 0.01 else 1


if __name__ == "__main__":
    sys.exit(main())
