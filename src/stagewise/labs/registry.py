"""The lab registry: name -> :class:`~stagewise.labs.contract.Lab`.

Each lab module defines ``LAB = Lab(...)``; adding a lab takes one line in ``_MODULES``.
Lab modules are imported on first use (so `stagewise labs` does not import every lab's
dependencies), and the registry checks that what it imported is a ``Lab``.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterator, Mapping

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


REGISTRY = Registry(_MODULES)


def get_lab(name: str) -> Lab:
    """The lab registered as ``name``; one-line UserError for unknown names."""
    if name not in REGISTRY:
        close = difflib.get_close_matches(name, list(REGISTRY), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise UserError(f"unknown lab '{name}'{hint}; available: {', '.join(REGISTRY)}")
    return REGISTRY[name]
