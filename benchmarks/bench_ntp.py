"""Benchmark the batched NTP trainer against a plain per-seed autograd loop (not a test).

Usage: python benchmarks/bench_ntp.py [--sizes 1 8 64] [--loop-seeds 8] [--steps1 900]
       [--steps2 900] [--repeats 1] [--threads 1] [--no-memory] [--no-metrics]

Workload: the paper preset (Config defaults: random realizable data, |V| = d = 20, one-hot,
zero init, two-stage normalized GD, 900 + 900 steps, float64).

* batched: ``train(config, problem)`` on an ensemble of n seeds (no ctx: no logging), and
  again with an in-memory logger so that every step's metrics are computed (log_every=1;
  the generalization suite every ``generalize.every`` steps, as configured).
* loop: what one would write without the lab: the reference loop of Algorithm 1
  (:func:`stagewise.labs.ntp.reference.train_reference`), one seed at a time, on that
  seed's data in embedding space, autograd gradients and the normalized update in plain
  torch. Its final weights are checked against the batched run's members.
* memory: peak RSS (``ru_maxrss`` and /proc VmHWM) of a fresh subprocess per ensemble size
  that builds the problem and trains it.

Problem construction (data generation and the max-margin QPs) is timed separately and left
out of the training times. Prints markdown tables.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time

import torch

from stagewise.labs.ntp.config import Config
from stagewise.labs.ntp.problem import Problem, build_problem
from stagewise.labs.ntp.reference import seed_data, train_reference
from stagewise.labs.ntp.train import train_two_stage as train
from stagewise.runs import MemoryContext

TARGET_SPEEDUP = 10.0


def preset(n_seeds: int, steps1: int, steps2: int, seed: int = 0, threads: int | str = "auto") -> Config:
    """The paper preset (Config defaults) with an ensemble of ``n_seeds``, the given steps and
    ``train.threads`` (``train`` sets torch's thread count from it while it runs)."""
    return Config.model_validate({"seed": seed, "n_seeds": n_seeds,
                                  "train": {"steps_stage1": steps1, "steps_stage2": steps2, "threads": threads,
                                            "log_every": 1}})  # the metrics timing logs every step


# --------------------------------------------------------------------------- timing


def timed(fn, repeats: int):
    """(best wall seconds, result of the last call)."""
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def _rss_now_mb() -> float:
    """Current resident set size (Linux /proc), MiB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_mb() -> float:
    """ru_maxrss, MiB. Linux carries it over fork + exec from the launching process."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB -> MiB


def _hwm_mb() -> float:
    """VmHWM: the high-water mark of this process image only (reset by exec), MiB."""
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


def problem_tensor_mb(problem: Problem) -> float:
    """Bytes held by the Problem's tensors (its TokenBatch included), MiB."""
    fields = list(vars(problem).values()) + list(vars(problem.batch).values())
    return sum(v.numel() * v.element_size() for v in fields if isinstance(v, torch.Tensor)) / 2**20


def memory_child(n_seeds: int, steps1: int, steps2: int, threads: int | str) -> None:
    """Run in a fresh interpreter: print JSON with peak (ru_maxrss) and current RSS at each phase, MiB."""
    out = {"import_peak": _peak_mb(), "import_now": _rss_now_mb(), "import_hwm": _hwm_mb()}
    config = preset(n_seeds, steps1, steps2, threads=threads)
    problem = build_problem(config)
    out.update(build_peak=_peak_mb(), problem_mb=problem_tensor_mb(problem))
    train(config, problem)
    out.update(peak=_peak_mb(), train_now=_rss_now_mb(), hwm=_hwm_mb())
    print(json.dumps(out))


def measure_memory(n_seeds: int, steps1: int, steps2: int, threads: int | str) -> dict[str, float]:
    cmd = [sys.executable, os.path.abspath(__file__), "--memory-child", str(n_seeds),
           "--steps1", str(steps1), "--steps2", str(steps2), "--threads", str(threads)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 8, 64], help="ensemble sizes of the batched runs")
    parser.add_argument("--loop-seeds", type=int, default=8, help="seeds run by the per-seed autograd loop")
    parser.add_argument("--steps1", type=int, default=900)
    parser.add_argument("--steps2", type=int, default=900)
    parser.add_argument("--repeats", type=int, default=1, help="best of this many timings")
    parser.add_argument("--threads", type=lambda v: v if v == "auto" else int(v), default="auto",
                        help="train.threads of the batched runs: auto (the default config) or a number")
    parser.add_argument("--loop-threads", type=int, default=1,
                        help="torch intra-op threads of the per-seed loop (1 is its fastest setting here)")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    parser.add_argument("--no-metrics", action="store_true", help="skip the runs with per-step metrics")
    parser.add_argument("--memory-child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child is not None:
        memory_child(args.memory_child, args.steps1, args.steps2, args.threads)
        return

    steps = args.steps1 + args.steps2
    # peak memory first, while this process is still small (see _peak_mb)
    memory = {} if args.no_memory else {n: measure_memory(n, args.steps1, args.steps2, args.threads) for n in args.sizes}
    print(f"torch {torch.__version__}, {platform.machine()}, {os.cpu_count()} CPUs, "
          f"train.threads={args.threads} for the batched runs (auto = min(cores, seeds // 16)), "
          f"{args.loop_threads} thread(s) for the loop, float64, paper preset (|V| = d = 20, "
          f"{args.steps1} + {args.steps2} steps, random data, zero init)\n")

    # ---- batched runs
    rows, batched = [], {}
    for n in args.sizes:
        config = preset(n, args.steps1, args.steps2, threads=args.threads)
        build_s, problem = timed(lambda config=config: build_problem(config), 1)
        train_s, params = timed(lambda config=config, problem=problem: train(config, problem), args.repeats)
        batched[n] = params
        metrics_s = None
        if not args.no_metrics:
            def with_metrics(config=config, problem=problem):
                logger = MemoryContext(problem.seeds)
                train(config, problem, logger)
                return logger
            metrics_s, logger = timed(with_metrics, args.repeats)
            assert len(logger.records) == steps + 1
        rows.append((n, build_s, train_s, metrics_s))

    # ---- per-seed reference loop (stage 1 timed alone, as for the batched runs)
    n_loop = args.loop_seeds
    loop_cfg = preset(1, args.steps1, args.steps2)
    loop_cfg1 = preset(1, args.steps1, 0) if args.steps1 > 0 and args.steps2 > 0 else None
    loop_data = [seed_data(loop_cfg, s) for s in range(n_loop)]  # data construction excluded from the timing
    assert all(data.emb.shape[1] == 20 for data in loop_data)

    def run_loop(config):
        return [train_reference(config, s, data) for s, data in enumerate(loop_data)]

    torch.set_num_threads(args.loop_threads)
    loop_s, loop_runs = timed(lambda: run_loop(loop_cfg), args.repeats)
    loop_weights = [(run.stages[1].wkq, run.stages[1].wov) for run in loop_runs]
    loop_stage_s = [0.0, 0.0]
    if loop_cfg1 is not None:
        loop_stage_s[0], _ = timed(lambda: run_loop(loop_cfg1), args.repeats)
        loop_stage_s[1] = loop_s - loop_stage_s[0]
    loop_rate = n_loop * steps / loop_s  # seed-steps per second

    print("## Training time (problem build excluded)\n")
    print("| method | seeds | build s | train s | seed-steps/s | ms per seed | train+metrics s | seed-steps/s (metrics) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for n, build_s, train_s, metrics_s in rows:
        m_cols = ("-", "-") if metrics_s is None else (f"{metrics_s:.2f}", f"{n * steps / metrics_s:,.0f}")
        print(f"| batched `train` | {n} | {build_s:.2f} | {train_s:.2f} | {n * steps / train_s:,.0f} | "
              f"{1000 * train_s / n:.1f} | {m_cols[0]} | {m_cols[1]} |")
    print(f"| reference loop | {n_loop} | (excluded) | {loop_s:.2f} | {loop_rate:,.0f} | {1000 * loop_s / n_loop:.1f} | - | - |")
    largest = max(args.sizes)
    if largest > n_loop:
        print(f"| reference loop (extrapolated: {n_loop}-seed per-seed cost x {largest}) | {largest} | - | "
              f"{loop_s / n_loop * largest:.2f} | {loop_rate:,.0f} | {1000 * loop_s / n_loop:.1f} | - | - |")
    big = next(r for r in rows if r[0] == largest)
    ratio = (largest * steps / big[2]) / loop_rate
    verdict = "meets" if ratio >= TARGET_SPEEDUP else "MISSES"
    print(f"\nbatched({largest}) / loop throughput (seed-steps/s): {ratio:.1f}x ({verdict} the {TARGET_SPEEDUP:.0f}x target)")
    if big[3] is not None:
        print(f"with per-step metrics (log_every=1): {(largest * steps / big[3]) / loop_rate:.1f}x over the loop "
              "(the loop computes no metrics)")

    # ---- per stage: batched stage 1 timed alone, stage 2 = total - stage 1
    if args.steps1 > 0 and args.steps2 > 0:
        cfg1 = preset(largest, args.steps1, 0, threads=args.threads)
        prob1 = build_problem(cfg1)
        b1, _ = timed(lambda: train(cfg1, prob1), args.repeats)
        b2 = big[2] - b1
        print(f"\n| stage | batched({largest}) seed-steps/s | loop seed-steps/s | ratio |\n|---|---:|---:|---:|")
        for name, b_s, l_s, k in (("1 (W_ov on L0)", b1, loop_stage_s[0], args.steps1),
                                  ("2 (W_kq on L)", b2, loop_stage_s[1], args.steps2)):
            b_rate, l_rate = largest * k / b_s, n_loop * k / l_s
            print(f"| {name} | {b_rate:,.0f} | {l_rate:,.0f} | {b_rate / l_rate:.1f}x |")
        print("\n(stage 2 = full run - stage-1-only run, for the batched runs and the loop alike)")

    # ---- weight check: loop seed s == member s of every batched run that contains it
    print("\n## Loop vs batched final weights (max abs difference, tolerance 1e-8)\n")
    print("| seed | batched run | max abs dW_kq | max abs dW_ov | ok |")
    print("|---:|---:|---:|---:|:---:|")
    all_ok = True
    for n, params in batched.items():
        for s in range(min(n, n_loop)):
            kq, ov = loop_weights[s]
            d_kq = (params.tensors["wkq"][s] - kq).abs().max().item()
            d_ov = (params.tensors["wov"][s] - ov).abs().max().item()
            ok = d_kq <= 1e-8 and d_ov <= 1e-8
            all_ok &= ok
            print(f"| {s} | n={n} | {d_kq:.2e} | {d_ov:.2e} | {'yes' if ok else 'NO'} |")
    print(f"\nweights match: {'all' if all_ok else 'NOT all'}")

    if memory:
        print("\n## Peak memory (a fresh process per size: imports, build_problem, train)\n")
        print("VmHWM: high-water RSS of the child's own image. ru_maxrss: Linux carries the launching process's\n"
              "RSS over fork + exec, so the children are launched before this process builds anything.\n")
        print("| seeds | VmHWM after imports MB | VmHWM peak MB | peak - imports MB | ru_maxrss after imports MB "
              "| ru_maxrss peak MB | RSS now, after train - after imports MB | Problem tensors MB |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for n, m in memory.items():
            print(f"| {n} | {m['import_hwm']:.0f} | {m['hwm']:.0f} | {m['hwm'] - m['import_hwm']:.0f} | "
                  f"{m['import_peak']:.0f} | {m['peak']:.0f} | {m['train_now'] - m['import_now']:.1f} | {m['problem_mb']:.2f} |")

if __name__ == "__main__":
    main()
