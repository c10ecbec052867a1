"""The NTP lab's contract: presets, run, summary, figures (see :mod:`stagewise.labs`).

Importing this module is cheap (config, claims, presets): the functions that need torch,
numpy or pandas import them when called.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from ..contract import Lab, RunContext, RunResult, deferred, reproduction
from .claimspecs import CLAIMS, SOURCES
from .config import Config

if TYPE_CHECKING:
    import pandas as pd
    import torch

    from .problem import Problem

NAME = "ntp"
DESCRIPTION = "next-token prediction: two-stage normalized GD converges to max-margin solutions (Huang, Liang, Yang 2024)"

PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "paper": ("|V| = d = 20, lr_stage1 = 0.2/sqrt(d), lr_stage2 = 0.05/sqrt(d), T = T1 = 900, zero init (the paper's experiment)",
              {"data": {"source": "random", "vocab_size": 20}, "train": {"steps_stage1": 900, "steps_stage2": 900}}),
    "paper-random-init": ("the paper preset from random init (std 0.05), the look of the paper's Figure 2",
                          {"data": {"source": "random", "vocab_size": 20}, "model": {"init": "random", "init_scale": 0.05}}),
    "example1": ("the paper's Example 1 (S V O P); T = 200 keeps the stage-1 gradient above the guard",
                 {"data": {"source": "example1"}, "train": {"steps_stage1": 200, "steps_stage2": 900}}),
    "joint": ("ablation: both matrices trained jointly with one normalized gradient",
              {"train": {"algorithm": "joint"}}),
    "gd": ("ablation: plain GD, lr_stage1 = 1.8, lr_stage2 = 0.45 (stage-1 norm of the same order as normalized GD's); norms grow ~log t",
           {"train": {"optimizer": "gd", "lr_stage1": 1.8, "lr_stage2": 0.45}}),
    "adam": ("ablation: Adam with the paper's step sizes", {"train": {"optimizer": "adam"}}),
    "adamw": ("ablation: AdamW (weight decay 0.01): the norm stays bounded",
              {"train": {"optimizer": "adamw", "weight_decay": 0.01}}),
    "long-horizon": ("the paper preset with T1 = 8000 stage-2 steps: the late-rate claims become testable",
                     {"data": {"source": "random", "vocab_size": 20}, "train": {"steps_stage1": 900, "steps_stage2": 8000}}),
    **{f"{q}-{kind}": (f"reviewer question {q.upper()}: the long-horizon preset with data.out_of_assumption=[{kind}] "
                       f"(outside the theory: the validator warns, the theory's claims are null)",
                       {"data": {"source": "random", "vocab_size": 20, "out_of_assumption": [kind]},
                        "train": {"steps_stage1": 900, "steps_stage2": 8000}})
       for q, kind in (("q1", "stochastic-next"), ("q2", "non-injective"), ("q3", "confused"),
                       ("q3", "conflicting-orders"), ("q5", "sparse-optimal"))},
    "compare": ("two-stage NGD vs joint NGD, Adam and AdamW on the same data and seeds, T1 = 8000 (records carry the variant)",
                {"data": {"source": "random", "vocab_size": 20}, "train": {"steps_stage1": 900, "steps_stage2": 8000},
                 "compare": ["two_stage", "joint", "adam", "adamw"]}),
    "rotated": ("invariance check: a random orthogonal rotation of the one-hot embeddings",
                {"data": {"embedding": "rotated"}}),
}

# runs of `stagewise reproduce ntp`: (name, preset, extra overrides, quick overrides or None)
_REPRODUCE: list[tuple[str, str, dict[str, Any], dict[str, Any] | None]] = [
    ("example1", "example1", {}, {}),
    ("paper", "paper", {"n_seeds": 8}, {"n_seeds": 4}),
    ("paper-random-init", "paper-random-init", {"n_seeds": 8}, {"n_seeds": 2}),
    ("joint", "joint", {"n_seeds": 8}, None),
    ("gd", "gd", {"n_seeds": 8}, None),
    ("adam", "adam", {"n_seeds": 8}, None),
    ("adamw", "adamw", {"n_seeds": 8}, None),
    ("rotated", "rotated", {"n_seeds": 8}, None),
    ("long-horizon", "long-horizon", {"n_seeds": 8}, {"n_seeds": 4}),
    ("compare", "compare", {"n_seeds": 8}, None),
    *((name, name, {"n_seeds": 8}, None) for name in ("q1-stochastic-next", "q2-non-injective", "q3-confused",
                                                       "q3-conflicting-orders", "q5-sparse-optimal")),
]
REPRODUCE = reproduction(NAME, _REPRODUCE)

METRIC_ALIASES: dict[str, str] = {
    "loss": "train.loss", "loss_stage1": "train.loss.stage1", "loss_floor": "train.loss.floor", "loss_gap": "train.loss.gap",
    "cos_wov": "W_ov.cos_target", "cos_wkq": "W_kq.cos_target", "dist_wov": "W_ov.dist_target", "dist_wkq": "W_kq.dist_target",
    "cos_wkq_prop2": "W_kq.cos_prop2", "dist_wkq_prop2": "W_kq.dist_prop2", "norm_wov": "W_ov.fro", "norm_wkq": "W_kq.fro",
    "grad_norm_wov": "W_ov.grad_fro", "grad_norm_wkq": "W_kq.grad_fro",
    "opt_attn_min": "train.opt_attn.min", "opt_attn_mean": "train.opt_attn.mean", "train_acc": "train.acc",
    "score_optimal": "train.score.optimal", "score_non_optimal": "train.score.non_optimal",
    "score_non_comparable": "train.score.non_comparable", "gen_acc": "test.acc.covered",
}
"""The metric names runs logged before they followed the run store's grammar -> today's
(``Lab.metric_aliases``: old run folders read with these; docs/ntp.md section 3). ``stage``,
``frozen`` and ``tiny_grad`` (member states, no split) kept their names."""

EXAMPLE1_CASES = [["S", "P"], ["O", "S", "P"]]
GEN_COLUMNS = ["seed", "input", "category", "predicted", "expected", "covered", "correct", "reason", "max_attention"]


def check(config: Config) -> None:
    """Everything that can fail on user input, before any work: the data and embeddings of
    the first member (the generator's checks depend on the options, not on the seed)."""
    from ...engine import resolve_device
    from .problem import embedding, member_dataset

    resolve_device(config.device)
    ds = member_dataset(config, config.seed)
    embedding(config, ds.vocab_size, config.seed)


def _final_predictions(problem: Problem, wkq: torch.Tensor, wov: torch.Tensor) -> list[dict[str, Any]]:
    from .generalize import render
    from .model import predict, token_matrices

    key, tok = token_matrices(wkq, wov, problem.emb, unknown=True)
    pred, attn = predict(key, tok, problem.gen_idx, problem.gen_query, problem.gen_mask)  # (S, G), (S, G, Lg)
    rows = []
    for i, (seed, ds, suite) in enumerate(zip(problem.seeds, problem.datasets, problem.suites)):
        for j, case in enumerate(suite):
            predicted = int(pred[i, j])
            rows.append({
                "seed": seed, "input": render(ds, case.input), "category": case.category,
                "predicted": ds.tokens[predicted],
                "expected": ds.tokens[case.expected] if case.expected is not None else "not covered",
                "covered": case.expected is not None, "correct": case.expected == predicted if case.expected is not None else None,
                "reason": case.reason, "max_attention": float(attn[i, j, : len(case.input)].max()),
            })
    return rows


def _named_predictions(config: Config, problem: Problem, wkq: torch.Tensor, wov: torch.Tensor) -> list[dict[str, Any]]:
    """The spec's named Example-1 cases ("S P" -> V, "O S P" -> P), seed by seed."""
    import torch

    from .generalize import named_cases, render
    from .model import predict, token_matrices

    ds = problem.datasets[0]
    if config.data.source != "example1":
        return []
    rows = []
    key, tok = token_matrices(wkq, wov, problem.emb, unknown=True)
    S = problem.n_members
    for case in named_cases(ds, EXAMPLE1_CASES):
        idx = torch.tensor(case.input).expand(S, 1, -1)  # (S, 1, L)
        pred, _ = predict(key, tok, idx, idx[:, :, -1], torch.ones_like(idx, dtype=torch.bool))  # (S, 1)
        for i, seed in enumerate(problem.seeds):
            rows.append({"seed": seed, "input": render(ds, case.input), "predicted": ds.tokens[int(pred[i, 0])],
                         "expected": ds.tokens[case.expected] if case.expected is not None else "not covered"})
    return rows


def report_violations(problem: Problem, ctx: RunContext) -> list[str]:
    """Print each allowed assumption breach (data.out_of_assumption) as a WARNING, once per
    kind (count over seeds, first message), note them in the manifest; returns the kinds."""
    found: dict[str, dict[str, Any]] = {}
    for seed, ds in zip(problem.seeds, problem.datasets):
        for kind, message in ds.violations:
            entry = found.setdefault(kind, {"count": 0, "seeds": [], "first": f"seed {seed}: {message}"})
            entry["count"] += 1
            if seed not in entry["seeds"]:
                entry["seeds"].append(seed)
    for kind, entry in found.items():
        print(f"ntp: WARNING data.out_of_assumption={kind}: {entry['count']} violation(s) over "
              f"{len(entry['seeds'])} seed(s), outside the theory; first: {entry['first']}", file=sys.stderr)
    if found:
        ctx.note("out_of_assumption", found)
    return sorted(found)


def _cos(a, b) -> float:
    """cos of two matrices (1 when both are 0, 0 when one is)."""
    import numpy as np

    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0 or nb == 0:
        return 1.0 if na == nb else 0.0
    return float(np.sum(a * b) / (na * nb))


def run(config: Config, ctx: RunContext) -> RunResult:
    """Build the batched problem, train (resuming if ``ctx`` holds a checkpoint), log the
    table ``generalization`` (one row per seed and unseen sentence) and return the extras
    the summary needs."""
    import pandas as pd

    from ...engine import resolve_device
    from .compare import run_compare
    from .problem import build_problem
    from .train import train_two_stage

    problem = build_problem(config).to(resolve_device(config.device))
    violations = report_violations(problem, ctx)
    if config.compare:
        run_compare(config, problem, ctx)  # no generalization table: the variants' claims are about dynamics
        named = []
    else:
        params = train_two_stage(config, problem, ctx)
        wkq, wov = params.merged()
        rows = _final_predictions(problem, wkq, wov)
        ctx.log_table("generalization", pd.DataFrame(rows, columns=GEN_COLUMNS), csv=True)
        named = _named_predictions(config, problem, wkq, wov)
    eta0, eta = config.step_sizes(problem.emb.shape[1])
    return RunResult({
        "seeds": problem.seeds,
        "vocab_size": problem.datasets[0].vocab_size,
        "dim": int(problem.emb.shape[1]),
        "eta0": eta0, "eta": eta,
        "n_samples": [len(ds.samples) for ds in problem.datasets],
        "max_len": [ds.max_len for ds in problem.datasets],
        "qp_prop2_cos": [_cos(t.wkq_star, t.prop2_wkq) for t in problem.targets],
        "targets": [{"wov_star_norm": t.wov_star_norm, "wkq_star_norm_sq": t.wkq_star_norm_sq,
                     "prop2_wkq_norm_sq": t.prop2_wkq_norm_sq, "prop2_gap": t.prop2_gap} for t in problem.targets],
        "named_cases": named,
        "orthonormal": config.data.embedding != "gaussian",
        "violations": violations,
    })


def figures(config: Config, frame: pd.DataFrame, tables, summary, folder):
    """The lab's figures; for a comparison run, those of its main variant."""
    from .compare import variant_frame

    if config.compare:
        frame = variant_frame(frame, summary.details["figures_variant"])
    return make_figures(config, frame, tables, summary, folder)


make_figures = deferred("stagewise.labs.ntp.figures", "make_figures")  # the figures of one run's frame
summarize = deferred("stagewise.labs.ntp.compare", "summarize_run")
estimate = deferred("stagewise.labs.ntp.resources", "estimate")


LAB = Lab(name=NAME, description=DESCRIPTION, Config=Config, presets=PRESETS, reproduce=REPRODUCE, check=check, run=run,
          summarize=summarize, make_figures=figures, estimate=estimate,
          claims=CLAIMS, sources=SOURCES, key_metrics=("train.loss", "test.acc.covered", "W_kq.cos_target", "W_ov.cos_target"),
          metric_aliases=METRIC_ALIASES,
          smoke={"n_seeds": 2, "data": {"vocab_size": 6}, "train": {"steps_stage1": 12, "steps_stage2": 24, "checkpoint_every": 7}})

__all__ = ["LAB"]
