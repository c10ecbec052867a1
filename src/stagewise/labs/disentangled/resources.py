"""Up-front size estimate of a disentangled run (memory and metric disk) from the config
alone, before any prompt is drawn.

Sizes: M members of the largest group (seeds x batched variants), U datasets (seeds),
N train / T test prompts, C = L - 1 context tokens, d the block dimension. The prompt
features are stored once per dataset, in float64 while sampling and in the run dtype
after: about ``FEATURE_COPIES`` arrays of (U, N + T, L, 2d); a step keeps about
``STEP_COPIES`` (M, N, C) score-sized arrays and the test evaluation (M, T, C) ones.
"""

from __future__ import annotations

import math

from ..contract import Resources
from .config import Config

FEATURE_COPIES = 6  # x1, x2, noise draws in float64 while sampling, plus the stored features
STEP_COPIES = 10  # scores, ReLU, masks, gradient coefficients of both branches
METRICS_PER_LOG = 70  # accuracies, losses, norms per logged step (spectra add 3 x 2d)
BYTES_PER_VALUE = 11  # base64 float64 in the JSONL stream plus framing
PROCESS_BASE = 400 << 20


def estimate(config: Config) -> Resources:
    from .experiments import grid_variants

    dc, tc, ex = config.data, config.train, config.experiment
    dims = ex.dims if ex.kind in ("d-scaling", "robustness") else [dc.d]
    d = max(dims)
    L = dc.prompt_len
    if ex.kind == "d-scaling" and ex.scale_rules and dc.d >= 2:  # the scaling rule of experiments.scaled_config
        L = max(2, round(dc.prompt_len * (math.sqrt(d) * math.log(d)) / (math.sqrt(dc.d) * math.log(dc.d))))
    variants = {"grid": len(grid_variants(config)), "ablations": 1 + len(ex.ablations)}.get(ex.kind, 1)
    controls = 2 if ex.control and ex.kind != "d-scaling" else 1  # each member's shuffled-label twin (own data)
    U, M = config.n_seeds * controls, config.n_seeds * variants * controls
    if ex.kind == "ablations" and ex.control:
        M = config.n_seeds * (variants + 1)  # only the baseline has a control
    width = 8 if config.model.dtype == "float64" else 4
    features = U * (dc.n_train + dc.n_test) * L * 2 * d * 8 * FEATURE_COPIES
    steps = M * max(dc.n_train, dc.n_test) * (L - 1) * 8 * STEP_COPIES
    weights = M * (2 * d) ** 2 * width * 8
    memory = PROCESS_BASE + features + steps + weights
    logged = (tc.steps // tc.log_every + 3) * len(dims) * (len(ex.seed_blocks) if ex.kind == "robustness" else 1)
    disk = logged * M * (METRICS_PER_LOG + 6 * d) * BYTES_PER_VALUE
    return Resources(int(memory), int(disk), f"M={M} members, d={d}, L={L}, N={dc.n_train}, test {dc.n_test}, "
                                             f"{logged} logged steps")
