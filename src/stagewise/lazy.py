"""Lazy re-exports for package ``__init__`` files (PEP 562): a public name is imported from
its submodule on first use, so importing a package imports none of its heavy dependencies.

Usage, at the end of an ``__init__.py``::

    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)

with ``_EXPORTS`` mapping each public name to the (relative) module that defines it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any


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
