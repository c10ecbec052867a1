"""Old metric names read as current ones.

A lab that renames a metric declares old name -> current name (``Lab.metric_aliases``);
whatever reads a run's metrics (the runner's compaction to Parquet, ``stagewise stages`` and
``show``, ``sweep collect``, the run report) passes the run's lab's aliases to these
functions, so a run folder written before the rename, or resumed across it (old names in the
stream before the checkpoint, current ones after), reads with the current names only.

A name is looked up as it is and, for a ``{variant}/{name}`` one, by its last part, so one
alias covers every variant (``two_stage/cos_wkq`` -> ``two_stage/W_kq.cos_target``). Current
names never contain ``/`` (docs/run-store.md, "Metric names"). Pure functions: this module
knows no lab.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Iterable, Mapping, TypeVar

from ..errors import RenamedMetric

if TYPE_CHECKING:  # annotations only: importing this module needs no pandas
    import pandas as pd

__all__ = ["current_name", "current_names", "rename_keys", "rename_metrics"]

FRAME_ORDER = ("metric", "step", "seed")
"""The row order of a compacted metrics frame (:meth:`~stagewise.runs.stream.MetricSink.to_frame`),
restored after a rename so that an old run's frame equals a new run's."""

V = TypeVar("V")


def current_name(name: str, aliases: Mapping[str, str]) -> str:
    """``name`` under its current name: the alias's target for an old plain name or an old
    ``{variant}/{name}``; any other name unchanged."""
    if name in aliases:
        return aliases[name]
    variant, sep, base = name.rpartition("/")
    if sep and base in aliases:
        return f"{variant}/{aliases[base]}"
    return name


def current_names(names: Iterable[str], aliases: Mapping[str, str]) -> list[str]:
    """``names`` (metrics a user gave: criteria, sweep report entries) under their current
    names; each old one warns :class:`~stagewise.errors.RenamedMetric` (``opt_attn_min is now
    train.opt_attn.min``), which the CLI prints as one ``note:`` line."""
    out = []
    for name in names:
        new = current_name(name, aliases)
        if new != name:
            warnings.warn(f"{name} is now {new} (metric renamed; the old name still works)", RenamedMetric, stacklevel=2)
        out.append(new)
    return out


def rename_keys(values: Mapping[str, V], aliases: Mapping[str, str]) -> dict[str, V]:
    """``values`` keyed by metric name (``summary.json``'s ``final``, a ``per_seed`` entry)
    with old names replaced by current ones, in the same order."""
    return {current_name(k, aliases): v for k, v in values.items()}


def rename_metrics(frame: pd.DataFrame, aliases: Mapping[str, str]) -> pd.DataFrame:
    """A long-form metrics frame (column ``metric``) with old names replaced by current ones.

    Returns ``frame`` itself when no name changes (a run written after the rename costs one
    pass over its distinct names). Otherwise a copy, its ``metric`` column of the same dtype,
    re-sorted by (metric, step, seed) when it has those columns, as the stream's compaction
    sorts them: a run resumed across the rename then gives the frame an uninterrupted run
    gives. A record logged under both names at one step and seed would appear twice (a lab
    never logs an old name)."""
    if not aliases or "metric" not in frame.columns or frame.empty:
        return frame
    lookup = {name: current_name(name, aliases) for name in frame["metric"].unique()}
    if all(old == new for old, new in lookup.items()):
        return frame
    out = frame.copy()
    out["metric"] = out["metric"].map(lookup).astype(frame["metric"].dtype)
    if all(c in out.columns for c in FRAME_ORDER):
        out = out.sort_values(list(FRAME_ORDER), kind="stable").reset_index(drop=True)
    return out
