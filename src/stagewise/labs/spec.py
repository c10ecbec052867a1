"""Run specs: one serializable way to say "run this" (used by reproduce and sweeps)."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..config import config_hash, deep_merge, resolve
from .contract import Lab, Reproduction
from .registry import get_lab


class RunSpec(BaseModel):
    """One way to say "run this": a lab, an optional preset, nested overrides and a name.

    Serializable (JSON, pickle) and shippable to other processes: it holds names and plain
    values only. ``hash`` equals the resolved config's hash.

    Example::

        RunSpec(lab="ntp", preset="example1", overrides={"train": {"steps_stage2": 60}}, name="x")
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    lab: str
    preset: str | None = None
    overrides: dict[str, Any] = Field(default_factory=dict)
    name: str = ""

    def lab_value(self) -> Lab:
        return get_lab(self.lab)

    def config(self) -> BaseModel:
        """The validated config: lab defaults < preset < overrides."""
        lab = self.lab_value()
        return resolve(lab.Config, deep_merge(lab.preset_overrides(self.preset), self.overrides))

    @property
    def hash(self) -> str:
        return config_hash(self.config())

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> "RunSpec":
        return cls.model_validate(json.loads(text))


def reproduction(lab: str, rows: list[tuple[str, str | None, dict[str, Any], dict[str, Any] | None]]) -> Reproduction:
    """A Reproduction from rows (name, preset, extra overrides, quick overrides or None to
    leave the run out of ``--quick``); quick overrides are merged over the extra ones."""
    full = tuple(RunSpec(lab=lab, preset=preset, overrides=extra, name=name) for name, preset, extra, _ in rows)
    quick = tuple(RunSpec(lab=lab, preset=preset, overrides=deep_merge(extra, quick), name=name)
                  for name, preset, extra, quick in rows if quick is not None)
    return Reproduction(full=full, quick=quick)
