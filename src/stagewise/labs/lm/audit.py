"""Hand-check export: a seeded random sample of a run's predictions of one category
(``stagewise lm sample RUN --category type-correct --n 20``), with the prompt, the answer,
the predicted token and both type rules' verdicts, so anyone can audit a run's categories.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ...errors import UserError
from .categories import OPEN_CATEGORIES, RULES

MAX_SAMPLE = 1000
EPOCH_WORDS = ("peak", "first", "last")


def check_sample_args(category: str, n: int, rule: str, epoch: str) -> None:
    """One-line UserErrors for the command's options, before any file is read."""
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
    example id, with columns example_id, group, prompt, answer, prediction, closed, open."""
    from .prepare import tokenize_data
    from ...lmkit.models import load_tokenizer
    from .refs import run_config
    from .summary import rule_column

    check_sample_args(category, n, rule, epoch)
    table = Path(run_dir) / "tables" / "predictions.parquet"
    if not table.is_file():
        raise UserError(f"{run_dir}: no predictions table (tables/predictions.parquet): not a finished answer-framing lm run")
    predictions = pd.read_parquet(table, columns=["example_id", "epoch", "category", "category_open", "top_ids"])
    column = rule_column(predictions, rule)
    if column is None:
        raise UserError(f"{run_dir}: its records have no {rule}-rule categories (a run made before the open rule: use --rule closed)")
    at = _epoch(predictions, column, epoch)
    rows = predictions[(predictions["epoch"] == at) & (predictions[column] == category)]
    total = len(rows)
    if total:
        pick = np.random.default_rng(seed).choice(total, size=min(n, total), replace=False)
        rows = rows.iloc[np.sort(pick)].sort_values("example_id")
    config = run_config(Path(run_dir))
    tok = load_tokenizer(config.model)
    items: dict[str, Any] = {e.id: e for e in tokenize_data(config, tok, quiet=True).items}
    predicted = [int(ids[0]) for ids in rows["top_ids"]]
    texts = tok.batch_decode([[i] for i in predicted]) if predicted else []
    out = pd.DataFrame({
        "example_id": rows["example_id"].to_numpy(),
        "group": [items[i].group if i in items else None for i in rows["example_id"]],
        "prompt": [items[i].prompt if i in items else None for i in rows["example_id"]],
        "answer": [items[i].answer if i in items else None for i in rows["example_id"]],
        "prediction": texts,
        "closed": rows["category"].to_numpy(),
        "open": rows["category_open"].to_numpy(),
    })
    return out, at, total
