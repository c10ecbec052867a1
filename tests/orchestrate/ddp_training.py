"""The multi-process acceptance script of tests/orchestrate/test_track_ranks.py (issue 39).

Run by ``torchrun --nproc_per_node 2`` (CPU, gloo) or plainly (one process). docs/probes.md's
setup block gives the tiny GPT-2, its tokenizer, the CounterFact fixture and the collator;
then, on every rank with the same code:

* ``trainer``: the HF Trainer (the doc's arguments, ``--batch`` examples per rank and step, in
  dataset order) with ``StagewiseCallback(OUT/runs/trainer, every=--every)``;
* ``loop`` (with ``--loop-epochs E``, under torchrun only): a plain ``DistributedDataParallel`` loop with
  a ``Tracker(OUT/runs/loop)`` on the budget rule (``every=0``, rank 0's decisions broadcast),
  each rank's ``step`` answers written to ``OUT/decisions-RANK.json`` (outside the run folder).

Usage: python ddp_training.py OUT --batch B --epochs E --every K [--loop-epochs E]
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path
from typing import Any

import torch

DOC = Path(__file__).resolve().parents[2] / "docs" / "probes.md"


def setup() -> dict[str, Any]:
    """docs/probes.md's first python block run as written: prep, model, tokenizer, train_data, collate, config."""
    block = re.findall(r"^```python\n(.*?)^```$", DOC.read_text(encoding="utf-8"), flags=re.S | re.M)[0]
    namespace: dict[str, Any] = {}
    exec(compile(block, str(DOC), "exec"), namespace)  # our own docs, as a reader runs them
    return namespace


def trainer_run(ns: dict[str, Any], out: Path, batch: int, epochs: int, every: int) -> None:
    from transformers import Trainer, TrainingArguments

    from stagewise import StagewiseCallback

    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    args = TrainingArguments(
        output_dir=str(out / "hf"), num_train_epochs=epochs, per_device_train_batch_size=batch, learning_rate=1e-3,
        weight_decay=0.0, lr_scheduler_type="constant", max_grad_norm=0.0, train_sampling_strategy="sequential",
        remove_unused_columns=False, report_to="none", save_strategy="no", logging_strategy="no", disable_tqdm=True,
        use_cpu=True, ddp_backend="gloo" if distributed else None)
    callback = StagewiseCallback(out / "runs" / "trainer", lab="lm", preset="counterfact-tiny", every=every,
                                 vocab_ids=ns["prep"].loaded.vocab_ids)
    trainer = Trainer(model=ns["model"], args=args, train_dataset=ns["train_data"], data_collator=ns["collate"],
                      processing_class=ns["tokenizer"], callbacks=[callback])
    trainer.train()


def loop_run(ns: dict[str, Any], out: Path, batch: int, epochs: int) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from stagewise import Tracker
    from stagewise.labs.lm.prepare import prepare

    if not dist.is_initialized():
        dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = DistributedDataParallel(prepare(ns["config"], quiet=True).loaded.model)  # a fresh copy of the seeded model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    data = ns["train_data"]
    batches = [data[i:i + batch] for i in range(0, len(data), batch)][rank::world]  # this rank's share, in order
    answers: list[bool] = []
    with Tracker(out / "runs" / "loop", model, ns["tokenizer"], lab="lm", preset="counterfact-tiny", budget=1.0,
                 vocab_ids=ns["prep"].loaded.vocab_ids) as tracker:
        answers.append(tracker.step(0, epoch=0.0, force=True))
        model.train()
        step, total = 0, epochs * len(batches)
        for _ in range(epochs):
            for chunk in batches:
                loss = model(**ns["collate"](chunk)).loss
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                step += 1
                answers.append(tracker.step(step, epoch=step / len(batches), force=step == total))
    (out / f"decisions-{rank}.json").write_text(json.dumps(answers))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument("--every", type=int, required=True)
    parser.add_argument("--loop-epochs", type=int, default=0, help="the plain DDP loop's epochs (0: no loop)")
    options = parser.parse_args()
    torch.set_num_threads(1)
    ns = setup()
    trainer_run(ns, options.out, options.batch, options.epochs, options.every)
    if options.loop_epochs:
        loop_run(ns, options.out, options.batch, options.loop_epochs)


if __name__ == "__main__":
    main()
