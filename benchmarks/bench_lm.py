"""LM-lab benchmarks (by hand, not a test): one epoch of counterfact-tiny with this lab's
loop against a loop written the way the authors' script works, the compact vocabulary's
extra speedup, and the overhead of attention spectra logged every 50 steps.

The authors' way (zx-gong/Two-Stage-Dynamics, a LASER fork): every batch is tokenized inside
the loop, right-padded with EOS and passed without an attention mask; logits are computed at
every position over the full vocabulary and read at the last (padded) column; after the step,
each example's top-10 tokens are decoded one by one in Python and compared with the answer.
Same model initialization, same batches (dataset order, batch 32), same optimizer.

    python benchmarks/bench_lm.py --data ../shared/data [--threads 1] [--repeats 2]
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
import torch.nn.functional as F

from stagewise.config import deep_merge, resolve
from stagewise.labs.lm.batching import dataset_batches
from stagewise.labs.lm.config import Config
from stagewise.labs.lm.train import batch_loss, evaluate_answers, make_optimizer, prediction_records
from stagewise.labs.lm.lab import PRESETS
from stagewise.labs.lm.prepare import prepare
from stagewise.lmkit.spectra import spectra_hook


def config(data: str, compact: bool) -> Config:
    over = deep_merge(PRESETS["counterfact-tiny"][1], {"data": {"root": data}, "model": {"compact_vocab": compact}})
    return resolve(Config, over)


def our_epoch(cfg: Config, prep, spectra_every: int = 0) -> tuple[float, float, float]:
    """(seconds of one training epoch + its evaluation and records, seconds of the training
    steps alone, seconds spent in spectra)."""
    model, enc = prep.loaded.model, prep.encoded
    opt = make_optimizer(cfg, list(model.parameters()))
    hook = spectra_hook(model) if spectra_every else None
    spent = 0.0
    start = time.perf_counter()
    model.train()
    for step, rows in enumerate(dataset_batches(len(enc), cfg.train.batch_size), start=1):
        loss = batch_loss(model, enc, rows, cfg, prep.device)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if hook is not None and step % spectra_every == 0:
            t = time.perf_counter()
            metrics, table = hook(model)
            spent += time.perf_counter() - t
    trained = time.perf_counter() - start - spent
    model.eval()
    ev = evaluate_answers(model, enc, prep.space, cfg, prep.device)
    prediction_records(enc, ev, 1, prep.loaded.vocab_ids)
    return time.perf_counter() - start, trained, spent


def authors_epoch(cfg: Config, prep, prompts: list[str], answers: list[str]) -> float:
    """One epoch the authors' way (see the module docstring)."""
    model, tok = prep.loaded.model, prep.loaded.tokenizer
    tok.padding_side = "right"
    opt = make_optimizer(cfg, list(model.parameters()))
    answer_ids = torch.tensor([r[0] for r in tok(answers, add_special_tokens=False)["input_ids"]])
    correct = 0
    start = time.perf_counter()
    model.train()
    for rows in dataset_batches(len(prompts), cfg.train.batch_size):
        idx = rows.tolist()
        batch = tok([prompts[i] for i in idx], padding=True, return_tensors="pt")
        logits = model(input_ids=batch["input_ids"]).logits[:, -1, :]  # (B, V): a pad token for short prompts
        loss = F.cross_entropy(logits, answer_ids[rows])
        loss.backward()
        opt.step()
        opt.zero_grad()
        for j, i in enumerate(idx):  # per-example Python decoding of the top 10
            top = torch.topk(logits[j].detach(), 10)
            words = [tok.decode([int(t)]) for t in top.indices]
            correct += words[0].strip().lower() == answers[i].strip().lower()
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    full_cfg, compact_cfg = config(args.data, False), config(args.data, True)
    full, compact = prepare(full_cfg, quiet=True), prepare(compact_cfg, quiet=True)
    items = [e for e in _examples(full_cfg)]
    prompts, answers = [e.prompt for e in items], [e.answer for e in items]
    init_full = copy.deepcopy(full.loaded.model.state_dict())
    init_compact = copy.deepcopy(compact.loaded.model.state_dict())
    rows = {"authors (full vocab)": [], "ours (full vocab)": [], "ours (compact vocab)": [],
            "ours (compact) + spectra/50": []}
    spectra_time, train_time = [], []
    for _ in range(args.repeats):  # interleaved: the machine's noise hits every variant alike
        full.loaded.model.load_state_dict(init_full)
        rows["authors (full vocab)"].append(authors_epoch(full_cfg, full, prompts, answers))
        full.loaded.model.load_state_dict(init_full)
        rows["ours (full vocab)"].append(our_epoch(full_cfg, full)[0])
        compact.loaded.model.load_state_dict(init_compact)
        total, trained, _ = our_epoch(compact_cfg, compact)
        rows["ours (compact vocab)"].append(total)
        train_time.append(trained)
        compact.loaded.model.load_state_dict(init_compact)
        total, _, spent = our_epoch(compact_cfg, compact, spectra_every=50)
        rows["ours (compact) + spectra/50"].append(total)
        spectra_time.append(spent)
    best = {k: min(v) for k, v in rows.items()}
    n = len(prompts)
    print(f"counterfact-tiny, one epoch ({n} examples, batch 32, {args.threads} thread(s)), best of {args.repeats}:")
    print(f"{'loop':32s} {'seconds':>8s} {'examples/s':>11s} {'vs authors':>10s}")
    for name, sec in best.items():
        print(f"{name:32s} {sec:8.2f} {n / sec:11.0f} {best['authors (full vocab)'] / sec:9.1f}x")
    steps = -(-n // 32)
    step_time = min(train_time) / steps
    hook = spectra_hook(compact.loaded.model)
    calls = []
    for _ in range(20):  # an epoch has fewer than 50 steps: time the call itself
        t = time.perf_counter()
        hook(compact.loaded.model)
        calls.append(time.perf_counter() - t)
    per_call = min(calls)
    print(f"spectra: {per_call * 1000:.1f} ms per call; logged every 50 steps: {per_call / 50 / step_time:.1%} of the "
          f"training step time ({step_time * 1000:.1f} ms per step)")


def _examples(cfg: Config):
    from stagewise.lmkit.models import load_tokenizer
    from stagewise.labs.lm.prepare import tokenize_data

    return tokenize_data(cfg, load_tokenizer(cfg.model), quiet=True).items


if __name__ == "__main__":
    main()
