"""One run folder as Python values, for a notebook or a script: :class:`RunView`.

The values are read with the store's own readers (``read_manifest``, ``load_yaml``,
``read_summary``, the metric stream's compaction, ``TableStore``); nothing is written. The
manifest, config and summary are read at once (small files); the metrics, the wide metrics,
the claims frame and each table are read on first use and kept.

This layer knows no lab: the lab's old metric names and paper headings are passed in
(:func:`stagewise.orchestrate.load.load_run` looks them up for the run's lab), so an old run
reads under the current metric names, as ``show`` and ``stages`` read it.

Example::

    from stagewise import load_run
    run = load_run("runs/ex1")
    run.status, run.config["train"]["steps_stage2"]     # 'done', 900
    run.claims[["id", "verdict", "value"]]             # one row per claim
    run.wide["W_kq.cos_target"]                        # (steps x seeds) DataFrame
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from ..errors import UserError
from ..runs.links import refuse_links
from ..runs.manifest import read_manifest
from ..runs.names import current_names, rename_keys, rename_metrics
from ..runs.store import TableStore
from ..runs.stream import MetricSink, read_metrics_file
from ..lazy import LazyMapping
from ..yamlio import load_yaml
from .claims import Summary, read_summary

__all__ = ["CLAIM_COLUMNS", "RunTables", "RunView", "claims_frame", "read_run"]

CLAIM_COLUMNS = ("id", "statement", "source", "quantity", "relation", "threshold", "unit", "verdict", "holds", "value",
                 "pass_fraction", "reason", "evidence")
"""The columns of :attr:`RunView.claims`, in order."""


def claims_frame(summary: Summary | None, sources: Mapping[str, str] | None = None) -> pd.DataFrame:
    """One row per claim of ``summary`` (:data:`CLAIM_COLUMNS`; no rows for None): ``source``
    is the short label (``paper 2, Theorem 3``; <NA> for a version-1 claim), ``holds`` a
    nullable boolean (<NA>: not testable), ``threshold``, ``value`` and ``pass_fraction``
    floats (NaN where there is none). ``sources``: paper key -> heading, under the summary's own."""
    claims = summary.claims if summary is not None else []
    headings = {**(sources or {}), **(summary.sources if summary is not None else {})}
    nan = float("nan")
    data = {
        "id": pd.Series([c.id for c in claims], dtype="string"),
        "statement": pd.Series([c.statement for c in claims], dtype="string"),
        "source": pd.Series([c.source.label(headings) if c.source is not None else None for c in claims], dtype="string"),
        "quantity": pd.Series([c.quantity for c in claims], dtype="string"),
        "relation": pd.Series([c.relation for c in claims], dtype="string"),
        "threshold": pd.Series([nan if c.threshold is None else c.threshold for c in claims], dtype="float64"),
        "unit": pd.Series([c.unit for c in claims], dtype="string"),
        "verdict": pd.Series([c.verdict for c in claims], dtype="string"),
        "holds": pd.Series(pd.array([c.holds for c in claims], dtype="boolean")),
        "value": pd.Series([nan if c.value is None else c.value for c in claims], dtype="float64"),
        "pass_fraction": pd.Series([nan if c.pass_fraction is None else c.pass_fraction for c in claims], dtype="float64"),
        "reason": pd.Series([c.reason for c in claims], dtype="string"),
        "evidence": pd.Series([c.evidence for c in claims], dtype="string"),
    }
    return pd.DataFrame(data, columns=list(CLAIM_COLUMNS))


class RunTables(LazyMapping[pd.DataFrame]):
    """The run's tables by name (``tables/NAME.parquet``), each read on first access
    (``TableStore.get``: without the store's ``_part`` column) and kept."""

    def __init__(self, folder: Path):
        self._store = TableStore(folder)
        super().__init__(self._store.names(), self._table, describe=lambda m: f"RunTables({', '.join(m) or 'none'})")

    def _table(self, name: str) -> pd.DataFrame:
        try:
            frame = self._store.get(name)
        except (OSError, ValueError, pa.ArrowException) as err:
            raise UserError(f"{self._store.path(name)}: not a readable table ({str(err).strip().splitlines()[0]})") from None
        return frame if frame is not None else pd.DataFrame()


@dataclass(frozen=True, eq=False)
class RunView:
    """A run folder read for analysis (:func:`read_run`; ``stagewise.load_run``).

    Attributes:
        path: the run folder.
        manifest: ``manifest.json`` (dict: lab, status, config_hash, seeds, times, error, tables, ...).
        config: ``config.yaml``, the resolved config (dict).
        summary: ``summary.json`` (:class:`~stagewise.report.claims.Summary`; version-1 summaries
            too), its ``final`` and ``per_seed`` under the current metric names; None while the
            run has none (unfinished).

    The frames (read on first use): :attr:`metrics` (long), :attr:`wide` (steps x (metric,
    seed)), :meth:`series` (one metric, steps x seeds), :attr:`claims` (one row per claim),
    :attr:`tables` (name -> table).
    """

    path: Path
    manifest: dict[str, Any] = field(repr=False)
    config: dict[str, Any] = field(repr=False)
    summary: Summary | None = field(repr=False)
    aliases: Mapping[str, str] = field(default_factory=dict, repr=False)
    """The lab's old metric names -> current ones (``Lab.metric_aliases``)."""
    sources: Mapping[str, str] = field(default_factory=dict, repr=False)
    """Paper key -> heading as the lab declares them (for summaries written without ``sources``)."""

    @property
    def status(self) -> str:
        """``running``, ``done``, ``failed``, ``diverged`` or ``interrupted`` (the manifest's)."""
        return str(self.manifest["status"])

    @property
    def lab(self) -> str:
        return str(self.manifest["lab"])

    @property
    def seeds(self) -> list[int]:
        """The ensemble's seeds, in ensemble order."""
        return [int(s) for s in self.manifest["seeds"]]

    @cached_property
    def metrics(self) -> pd.DataFrame:
        """Long form, one row per (step, seed, metric): columns ``step``, ``seed`` (the seed
        value), ``variant``, ``metric`` (``{variant}/{name}`` when a variant is set), ``value``,
        sorted by metric, step, seed. From ``metrics.parquet``; from ``metrics.jsonl`` (as the
        runner compacts it) while the run is ``running`` or when there is no Parquet file (a
        killed run): then it holds every step logged so far. One UserError line naming the file
        for a metrics.parquet without those columns (or holding other kinds of values in them)
        or a metrics.jsonl line the stream does not write."""
        parquet, stream = self.path / "metrics.parquet", self.path / "metrics.jsonl"
        if parquet.is_file() and (self.status != "running" or not stream.is_file()):
            frame = read_metrics_file(parquet)  # one line for a file without the five columns or of other types
        else:
            frame = MetricSink(stream, self.seeds).to_frame()  # no file yet: an empty frame with the five columns
        return rename_metrics(frame, self.aliases)

    @cached_property
    def wide(self) -> pd.DataFrame:
        """:attr:`metrics` pivoted: index ``step``, columns a MultiIndex (``metric``, ``seed``),
        NaN where a metric was not logged at a step. ``run.wide["train.loss"]`` is that metric's
        (steps x seeds) frame; ``run.wide.xs(0, level="seed", axis=1)`` every metric of seed 0."""
        frame = self.metrics
        return frame.pivot(index="step", columns=["metric", "seed"], values="value").sort_index(axis=1)

    def series(self, metric: str) -> pd.DataFrame:
        """One metric as (steps x seeds), only the steps where it was logged; an old name is
        read as its current one (with a note). One UserError line for a metric the run did not log."""
        (name,) = current_names([metric], self.aliases)
        names = self.wide.columns.get_level_values("metric").unique().tolist()
        if name not in names:
            close = difflib.get_close_matches(name, names, n=3)
            hint = f" (close: {', '.join(close)})" if close else f" ({len(names)} metrics logged)"
            raise UserError(f"{self.path}: metric {name!r} was not logged{hint}")
        return self.wide[name].dropna(how="all")

    @cached_property
    def claims(self) -> pd.DataFrame:
        """One row per claim of the summary (columns :data:`CLAIM_COLUMNS`: id, statement,
        source, quantity, relation, threshold, unit, verdict, holds, value, pass_fraction,
        reason, evidence); no rows without a summary."""
        return claims_frame(self.summary, self.sources)

    @cached_property
    def tables(self) -> RunTables:
        """Table name -> DataFrame (``tables/NAME.parquet`` without ``_part``), read on first access."""
        return RunTables(self.path / "tables")

    def __repr__(self) -> str:
        counts = self.summary.counts() if self.summary is not None else {}
        claims = ", ".join(f"{n} {verdict}" for verdict, n in counts.items() if n) or "none"
        return f"RunView({str(self.path)!r}, lab={self.lab!r}, status={self.status!r}, seeds={self.seeds}, claims: {claims})"


def read_run(path: str | Path, *, aliases: Mapping[str, str] | None = None, sources: Mapping[str, str] | None = None,
             check_links: bool = True) -> RunView:
    """The run folder ``path`` as a :class:`RunView`; one UserError line for a folder that is
    not a run (no manifest, naming the path), an unreadable config or summary, or a symbolic
    link inside it (never followed; ``check_links=False`` when the caller has checked a folder
    above it). ``aliases``: old metric name -> current; ``sources``: paper key -> heading.

    Example::

        view = read_run("runs/ex1", aliases=get_lab("ntp").metric_aliases)
    """
    path = Path(path)
    if check_links:
        refuse_links(path)
    manifest = read_manifest(path)
    config = load_yaml(path / "config.yaml")
    summary = read_summary(path / "summary.json") if (path / "summary.json").is_file() else None
    aliases = dict(aliases or {})
    if summary is not None and aliases:
        summary = summary.model_copy(update={"final": rename_keys(summary.final, aliases),
                                             "per_seed": {s: rename_keys(v, aliases) for s, v in summary.per_seed.items()}})
    return RunView(path=path, manifest=manifest, config=config, summary=summary, aliases=aliases, sources=dict(sources or {}))
