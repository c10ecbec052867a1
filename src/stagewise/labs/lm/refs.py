"""MODEL references of the lm commands (``eval blimp``, ``lm reduce``, ``lm rank-curve``).

A MODEL is one of

* a run directory of this lab (its last epoch's snapshot) or ``RUN@EPOCH`` (the snapshot of
  that epoch: see ``train.snapshot_epochs``);
* a ``.gguf`` file (loaded with gguf + accelerate);
* a local Hugging Face model folder (``config.json`` + weights);
* ``tiny-gpt2`` (random weights, seed 0) or ``pkg:PACKAGE`` (an installed package's folder);
* anything else is taken as a hub id: from the local Hugging Face cache, or downloaded when
  the hub is reachable (checked at once, before anything is made: :mod:`.hub`); a name
  written as a path (``./x``, ``/x``, ``a/b/c``) that does not exist is "model folder ...
  does not exist".

Run snapshots hold the weights (and ``vocab_ids`` for compact vocabularies); the model's
skeleton and tokenizer are rebuilt from the run's config.yaml.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch

from ...config import resolve
from ...errors import UserError
from ...lmkit.config import TINY, ModelConfig
from ...lmkit.models import LoadedModel, build, check_model, load_tokenizer, skeleton
from ...runs import load_snapshot, read_manifest
from ...yamlio import load_yaml
from .config import Config

_AT = re.compile(r"^(?P<path>.+)@(?P<epoch>\d+)$")
SNAPSHOT = "epoch_{:05d}.safetensors"


@dataclass(frozen=True, eq=False)
class ModelRef:
    """A loaded MODEL and, for a run directory, the run's config and the snapshot's epoch."""

    loaded: LoadedModel
    label: str
    config: Config | None = None
    run_dir: Path | None = None
    epoch: int | None = None


def run_config(run_dir: Path) -> Config:
    manifest = read_manifest(run_dir)
    if manifest.get("lab") != "lm":
        raise UserError(f"{run_dir}: a run of lab '{manifest.get('lab')}', not of the lm lab")
    return resolve(Config, load_yaml(run_dir / "config.yaml"))


def snapshot_path(run_dir: Path, epoch: int | None) -> tuple[Path, int]:
    folder = run_dir / "snapshots"
    found = sorted(folder.glob("epoch_*.safetensors")) if folder.is_dir() else []
    epochs = [int(p.stem.split("_")[1]) for p in found]
    if not epochs:
        raise UserError(f"{run_dir}: no snapshots/ (the run has not finished an epoch that keeps weights)")
    if epoch is None:
        return found[-1], epochs[-1]
    if epoch not in epochs:
        raise UserError(f"{run_dir}@{epoch}: no snapshot of epoch {epoch}; kept: {', '.join(map(str, epochs))} "
                        "(train.snapshot_epochs chooses them)")
    return folder / SNAPSHOT.format(epoch), epoch


def load_run_model(run_dir: Path, epoch: int | None = None) -> ModelRef:
    """The model of a run directory at a snapshot epoch (default: the last kept)."""
    cfg = run_config(run_dir)
    path, epoch = snapshot_path(run_dir, epoch)
    check_model(cfg.model, f"{run_dir}: model.name={cfg.model.name}")  # the run's base model can be had now
    try:
        tensors, _ = load_snapshot(path)
    except ValueError as err:
        raise UserError(str(err)) from None
    vocab_ids = tensors.pop("vocab_ids", None)
    tok = load_tokenizer(cfg.model)
    model = skeleton(cfg.model, tok, seed=cfg.seed, dtype=torch.float32, keep=vocab_ids)
    params = dict(model.named_parameters())
    missing = sorted(set(params) - {k[len("model."):] for k in tensors})
    if missing:
        raise UserError(f"{path}: snapshot lacks {len(missing)} parameters (e.g. {missing[0]}); not this run's model?")
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(tensors[f"model.{name}"])
    loaded = LoadedModel(model=model.eval(), tokenizer=tok, name=f"{run_dir}@{epoch}", vocab_ids=vocab_ids)
    return ModelRef(loaded, f"{run_dir.name}@{epoch}", cfg, run_dir, epoch)


def model_config_of(ref: str) -> ModelConfig:
    """The ModelConfig a non-run MODEL reference stands for."""
    path = Path(ref).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise UserError(f"{ref}: no such GGUF file")
        return ModelConfig(name=str(path.resolve().parent), gguf_file=path.name)
    if ref == TINY or ref.startswith("pkg:"):
        return ModelConfig(name=ref)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UserError(f"{ref}: a folder without config.json is neither a run of this lab nor a Hugging Face model")
        return ModelConfig(name=str(path.resolve()))
    if path.exists():
        raise UserError(f"{ref}: a file that is not a .gguf model")
    return ModelConfig(name=ref)  # a hub id


def load_ref(ref: str, *, dtype: torch.dtype = torch.float32) -> ModelRef:
    """Load a MODEL reference (see the module docstring)."""
    match = _AT.match(ref)
    path = Path(match["path"] if match else ref).expanduser()
    if (path / "manifest.json").is_file():
        return load_run_model(path, int(match["epoch"]) if match else None)
    if match:
        what = "does not exist" if not path.exists() else "is not one"
        raise UserError(f"{ref}: @EPOCH is for run directories of this lab; {match['path']} {what}")
    cfg = model_config_of(ref)
    check_model(cfg, ref)  # a missing folder, or a hub id neither cached nor downloadable now: one line at once
    loaded = build(cfg, seed=0, dtype=dtype)
    loaded.model.eval()
    return ModelRef(loaded, Path(ref).name if Path(ref).exists() else ref)

