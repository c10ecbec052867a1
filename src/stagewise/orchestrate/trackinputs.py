"""What a :class:`~stagewise.orchestrate.track.Tracker` is given, checked before anything is
made (issue 39, round 4): each bad value is one :class:`~stagewise.errors.UserError` line
(what is wrong, which value, what is allowed), never a raw TypeError, RecursionError or
OverflowError from deep inside, and never after the run folder exists.

The lab's own probe checks what only it knows (for ``lm``: the tokenizer, ``vocab_ids``, the
model's embedding rows against the tokenizer's vocabulary); here are the checks of any lab.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..config import MAX_RECORD_STEP, whole_number
from ..errors import UserError
from ..errors import short_repr as shown
from ..yamlio import MAX_YAML_DEPTH

MAX_PATH_SHOWN = 120
"""Longest rendering of where in a nested mapping a problem sits (``settings['a']['b']...``)."""


def run_folder(out: Any) -> Path:
    """``out`` as the run directory's path: a non-empty str or an ``os.PathLike``."""
    path = _path(out) if not (isinstance(out, str) and not out.strip()) else None
    if path is not None:
        return path
    raise UserError(f"out={shown(out)}: the run directory, a path (a non-empty str or pathlib.Path; got "
                    f"{type(out).__name__})")


def _path(value: Any) -> Path | None:
    """``value`` (a str or an ``os.PathLike`` of str) as a Path, else None (a PathLike of bytes too)."""
    if isinstance(value, (str, os.PathLike)):
        try:
            return Path(value)
        except TypeError:  # a PathLike of bytes
            return None
    return None


def name_or_none(value: Any, what: str, means: str) -> str | None:
    """``value`` when it is a str or None; one line naming ``what`` (``means``: what it is) otherwise."""
    if value is None or isinstance(value, str):
        return value
    raise UserError(f"{what}={shown(value)}: {means}, a string (got {type(value).__name__})")


def config_source(config: Any) -> str | Path | Mapping[str, Any] | None:
    """``config``: None, a YAML file's path (str or PathLike), or a mapping (checked as :func:`plain_mapping`)."""
    if config is None or isinstance(config, str):
        return config
    if isinstance(config, Mapping):
        return plain_mapping(config, "config")
    path = _path(config)
    if path is not None:
        return path
    raise UserError(f"config={shown(config)}: a YAML file's path or a mapping of config sections (got "
                    f"{type(config).__name__})")


def plain_mapping(value: Any, what: str) -> dict[str, Any] | None:
    """``value`` (None or a mapping) as a dict; one UserError line when it is not a mapping,
    contains itself (a self-referencing dict or list), or nests deeper than :data:`MAX_YAML_DEPTH`
    (what config.yaml could hold)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise UserError(f"{what}={shown(value)}: give a mapping (a dict), not a {type(value).__name__}")
    _plain(value, what, 0, set())
    return dict(value)


def _plain(value: Any, where: str, depth: int, inside: set[int]) -> None:
    """Walk the mappings and lists of ``value`` (``inside``: the ids of the containers around it)."""
    if isinstance(value, Mapping):
        children = list(value.items())
    elif isinstance(value, (list, tuple)):
        children = list(enumerate(value))
    else:
        return
    if id(value) in inside:
        raise UserError(f"{_cut(where)}: contains itself (a self-referencing mapping or list); give plain data")
    if depth >= MAX_YAML_DEPTH:
        raise UserError(f"{_cut(where)}: nested deeper than {MAX_YAML_DEPTH} levels; give plain data")
    inside.add(id(value))
    for key, child in children:
        _plain(child, f"{where}[{key!r}]", depth + 1, inside)
    inside.discard(id(value))


def _cut(where: str) -> str:
    return where if len(where) <= MAX_PATH_SHOWN else where[:MAX_PATH_SHOWN - 3] + "..."


def check_model(model: Any) -> None:
    """``model`` is a ``torch.nn.Module`` with weights, none of them on the meta device (a model
    built without its weights, which no probe can run)."""
    import torch

    if not isinstance(model, torch.nn.Module):
        raise UserError(f"model={shown(model)}: the model being trained, a torch.nn.Module (got {type(model).__name__})")
    meta = [name for name, p in model.named_parameters() if p.is_meta]
    if meta:
        raise UserError(f"model: {len(meta)} weights are on the meta device, not loaded (e.g. {meta[0]}); give the model "
                        "with its weights (e.g. from_pretrained without device='meta', or load them into it first)")
    if next(model.parameters(), None) is None:
        raise UserError(f"model: {type(model).__name__} has no weights; give the model being trained")


def record_step(step: Any) -> int:
    """``step`` as an int: a whole number (a numpy or torch integer too) in [0, :data:`MAX_RECORD_STEP`]."""
    number = whole_number(step)
    if number is None or not 0 <= number <= MAX_RECORD_STEP:
        raise UserError(f"step={shown(step)}: a training step is a whole number >= 0 that fits int64 (at most "
                        f"{MAX_RECORD_STEP})")
    return number


def record_epoch(epoch: Any, step: int) -> float:
    """The records' epoch: ``epoch`` as a float (a finite number >= 0), or ``step`` when None."""
    if epoch is None:
        return float(step)
    value = math.nan
    if isinstance(epoch, numbers.Real) and not isinstance(epoch, bool):
        try:
            value = float(epoch)
        except OverflowError:  # an int past float's range
            value = math.inf
    if not (math.isfinite(value) and value >= 0):
        raise UserError(f"epoch={shown(epoch)}: the records' epoch is a finite number >= 0 (or None: the step)")
    return value


def probing_lab(lab: Any) -> Any:
    """The :class:`~stagewise.labs.Lab` whose probe applies: a registered lab's name or a
    ``Lab`` value (a lab outside the package); one line when it is missing, unknown or
    declares no probe (``Lab.probe``), naming the labs that do."""
    from ..labs import REGISTRY, Lab, get_lab

    def probing() -> str:
        names = []
        for name in REGISTRY:
            try:
                if REGISTRY[name].probe is not None:
                    names.append(name)
            except Exception:  # noqa: BLE001 (a lab that fails to import has no probe to offer here)
                continue
        return ", ".join(names) or "none registered"

    if lab is None:
        raise UserError(f"lab: name the lab whose probes apply (labs with probes: {probing()}), e.g. Tracker(..., lab='lm')")
    if not isinstance(lab, (str, Lab)):
        raise UserError(f"lab={shown(lab)}: the name of a lab or a Lab value (got {type(lab).__name__}); labs with "
                        f"probes: {probing()}")
    value = lab if isinstance(lab, Lab) else get_lab(lab)
    if value.probe is None:
        raise UserError(f"lab '{value.name}' has no probes (it measures only the models it trains); labs with probes: "
                        f"{probing()}")
    return value


def probe_options(lab: Any, options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` (the keywords given beside the Tracker's own) when the lab's probe takes
    each of them (``Probing.options``); one line naming the first it does not take."""
    allowed = lab.probe.options
    unknown = [k for k in options if k not in allowed]
    if unknown:
        takes = ", ".join(allowed) if allowed else "none"
        raise UserError(f"{unknown[0]}=...: not an option of lab '{lab.name}''s probe (it takes: {takes})")
    return dict(options)
