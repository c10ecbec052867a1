"""Run specs: one serializable way to say "run this" (used by reproduce and sweeps).

A :class:`RunSpec` is plain data (names and JSON values) and imports nothing from the labs:
resolving it against the registry (its lab, validated config and hash) lives one level up,
in :mod:`stagewise.labs.resolve` (``spec_lab``, ``spec_config``, ``spec_hash``).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class RunSpec(BaseModel):
    """One way to say "run this": a lab, an optional preset, nested overrides and a name.

    Serializable (JSON, pickle) and shippable to other processes: it holds names and plain
    values only. ``spec_hash(spec)`` equals the resolved config's hash; the name does not
    enter it.

    Example::

        RunSpec(lab="ntp", preset="example1", overrides={"train": {"steps_stage2": 60}}, name="x")
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    lab: str
    preset: str | None = None
    overrides: dict[str, Any] = Field(default_factory=dict)
    name: str = ""

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> "RunSpec":
        return cls.model_validate(json.loads(text))
