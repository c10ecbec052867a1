"""Lazy re-exports for package ``__init__`` files (PEP 562): a public name is imported from
its submodule on first use, so importing a package imports none of its heavy dependencies;
and :class:`LazyMapping`, a read-only mapping whose values are made on first access.

Usage, at the end of an ``__init__.py``::

    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)

with ``_EXPORTS`` mapping each public name to the (relative) module that defines it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar

V = TypeVar("V")


def lazy_exports(package: str, exports: Mapping[str, str], namespace: dict[str, Any], public: Sequence[str],
                 extra: Mapping[str, Callable[[], Any]] | None = None) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """(``__getattr__``, ``__dir__``) for the package ``package``: a name of ``exports`` is
    imported from its module (relative to ``package``) and cached in ``namespace`` (later
    lookups skip ``__getattr__``); a name of ``extra`` is computed by its function once.
    Any other name is an AttributeError, as for a plain module."""

    def __getattr__(name: str) -> Any:
        if extra is not None and name in extra:
            value = extra[name]()
        elif name in exports:
            value = getattr(importlib.import_module(exports[name], package), name)
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *public})

    return __getattr__, __dir__


class LazyMapping(Mapping[str, V], Generic[V]):
    """A read-only mapping over ``keys`` (in their order) whose value of a key is ``load(key)``,
    made on first access and kept under ``cache_key(key)`` (keys with one cache key share one
    value). A key not in ``keys`` is a KeyError; ``describe(self)`` is the repr."""

    def __init__(self, keys: Sequence[str], load: Callable[[str], V], *, cache_key: Callable[[str], Hashable] = lambda k: k,
                 describe: Callable[["LazyMapping[V]"], str] | None = None):
        self._keys, self._load, self._cache_key, self._describe = list(keys), load, cache_key, describe
        self._known = set(self._keys)
        self._made: dict[Hashable, V] = {}

    def __getitem__(self, key: str) -> V:
        if key not in self._known:
            raise KeyError(key)
        slot = self._cache_key(key)
        if slot not in self._made:
            self._made[slot] = self._load(key)
        return self._made[slot]

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return self._describe(self) if self._describe is not None else f"{type(self).__name__}({', '.join(self._keys)})"
