"""The lm claims over seeds (``Lab.across_runs``): runs grouped into families that differ only
in the seed and the control, each claim judged by its declared aggregation
(:func:`stagewise.report.seedstats.judge_over_seeds`) against the family's control runs.

A run's seed key is (``seed``, ``task.sample_seed``): the real run and a control run of the same
key saw the same initialisation, training order and subsample, so their values pair.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from ...config import canonical
from ...report.claims import Claim, Summary
from ...report.seedstats import judge_over_seeds
from .claimspecs import CLAIMS
from .config import Config
from .summary import control_name

SEED_FIELDS = (("seed",), ("task", "sample_seed"), ("task", "shuffle_groups"), ("task", "replace_answers"),
               ("task", "permute_labels"))
"""Config fields that vary within a family (the seed key and the control); everything else defines it."""

REAL = "real"


def family_key(config: Config) -> str:
    """The config without its seed key and control, as canonical JSON."""
    data = canonical(config)
    for path in SEED_FIELDS:
        node = data
        for part in path[:-1]:
            node = node.get(part, {})
        node.pop(path[-1], None)
    return json.dumps(data, sort_keys=True)


def across_runs(runs: Sequence[tuple[Config, Summary]]) -> list[Claim]:
    """Every claim with a declared aggregation, per family with at least one real run and
    more than one run: ``{id}_over_seeds`` (``_over_seeds_2``, ... for further families)."""
    families: dict[str, list[tuple[Config, Summary]]] = {}
    for config, summary in runs:
        families.setdefault(family_key(config), []).append((config, summary))
    out: list[Claim] = []
    numbered = [members for members in families.values()
                if len(members) > 1 and any(control_name(c) is None for c, _ in members)]
    for i, members in enumerate(numbered, start=1):
        label = _label(members[0][0]) + (f", family {i}" if len(numbered) > 1 else "")
        for spec in CLAIMS:
            if spec.aggregation is None:
                continue
            by_condition: dict[str, dict[str, float | None]] = {}
            for config, summary in members:
                claim = next((c for c in summary.claims if c.spec_id == spec.id), None)
                if claim is None or claim.verdict == "not applicable":
                    continue
                key = f"{config.seed}/{config.task.sample_seed}"
                value = claim.value if claim.verdict != "not testable" else None
                by_condition.setdefault(control_name(config) or REAL, {})[key] = value
            if REAL not in by_condition:
                continue
            real = by_condition.pop(REAL)
            case = "over_seeds" if i == 1 else f"over_seeds_{i}"
            out.append(judge_over_seeds(spec, real, by_condition, case=case, label=label))
    return out


def _label(config: Config) -> str:
    return f"{config.task.name}, {config.model.name or 'tiny'}, {config.train.epochs} epochs"

