"""Claims as data, and the summary every lab writes (``summary.json``).

A claim is **declared** before any run, as a :class:`ClaimSpec` in the lab's
``claimspecs.py`` (``Lab.claims``; ``stagewise claims LAB`` lists them without running
anything): its statement, its :class:`Source` (a paper, named by the key the lab declares
in ``Lab.sources``, and its theorem / figure / section; a reviewer; or our own check), the
measured quantity, the relation and threshold it is judged by, the attainable floor where
one exists, and the control that must make it fail.

Sources live in :mod:`.sources` (re-exported here): this layer knows the kinds of source,
never a paper's title.

After a run, :meth:`ClaimSpec.result` turns the measured per-seed values into a
:class:`Claim`: the declaration's fields plus the value(s), the per-seed pass fraction and
the verdict, in one vocabulary everywhere (:data:`VERDICTS`): ``holds`` / ``fails`` /
``not testable`` / ``not applicable`` (each with the reason). A claim over seeds (``over="every"``) holds when every
seed's value passes; its ``value`` is the worst seed's. An ensemble claim (``over="run"``)
is one value for the whole run. :meth:`Claim.with_not_testable` turns a result into "not testable"
(e.g. data outside the theory), :meth:`Claim.with_required_fraction` judges a per-seed
claim by a configured fraction of passing seeds.

:class:`Summary` is shared by all labs: ``final`` (metric -> mean/min/max over seeds at the
last step), ``per_seed`` (seed -> values), ``claims`` (:class:`Claim`) and ``details``
(lab-specific results: fitted rates, stage tables, targets). ``show``, ``reproduce`` and
reports read only this model. ``schema_version`` 2 added the declared fields; version-1
summaries (claims with ``holds`` and ``evidence`` only) still read, their claims with
``source`` None. ``sources`` (paper key -> heading) came later within version 2: a summary
without it, whose paper sources have the kinds ``paper1`` / ``paper2``, reads as kind
``paper`` with that key (:data:`OLD_PAPER_KIND`) and an empty ``sources``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..errors import UserError
from . import verdicts
from .sources import (KINDS, OLD_PAPER_KIND, PAPER_GROUP, SOURCE_KEY, Source, SourceKind, own, paper,  # noqa: F401
                      paper_label, reviewer, source_groups)

SCHEMA_VERSION = 2
"""summary.json's schema: 1 = claims as (id, statement, holds, evidence); 2 = declared claims."""

Verdict = Literal["holds", "fails", "inconclusive", "not testable", "not applicable"]
VERDICTS: tuple[str, ...] = ("holds", "fails", "inconclusive", "not testable", "not applicable")
UNJUDGED: tuple[str, ...] = ("inconclusive", "not testable", "not applicable")
"""The verdicts of a claim that was neither held nor failed (``holds`` None): *inconclusive* where
the numbers cannot decide (fewer seeds than declared, an interval straddling the threshold, a
value within the claim's band); *not testable* where the claim applies but this run cannot
decide it (a threshold beyond the attainable bound, NaN or round-off values, too few epochs);
*not applicable* where the claim does not concern the run (a type claim on a classification
task), with the reason. :mod:`.verdicts` decides them all."""
Relation = Literal[">=", ">", "<=", "<"]
Aggregation = Literal["median", "paired-median", "paired-bootstrap", "sign-test"]
"""How a claim's per-run values aggregate over seeds (:data:`~.verdicts.METHODS`). ``paired-bootstrap``
and ``sign-test`` are the names of summaries written before the verdict engine: read, and judged now
as ``paired-median`` and ``median`` (:data:`LEGACY_AGGREGATIONS`)."""
LEGACY_AGGREGATIONS: dict[str, str] = {"paired-bootstrap": "paired-median", "sign-test": "median"}
_PASSES = {">=": np.greater_equal, ">": np.greater, "<=": np.less_equal, "<": np.less}

def _finite_or_none(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


class ClaimSpec(BaseModel):
    """A claim declared before any run: what is measured and how it is judged.

    The claim holds when ``quantity relation threshold`` (e.g. ``min over samples of the
    optimal attention mass >= 0.99``) is true for every seed (``over="every"``) or for the
    run's one value (``over="run"``). ``floor`` says what the model can attain where a loss
    or error is judged ("" when no floor applies); ``control`` names the run or ablation in
    which the claim must fail (the falsifiability check).

    ``id`` may be a family: results with ``case`` get the id ``{id}_{case}``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_]+$")
    statement: str = Field(min_length=1)
    source: Source
    quantity: str = Field(min_length=1)
    relation: Relation
    threshold: float = Field(allow_inf_nan=False)
    unit: str = ""
    floor: str = ""
    control: str = Field(min_length=1)
    over: Literal["every", "run"] = "every"
    aggregation: Aggregation | None = None
    """How the claim's per-run values aggregate over seeds (:data:`~.verdicts.METHODS`),
    declared with it; None: each run is judged alone."""
    min_seeds: int | None = Field(default=None, ge=1)
    """Finished seeds an over-seeds verdict needs (fewer: inconclusive); None: the fewest whose
    interval reaches its level (:func:`~.verdicts.min_seeds_for`, 6 at 95 %)."""
    band: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    """A failing value nearer the threshold than this is inconclusive, not a failure."""
    tolerance: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    """|value| <= tolerance cannot carry a verdict (a fit, a rate or a ratio at round-off): not testable."""
    bound: float | None = Field(default=None, allow_inf_nan=False)
    """The attainable floor (``<``/``<=``) or ceiling (``>``/``>=``) where it is a number known at
    declaration; a lab passes the bound it computes for a run to :meth:`result` instead."""
    missing: Literal["fails", "not testable"] = "fails"
    """What a None value means: the event never happened (a failing seed), or no value."""

    @model_validator(mode="after")
    def _rules_valid(self) -> "ClaimSpec":
        try:
            self.rule()
            if self.aggregation is not None:
                self.seeds_rule()
        except ValueError as err:
            raise ValueError(f"claim {self.id}: {err}") from None
        return self

    def rule(self, bound: float | None = None, bound_name: str = "") -> verdicts.Rule:
        """The engine's rule for one run's values (every seed of the run; ``bound`` overrides the declared one)."""
        return verdicts.Rule(self.relation, self.threshold, "every", band=self.band, tolerance=self.tolerance,
                             bound=self.bound if bound is None else bound, bound_name=bound_name or self.floor,
                             missing=self.missing)

    def seeds_rule(self, bound: float | None = None, bound_name: str = "") -> verdicts.Rule:
        """The engine's rule over the seeds of several runs, by the declared aggregation."""
        if self.aggregation is None:
            raise ValueError(f"claim {self.id}: no declared aggregation")
        method = LEGACY_AGGREGATIONS.get(self.aggregation, self.aggregation)
        need = self.min_seeds if self.min_seeds is not None else verdicts.min_seeds_for()
        return verdicts.Rule(self.relation, self.threshold, method, min_seeds=need,  # type: ignore[arg-type]  # a Method
                             band=self.band, tolerance=self.tolerance, bound=self.bound if bound is None else bound,
                             bound_name=bound_name or self.floor, missing=self.missing)

    def condition(self) -> str:
        """``quantity relation threshold`` as text."""
        unit = f" {self.unit}" if self.unit else ""
        return f"{self.quantity} {self.relation} {self.threshold:g}{unit}"

    def passes(self, values: Any) -> np.ndarray:
        """Bool array: which values pass (a non-finite value never passes)."""
        return self.rule().passes(values)

    def _declared(self, case: str | None) -> dict[str, Any]:
        cid = self.id if case is None else f"{self.id}_{case}"
        return dict(id=cid, spec_id=self.id, statement=self.statement, source=self.source, quantity=self.quantity,
                    relation=self.relation, threshold=self.threshold, unit=self.unit, floor=self.floor,
                    control=self.control, aggregation=self.aggregation)

    def result(self, values: Any, evidence: str = "", *, seeds: Sequence[int] | None = None,
               case: str | None = None, statement: str | None = None, bound: float | None = None,
               bound_name: str = "") -> "Claim":
        """The verdict from the measured value(s), decided by the engine (:func:`~.verdicts.decide_arm`
        with :meth:`rule`: every seed of the run passes).

        ``values``: one number (``over="run"``, or one seed), a sequence in the order of
        ``seeds``, or a mapping seed -> value; None where the event never happened (a failing
        value unless the claim declares ``missing="not testable"``), while NaN or infinite
        values cannot carry a verdict (not testable). ``value`` is the worst seed's (the smallest for
        ``>=``/``>``, the largest for ``<=``/``<``). ``bound``: the attainable bound the lab
        computed for this run (a threshold beyond it: not testable)."""
        if isinstance(values, Mapping):
            keyed = {str(k): (None if v is None else float(v)) for k, v in values.items()}
        else:  # None (one value: the event never happened), a number, or a sequence (None kept)
            arr = np.asarray([None] if values is None else values, dtype=object).reshape(-1)
            keys = [str(s) for s in seeds] if seeds is not None and len(seeds) == arr.size else [str(i) for i in range(arr.size)]
            keyed = {k: (None if v is None else float(v)) for k, v in zip(keys, arr)}
        if self.over == "run" and len(keyed) > 1:
            raise ValueError(f"claim {self.id}: over='run' takes one value, got {len(keyed)}")
        decision = verdicts.decide_arm(keyed, self.rule(bound, bound_name))
        if self.over == "run":
            decision = verdicts.Decision(decision.word, decision.reason, decision.evidence, decision.value, {},
                                         decision.pass_fraction)
        return self.judged(decision, evidence, case=case, statement=statement)

    def judged(self, decision: verdicts.Decision, evidence: str = "", *, case: str | None = None,
               statement: str | None = None) -> "Claim":
        """The Claim of an engine decision: the declaration's fields, the decision's verdict,
        reason, value, per-seed values, interval and sign test; ``evidence`` (the lab's numbers in
        words) before the engine's."""
        fields = self._declared(case)
        if statement is not None:
            fields["statement"] = statement
        text = "; ".join(t for t in (evidence, "" if decision.word in ("holds", "fails") and not decision.arms
                                     and decision.interval is None else decision.evidence) if t)
        iv = decision.interval
        return Claim(**fields, holds=decision.holds, verdict=decision.word, evidence=text, reason=decision.reason,
                     value=decision.value, per_seed=dict(decision.per_seed), pass_fraction=decision.pass_fraction,
                     interval=None if iv is None else [iv.low, iv.high], coverage=None if iv is None else iv.coverage,
                     sign_p=None if decision.sign is None else decision.sign.p, judged_by=verdicts.ENGINE,
                     control_verdicts={name: arm.word for name, arm in decision.arms.items()})

    def not_testable(self, reason: str, evidence: str = "", *, case: str | None = None,
                     statement: str | None = None, values: Any = None, seeds: Sequence[int] | None = None) -> "Claim":
        """The claim cannot be tested in this run (``reason``: why). Measured ``values``, if
        any, are kept (with what the verdict would have been, in the evidence)."""
        fields = self._declared(case)
        if statement is not None:
            fields["statement"] = statement
        value, per_seed, fraction = None, {}, None
        if values is not None:
            measured = self.result(values, evidence, seeds=seeds, case=case)
            value, per_seed, fraction = measured.value, measured.per_seed, measured.pass_fraction
            outcome = {"holds": "would hold", "fails": "would fail"}.get(str(measured.verdict), str(measured.verdict))
            evidence = f"measured ({outcome}): {evidence}" if evidence else f"measured: {outcome}"
        return Claim(**fields, holds=None, verdict="not testable", reason=reason, evidence=evidence,
                     value=value, per_seed=per_seed, pass_fraction=fraction, judged_by=verdicts.ENGINE)

    def not_applicable(self, reason: str, evidence: str = "", *, case: str | None = None,
                       statement: str | None = None) -> "Claim":
        """The claim does not concern this run (``reason``: why, e.g. "a type claim; BLiMP and
        SICK answers are label words, not typed answers"): never judged, never "fails"."""
        fields = self._declared(case)
        if statement is not None:
            fields["statement"] = statement
        return Claim(**fields, holds=None, verdict="not applicable", reason=reason, evidence=evidence,
                     judged_by=verdicts.ENGINE)


class Claim(BaseModel):
    """One tested claim: the declaration (:class:`ClaimSpec`'s fields, ``source`` None in
    version-1 summaries) plus the measurement and the verdict.

    ``holds`` is True / False / None (not testable) and always agrees with ``verdict``;
    ``value`` is the judged value (the worst seed's), ``per_seed`` seed -> value,
    ``pass_fraction`` the fraction of seeds that pass, ``reason`` why a claim is not
    testable, ``evidence`` the numbers in words."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    statement: str
    holds: bool | None
    evidence: str = ""
    verdict: Verdict | None = None
    spec_id: str | None = None
    source: Source | None = None
    quantity: str = ""
    relation: Relation | None = None
    threshold: float | None = None
    unit: str = ""
    floor: str = ""
    control: str = ""
    aggregation: Aggregation | None = None
    value: float | None = None
    per_seed: dict[str, float | None] = Field(default_factory=dict)
    pass_fraction: float | None = None
    reason: str = ""
    interval: list[float | None] | None = None
    """Over seeds: the median's interval [low, high] that decided (:func:`~.verdicts.median_interval`);
    None at an end: unbounded there (paired seeds where one arm's event never happened, +-inf)."""
    coverage: float | None = None
    """The interval's exact coverage (>= its level for any continuous law)."""
    sign_p: float | None = None
    """Over seeds: the exact one-sided sign test's p of 'value passes', reported beside the interval."""
    control_verdicts: dict[str, str] = Field(default_factory=dict)
    """The controls the engine decided with the claim (name -> verdict; paired claims also the
    ``real - NAME`` differences); empty where the control is a claim of its own or none was run."""
    judged_by: str = ""
    """The engine that decided the verdict (:data:`~.verdicts.ENGINE`); "" in summaries written before it."""

    @model_validator(mode="after")
    def _agree(self) -> "Claim":
        expected = "not testable" if self.holds is None else "holds" if self.holds else "fails"
        if self.verdict is None:
            object.__setattr__(self, "verdict", expected)
        elif self.verdict != expected and not (self.holds is None and self.verdict in UNJUDGED):
            raise ValueError(f"claim {self.id}: verdict {self.verdict!r} disagrees with holds={self.holds}")
        return self

    def condition(self) -> str:
        """``quantity relation threshold`` ("" for an undeclared, version-1 claim)."""
        if self.relation is None or self.threshold is None:
            return ""
        unit = f" {self.unit}" if self.unit else ""
        return f"{self.quantity} {self.relation} {self.threshold:g}{unit}"

    def with_not_testable(self, reason: str) -> "Claim":
        """This claim made not testable (e.g. the data are outside the theory's assumptions),
        its measurement kept and its would-be outcome in the evidence."""
        if self.holds is None:
            return self.model_copy(update={"reason": f"{self.reason}; also {reason}" if self.reason else reason})
        outcome = "would hold" if self.holds else "would fail"
        return self.model_copy(update={"holds": None, "verdict": "not testable", "reason": reason,
                                       "evidence": f"measured ({outcome}): {self.evidence}"})


    def with_required_fraction(self, need: float) -> "Claim":
        """This per-seed claim judged by the fraction of seeds that pass: it holds when
        ``pass_fraction >= need`` (1 = every seed, :meth:`ClaimSpec.result`'s rule; a lab's
        configured seed fraction below 1 relaxes it). A not testable claim is returned as is."""
        if self.holds is None or self.pass_fraction is None or need >= 1:
            return self
        word = verdicts.required_fraction(self.pass_fraction, need)
        note = f"holds when at least {need:g} of the seeds pass ({self.pass_fraction:.3g} do)"
        return self.model_copy(update={"holds": word == "holds", "verdict": word, "judged_by": verdicts.ENGINE,
                                       "evidence": f"{self.evidence}; {note}" if self.evidence else note})


class Stats(BaseModel):
    """Spread of one metric over seeds (None where a value is not finite)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mean: float | None
    min: float | None
    max: float | None

    @field_validator("mean", "min", "max", mode="before")
    @classmethod
    def _finite(cls, value: Any) -> float | None:
        if value is None:
            return None
        value = float(value)
        return value if math.isfinite(value) else None

    @classmethod
    def of(cls, values: Any) -> "Stats":
        arr = np.asarray(values, dtype=float).reshape(-1)
        arr = arr[np.isfinite(arr)]
        if not arr.size:
            return cls(mean=None, min=None, max=None)
        return cls(mean=float(arr.mean()), min=float(arr.min()), max=float(arr.max()))


class Summary(BaseModel):
    """The summary of one run, identical in shape for every lab."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    lab: str
    seeds: list[int]
    final: dict[str, Stats] = Field(default_factory=dict)
    per_seed: dict[str, dict[str, Any]] = Field(default_factory=dict)
    claims: list[Claim] = Field(default_factory=list)
    details: dict[str, Any] = Field(default_factory=dict)
    sources: dict[str, str] = Field(default_factory=dict)
    """The papers its claims cite: key -> heading (the lab's ``Lab.sources``); empty in older summaries."""

    @classmethod
    def from_stored(cls, data: Any) -> "Summary":
        """A Summary from what a ``summary.json`` holds: one written before schema_version
        existed is version 1. (Only stored data is read this way: a Summary a lab builds now
        has no ``schema_version`` key either, and is :data:`SCHEMA_VERSION`.)"""
        if isinstance(data, dict) and "schema_version" not in data:
            data = {**data, "schema_version": 1}
        return cls.model_validate(data)

    def counts(self) -> dict[str, int]:
        """Claims per verdict: {"holds": k, "fails": k, "not testable": k}."""
        out = dict.fromkeys(VERDICTS, 0)
        for c in self.claims:
            out[str(c.verdict)] += 1
        return out

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def read_summary(path: str | Path) -> Summary:
    """Load and validate ``summary.json``; one-line UserError when it is unreadable."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:  # e.g. "[" * 100_000
        raise UserError(f"{path}: unreadable summary (not valid JSON: nested too deeply)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserError(f"{path}: unreadable summary ({type(err).__name__}: {str(err).splitlines()[0]})") from None
    try:
        return Summary.from_stored(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "top level"
        raise UserError(f"{path}: not a stagewise summary ({where}: {first['msg']})") from None
