"""The linear-modes lab's contract value: presets, reproduction set, smoke overrides and
``LAB = Lab(...)``.

Importing this module is cheap (the config and the claims: pydantic only); the functions
that need torch, numpy or pandas are :func:`~stagewise.labs.contract.deferred`, imported
from this package when first called.
"""

from __future__ import annotations

from typing import Any

from stagewise.errors import UserError
from stagewise.labs.contract import Lab, Probing, SummaryTable, deferred, reproduction
from stagewise.report.claims import Summary

from .claimspecs import CLAIMS, SOURCES
from .config import NAME, Config, control_overrides

DESCRIPTION = "saddle-to-saddle learning of a two-layer linear network: singular modes one after another (Saxe et al. 2014)"

PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "equal-sv": ("control of modes_in_order alone: every singular value 2 (their mean), no order to find",
                 control_overrides(Config(), "equal-sv")),
    "large-init": ("control of onset_matches_theory alone: random init at 0.4 (of s_min = 1), no plateaus",
                   control_overrides(Config(), "large-init")),
    "random-small": ("small random (not mode-aligned) init, a0 = 0.001: ordered, the closed form only approximate",
                     {"model": {"init": "random"}, "controls": []}),
    "warmup": ("a linear lr warmup over 100 steps: the closed form in the accumulated rate still holds",
               {"train": {"schedule": "warmup", "warmup_steps": 100, "steps": 500}}),
}

# runs of reproduce: (name, preset, extra overrides, quick overrides or None to leave it out of --quick)
REPRODUCE = reproduction(NAME, [
    ("modes", None, {"n_seeds": 8}, {"n_seeds": 4}),
    ("random-small", "random-small", {"n_seeds": 8}, None),
    ("warmup", "warmup", {"n_seeds": 8}, None),
])


def check(config: Config) -> None:
    """The device resolves and the controls' configs validate (one UserError line otherwise)."""
    from stagewise.engine import resolve_device

    from .config import control_config

    resolve_device(config.device)
    if config.source.kind not in ("train", "tracked"):
        raise UserError(f"source.kind={config.source.kind}: this lab trains its networks or probes a training while it "
                        "runs (tracked); it reads no saved checkpoints")
    for name in config.controls:
        control_config(config, name)


def half_time_table(summary: Summary) -> SummaryTable | None:
    """``stagewise show``'s table: measured half-times (mean over seeds) beside the closed form's."""
    rows = []
    for group, entry in summary.details.get("half_times", {}).items():
        for i, theory in enumerate(entry["closed_form"]):
            measured = [row[i] for row in entry["per_seed"].values() if row[i] is not None]
            rows.append((f"{group} mode {i}", sum(measured) / len(measured) if measured else None, theory))
    return SummaryTable(("group and mode", "half-time (mean over seeds)", "closed form"), tuple(rows)) if rows else None


LAB = Lab(
    name=NAME, description=DESCRIPTION, Config=Config, presets=PRESETS, reproduce=REPRODUCE, check=check,
    run=deferred(f"{__package__}.train", "run"), summarize=deferred(f"{__package__}.summary", "summarize"),
    make_figures=deferred(f"{__package__}.figures", "make_figures"), estimate=deferred(f"{__package__}.resources", "estimate"),
    smoke={"n_seeds": 2, "controls": ["equal-sv"], "data": {"singular_values": [3.0, 1.0], "d_in": 3, "d_out": 3},
           "model": {"hidden": 4}, "train": {"steps": 40, "lr": 0.1, "checkpoint_every": 9}},
    key_metrics=("order_ratio", "theory_error", "train.loss"), claims=CLAIMS, sources=SOURCES,
    summary_tables={"half_times": half_time_table},
    probe=Probing(make=deferred(f"{__package__}.probe", "probe"), tracked={"controls": [], "n_seeds": 1}),
)

__all__ = ["LAB"]
