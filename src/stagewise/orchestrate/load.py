"""Run and sweep folders as Python values, for a notebook or a script: :func:`load_run` and
:func:`load_sweep` (``stagewise.load_run``, ``stagewise.load_sweep``).

Both only read, with the readers the commands use: the run store's (manifest, config, summary,
metric stream, tables; :class:`~stagewise.report.runview.RunView`), the sweep index's schema
reader (:func:`stagewise.orchestrate.sweep.index`) and ``sweep collect``'s table
(:func:`~stagewise.orchestrate.collect.collect_frame`, without writing ``collect/``). Old
metric names read as the current ones of the run's lab, as in ``show`` and ``sweep collect``.
No symbolic link inside the folder is followed: one is refused with one line.

Example::

    import stagewise
    run = stagewise.load_run("runs/ex1")
    run.metrics                 # long: step, seed, variant, metric, value
    sweep = stagewise.load_sweep("sweeps/eta")
    sweep.frame                 # one row per point and seed (as `sweep collect`)
    sweep.metrics               # long, over every point, with the point's axes as columns
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import Note, UserError
from ..labs import metric_aliases
from ..lazy import LazyMapping
from ..report.html import inside_folder
from ..report.runview import CLAIM_COLUMNS, RunView, read_run
from ..runs.links import refuse_links
from ..runs.manifest import read_manifest
from .collect import collect_frame
from .reporting import declared_sources
from .sweep import index
from .sweepplot import SEED_AXIS

__all__ = ["RunView", "SweepView", "load_run", "load_sweep"]

POINT_COLUMNS = ("point", "run_dir")
"""The columns that name a point's row in :attr:`SweepView.claims` and :attr:`SweepView.metrics`."""

METRIC_COLUMNS = ("step", "seed", "variant", "metric", "value")
"""The columns of a run's long metrics (:attr:`RunView.metrics`)."""


def _not_a_run_hint(path: Path) -> None:
    """One UserError line for a sweep or reproduce folder given as a run (no manifest there)."""
    if (path / "manifest.json").exists():
        return
    if (path / "sweep.json").is_file():
        raise UserError(f"{path}: not a run directory (no manifest.json; it is a sweep folder: stagewise.load_sweep({str(path)!r}))")
    if (path / "reproduce.json").is_file():
        raise UserError(f"{path}: not a run directory (no manifest.json; it is a reproduce folder: its runs are {path}/runs/NAME)")


def load_run(path: str | Path) -> RunView:
    """The run folder ``path`` read for analysis: config, manifest, summary, and the metrics,
    claims and tables as DataFrames (:class:`~stagewise.report.runview.RunView`). A finished,
    failed or still running run alike (metrics then come from ``metrics.jsonl``). One
    UserError line for a folder that is not a run (naming the path) or holds a symbolic link.

    Example::

        run = load_run("runs/ex1")
        run.summary.final["train.loss"].mean           # the last step's mean over seeds
        run.claims.query("verdict == 'fails'")         # the claims that fail, with their values
        run.series("W_kq.cos_target").iloc[-1]         # the last logged value of each seed
    """
    path = Path(path)
    refuse_links(path)
    _not_a_run_hint(path)
    return _read(path, check_links=False)


def _read(path: Path, check_links: bool, lab: str | None = None) -> RunView:
    """:func:`read_run` with the lab's old metric names and paper headings (``lab``: the
    manifest's, read first when not given)."""
    if lab is None:
        lab = str(read_manifest(path)["lab"])
    return read_run(path, aliases=metric_aliases(lab), sources=declared_sources(lab), check_links=check_links)


class PointRuns(LazyMapping[RunView]):
    """Point label -> the :class:`RunView` of the point's run, read on first access and kept
    (points folded into one run share one view). A point whose run folder is missing or not a
    run is one UserError line on access."""

    def __init__(self, folder: Path, points: Mapping[str, str], lab: str):
        points = dict(points)
        super().__init__(list(points), lambda label: _read(folder / points[label], check_links=False, lab=lab),
                         cache_key=points.__getitem__,
                         describe=lambda m: f"PointRuns({len(points)} points, {len(set(points.values()))} runs)")


@dataclass(frozen=True, eq=False)
class SweepView:
    """A sweep folder read for analysis (:func:`load_sweep`).

    Attributes:
        path: the sweep folder.
        index: ``sweep.json`` (lab, axes, log_axes, fold, report, points), checked against its schema.

    Read on first use: :attr:`runs` (point label -> :class:`RunView`), :attr:`frame` (the
    ``sweep collect`` table), :attr:`claims` and :attr:`metrics` (over every point, with its axes).
    """

    path: Path
    index: dict[str, Any] = field(repr=False)

    @property
    def lab(self) -> str:
        return str(self.index["lab"])

    @property
    def axes(self) -> list[str]:
        """The sweep's axes (dotted config keys; ``seed`` when seeds are an axis)."""
        return list(self.index.get("axes") or dict.fromkeys(k for p in self.index["points"] for k in p.get("values", {})))

    @cached_property
    def runs(self) -> PointRuns:
        """Point label -> the :class:`RunView` of its run (read on first access)."""
        return PointRuns(self.path, {str(p["label"]): str(p["run_dir"]) for p in self.index["points"]}, self.lab)

    @cached_property
    def frame(self) -> pd.DataFrame:
        """The ``sweep collect`` table (:mod:`stagewise.orchestrate.collect`): one row per point
        and seed, with status, axes, ``final.*``, ``stage.*``, ``claim.*`` and ``claim_value.*``
        columns; nothing is written."""
        return collect_frame(self.path)[0]

    @cached_property
    def point_axes(self) -> pd.DataFrame:
        """One row per point: ``point``, ``run_dir`` and its axis values (typed as in
        :attr:`frame`; the seed axis is left out: it is each row's ``seed``)."""
        axes = [a for a in self.axes if a != SEED_AXIS and a in self.frame.columns]
        return self.frame[[*POINT_COLUMNS, *axes]].drop_duplicates("point").reset_index(drop=True)

    def _per_point(self, part: Any, columns: tuple[str, ...]) -> pd.DataFrame:
        """``part(label, run)`` of every point whose run reads, with the point's columns in
        front (an axis named like one of ``columns`` becomes ``axis.NAME``); one note naming
        the points left out."""
        pieces, left_out = [], []
        for label in self.runs:
            try:
                run = self.runs[label]
            except UserError as err:
                left_out.append(f"{label} ({err.messages[0]})")
                continue
            pieces.append(part(label, run).assign(point=label))
        if left_out:
            warnings.warn(f"{self.path}: {len(left_out)} point(s) left out, their run does not read: {left_out[0]}"
                          f"{' ...' if len(left_out) > 1 else ''}", Note, stacklevel=3)
        axes = self.point_axes.rename(columns={a: f"axis.{a}" for a in self.point_axes.columns[2:] if a in columns})
        body = pd.concat(pieces, ignore_index=True) if pieces else pd.DataFrame(columns=[*columns, "point"])
        body["point"] = body["point"].astype("string")
        merged = axes.merge(body, on="point", how="inner", validate="one_to_many")
        return merged[[*axes.columns, *columns]].reset_index(drop=True)

    @cached_property
    def claims(self) -> pd.DataFrame:
        """One row per point and claim: ``point``, ``run_dir``, the point's axes, then the
        claim columns of :attr:`RunView.claims` (verdict, value, pass_fraction, ...). A claim
        is judged over its run's seeds: points folded into one run (``fold: seeds``) each carry
        that run's claims. Points whose run has no summary have no rows (see :attr:`frame`)."""
        return self._per_point(lambda label, run: run.claims, CLAIM_COLUMNS)

    @cached_property
    def metrics(self) -> pd.DataFrame:
        """The long metrics of every point's run (:attr:`RunView.metrics`, only the point's
        own seeds of a folded run): ``point``, ``run_dir``, the point's axes, then ``step``,
        ``seed``, ``variant``, ``metric``, ``value``. Unfinished runs give the steps logged so far."""
        seeds = {str(p["label"]): p.get("seeds") for p in self.index["points"]}

        def own(label: str, run: RunView) -> pd.DataFrame:
            frame, mine = run.metrics, seeds.get(label)
            return frame[frame["seed"].isin(mine)] if isinstance(mine, list) and mine else frame

        return self._per_point(own, METRIC_COLUMNS)

    def __repr__(self) -> str:
        runs = len({p["run_dir"] for p in self.index["points"]})
        return f"SweepView({str(self.path)!r}, lab={self.lab!r}, axes={self.axes}, {len(self.index['points'])} points, {runs} runs)"


def load_sweep(path: str | Path) -> SweepView:
    """The sweep folder ``path`` read for analysis (:class:`SweepView`): its index, each
    point's run, the collected table, and the claims and metrics over points as DataFrames.
    One UserError line for a folder without a readable ``sweep.json``, a point whose run
    folder is not inside the sweep folder, or a symbolic link inside it.

    Example::

        sweep = load_sweep("sweeps/eta")
        sweep.frame.groupby("train.lr_stage2")["claims_all_hold"].mean()
        loss = sweep.metrics.query("metric == 'train.loss'")
        sweep.runs[sweep.frame["point"][0]].config      # one point's run, as load_run gives it
    """
    path = Path(path)
    refuse_links(path)
    data = index(path)
    for point in data["points"]:
        if inside_folder(path, path / str(point["run_dir"])) is None or Path(str(point["run_dir"])).is_absolute():
            raise UserError(f"{path / 'sweep.json'}: point {point['label']!r}: run_dir {point['run_dir']!r} is not inside "
                            "the sweep folder")
    return SweepView(path=path, index=data)
