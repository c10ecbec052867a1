"""The next-token-prediction lab (Huang, Liang, Yang, NeurIPS 2024): two-stage normalized
GD on a one-layer transformer converges in direction to max-margin solutions.

The lab's contract value is :data:`.lab.LAB` (a :class:`~stagewise.labs.contract.Lab`);
the pieces are importable on their own for use from Python. They load on first use
(PEP 562), so importing the lab's contract (``stagewise config ntp``) needs no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...lazy import lazy_exports

if TYPE_CHECKING:
    from .config import Config
    from .data import build_dataset, example1, load_json_dataset, random_dataset, to_tensors
    from .dataset import NTPDataset, QueryStructure, Sample
    from .generalize import GenCase, build_suite, classify
    from .maxmargin import MaxMarginTargets, max_margin_targets, min_norm_margin, prop2_wkq, wkq_star, wov_star
    from .problem import Problem, build_problem, member_dataset
    from .train import Params, cosine, train_two_stage

_EXPORTS: dict[str, str] = {
    "Config": ".config",
    **dict.fromkeys(("build_dataset", "example1", "load_json_dataset", "random_dataset", "to_tensors"), ".data"),
    **dict.fromkeys(("NTPDataset", "QueryStructure", "Sample"), ".dataset"),
    **dict.fromkeys(("GenCase", "build_suite", "classify"), ".generalize"),
    **dict.fromkeys(("MaxMarginTargets", "max_margin_targets", "min_norm_margin", "prop2_wkq", "wkq_star", "wov_star"),
                    ".maxmargin"),
    **dict.fromkeys(("Problem", "build_problem", "member_dataset"), ".problem"),
    **dict.fromkeys(("Params", "cosine", "train_two_stage"), ".train"),
}

__all__ = [
    "Config", "GenCase", "MaxMarginTargets", "NTPDataset", "Params", "Problem", "QueryStructure", "Sample",
    "build_dataset", "build_problem", "build_suite", "classify", "cosine", "example1", "load_json_dataset",
    "max_margin_targets", "member_dataset", "min_norm_margin", "prop2_wkq", "random_dataset", "to_tensors", "train_two_stage", "wkq_star",
    "wov_star",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
