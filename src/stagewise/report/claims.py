"""The summary every lab writes (``summary.json``) and the claim records in it.

:class:`Summary` is shared by all labs: ``final`` (metric -> mean/min/max over seeds at the
last step), ``per_seed`` (seed -> values), ``claims`` (:class:`Claim`) and ``details``
(lab-specific results: fitted rates, stage tables, targets). ``show``, ``reproduce`` and
reports read only this model.

A claim's ``holds`` is computed from logged metrics with thresholds fixed before the run:
``True`` / ``False``, or ``None`` when the claim is not testable in this run (the reason is
in ``evidence``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..errors import UserError


class Claim(BaseModel):
    """One tested statement: ``holds`` computed from logged metrics, ``evidence`` the numbers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    statement: str
    holds: bool | None
    evidence: str


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

    lab: str
    seeds: list[int]
    final: dict[str, Stats] = Field(default_factory=dict)
    per_seed: dict[str, dict[str, Any]] = Field(default_factory=dict)
    claims: list[Claim] = Field(default_factory=list)
    details: dict[str, Any] = Field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        """Claims that hold / do not hold / are not testable."""
        out = {"holds": 0, "fails": 0, "untestable": 0}
        for c in self.claims:
            out["holds" if c.holds else "untestable" if c.holds is None else "fails"] += 1
        return out

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def claim(cid: str, statement: str, holds: bool | None, evidence: str) -> Claim:
    """One tested statement; ``holds=None`` marks it not testable here (say why in ``evidence``)."""
    return Claim(id=cid, statement=statement, holds=None if holds is None else bool(holds), evidence=evidence)


def read_summary(path: str | Path) -> Summary:
    """Load and validate ``summary.json``; one-line UserError when it is unreadable."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserError(f"{path}: unreadable summary ({type(err).__name__}: {str(err).splitlines()[0]})") from None
    try:
        return Summary.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "top level"
        raise UserError(f"{path}: not a stagewise summary ({where}: {first['msg']})") from None
