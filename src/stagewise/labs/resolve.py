"""A :class:`~stagewise.labs.spec.RunSpec` resolved against the registry.

Above both the spec (plain data) and the registry/contract, so neither imports the other::

    spec_lab(spec)     -> Lab                      # registry[spec.lab], one-line error if unknown
    spec_config(spec)  -> validated Config         # lab defaults < preset < overrides
    spec_hash(spec)    -> str                      # config_hash(spec_config(spec)); the name is not in it
"""

from __future__ import annotations

from pydantic import BaseModel

from ..config import config_hash, deep_merge, resolve
from .contract import Lab
from .registry import get_lab
from .spec import RunSpec

__all__ = ["spec_config", "spec_hash", "spec_lab"]


def spec_lab(spec: RunSpec) -> Lab:
    """The registered lab of ``spec.lab`` (UserError for an unknown name)."""
    return get_lab(spec.lab)


def spec_config(spec: RunSpec) -> BaseModel:
    """The validated config: lab defaults < preset < overrides (UserError on bad values)."""
    lab = spec_lab(spec)
    return resolve(lab.Config, deep_merge(lab.preset_overrides(spec.preset), spec.overrides))


def spec_hash(spec: RunSpec) -> str:
    """The resolved config's hash (equal for the same config written two ways)."""
    return config_hash(spec_config(spec))
