"""The lab registry: name -> :class:`~stagewise.labs.contract.Lab`.

Each lab module defines ``LAB = Lab(...)``; adding a lab takes one line in ``_MODULES``. A lab
outside the package is registered for the CLI by the environment variable ``STAGEWISE_LABS``:
``NAME=MODULE`` pairs separated by commas (e.g. ``linear_modes=linear_modes.lab``, the module
importable from ``sys.path``/``PYTHONPATH``); a malformed pair or a built-in name is one
UserError line.
Lab modules are imported on first use (so `stagewise labs` does not import every lab's
dependencies), and the registry checks that what it imported is a ``Lab``.
"""

from __future__ import annotations

import difflib
import importlib
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from ..errors import UserError
from .contract import Lab

_MODULES: dict[str, str] = {
    "ntp": "stagewise.labs.ntp.lab",
    "disentangled": "stagewise.labs.disentangled.lab",
    "lm": "stagewise.labs.lm.lab",
}


class Registry(Mapping[str, Lab]):
    """A read-only mapping of lab names to ``Lab`` values, loaded on first access."""

    def __init__(self, modules: Mapping[str, str]):
        self._modules = dict(modules)
        self._labs: dict[str, Lab] = {}

    def __getitem__(self, name: str) -> Lab:
        if name not in self._modules:
            raise KeyError(name)
        if name not in self._labs:
            value = getattr(importlib.import_module(self._modules[name]), "LAB", None)
            if not isinstance(value, Lab):
                raise TypeError(f"lab module {self._modules[name]} must define LAB = Lab(...), got {type(value).__name__}")
            if value.name != name:
                raise TypeError(f"lab module {self._modules[name]} is registered as '{name}' but names itself '{value.name}'")
            self._labs[name] = value
        return self._labs[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __len__(self) -> int:
        return len(self._modules)

    @contextmanager
    def registered(self, lab: Lab) -> Iterator[None]:
        """``lab`` is ``self[lab.name]`` inside the block (specs, execute_spec and resume
        resolve it by name, e.g. a lab written outside the package under
        :func:`stagewise.testing.check_lab`); afterwards the registry is as before. A lab that
        is already registered as itself is left alone; one with a registered name replaces it
        for the block."""
        if lab.name in self._labs and self._labs[lab.name] is lab:
            yield
            return
        had_module, module, previous = lab.name in self._modules, self._modules.get(lab.name), self._labs.get(lab.name)
        self._modules[lab.name] = module or f"<registered in process: {lab.name}>"
        self._labs[lab.name] = lab
        try:
            yield
        finally:
            if had_module and module is not None:
                self._modules[lab.name] = module
            else:
                self._modules.pop(lab.name, None)
            if previous is None:
                self._labs.pop(lab.name, None)
            else:
                self._labs[lab.name] = previous


LABS_ENV = "STAGEWISE_LABS"
_PAIR = re.compile(r"^([a-z][a-z0-9_-]*)=([A-Za-z_][\w.]*)$")


def env_modules(value: str | None) -> dict[str, str]:
    """The labs ``STAGEWISE_LABS`` names: ``"a=pkg.lab, b=other.lab"`` -> {"a": "pkg.lab", ...}."""
    out: dict[str, str] = {}
    for pair in filter(None, (p.strip() for p in (value or "").split(","))):
        match = _PAIR.match(pair)
        if match is None:
            raise UserError(f"{LABS_ENV}: {pair!r} is not NAME=MODULE (a lab name, then an importable module path)")
        name, module = match.groups()
        if name in _MODULES or name in out:
            raise UserError(f"{LABS_ENV}: lab name {name!r} is already registered; give the outside lab another name")
        out[name] = module
    return out


REGISTRY = Registry({**_MODULES, **env_modules(os.environ.get(LABS_ENV))})


def get_lab(name: str) -> Lab:
    """The lab registered as ``name``; one-line UserError for unknown names."""
    if name not in REGISTRY:
        close = difflib.get_close_matches(name, list(REGISTRY), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise UserError(f"unknown lab '{name}'{hint}; available: {', '.join(REGISTRY)}")
    return REGISTRY[name]


def metric_aliases(name: object) -> Mapping[str, str]:
    """The old metric names of the lab registered as ``name`` (``Lab.metric_aliases``, old ->
    current): what a reader of a run folder of that lab (its manifest's ``lab``) passes to
    :mod:`stagewise.runs.names`; none for a name that is not a registered lab (a folder of
    another installation reads as written)."""
    return REGISTRY[name].metric_aliases if isinstance(name, str) and name in REGISTRY else {}
