"""``syntax_before_semantics`` on the floor-relative held-out records (issue 27; declared in
:data:`.claimspecs.SYNTAX_BEFORE_SEMANTICS`), and its stage conditions.

A task's **beat-the-prior epoch** is the first record epoch ``e_i`` with

    eval.accuracy_minus_majority.T >= m   at records i, i+1, ..., i+R-1

(``m`` = :data:`.claimspecs.PRIOR_MARGIN`, ``R`` = :data:`.claimspecs.PRIOR_RECORDS`
consecutive records); None when no such record exists ("T never beats its prior"). The
claim's value is SICK's epoch minus BLiMP's, > 0 holds. A task that never gets there is
censored at the last record ``e_end``: BLiMP at ``e_B``, SICK never gives the bound
``e_end - e_B`` (> 0, holds); SICK at ``e_S``, BLiMP never gives ``e_S - e_end`` (<= 0, fails).
Not testable: no held-out records (``task.heldout`` unset), neither task gets there, or both
at the same record. A run of one of the two tasks (the each-task-alone control) gets the claim
as not applicable, with its own epoch in ``details.two_task``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ...report.claims import Claim
from . import claimspecs as cs

TASKS = ("blimp", "sick")
NAMES = {"blimp": "BLiMP", "sick": "SICK"}


def record_series(frame: pd.DataFrame, metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(steps, epochs, values) of a per-record metric, by step (records carry ``epoch``)."""
    rows = frame[frame["metric"].isin(["epoch", metric])]
    wide = rows.pivot_table(index="step", columns="metric", values="value")
    if metric not in wide or "epoch" not in wide:
        empty = np.array([], dtype=float)
        return empty, empty, empty
    wide = wide.dropna(subset=["epoch", metric]).sort_index()
    return wide.index.to_numpy(float), wide["epoch"].to_numpy(float), wide[metric].to_numpy(float)


def sustained(values: np.ndarray, margin: float, records: int) -> np.ndarray:
    """(K,) the smallest of ``values[i : i + records]`` minus ``margin`` (NaN where fewer than
    ``records`` records remain): >= 0 exactly where the beat-the-prior condition holds from record i."""
    out = np.full(len(values), np.nan)
    if len(values) >= records:
        windows = np.lib.stride_tricks.sliding_window_view(values, records)  # (K - records + 1, records)
        out[: len(windows)] = windows.min(axis=1) - margin
    return out


def beat_epoch(epochs: np.ndarray, excess: np.ndarray, margin: float = cs.PRIOR_MARGIN,
               records: int = cs.PRIOR_RECORDS) -> float | None:
    """The first epoch from which ``excess`` >= ``margin`` at ``records`` consecutive records; None if never."""
    hits = np.nonzero(sustained(excess, margin, records) >= 0)[0]
    return float(epochs[hits[0]]) if len(hits) else None


def _num(x: float | None) -> int | float | None:
    return None if x is None else int(x) if float(x).is_integer() else round(float(x), 4)


def task_facts(frame: pd.DataFrame, task: str) -> dict[str, Any]:
    """One task's numbers: its prior, its beat-the-prior epoch, and its held-out values at the
    last record and at their best."""
    _, epochs, excess = record_series(frame, f"eval.accuracy_minus_majority.{task}")
    facts: dict[str, Any] = {"records": int(len(epochs)), "beat_prior_epoch": _num(beat_epoch(epochs, excess))}
    if not len(epochs):
        return facts
    facts["last_epoch"] = _num(epochs[-1])
    for metric in ("prior.floor", "prior.majority", "eval.loss", "eval.accuracy", "eval.loss_minus_floor",
                   "eval.accuracy_minus_majority", "train.loss_minus_floor", "train.accuracy_minus_majority"):
        _, _, values = record_series(frame, f"{metric}.{task}")
        facts[f"{metric}_end"] = float(values[-1]) if len(values) else None
    facts["eval.accuracy_minus_majority_max"] = float(np.max(excess))
    _, _, gap = record_series(frame, f"eval.loss_minus_floor.{task}")
    facts["eval.loss_minus_floor_min"] = float(np.min(gap)) if len(gap) else None
    if task == "blimp":
        _, _, pairs = record_series(frame, "eval.blimp_minimal_pair")
        facts["eval.blimp_minimal_pair_end"] = float(pairs[-1]) if len(pairs) else None
        facts["eval.blimp_minimal_pair_max"] = float(np.max(pairs)) if len(pairs) else None
    return facts


def _said(task: str, facts: dict[str, Any]) -> str:
    """One task in the evidence line, in words."""
    name, e = NAMES[task], facts["beat_prior_epoch"]
    if not facts["records"]:
        return f"{name}: no held-out records"
    def fmt(value: float | None) -> str:
        return "-" if value is None else f"{value:+.3f}"

    where = f"beats its prior from epoch {e}" if e is not None else "never beats its prior"
    return (f"{name} {where} (held-out accuracy - majority: {fmt(facts['eval.accuracy_minus_majority_end'])} at the "
            f"end, best {fmt(facts['eval.accuracy_minus_majority_max'])}; loss - floor "
            f"{fmt(facts['eval.loss_minus_floor_end'])} at the end)")


def syntax_claim(config: Any, frame: pd.DataFrame) -> tuple[Claim | None, dict[str, Any]]:
    """(the claim, ``details.two_task``) of a run with blimp and/or sick (module docstring);
    the claim is None for a run of one task without held-out records (nothing to say)."""
    spec = cs.SYNTAX_BEFORE_SEMANTICS
    tasks = [t for t in TASKS if t in config.task.tasks()]
    found: dict[str, Any] = {t: task_facts(frame, t) for t in tasks}
    found.update(margin=cs.PRIOR_MARGIN, records=cs.PRIOR_RECORDS, permuted_labels=bool(config.task.permute_labels))
    control = " (control: permuted labels; the claim should fail or be not testable)" if config.task.permute_labels else ""
    statement = spec.statement + control
    evidence = "; ".join(_said(t, found[t]) for t in tasks)
    if config.task.heldout is None:
        if len(tasks) < 2:
            return None, found
        return spec.not_testable("no held-out evaluation (task.heldout unset): the claim is judged on held-out examples only",
                                 statement=statement), found
    if len(tasks) < 2:
        return spec.not_applicable(f"one task trained ({tasks[0]} alone, the each-task-alone control): its own "
                                   "beat-the-prior epoch is in details.two_task", evidence, statement=statement), found
    b, s = found["blimp"], found["sick"]
    if min(b["records"], s["records"]) < cs.PRIOR_RECORDS:
        return spec.not_testable(f"fewer than {cs.PRIOR_RECORDS} held-out records", evidence, statement=statement), found
    e_b, e_s = b["beat_prior_epoch"], s["beat_prior_epoch"]
    if e_b is None and e_s is None:
        return spec.not_testable("neither task beats its prior on held-out examples: no order to test", evidence,
                                 statement=statement), found
    if e_b == e_s:
        return spec.not_testable(f"both tasks beat their prior from the same record (epoch {e_b})", evidence,
                                 statement=statement), found
    end = min(b["last_epoch"], s["last_epoch"])
    lead = (end if e_s is None else e_s) - (end if e_b is None else e_b)  # a never is censored at the last record
    if e_b is None or e_s is None:
        evidence += f"; censored at the last record (epoch {_num(end)}): the value is a bound"
    found["lead"] = _num(lead)
    return spec.result(float(lead), evidence, statement=statement), found


def stage_conditions(config: Any, frame: pd.DataFrame) -> list[pd.DataFrame]:
    """The derived rows (step, seed, metric, value) of ``{task}_beats_prior`` for
    :func:`~stagewise.measure.detect_stages`: :func:`sustained` of the held-out accuracy minus
    the majority share, >= 0 exactly from the record where the claim's condition holds."""
    out: list[pd.DataFrame] = []
    if config.task.heldout is None:
        return out
    for task in (t for t in TASKS if t in config.task.tasks()):
        rows = frame[frame["metric"] == f"eval.accuracy_minus_majority.{task}"].sort_values("step")
        for seed, g in rows.groupby("seed"):
            values = sustained(g["value"].to_numpy(float), cs.PRIOR_MARGIN, cs.PRIOR_RECORDS)
            out.append(pd.DataFrame({"step": g["step"].to_numpy(), "seed": seed, "metric": f"{task}_beats_prior",
                                     "value": values}))
    return out
