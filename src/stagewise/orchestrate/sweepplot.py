"""The sweep report's figures: which figures a collected sweep table gets (:func:`figure_plan`,
from the sweep file's ``report`` section and the lab's ``key_metrics``) and how they are
saved. The table itself is :mod:`stagewise.orchestrate.collect`'s."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from ..errors import UserError
from ..labs import get_lab, metric_aliases
from ..report.plots import save
from ..runs.names import current_names
from ..report.sweepfigs import CLAIM_VALUE, claim_value_vs_axis, metric_vs_axis, onset_vs_axis, parse_condition, phase_diagram

DPI = 150
SEED_AXIS = "seed"
MAX_DEFAULT_METRICS = 4
MAX_DEFAULT_ONSETS = 4
ALL_HOLD = "claims_all_hold"


def _key_metrics(lab: Any) -> tuple[str, ...]:
    """The lab's default sweep metrics (``Lab.key_metrics``); none for an unknown lab."""
    try:
        return get_lab(str(lab)).key_metrics
    except UserError:
        return ()

HOLDING = "claims_holding_fraction"


# -------------------------------------------------------------------------- figures
def _resolve(frame: pd.DataFrame, name: str, prefixes: tuple[str, ...] = ("", "final.", "claim.", "stage.")) -> str | None:
    for prefix in prefixes:
        if prefix + name in frame.columns:
            return prefix + name
    return None


def _current(name: str, aliases: Mapping[str, str]) -> str:
    """A metric a sweep file names (``final.`` prefix or none) under its current name: an old
    one (the lab's ``metric_aliases``) warns :class:`~stagewise.errors.RenamedMetric`."""
    prefix = "final." if name.startswith("final.") else ""
    return prefix + current_names([name.removeprefix(prefix)], aliases)[0]


def _resolve_value(frame: pd.DataFrame, value: str, aliases: Mapping[str, str]) -> str | None:
    """A phase value with its column resolved (``loss<=0.3`` -> ``final.loss<=0.3``; an old
    metric name -> its current one)."""
    column, op, number = parse_condition(value)
    found = _resolve(frame, _current(column, aliases))
    if found is None or op is None:
        return found
    return f"{found}{op}{number:g}"


def _has_values(frame: pd.DataFrame, column: str) -> bool:
    return bool(frame[column].notna().any())


def _determines(frame: pd.DataFrame, a: str, b: str) -> bool:
    """Whether every value of axis ``a`` comes with a single value of axis ``b`` (zipped axes)."""
    if frame.empty:
        return False
    pairs = frame[[a, b]].astype(str).drop_duplicates()
    return bool(pairs.groupby(a)[b].nunique().max() <= 1)


def log_axes(sweep: dict[str, Any]) -> tuple[str, ...]:
    """The axes declared log-spaced: ``sweep.json``'s ``log_axes``, when the index has it
    (exactly geometric values, as a ``logrange`` writes them, are log-scaled anyway:
    :func:`stagewise.report.plots.use_log_scale`)."""
    return tuple(str(a) for a in sweep.get("log_axes") or [])


def figure_plan(frame: pd.DataFrame, sweep: dict[str, Any]) -> tuple[list[tuple[str, Any]], list[str]]:
    """([(figure name, zero-argument function returning the Figure)], warnings) from the
    sweep's ``report`` section; each kind it leaves out gets its default. Figures are drawn
    against every non-seed axis (the seed axis when it is the only one), except an axis
    zipped one-to-one with an earlier one; lines split by the other such axes. Defaults: for
    every such axis up to MAX_DEFAULT_METRICS key metrics of the
    lab and the fraction of claims holding; with two or more non-seed axes a phase diagram of
    the first two over ``claims_all_hold``; onsets of up to MAX_DEFAULT_ONSETS stages vs the
    first axis. Onsets are drawn only for stages some run reached (the others are named in
    the onset figures' titles); ``claims`` asks for :func:`claim_value_vs_axis` of each id
    against every such axis (threshold and relation from ``sweep["claim_records"]``)."""
    report, axes, warnings = sweep.get("report") or {}, sweep["axes"], []
    aliases = metric_aliases(sweep.get("lab"))
    logs = log_axes(sweep)
    varying = [a for a in axes if a != SEED_AXIS and a in frame]
    plot_axes: list[str] = []
    for a in varying:  # of axes zipped one-to-one (d with L and lambda) only the first is drawn
        if not any(_determines(frame, p, a) and _determines(frame, a, p) for p in plot_axes):
            plot_axes.append(a)
    plot_axes = plot_axes or [a for a in axes if a == SEED_AXIS]
    others = lambda axis: [a for a in plot_axes if a != axis and not _determines(frame, axis, a)]  # noqa: E731
    if "metrics" in report:
        metrics = []
        for name in report["metrics"]:
            found = _resolve(frame, _current(name, aliases))
            if found is None:
                examples = ", ".join(c for c in frame.columns if c.startswith("final."))[:200] or "no final.* columns"
                warnings.append(f"report metrics: {name!r} is not a column of the table (e.g. {examples})")
            else:
                metrics.append(found)
    else:
        finals = [c for c in frame.columns if c.startswith("final.") and _has_values(frame, c)]
        preferred = [f"final.{m}" for m in _key_metrics(sweep.get("lab")) if f"final.{m}" in finals]
        metrics = (preferred or finals)[:MAX_DEFAULT_METRICS] + ([HOLDING] if _has_values(frame, HOLDING) else [])
    plan: list[tuple[str, Any]] = []
    for axis in plot_axes:
        for metric in metrics:
            plan.append((f"{metric}_vs_{axis}", lambda m=metric, a=axis: metric_vs_axis(frame, m, a, by=others(a),
                                                                                      log_axes=logs)))
    records = sweep.get("claim_records") or {}
    for cid in report.get("claims", []):
        if f"{CLAIM_VALUE}{cid}" not in frame.columns:
            known = ", ".join(c.removeprefix(CLAIM_VALUE) for c in frame.columns if c.startswith(CLAIM_VALUE)) or "none"
            warnings.append(f"report claims: {cid!r} is not a claim of the collected runs (claims: {known[:200]})")
            continue
        rec = records.get(cid, {})
        for axis in plot_axes:
            plan.append((f"claim_value.{cid}_vs_{axis}", lambda c=cid, a=axis, r=rec: claim_value_vs_axis(
                frame, c, a, threshold=r.get("threshold"), relation=r.get("relation"), quantity=r.get("quantity", ""),
                unit=r.get("unit", ""), by=others(a), log_axes=logs)))
    if "phase" in report:
        phases = []
        for item in report["phase"]:
            value = _resolve_value(frame, item["value"], aliases)
            if value is None:
                warnings.append(f"report phase: value {item['value']!r} names no column of the table")
            else:
                phases.append((item["x"], item["y"], value))
    else:
        phases = [(plot_axes[0], plot_axes[1], ALL_HOLD)] if len(plot_axes) >= 2 and ALL_HOLD in frame else []
    for x, y, value in phases:
        plan.append((f"phase_{value}_over_{x}_x_{y}", lambda x=x, y=y, v=value: phase_diagram(frame, x, y, v)))
    stage_columns_all = [c for c in frame.columns if c.startswith("stage.")]
    never = [c.removeprefix("stage.") for c in stage_columns_all if not _has_values(frame, c)]
    if "onsets" in report:
        onsets = []
        for item in report["onsets"]:
            stage = _resolve(frame, item["stage"], ("", "stage."))
            if stage is None:
                warnings.append(f"report onsets: stage {item['stage']!r} is not a column of the table "
                                f"(stages: {', '.join(c for c in frame.columns if c.startswith('stage.')) or 'none'})")
            elif not _has_values(frame, stage):
                warnings.append(f"report onsets: stage {item['stage']!r} was reached by no run; not drawn")
            else:
                onsets.append((stage, item["axis"]))
    else:
        stages = [c for c in stage_columns_all if _has_values(frame, c)][:MAX_DEFAULT_ONSETS]
        onsets = [(s, plot_axes[0]) for s in stages] if plot_axes else []
    for stage, axis in onsets:
        plan.append((f"onset_{stage}_vs_{axis}", lambda s=stage, a=axis: onset_vs_axis(frame, s, a, by=others(a),
                                                                                       log_axes=logs, never_reached=never)))
    return plan, warnings


_OPS = {"<=": "_le_", ">=": "_ge_", "==": "_eq_", "!=": "_ne_", "<": "_lt_", ">": "_gt_"}


def file_name(name: str) -> str:
    """A figure name as a file stem: operators spelled out, anything but [A-Za-z0-9._-] as '_'."""
    for op, word in _OPS.items():
        name = name.replace(op, word)
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "figure"


def save_figure(fig: Any, folder: Path, stem: str) -> Path:
    """PNG + PDF of a figure (:func:`stagewise.report.plots.save`, so tests can record it); the PNG's path."""
    return save(fig, folder, stem, dpi=DPI)[0]


