"""The disentangled-feature lab's contract: presets, run, summary, figures.

Importing this module is cheap (config, claims, presets): the functions that need torch,
numpy or pandas import them when called.
"""

from __future__ import annotations

from typing import Any

from ...config import deep_merge
from ...errors import UserError
from ..contract import Lab, LabCommand, RunContext, RunResult, Summary, SummaryTable, deferred, reproduction
from .claimspecs import CLAIMS, SOURCES
from .config import Config

NAME = "disentangled"
DESCRIPTION = "elementary (P) then specialized (Q) features: normalized ReLU attention, large then annealed LR (Gong et al. 2025; reconstructed)"

_PHASE = {"experiment": {"kind": "grid"}, "n_seeds": 4, "data": {"n_test": 1000},
          "train": {"t1": 1000, "steps": 5000, "log_every": 50, "spectrum_every": 1000}}
# the phase diagrams of the loss-level second stage, one per mechanism (docs section 5)
_MECHANISMS = {
    "phase-noise": ("update noise: noise x ||zeta|| at lambda 0.01 (noise std = noise * lr)",
                    {"train": {"l2": 0.01}, "experiment": {"grid": {"noise": [0.05, 0.2, 0.3, 0.5], "zeta": [1.0, 1.5, 2.0, 3.0]}}}),
    "phase-sgd": ("minibatch SGD noise: batch size x eta1, no update noise, ||zeta|| = 2",
                  {"data": {"zeta": 2.0}, "train": {"optimizer": "sgd", "noise": 0.0, "l2": 0.01},
                   "experiment": {"grid": {"batch_size": [4, 16, 64], "lr_stage1": [1.0, 3.0]}}}),
    "phase-centre": ("large-LR instability along a high-curvature Q centre z: ||z|| x eta1, noise 0.003, lambda 0.001",
                     {"data": {"zeta": 1.0}, "train": {"noise": 0.003, "l2": 0.001},
                      "experiment": {"grid": {"q_centre": [0.0, 2.0, 3.0], "lr_stage1": [1.0, 3.0]}}}),
    "phase-composite": ("composite labels (both features in every token, P flipped on p_flip): p_flip x noise, ||zeta|| = 2",
                        {"data": {"zeta": 2.0, "label_rule": "composite", "p0": 0.0, "q0": 0.0}, "train": {"l2": 0.01},
                         "experiment": {"grid": {"p_flip": [0.05, 0.1], "noise": [0.05, 0.2, 0.5]}}}),
}

GATE_NOISE: dict[str, Any] = {
    # gate_noise.size(d=200, prompt_len=1000, zeta=3.0, radius=4.0, rho=26.0).overrides() (tests/labs/disentangled/test_gate_noise.py)
    "data": {"d": 200, "prompt_len": 1000, "zeta": 3.0, "q_noise_radius": 4.0, "p0": 0.2, "q0": 0.2, "n_train": 400, "n_test": 400},
    "train": {"l2": 0.08809, "noise": 0.06433, "lr_stage1": 1.0, "lr_stage2": 0.1, "t1": 35, "steps": 1057,
              "log_every": 10, "spectrum_every": 1057, "checkpoint_every": 250},
    "model": {"dtype": "float32"}, "n_seeds": 4,
    "experiment": {"kind": "ablations", "ablations": ["no-anneal", "no-noise"], "control": True, "floors": False},
}
"""The gate-noise regime, sized by :func:`.gate_noise.size` (spec section 5's formulas, no fitted constant).
Floors off: the fixed point does not apply to token-level gates, and the numerical solver does not
converge there within its iterations (docs/disentangled.md, gate-noise)."""

GATE_NOISE_SMALL: dict[str, Any] = deep_merge(GATE_NOISE, {
    # gate_noise.size(d=100, prompt_len=1100, zeta=3.0, radius=4.0, rho=26.0).overrides(): the same relations
    # (sigma_1 = 1.5 sigma_crit, sigma_2 = 0.47 sigma_crit, random Q output 0.495 <= 0.5) at 1/2 the d and 1/2 the
    # training prompts: 1/3.6 of the training features (issue 28; docs/disentangled.md 5a.4; N = 100 overfits Q: test
    # K2 0.48-0.60 against train 0.23-0.27 without noise)
    "data": {"d": 100, "prompt_len": 1100, "n_train": 200, "n_test": 200},
    "train": {"l2": 0.0749, "noise": 0.06976, "t1": 41, "steps": 1243, "log_every": 25, "spectrum_every": 1243},
})
"""The gate-noise regime at a size a phase map can afford (:func:`.gate_noise.size`, the same relations)."""

PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "two-stage": ("the staged run: xor Q, mixture 0.2/0.2, lr_stage1 = 1 for 300 steps then lr_stage2 = 0.1 to 6000, update noise 0.05, lambda 0.01, "
                  "8 seeds and their shuffled-label controls",
                  {"experiment": {"kind": "two-stage"}}),
    "ablations": ("the two-stage run beside no-anneal, small-lr, no-noise, no-l2, joint, mixture-off, full, anneal-fixed-noise, "
                  "noise-off-t1 (same data and seeds)",
                  {"experiment": {"kind": "ablations"}, "data": {"n_test": 1000}, "train": {"log_every": 50, "spectrum_every": 1000}}),
    "spectral": ("spectra of W, V over training and the top-k / bottom-k truncation of blockdiag(W, V)",
                 {"experiment": {"kind": "spectral"}, "train": {"spectrum_every": 50}}),
    "grid": ("eta1 x update-noise grid (0.3, 1.0) x (0, 0.02, 0.05, 0.1), batched in one pass: where do the stages appear?",
             {"experiment": {"kind": "grid"}, "data": {"n_test": 1000}, "train": {"log_every": 50, "spectrum_every": 1000}}),
    **{name: (text, deep_merge(_PHASE, over)) for name, (text, over) in _MECHANISMS.items()},
    "robustness": ("the per-seed stage claims for d = 20, 30, 50 x seed blocks 0, 1000, 2000 (8 seeds each, with controls)",
                   {"experiment": {"kind": "robustness", "dims": [20, 30, 50], "seed_blocks": [0, 1000, 2000]},
                    "data": {"n_test": 1000}, "train": {"log_every": 100, "spectrum_every": 6000}}),
    "gate-noise": ("Li-Wei-Ma's token-level gate noise (spec 5): d 200, L 1000, ||zeta|| 3, Q noise radius 4 ||zeta||, "
                   "kappa_Q^2/lambda 26, update noise 1.5 sigma_crit in stage 1, 1057 steps (gate_noise.size), 4 seeds, float32; "
                   "with its no-anneal and no-noise ablations and the shuffled controls",
                   GATE_NOISE),
    "gate-noise-small": ("the gate-noise regime at d 100, L 1100, N 200 (test 200): the same sizing relations "
                         "(gate_noise.size(100, 1100, 3, 4, 26)), 1243 steps, 4 seeds, float32, with the no-anneal and no-noise "
                         "ablations and the shuffled controls; the size of the phase map (docs 5a.4)",
                         GATE_NOISE_SMALL),
    "d-scaling": ("K1, K2 at the stage ends for d = 8..128 with lambda and L scaled by the assumption's rules",
                  {"experiment": {"kind": "d-scaling"}, "n_seeds": 3,
                   "data": {"n_test": 500}, "train": {"steps": 3000, "log_every": 100, "spectrum_every": 3000}}),
}

# runs of `stagewise reproduce disentangled`: (name, preset, extra overrides, quick overrides or None)
_QUICK = {"n_seeds": 4, "data": {"n_test": 500}, "train": {"steps": 3000, "log_every": 50, "spectrum_every": 500}}
_REPRODUCE: list[tuple[str, str, dict[str, Any], dict[str, Any] | None]] = [
    ("two-stage", "two-stage", {}, _QUICK),
    ("ablations", "ablations", {}, {**_QUICK, "experiment": {"ablations": ["no-anneal", "no-noise"]}}),
    ("spectral", "spectral", {}, None),
    ("grid", "grid", {}, None),
    *((name, name, {}, None) for name in _MECHANISMS),
    ("robustness", "robustness", {}, None),
    ("d-scaling", "d-scaling", {}, {"n_seeds": 2, "data": {"n_train": 200, "n_test": 300},
                                    "experiment": {"dims": [8, 16, 32]},
                                    "train": {"steps": 800, "log_every": 100, "spectrum_every": 800}}),
]
REPRODUCE = reproduction(NAME, _REPRODUCE)


def check(config: Config) -> None:
    """Data specs of every group (d-scaling changes d and L) before any work."""
    from ...engine import resolve_device
    from .data import validate_spec
    from .experiments import groups
    from .train import data_spec

    resolve_device(config.device)
    for group in groups(config):
        for member in {m.data_key()[1:]: m for m in group.members}.values():
            validate_spec(data_spec(group.config, member))
    if config.experiment.kind == "d-scaling" and config.data.d < 2:
        raise UserError(f"data.d={config.data.d}: d-scaling anchors its rules at d >= 2")


def run(config: Config, ctx: RunContext) -> RunResult:
    """Run every group of the experiment, resuming inside the group a checkpoint names."""
    from .experiments import run_experiment

    plan = run_experiment(config, ctx)
    return RunResult({
        "seeds": config.seed_list(),
        "groups": [{"name": g.name, "members": len(g.members), "d": g.config.data.d, "prompt_len": g.config.data.prompt_len,
                    "l2": g.config.train.l2, "variants": sorted({m.variant for m in g.members})} for g in plan],
    })


summarize = deferred("stagewise.labs.disentangled.summary", "summarize")
make_figures = deferred("stagewise.labs.disentangled.figures", "make_figures")
estimate = deferred("stagewise.labs.disentangled.resources", "estimate")
floors_command = LabCommand(
    help="Print the attainable loss floors of a config (numerical optimum, analytic cross-check), without training.",
    what="attainable floors", run=deferred("stagewise.labs.disentangled.floor_tables", "floors_report"))
"""``stagewise floors disentangled``: :func:`.floor_tables.floors_report` of the config."""


def floors_table(summary: Summary) -> SummaryTable | None:
    """``details.floors`` ({variant: {quantity: mean over seeds}}, what the model can attain) as
    the table ``stagewise show`` prints: a row per variant, the per-seed texts left out."""
    floors = summary.details.get("floors")
    if not isinstance(floors, dict) or not floors:
        return None
    names = [k for k in next(iter(floors.values())) if not k.startswith("per seed")]
    rows = tuple((variant, *(entry.get(k) for k in names)) for variant, entry in floors.items())
    return SummaryTable(("attainable floors (means over seeds)", *names), rows)


LAB = Lab(name=NAME, description=DESCRIPTION, Config=Config, presets=PRESETS, reproduce=REPRODUCE, check=check, run=run,
          summarize=summarize, make_figures=make_figures, estimate=estimate,
          commands={"floors": floors_command}, summary_tables={"floors": floors_table},
          claims=CLAIMS, sources=SOURCES, key_metrics=("test.K1.p_queries", "test.K2.q_queries", "test.acc.p_only", "test.acc.q_only"),
          smoke={"n_seeds": 2, "data": {"d": 6, "prompt_len": 6, "n_train": 40, "n_test": 60},
                 "train": {"steps": 40, "t1": 15, "log_every": 5, "spectrum_every": 10, "checkpoint_every": 7}})

__all__ = ["LAB"]
