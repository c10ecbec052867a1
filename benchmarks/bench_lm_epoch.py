"""Where an LM-lab epoch goes (by hand, not a test; issue 41): counterfact-tiny's preset (its
tiny GPT-2 2 x 128, compact vocabulary, batch 32, baselines ``bow`` and ``bow-last2``), at
``--threads`` threads, in one invocation, each part against the bare epoch:

* bare: the transformer's forward, backward and AdamW step over the epoch's batches;
* + baselines: the lab's loop order, the baselines' step beside the transformer's on a free
  core (``train.beside_pool``) or after it;
* evaluation: the per-epoch eval-mode pass over every example (``evaluate_answers``) and the
  baselines' (``Baselines.evaluate``, beside it on a free core, as ``record_epoch`` runs it);
* records: ``record_epoch`` into an in-memory run (the evaluation, the prediction tables, the
  category counts) minus the evaluation;
* checkpoint: one resume checkpoint (the loop's state: weights, optimizer, baselines) written
  as safetensors;
* ``stagewise run`` slope: the wall time of the real command at 10 epochs minus at 2, over 8
  (imports, data preparation, the summary and the figures cancel), ``--set
  train.threads=N``.

The goal of issue 41: the slope <= 1.3 x the bare epoch at the same thread count.

    python benchmarks/bench_lm_epoch.py --data ../shared/data [--threads 1] [--repeats 3]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

from stagewise.config import deep_merge, resolve
from stagewise.labs.lm.baselines import make_baselines
from stagewise.labs.lm.batching import dataset_batches
from stagewise.labs.lm.config import Config
from stagewise.labs.lm.lab import PRESETS
from stagewise.labs.lm.prepare import prepare
from stagewise.labs.lm.train import beside_pool, evaluate_answers, make_optimizer, pack_state, record_epoch
from stagewise.runs import MemoryContext

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' shared timing and epoch helpers
from bench_lm_baselines import best_epoch, training_epoch  # noqa: E402


def run_slope(data: str, threads: int) -> float:
    """Seconds per epoch of ``stagewise run lm --preset counterfact-tiny``: (wall at 10 epochs - at 2) / 8."""
    walls = {}
    with tempfile.TemporaryDirectory(prefix="bench_lm_epoch_") as tmp:
        for epochs in (2, 10):
            began = time.perf_counter()
            subprocess.run([sys.executable, "-m", "stagewise.cli", "run", "lm", "--preset", "counterfact-tiny", "--set",
                            f"data.root={data}", "--set", f"train.epochs={epochs}", "--set", "train.snapshot_epochs=[]",
                            "--set", f"train.threads={threads}", "--out", str(Path(tmp) / f"r{epochs}"), "-q"],
                           check=True, capture_output=True)
            walls[epochs] = time.perf_counter() - began
    return (walls[10] - walls[2]) / 8


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    data = str(Path(args.data).resolve())
    torch.set_num_threads(args.threads)
    cfg = resolve(Config, deep_merge(PRESETS["counterfact-tiny"][1], {"data": {"root": data}}))
    prep = prepare(cfg, quiet=True)
    model, enc, space = prep.loaded.model, prep.encoded, prep.space
    batches = list(dataset_batches(len(enc), cfg.train.batch_size))
    opt = make_optimizer(cfg, list(model.parameters()))
    baselines = make_baselines(cfg, model, enc, lambda params: make_optimizer(cfg, params, fused=True))
    assert baselines is not None and space is not None
    pool = beside_pool(True, prep.device)

    bare = training_epoch(cfg, model, enc, opt, batches, prep.device)
    with_baselines = training_epoch(cfg, model, enc, opt, batches, prep.device, baselines, pool)

    def evaluation() -> None:
        """As ``record_epoch`` runs it: the baselines' evaluation beside the model's on a free core."""
        model.eval()
        job = pool.submit(baselines.evaluate, enc, space, cfg.train.eval_batch_size) if pool is not None else None
        evaluate_answers(model, enc, space, cfg, prep.device)
        if job is not None:
            job.result()
        else:
            baselines.evaluate(enc, space, cfg.train.eval_batch_size)

    def records() -> None:
        record_epoch(cfg, model, enc, MemoryContext([cfg.seed]), prep.device, 1.0, len(batches), space,
                     prep.loaded.vocab_ids, None, baselines=baselines)

    def checkpoint() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            state = {**pack_state(model, opt), **baselines.state()}
            save_file({k: v.contiguous() for k, v in state.items()}, str(Path(tmp) / "ckpt.safetensors"))

    bare_s = best_epoch(bare, args.repeats)
    rows = [("bare transformer epoch (forward, backward, AdamW)", bare_s),
            (f"+ baselines ({'beside it on a free core' if pool is not None else 'after it: no free core'})",
             best_epoch(with_baselines, args.repeats) - bare_s)]
    eval_s = best_epoch(evaluation, args.repeats)
    rows += [("+ evaluation (every example, the model's and the baselines')", eval_s),
             ("+ records (tables, counts; beyond the evaluation)", best_epoch(records, args.repeats) - eval_s),
             (f"+ checkpoint (one; the preset writes one every {cfg.train.checkpoint_every} epochs)", best_epoch(checkpoint, args.repeats))]
    slope = run_slope(data, args.threads)
    print(f"counterfact-tiny ({len(enc)} examples, {len(batches)} batches), {args.threads} thread(s), best of {args.repeats}:")
    print("| part of an epoch | seconds | x the bare epoch |\n|---|---:|---:|")
    for name, seconds in rows:
        print(f"| {name} | {seconds:.3f} | {seconds / bare_s:.2f} |")
    print(f"| `stagewise run lm` per epoch (slope 2 -> 10 epochs) | {slope:.3f} | {slope / bare_s:.2f} |")


if __name__ == "__main__":
    main()
