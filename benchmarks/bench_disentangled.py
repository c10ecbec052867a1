"""Benchmark the batched disentangled-lab trainer (not a test; run by hand).

1. The two-stage preset at 4 seeds (N = 400, L = 20, d = 30, 4000 steps) against a plain
   per-seed loop of the same model and algorithm with torch autograd (the lab's reference
   loop, labs/disentangled/reference.py): wall time,
   seed-steps/s, ratio (target >= 5x) and the final losses of both (must agree to 1e-6).
2. Seed scaling at d = 16, L = 16, N = 256: seed-steps/s at 1, 8 and 64 seeds (target:
   64 seeds >= 8x the single-seed seed-steps/s).
3. Peak memory (VmHWM of a fresh process) at 64 seeds of the default size.
4. The gate-noise size (preset gate-noise: d 200, L 1000, N 400, float32, 4 seeds x
   (baseline, no-anneal, no-noise) + 2 controls = 20 members over 4 datasets): seconds per
   training step against the memory-bandwidth bound of that size, measured in the same run:
   bytes streamed per step = 2 passes (forward scores, backward contraction: the gradient
   needs the forward's sigmoid coefficients, so no GD step can read the features fewer
   times) x the stored training features (U, B, N, C, k), over the copy bandwidth
   (dst.copy_(src) of 1 GiB, read + write bytes / s, best of 5, the step's thread count).
   Target: step time within 2x of the bound.

   ``--gate-preset gate-noise-small`` times the phase map's cheaper size (issue 28) instead.

Usage: python benchmarks/bench_disentangled.py [--steps 4000] [--skip-memory] [--only gate-noise]
       [--gate-preset gate-noise|gate-noise-small]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time

import torch

from stagewise.config import deep_merge, resolve
from stagewise.engine.perf import training_threads
from stagewise.labs.disentangled.config import Config
from stagewise.labs.disentangled.model import forward, logistic
from stagewise.labs.disentangled.reference import seed_data, train_reference
from stagewise.labs.disentangled.ensemble import build_ensemble, members_from_config
from stagewise.labs.disentangled.train import State, init_weights, run_training


def config_for(n_seeds: int, steps: int, **data) -> Config:
    return resolve(Config, deep_merge({"n_seeds": n_seeds, "train": {"steps": steps, "t1": min(300, steps)}},
                                      {"data": data} if data else {}))


def batched(config: Config) -> tuple[float, torch.Tensor]:
    """(train seconds, final train loss per member)."""
    members = members_from_config(config)
    ens = build_ensemble(config, members)
    state = State(list(init_weights(config, members, torch.float64)))
    start = time.perf_counter()
    run_training(ens, state, config.train.steps, lambda t, s: None)
    seconds = time.perf_counter() - start
    fwd = forward(tuple(state.weights), ens.train, config.model.output, config.model.normalizer)
    return seconds, logistic(fwd.f, ens.train.target).mean(-1)


def loop(config: Config) -> tuple[float, torch.Tensor]:
    """The reference loop (:func:`stagewise.labs.disentangled.reference.train_reference`: autograd
    through the split normalized-ReLU model, full-batch GD with the step schedule, L2 and
    Li-Wei-Ma update noise, the same random streams), one seed at a time: (train seconds,
    final train loss per seed). Each seed's data is drawn before its timing starts."""
    losses, seconds = [], 0.0
    for seed in config.seed_list():
        data = seed_data(config, seed)
        start = time.perf_counter()
        run = train_reference(config, seed, data)
        seconds += time.perf_counter() - start
        losses.append(run.stages[1].losses.loss)
    return seconds, torch.tensor(losses, dtype=torch.float64)


def hwm_mb() -> float:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--scaling-steps", type=int, default=500)
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--memory-child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--only", choices=["gate-noise"], default=None, help="run only this section")
    parser.add_argument("--gate-steps", type=int, default=8, help="timed steps of section 4 (after one warm-up step)")
    parser.add_argument("--gate-preset", choices=["gate-noise", "gate-noise-small"], default="gate-noise")
    args = parser.parse_args()
    if args.only == "gate-noise":
        gate_noise_section(args.gate_steps, args.gate_preset)
        return
    if args.memory_child is not None:
        before = hwm_mb()
        batched(config_for(args.memory_child, 200))
        print(json.dumps({"imports": before, "peak": hwm_mb()}))
        return

    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, float64\n")
    print(f"## 1. two-stage preset, 4 seeds, N = 400, L = 20, d = 30, {args.steps} steps\n")
    config = config_for(4, args.steps)
    t_batch, loss_batch = batched(config)
    t_loop, loss_loop = loop(config)
    rate_b, rate_l = 4 * args.steps / t_batch, 4 * args.steps / t_loop
    diff = float((loss_batch - loss_loop).abs().max())
    print("| method | wall s | seed-steps/s |\n|---|---:|---:|")
    print(f"| batched | {t_batch:.2f} | {rate_b:,.0f} |\n| per-seed reference loop | {t_loop:.2f} | {rate_l:,.0f} |")
    print(f"\nratio {rate_b / rate_l:.1f}x (target >= 5x: {'met' if rate_b / rate_l >= 5 else 'MISSED'}); "
          f"final train losses batched {[round(x, 6) for x in loss_batch.tolist()]}, loop "
          f"{[round(x, 6) for x in loss_loop.tolist()]}, max |diff| {diff:.2e} ({'ok' if diff <= 1e-6 else 'MISMATCH'})\n")

    print(f"## 2. seed scaling, d = 16, L = 16, N = 256, {args.scaling_steps} steps (threads = auto)\n")
    print("| seeds | wall s | seed-steps/s | vs 1 seed |\n|---:|---:|---:|---:|")
    base = None
    for n in (1, 8, 64):
        cfg = config_for(n, args.scaling_steps, d=16, prompt_len=16, n_train=256, n_test=16)
        seconds, _ = batched(cfg)
        rate = n * args.scaling_steps / seconds
        base = base or rate
        print(f"| {n} | {seconds:.2f} | {rate:,.0f} | {rate / base:.1f}x |")
    if not args.skip_memory:
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--memory-child", "64"],
                             check=True, capture_output=True, text=True)
        mem = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"\n## 3. peak memory, 64 seeds of the default size (N = 400 train, 2000 test, L = 20, d = 30)\n\n"
              f"VmHWM {mem['peak']:.0f} MB ({mem['peak'] - mem['imports']:.0f} MB above the imports)")

    gate_noise_section(args.gate_steps, args.gate_preset)


def copy_bandwidth(threads: int, nbytes: int = 1 << 30, repeats: int = 5) -> float:
    """Bytes per second of dst.copy_(src) (read + write) for float32 buffers of ``nbytes``."""
    src = torch.ones(nbytes // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    best = math.inf
    with training_threads(threads):
        for _ in range(repeats):
            start = time.perf_counter()
            dst.copy_(src)
            best = min(best, time.perf_counter() - start)
    return 2 * nbytes / best


def gate_noise_section(steps: int, preset: str = "gate-noise") -> None:
    from stagewise.labs import get_lab
    from stagewise.labs.disentangled.experiments import groups

    lab = get_lab("disentangled")
    config = resolve(Config, lab.preset_overrides(preset))
    group = groups(config)[0]
    start = time.perf_counter()
    ens = build_ensemble(config, group.members)
    sampled = time.perf_counter() - start
    state = State(list(init_weights(config, group.members, torch.float32)))
    threads = config.thread_count(len(group.members))
    with training_threads(threads):
        state = run_training(ens, state, 1, lambda t, s: None)  # warm-up
        start = time.perf_counter()
        run_training(ens, state, 1 + steps, lambda t, s: None)  # updates 2 .. 1 + steps (total is the last step)
        per_step = (time.perf_counter() - start) / steps
    features = ens.train.ctx.nbytes + ens.train.query.nbytes
    bandwidth = copy_bandwidth(threads)
    bound = 2 * features / bandwidth
    dc = config.data
    print(f"\n## 4. {preset} size: d {dc.d}, L {dc.prompt_len}, N {dc.n_train}, {len(group.members)} members over "
          f"{ens.train.ctx.shape[0]} datasets, {config.model.dtype}, {threads} threads\n")
    print("| quantity | value |\n|---|---:|")
    print(f"| sampling train + test (s) | {sampled:.1f} |\n| training features (GiB) | {features / 2**30:.2f} |\n"
          f"| copy bandwidth (GB/s) | {bandwidth / 1e9:.1f} |\n| bound: 2 passes / bandwidth (s) | {bound:.3f} |\n"
          f"| measured step (s, mean of {steps}) | {per_step:.3f} |\n| ratio step / bound | {per_step / bound:.2f} "
          f"(target <= 2: {'met' if per_step / bound <= 2 else 'MISSED'}) |")


if __name__ == "__main__":
    main()
