"""One run of the study: a GPT-2-shaped model trained from scratch on a corpus folder's text
(``prepare.py``) with the Hugging Face Trainer, probed by ``stagewise.StagewiseCallback``.

The seed sets the initialisation and the data order (``TrainingArguments.seed`` and
``data_seed``). The Trainer saves a checkpoint every ``train.save_steps`` (safetensors weights;
its optimizer, scheduler and RNG states load with ``torch.load(weights_only=True)``), and a
killed run started again resumes from the last one while the callback's run resumes from its
last record: the run ends with the records an uninterrupted run has. :func:`run_job` is the
worker every executor runs (the sweep's local pool, Ray, SLURM through submitit): it never
raises for one run's problem and reports ``(status, error)`` as the sweep's own worker does.
"""

from __future__ import annotations

import json
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import torch

from stagewise.errors import UserError
from stagewise.lmkit.scoring import encode_texts
from stagewise.orchestrate.tasks import stop_requested
from stagewise.runs import Interrupted, RunLock, read_manifest
from stagewise.runs.lock import LockHeld
from studyconfig import StudyConfig


def blocks(tok: Any, text: str, seq_len: int) -> torch.Tensor:
    """(N, seq_len) int64: the text's lines tokenized, each followed by the end-of-text token,
    concatenated and cut into consecutive blocks (the remainder dropped)."""
    eos = tok.convert_tokens_to_ids("<|endoftext|>")
    lines = [line for line in text.split("\n") if line.strip()]
    ids = encode_texts(tok, lines)
    flat = np.fromiter((t for seq in ids for t in (*seq, eos)), dtype=np.int64)  # (T,)
    n = len(flat) // seq_len
    return torch.from_numpy(flat[: n * seq_len].reshape(n, seq_len))  # (T,) -> (N, seq_len)


class Blocks(torch.utils.data.Dataset):
    """The training blocks as the Trainer's examples (labels = inputs: the model shifts them)."""

    def __init__(self, data: torch.Tensor):
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.data[i], "labels": self.data[i]}


CHECKPOINT_FILES = ("trainer_state.json", "model.safetensors", "optimizer.pt", "scheduler.pt")
"""What a Trainer checkpoint needs to resume from (trainer_state.json is written last)."""


def last_complete_checkpoint(trainer_dir: Path) -> str | None:
    """The newest ``checkpoint-N`` folder holding every file of :data:`CHECKPOINT_FILES`: a kill
    while a checkpoint was being written leaves one without them, and the training goes on from
    the one before (or from the start: the seeded training is deterministic, and the run's records
    at or before its last one are not taken again)."""
    if not trainer_dir.is_dir():
        return None
    folders = sorted((p for p in trainer_dir.glob("checkpoint-*") if p.name.split("-")[-1].isdigit()),
                     key=lambda p: int(p.name.split("-")[-1]), reverse=True)
    return next((str(p) for p in folders if all((p / f).is_file() for f in CHECKPOINT_FILES)), None)


def run_key(corpus: str, arm: str, seed: int) -> str:
    return f"{corpus}-{arm}-s{seed}"


def train_one(cfg: StudyConfig, folder: Path, arm: str, seed: int, run_dir: Path, trainer_dir: Path,
              keep_checkpoints: bool = False) -> dict[str, Any]:
    """Train one model and track it into ``run_dir`` (module docstring); the callback's summary."""
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments, set_seed

    from stagewise import StagewiseCallback

    torch.set_num_threads(cfg.train.threads)
    tok = AutoTokenizer.from_pretrained(str(folder / "tokenizer"))
    text = (folder / ("train.txt" if arm == "real" else "train-shuffled.txt")).read_text(encoding="utf-8")
    data = Blocks(blocks(tok, text, cfg.train.seq_len))
    set_seed(seed)
    eos = tok.convert_tokens_to_ids("<|endoftext|>")
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=cfg.train.seq_len, n_embd=cfg.model.n_embd,
                                       n_layer=cfg.model.n_layer, n_head=cfg.model.n_head, bos_token_id=eos,
                                       eos_token_id=eos, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
    args = TrainingArguments(
        output_dir=str(trainer_dir), max_steps=cfg.train.steps, per_device_train_batch_size=cfg.train.batch_size,
        learning_rate=cfg.train.lr, warmup_steps=cfg.train.warmup_steps, lr_scheduler_type=cfg.train.schedule,
        weight_decay=cfg.train.weight_decay, seed=seed, data_seed=seed, save_strategy="steps",
        save_steps=cfg.train.save_steps, save_total_limit=None if keep_checkpoints else 1, logging_strategy="no",
        report_to="none", use_cpu=True, dataloader_num_workers=0, disable_tqdm=True)
    record = cfg.records
    when: dict[str, Any] = ({"schedule": "steps", "steps": record.steps} if record.schedule == "steps" else
                            {"schedule": "log", "log_until": record.log_until, "every": record.every})
    callback = StagewiseCallback(run_dir, lab="lm", config=folder / "probes.yaml", name=f"gpt2-{cfg.model.n_layer}x"
                                 f"{cfg.model.n_embd}", settings={"study": cfg.model_dump(mode="json"), "arm": arm,
                                                                  "corpus": folder.name}, **when)
    trainer = Trainer(model=model, args=args, train_dataset=data, processing_class=tok, callbacks=[callback])
    last = last_complete_checkpoint(trainer_dir)
    with callback:
        trainer.train(resume_from_checkpoint=last)
    return read_manifest(run_dir)


def run_job(spec_json: str, root: str, key: str, block: bool = False, catch_stop: bool = True,
            allow_large: bool = False, sinks: tuple[str, ...] = ()) -> tuple[str, str | None]:
    """The executors' worker (:func:`stagewise.orchestrate.tasks.run_task`'s contract): one run
    into ``ROOT/runs/KEY`` under the lock ``ROOT/locks/KEY``; ``(status, error)``, never raising
    for the run's own problem (a stop in the sweep's own process propagates)."""
    if stop_requested():
        return "interrupted", "the study was stopped before this run started; run it again to resume"
    spec = json.loads(spec_json)
    cfg = StudyConfig.model_validate(spec["study"])
    run_dir, trainer_dir = Path(root) / "runs" / key, Path(root) / "trainer" / key
    lock = RunLock(Path(root) / "locks" / key)
    try:
        lock.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            lock.acquire()
        except LockHeld:
            return "held", None
        try:
            if (run_dir / "manifest.json").is_file() and read_manifest(run_dir).get("status") == "done":
                return "skipped", None
            began = time.perf_counter()
            manifest = train_one(cfg, Path(spec["folder"]), spec["arm"], int(spec["seed"]), run_dir, trainer_dir,
                                 bool(spec.get("keep_checkpoints")))
            (Path(root) / "times").mkdir(exist_ok=True)
            (Path(root) / "times" / f"{key}.json").write_text(json.dumps({"wall_s": time.perf_counter() - began}))
        finally:
            lock.release()
        return ("done", None) if manifest.get("status") == "done" else ("failed", f"{manifest.get('status')}")
    except Interrupted as err:
        if not catch_stop:
            raise
        return "interrupted", f"stopped by {err}; run the study again to resume"
    except KeyboardInterrupt:
        if not catch_stop:
            raise
        return "interrupted", "stopped; run the study again to resume"
    except UserError as err:
        return "failed", "; ".join(err.messages)
    except Exception as err:  # one run's problem: reported, the others go on
        return "failed", f"{type(err).__name__}: {err} ({traceback.format_exc(limit=3).splitlines()[-3].strip()})"
