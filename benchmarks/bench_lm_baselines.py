"""The no-attention baselines' cost per epoch against the transformer's bare epoch (by hand,
not a test; issue 41): counterfact-tiny's preset (its model, compact vocabulary, batches and
its two baselines, ``bow`` and ``bow-last2``), one invocation, side by side:

* bare: the transformer's forward, backward and AdamW step over an epoch's batches (the lab's
  ``batch_loss``), nothing else;
* baselines, dense (before issue 41): the features as a (B, L, d) gather masked and summed,
  per-tensor AdamW;
* baselines, now: ``embedding_bag`` features and a fused AdamW (``labs/lm/baselines.py``).

Each is timed over ``--repeats`` epochs after a warm-up epoch (best epoch reported), at
``--threads`` threads. The baselines' share is their epoch over the bare epoch (the goal of
issue 41: <= 10 %).

    python benchmarks/bench_lm_baselines.py --data ../shared/data [--threads 1] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any, Callable

import torch

from stagewise.config import deep_merge, resolve
from stagewise.labs.lm.baselines import Baseline, make_baselines
from stagewise.labs.lm.batching import dataset_batches
from stagewise.labs.lm.config import Config
from stagewise.labs.lm.lab import PRESETS
from stagewise.labs.lm.prepare import prepare
from stagewise.labs.lm.train import batch_loss, make_optimizer


def dense_features(self: Baseline, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The features as computed before issue 41 (the reference of tests/labs/lm/test_baselines.py)."""
    real = torch.arange(ids.shape[1])[None, :] < lengths[:, None]  # (B, L)
    e = self.embed[ids.clamp(max=self.n_rows)] * real[..., None]  # (B, L, d)
    parts = [e.sum(1) / lengths[:, None].to(e.dtype)]
    for j in range(self.last_k):
        col = lengths - 1 - j
        tok = torch.where(col >= 0, ids.gather(1, col.clamp(min=0)[:, None])[:, 0], torch.full_like(col, self.n_rows))
        parts.append(self.embed[tok])
    return torch.cat(parts, dim=1)


def best_epoch(epoch: Callable[[], None], repeats: int) -> float:
    epoch()  # warm-up
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        epoch()
        times.append(time.perf_counter() - began)
    return min(times)


def training_epoch(cfg: Config, model: Any, enc: Any, opt: torch.optim.Optimizer, batches: list[torch.Tensor],
                   device: torch.device, baselines: Any = None, pool: Any = None) -> Callable[[], None]:
    """One training epoch as the lab's loop runs it: the transformer's forward, backward and step
    over ``batches``, with ``baselines`` stepped beside it on ``pool`` (a free core) or after it."""

    def epoch() -> None:
        model.train()
        for rows in batches:
            job = pool.submit(baselines.step, enc, rows, cfg.train.lr) if pool is not None and baselines is not None else None
            loss = batch_loss(model, enc, rows, cfg, device)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if job is not None:
                job.result()
            elif baselines is not None:
                baselines.step(enc, rows, cfg.train.lr)
    return epoch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = resolve(Config, deep_merge(PRESETS["counterfact-tiny"][1], {"data": {"root": args.data}}))
    prep = prepare(cfg, quiet=True)
    model, enc = prep.loaded.model, prep.encoded
    batches = list(dataset_batches(len(enc), cfg.train.batch_size))
    opt = make_optimizer(cfg, list(model.parameters()))

    bare = training_epoch(cfg, model, enc, opt, batches, prep.device)

    def baselines(fused: bool) -> Callable[[], None]:
        made = make_baselines(cfg, model, enc, lambda params: make_optimizer(cfg, params, fused=fused))
        assert made is not None

        def epoch() -> None:
            for rows in batches:
                made.step(enc, rows, cfg.train.lr)
        return epoch

    def together(pool: bool) -> Callable[[], None]:
        """The lab's loop order: the transformer's step with the baselines' (beside it on a free core, or after it)."""
        from stagewise.labs.lm.train import beside_pool

        made = make_baselines(cfg, model, enc, lambda params: make_optimizer(cfg, params, fused=True))
        assert made is not None
        return training_epoch(cfg, model, enc, opt, batches, prep.device, made, beside_pool(True, prep.device) if pool else None)

    bare_s = best_epoch(bare, args.repeats)
    after_s = best_epoch(together(False), args.repeats)
    beside_s = best_epoch(together(True), args.repeats)
    now_s = best_epoch(baselines(True), args.repeats)
    sparse = Baseline.features
    Baseline.features = dense_features  # type: ignore[method-assign]
    try:
        dense_s = best_epoch(baselines(False), args.repeats)
    finally:
        Baseline.features = sparse  # type: ignore[method-assign]
    print(f"counterfact-tiny ({len(enc)} examples, {len(batches)} batches, V' = {model.get_output_embeddings().weight.shape[0]}, "
          f"baselines {', '.join(cfg.baselines.kinds)}, d = {cfg.baselines.d}), {args.threads} thread(s), best of "
          f"{args.repeats} epochs:")
    print("| epoch | seconds | share of the bare epoch |\n|---|---:|---:|")
    print(f"| bare transformer (forward, backward, AdamW) | {bare_s:.3f} | 100 % |")
    print(f"| baselines, dense features + per-tensor AdamW (before) | {dense_s:.3f} | {100 * dense_s / bare_s:.1f} % |")
    print(f"| baselines, embedding_bag + fused AdamW (now) | {now_s:.3f} | {100 * now_s / bare_s:.1f} % |")
    print(f"| bare + baselines after each step | {after_s:.3f} | {100 * after_s / bare_s:.1f} % |")
    beside = "beside it on a free core" if torch.get_num_threads() + 1 <= (os.cpu_count() or 1) else "(no free core: after it)"
    print(f"| bare + baselines {beside} (the lab's loop) | {beside_s:.3f} | {100 * beside_s / bare_s:.1f} % |")


if __name__ == "__main__":
    main()
