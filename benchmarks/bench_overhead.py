"""What a run costs beyond its training loop (not a test; run by hand).

For each case, three timings (seconds, best of --repeats):

* bare:   the lab's batched training loop alone, in-process, no logging (problem and data
          construction excluded);
* logged: the same loop with every metric the run logs, into an in-memory context;
* run:    ``stagewise run LAB ... -q`` end to end in a fresh process (Python start,
          imports, data and max-margin QPs, training, metrics, Parquet, summary, figures).

Ratios logged/bare (the logging overhead) and run/bare are printed. With ``--before
PATH`` (a checkout of an earlier version, e.g. ``git worktree add /tmp/before HEAD~5``) the
same cases are measured with that checkout's sources too, side by side in one table.

Usage: python benchmarks/bench_overhead.py [--before /tmp/before] [--repeats 2] [--quick] [--only TEXT]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CASES = {
    "ntp default (1 seed, 1800 steps)": ("ntp", None, []),
    "ntp paper, 64 seeds": ("ntp", "paper", ["--seeds", "64"]),
    "disentangled two-stage, 4 seeds, 4000 steps": ("disentangled", "two-stage", ["--seeds", "4", "--set", "train.steps=4000"]),
    "disentangled default (8 seeds, 6000 steps)": ("disentangled", None, []),
}
QUICK = ["ntp default (1 seed, 1800 steps)", "ntp paper, 64 seeds", "disentangled two-stage, 4 seeds, 4000 steps"]


# ------------------------------------------------------------------ in-process worker
def _config(lab_name: str, preset: str | None, args: list[str]):
    """The config `stagewise run` would build from these CLI arguments (either version)."""
    from stagewise.config import resolve
    from stagewise.labs import get_lab

    lab = get_lab(lab_name)
    cls = lab.Config
    presets = getattr(lab, "presets", None) or lab.PRESETS
    over = presets[preset][1] if preset else {}
    sets = [args[i + 1] for i in range(len(args)) if args[i] == "--set"]
    extra = {"n_seeds": int(args[args.index("--seeds") + 1])} if "--seeds" in args else None
    return resolve(cls, over, None, sets, extra)


def _memory_ctx(seeds):
    from stagewise.runs import MemoryContext

    try:
        return MemoryContext(seeds)
    except TypeError:  # the earlier version takes no seeds
        return MemoryContext()


def _time_ntp(config, logged: bool) -> float:
    import importlib

    from stagewise.labs.ntp.problem import build_problem

    train_module = importlib.import_module("stagewise.labs.ntp.train")  # (earlier versions re-export a function `train`)

    fn = getattr(train_module, "train_two_stage", None) or train_module.train
    problem = build_problem(config)
    ctx = _memory_ctx(problem.seeds) if logged else None
    start = time.perf_counter()
    fn(config, problem, ctx)
    return time.perf_counter() - start


def _time_disentangled(config, logged: bool) -> float:
    import torch

    from stagewise.labs.disentangled import experiments
    from stagewise.labs.disentangled.train import State, build_ensemble, init_weights, run_training

    (group,) = experiments.groups(config)
    if logged:
        ctx = _memory_ctx(config.seed_list() if hasattr(config, "seed_list") else None)
        start = time.perf_counter()  # includes the ensemble's data: the group's training builds it (~0.2 s here)
        if hasattr(experiments, "end_tables"):  # since the groups wrapper (runs/groups.py)
            from stagewise.labs.disentangled.train import train_group

            train_group(0, group, ctx, experiments.end_tables)
        else:  # --before a tree older than it
            experiments.run_group(0, group, ctx, None)
        return time.perf_counter() - start
    ens = build_ensemble(config, group.members)
    state = State(list(init_weights(config, group.members, torch.float64)))
    start = time.perf_counter()
    run_training(ens, state, config.train.steps, lambda t, s: None)
    return time.perf_counter() - start


def worker(case: str, mode: str) -> None:
    lab, preset, args = CASES[case]
    config = _config(lab, preset, args)
    seconds = (_time_ntp if lab == "ntp" else _time_disentangled)(config, mode == "logged")
    print(json.dumps({"seconds": seconds}))


# ------------------------------------------------------------------------- driver
def _env(src: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _in_process(case: str, mode: str, src: Path | None) -> float:
    out = subprocess.run([sys.executable, __file__, "--worker", case, mode], capture_output=True, text=True,
                         env=_env(src), check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["seconds"]


def _cli(case: str, src: Path | None) -> float:
    lab, preset, args = CASES[case]
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "stagewise.cli", "run", lab, *(["--preset", preset] if preset else []), *args,
               "--out", str(Path(tmp) / "run"), "-q"]
        start = time.perf_counter()
        subprocess.run(cmd, capture_output=True, text=True, env=_env(src), check=True)
        return time.perf_counter() - start


def measure(case: str, src: Path | None, repeats: int) -> dict[str, float]:
    out = {"bare": min(_in_process(case, "bare", src) for _ in range(repeats)),
           "logged": min(_in_process(case, "logged", src) for _ in range(repeats)),
           "run": min(_cli(case, src) for _ in range(repeats))}
    out["logged/bare"] = out["logged"] / out["bare"]
    out["run/bare"] = out["run"] / out["bare"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, default=None, help="root of an earlier checkout (its src/ is used)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="leave out the 8-seed disentangled default preset")
    parser.add_argument("--only", default=None, help="run only the cases whose name contains this text")
    parser.add_argument("--worker", nargs=2, metavar=("CASE", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    versions = [("before", args.before / "src")] if args.before else []
    versions.append(("after", None))
    rows = []
    for case in [c for c in (QUICK if args.quick else CASES) if args.only is None or args.only in c]:
        for version, src in versions:
            m = measure(case, src, args.repeats)
            rows.append((case, version, m))
            print(f"{case:48s} {version:6s} bare {m['bare']:7.2f}  logged {m['logged']:7.2f}  run {m['run']:7.2f}  "
                  f"logged/bare {m['logged/bare']:5.2f}  run/bare {m['run/bare']:5.2f}", file=sys.stderr, flush=True)
    print("\n| case | version | bare loop s | loop + logging s | `stagewise run` s | logging ratio | run / bare |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for case, version, m in rows:
        print(f"| {case} | {version} | {m['bare']:.2f} | {m['logged']:.2f} | {m['run']:.2f} | "
              f"{m['logged/bare']:.2f} | {m['run/bare']:.2f} |")


if __name__ == "__main__":
    main()
