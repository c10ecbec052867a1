"""A researcher's own claims on logged metrics, declared in a YAML file before the runs and
judged over the finished runs' seeds by the verdict engine (``stagewise claims LAB --runs RUN...
--declare FILE``).

The file holds a list of declarations under ``claims``::

    claims:
    - id: q_learned_late            # letters, digits, _
      statement: Q's loss ends below 0.45 nats
      metric: test.K2.q_queries     # a final per-seed value of the runs (summary.json per_seed)
      relation: "<="                # >=, >, <=, <
      threshold: 0.45
      aggregation: median           # every (each seed passes) or median (exact 95 % interval of the median)
      min_seeds: 6                  # median: at least 6 (the fewest whose [min, max] reaches 95 %)
      control: the shuffled-label control (optional text)
      range: [0, .inf]              # optional: the metric's range; known families are checked without it

Refused in one line (what, which value, what is allowed), before anything is judged: an unknown
field, a minimum seed count below 2 for ``median`` (below the engine's 6), and a threshold outside
the metric's range (:func:`metric_range`: losses and K >= 0, accuracies, shares and fractions in
[0, 1], cosines in [-1, 1], or the declared ``range``), where no value could ever decide it.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import UserError
from . import verdicts
from .claims import Claim, ClaimSpec, Summary, own

RANGES: tuple[tuple[str, tuple[float, float], str], ...] = (
    (r"(^|[._/])(acc|accuracy)([._/]|$)|share|fraction|frac([._/]|$)", (0.0, 1.0), "an accuracy, share or fraction"),
    (r"(^|[._/])cos([._/]|$)|cosine", (-1.0, 1.0), "a cosine"),
    (r"(^|[._/])(loss|K1|K2|K)([._/]|$)|nll|entropy", (0.0, math.inf), "a loss"),
)
"""Metric-name families with a known range: (pattern, (low, high), what)."""


def metric_range(metric: str) -> tuple[float, float, str] | None:
    """(low, high, what) of a metric whose name says its family; None when it does not."""
    for pattern, (low, high), what in RANGES:
        if re.search(pattern, metric, flags=re.IGNORECASE):
            return low, high, what
    return None


class OwnClaim(BaseModel):
    """One declaration of the file (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_]+$")
    statement: str = Field(min_length=1)
    metric: str = Field(min_length=1)
    relation: Literal[">=", ">", "<=", "<"]
    threshold: float = Field(allow_inf_nan=False)
    aggregation: Literal["every", "median"] = "every"
    min_seeds: int | None = None
    control: str = "none declared"
    range: tuple[float, float] | None = None

    def spec(self) -> ClaimSpec:
        return ClaimSpec(id=self.id, statement=self.statement, source=own("declared in the researcher's claims file"),
                         quantity=f"final {self.metric} per seed", relation=self.relation, threshold=self.threshold,
                         control=self.control, aggregation="median" if self.aggregation == "median" else None,
                         min_seeds=self.min_seeds)


def _refuse(path: Path, index: int, message: str) -> UserError:
    return UserError(f"--declare {path}: claim {index}: {message}")


def read_declarations(path: str | Path) -> list[OwnClaim]:
    """The declarations of ``path``; one UserError line for the first bad one (module docstring)."""
    from ..yamlio import load_yaml

    path = Path(path)
    top = load_yaml(path, "--declare")
    if set(top) != {"claims"}:
        raise UserError(f"--declare {path}: expected one key 'claims' (a list of declarations), got {sorted(top)}")
    data = top["claims"]
    if not isinstance(data, list) or not data:
        raise UserError(f"--declare {path}: claims: expected a non-empty list of declarations, got {type(data).__name__}")
    out = []
    for i, item in enumerate(data):
        try:
            claim = OwnClaim.model_validate(item)
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "declaration"
            raise _refuse(path, i, f"{where}: {first['msg']} (got {first.get('input')!r})") from None
        if claim.aggregation == "median":
            need = verdicts.min_seeds_for()
            if claim.min_seeds is None or claim.min_seeds < need:
                raise _refuse(path, i, f"min_seeds={claim.min_seeds}: a median over seeds needs min_seeds >= {need} (the "
                              f"fewest seeds whose median interval reaches {verdicts.LEVEL:.0%}; below 2 there is no "
                              "interval at all)")
        elif claim.min_seeds is not None and claim.min_seeds < 1:
            raise _refuse(path, i, f"min_seeds={claim.min_seeds}: at least 1")
        known = (*claim.range, "its declared range") if claim.range is not None else metric_range(claim.metric)
        if known is not None:
            low, high, what = known
            if not low <= claim.threshold <= high:
                raise _refuse(path, i, f"threshold={claim.threshold:g} is outside the range of {claim.metric} ({what}: "
                              f"[{low:g}, {high:g}]); no value can decide it")
        out.append(claim)
    ids = [c.id for c in out]
    if len(set(ids)) != len(ids):
        raise UserError(f"--declare {path}: claim ids must be unique, got {sorted({i for i in ids if ids.count(i) > 1})}")
    return out


def judge(declared: Sequence[OwnClaim], summaries: Sequence[Summary]) -> list[Claim]:
    """Each declaration judged by the engine over every seed of ``summaries`` (a seed in two runs is
    refused: the claim would count it twice)."""
    claims = []
    for own_claim in declared:
        values: dict[str, float | None] = {}
        for summary in summaries:
            for seed, finals in summary.per_seed.items():
                if seed in values:
                    raise UserError(f"--runs: seed {seed} is in two of the runs: a claim over seeds counts each seed once")
                value: Any = (finals or {}).get(own_claim.metric)
                values[str(seed)] = None if value is None else float(value)
        if not any(v is not None for v in values.values()):
            known = sorted({k for s in summaries for f in s.per_seed.values() for k in (f or {})})
            raise UserError(f"--declare: claim {own_claim.id}: metric {own_claim.metric!r} is not a final per-seed value of "
                            f"the runs; they have: {', '.join(known[:30])}{' ...' if len(known) > 30 else ''}")
        spec = own_claim.spec()
        rule = spec.seeds_rule() if spec.aggregation else spec.rule()
        claims.append(spec.judged(verdicts.decide(values, rule), f"{own_claim.metric} per seed"))
    return claims
