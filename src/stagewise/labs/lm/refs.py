"""What the lm commands read from models and finished runs: MODEL references (``eval blimp``,
``lm reduce``, ``lm rank-curve``) and the hand-check sample of a run's predictions (``lm sample``,
last section).

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
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from ...config import MAX_SEED, resolve
from ...errors import UserError
from ...lmkit.config import TINY, ModelConfig
from ...lmkit.models import LoadedModel, build, check_model, load_tokenizer, skeleton
from ...runs import load_snapshot, read_manifest
from ...yamlio import load_yaml

from .config import Config
from .categories import OPEN_CATEGORIES, RULES


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


# Hand-check export: a seeded random sample of a run's predictions of one category
# (``stagewise lm sample RUN --category type-correct --n 20``), with the prompt, the answer,
# the predicted token and both type rules' verdicts, so anyone can audit a run's categories.
#
# The run's ``tables/predictions.parquet`` is checked before it is used: an unreadable file, a
# table without the columns (or with other types) this lab writes, or one without open-rule
# categories under ``--rule open`` is one line naming the file and what to do; a row without a
# top id, or with one the tokenizer does not have, is shown as such, not decoded.

MAX_SAMPLE = 1000
EPOCH_WORDS = ("peak", "first", "last")
PREDICTIONS = Path("tables") / "predictions.parquet"

_COLUMNS: dict[str, tuple[str, Any]] = {
    "example_id": ("text", lambda t: pa.types.is_string(t) or pa.types.is_large_string(t)),
    "epoch": ("numbers", lambda t: pa.types.is_integer(t) or pa.types.is_floating(t)),
    "category": ("text", lambda t: pa.types.is_string(t) or pa.types.is_large_string(t)),
    "top_ids": ("lists of integer token ids", lambda t: pa.types.is_null(t) or (pa.types.is_list(t) or pa.types.is_large_list(t))
                and (pa.types.is_integer(t.value_type) or pa.types.is_null(t.value_type))),
    "category_open": ("text", lambda t: pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t)),
}
"""The predictions columns ``lm sample`` reads: (what they hold, the Arrow type test);
``category_open`` is absent from runs made before the open rule."""


def check_sample_args(category: str, n: int, rule: str, epoch: str, seed: int = 0) -> None:
    """One-line UserErrors for the command's options, before any file is read."""
    if not 0 <= seed < MAX_SEED:
        raise UserError(f"--seed {seed}: between 0 and {MAX_SEED - 1}")
    if category not in OPEN_CATEGORIES:
        raise UserError(f"--category {category!r}: one of {', '.join(OPEN_CATEGORIES)}")
    if not 1 <= n <= MAX_SAMPLE:
        raise UserError(f"--n {n}: between 1 and {MAX_SAMPLE}")
    if rule not in RULES:
        raise UserError(f"--rule {rule!r}: one of {', '.join(RULES)}")
    if category == "excluded" and rule != "open":
        raise UserError("--category excluded: only the open rule excludes examples (--rule open)")
    if epoch not in EPOCH_WORDS:
        try:
            float(epoch)
        except ValueError:
            raise UserError(f"--epoch {epoch!r}: a number or one of {', '.join(EPOCH_WORDS)}") from None


def _unreadable(table: Path, err: BaseException) -> UserError:
    first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
    return UserError(f"{table}: not a readable Parquet file ({first}); the run's predictions table is damaged: "
                     "run the run again, or sample another run")


def read_predictions(run_dir: Path, rule: str) -> tuple[pd.DataFrame, str]:
    """(the run's predictions table, its column of ``rule``'s categories), read after its
    schema is checked: one-line UserError naming the file and what is wrong otherwise.

    Example::

        predictions, column = read_predictions(Path("runs/cf"), "open")   # column "category_open"
    """
    from .phases import rule_column

    table = Path(run_dir) / PREDICTIONS
    if not table.is_file():
        raise UserError(f"{run_dir}: no predictions table ({PREDICTIONS}): not a finished answer-framing lm run")
    try:
        schema = pq.read_schema(table)
    except (OSError, ValueError, pa.ArrowException) as err:
        raise _unreadable(table, err) from None
    missing = [name for name in _COLUMNS if name != "category_open" and name not in schema.names]
    if missing:
        raise UserError(f"{table}: not a predictions table of the lm lab (no column {', '.join(missing)}; it has "
                        f"{', '.join(schema.names[:8]) or 'none'}{' ...' if len(schema.names) > 8 else ''})")
    for name, (holds, fits) in _COLUMNS.items():
        if name in schema.names and not fits(schema.field(name).type):
            raise UserError(f"{table}: column {name} holds {schema.field(name).type}, expected {holds}; not a predictions "
                            "table of the lm lab")
    opened = "category_open" in schema.names
    if rule == "open" and not opened:
        raise UserError(f"{run_dir}: its predictions have no open-rule categories (no category_open column: a run made "
                        "before the open rule); use --rule closed, or run it again to record both rules")
    columns = [name for name in _COLUMNS if name in schema.names]
    try:
        predictions = pd.read_parquet(table, columns=columns)
    except (OSError, ValueError, pa.ArrowException) as err:
        raise _unreadable(table, err) from None
    if not opened:
        predictions["category_open"] = None
    if predictions.empty:
        raise UserError(f"{table}: no predictions recorded (0 rows)")
    column = rule_column(predictions, rule)
    if column is None:
        raise UserError(f"{run_dir}: its records have no {rule}-rule categories (a run made before the open rule): "
                        "use --rule closed, or run it again to record both rules")
    return predictions, column


def decode_top(tok: Any, top_ids: Any) -> tuple[list[str | None], list[str | None]]:
    """(decoded top-1 token or None, why not or None) of each row's top ids: a row without a
    top id, or whose top id is not one of the tokenizer's ids, is not decoded.

    Example::

        decode_top(gpt2_bpe(), [[6342, 11], [], [99999]])
        # ([' Paris', None, None], [None, 'no top id recorded', "id 99999 is not one of the tokenizer's 50257 ids"])
    """
    size = len(tok)
    firsts = [None if ids is None or len(ids) == 0 else int(ids[0]) for ids in top_ids]
    known = [i for i in firsts if i is not None and 0 <= i < size]
    texts = iter(tok.batch_decode([[i] for i in known]) if known else [])
    decoded: list[str | None] = []
    notes: list[str | None] = []
    for i in firsts:
        if i is None:
            decoded.append(None)
            notes.append("no top id recorded")
        elif 0 <= i < size:
            decoded.append(next(texts))
            notes.append(None)
        else:
            decoded.append(None)
            notes.append(f"id {i} is not one of the tokenizer's {size} ids")
    return decoded, notes


def _epoch(predictions: pd.DataFrame, column: str, epoch: str) -> float:
    epochs = np.sort(predictions["epoch"].unique())
    if epoch == "first":
        return float(epochs[0])
    if epoch == "last":
        return float(epochs[-1])
    if epoch == "peak":  # the epoch with the most type-correct predictions under the rule (first maximum)
        counts = predictions[predictions[column] == "type-correct"].groupby("epoch").size().reindex(epochs, fill_value=0)
        return float(counts.index[int(np.argmax(counts.to_numpy()))])
    value = float(epoch)
    if value not in set(epochs.tolist()):
        raise UserError(f"--epoch {epoch}: not a recorded epoch; recorded: {', '.join(f'{e:g}' for e in epochs)}")
    return value


def sample_predictions(run_dir: Path, category: str, n: int, *, rule: str = "open", epoch: str = "peak",
                       seed: int = 0) -> tuple[pd.DataFrame, float, int]:
    """(sample, epoch, how many of that category there were): ``n`` predictions of
    ``category`` under ``rule`` at ``epoch`` drawn without replacement (seeded), sorted by
    example id, with columns example_id, group, prompt, answer, prediction (the decoded top-1
    token, None when it cannot be decoded), prediction_note (why not, else None), closed, open."""
    from .prepare import tokenize_data
    from ...lmkit.models import load_tokenizer

    check_sample_args(category, n, rule, epoch, seed)
    predictions, column = read_predictions(Path(run_dir), rule)
    at = _epoch(predictions, column, epoch)
    rows = predictions[(predictions["epoch"] == at) & (predictions[column] == category)]
    total = len(rows)
    if total:
        pick = np.random.default_rng(seed).choice(total, size=min(n, total), replace=False)
        rows = rows.iloc[np.sort(pick)].sort_values("example_id")
    config = run_config(Path(run_dir))
    tok = load_tokenizer(config.model)
    items: dict[str, Any] = {e.id: e for e in tokenize_data(config, tok, quiet=True).items}
    texts, notes = decode_top(tok, rows["top_ids"])
    out = pd.DataFrame({
        "example_id": rows["example_id"].to_numpy(),
        "group": [items[i].group if i in items else None for i in rows["example_id"]],
        "prompt": [items[i].prompt if i in items else None for i in rows["example_id"]],
        "answer": [items[i].answer if i in items else None for i in rows["example_id"]],
        "prediction": pd.Series(texts, dtype=object),  # None (not NaN) where nothing was decoded
        "prediction_note": pd.Series(notes, dtype=object),
        "closed": rows["category"].to_numpy(),
        "open": rows["category_open"].to_numpy(),
    })
    return out, at, total
