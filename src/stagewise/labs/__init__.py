"""Lab registry. A lab is a module exposing the contract:

- ``NAME``, ``DESCRIPTION``: identity.
- ``Config``: the pydantic v2 config model (with ``seed``, ``n_seeds`` and
  ``train.checkpoint_every``).
- ``PRESETS``: name -> (description, nested dict of overrides).
- ``run(config, ctx) -> extras``: trains, streaming metrics through ``ctx``
  (:class:`stagewise.runs.RunContext`), checkpointing and resuming through it.
- ``summarize(config, metrics, extras) -> dict``: final values, fitted rates and claims
  computed from the long-form metrics frame.
- ``make_figures(config, metrics, summary, folder)``: PNG and PDF figures.
- ``check(config)`` (optional): every input check that needs more than the config model
  (data files, derived sizes); called before a run directory is created.
- ``REPRODUCE``: the runs of ``stagewise reproduce LAB`` (see :mod:`stagewise.report`).

Adding a lab takes one line here.
"""

from __future__ import annotations

import difflib
import importlib
from types import ModuleType

from ..errors import UserError

REGISTRY: dict[str, str] = {
    "ntp": "stagewise.labs.ntp.lab",
    "disentangled": "stagewise.labs.disentangled.lab",
}


def get_lab(name: str) -> ModuleType:
    """Import a lab module by its registry name; one-line UserError for unknown names."""
    if name not in REGISTRY:
        close = difflib.get_close_matches(name, list(REGISTRY), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise UserError(f"unknown lab '{name}'{hint}; available: {', '.join(REGISTRY)}")
    return importlib.import_module(REGISTRY[name])


def preset_overrides(lab: ModuleType, preset: str | None) -> dict:
    """The overrides of a named preset (None -> the lab's defaults)."""
    if preset is None:
        return {}
    if preset not in lab.PRESETS:
        close = difflib.get_close_matches(preset, list(lab.PRESETS), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise UserError(f"--preset {preset}: unknown preset for lab '{lab.NAME}'{hint}; available: {', '.join(lab.PRESETS)}")
    return lab.PRESETS[preset][1]
