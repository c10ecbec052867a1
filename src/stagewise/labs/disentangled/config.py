"""Config of the disentangled-feature lab (Gong, Li, Liu, Teng, arXiv 2502.20681).

The paper's body is not available to us, so most choices are a reconstruction. Every
description starts with a tag: [known] from the abstract, public code/notebook or review
discussion; [reconstructed] our choice, with the reason (see docs/disentangled.md).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from ...config import MAX_SEED, MAX_STEPS, ConfigModel, RunBase, Threads, TrainBase, available_cores

MAX_SEED_BLOCKS = 64
"""Most seed blocks of a robustness run (each block is a group per d: 64 x 5 d values is
already a long plan)."""

Finite: dict[str, Any] = {"allow_inf_nan": False}

FLOOR_STARTS = ("init", "small", "aligned", "large")
"""The declared starts of the floors solver, in their tie-breaking order (what each is:
:mod:`.floor_starts`; ``experiment.floor_starts``)."""


class DataConfig(ConfigModel):
    ADDED = ("q_noise_radius",)
    d: int = Field(30, ge=1, description="[known] dimension of each feature block, x = [x1; x2] in R^{2d}; value 30 [reconstructed] (our probes)\n"
                   "(floors solve at most 200,000 weights: d <= 316, model.weights=full d <= 223; docs section 4.0b)")
    prompt_len: int = Field(20, ge=2,
        description="[known] L: L-1 labelled context tokens plus the query (assumption: L >> sqrt(d) log d); value 20\n"
        "[reconstructed] (our probes; about sqrt(d) log d at d = 30)")
    n_train: int = Field(400, ge=1, description="[known] N training prompts; value 400 [reconstructed] (our probes)")
    n_test: int = Field(2000, ge=1, description="[reconstructed] fresh test prompts per seed")
    q_geometry: Literal["xor", "three-cluster"] = Field(
        "xor", description="[known] Q is not linearly separable. three-cluster: the notebook's (+1 in the middle; a Q-only\n"
        "query there scores ~0 with a bias-free ReLU score, so its loss is pinned near log 2); xor [reconstructed\n"
        "default]: +1 at +-zeta1, -1 at +-zeta2, learnable by the bilinear score")
    p0: float = Field(0.2, ge=0, le=1,
        description="[reconstructed] probability a token is P-only (Li-Wei-Ma mixture; without it P explains every label)\n"
        "(p0 = 1: no Q-bearing query, no K2 floor)")
    q0: float = Field(0.2, ge=0, le=1, description="[reconstructed] probability a token is Q-only (q0 = 1: no P-bearing query, no K1 floor)")
    gamma0: float = Field(1.0, gt=0, **Finite, description="[known] P margin scale (margin gamma0 ||w*||^2, ||w*|| = 1)")
    p_noise: float | None = Field(None, ge=0, **Finite, description="[reconstructed] P noise std; null = 1/sqrt(d)")
    q_noise: float = Field(0.05, ge=0, **Finite, description="[reconstructed] Q noise std (small); ignored when q_noise_radius is set")
    q_noise_radius: float | None = Field(None, gt=0, **Finite,
        description="[reconstructed] high-dimensional Q noise (the gate-noise regime, spec section 5): the Q noise radius\n"
        "R = q_noise sqrt(d) as a multiple of ||zeta||, so q_noise = q_noise_radius ||zeta|| / sqrt(d) (must stay < ||zeta||);\n"
        "null = use q_noise (a radius of 4 or more is the gate-noise regime: no floors there, docs section 4.0b)")
    zeta: float = Field(0.5, gt=0, **Finite, description="[reconstructed] ||zeta|| of the Q clusters (0.2..1 plausible; 0.5 from our probes)\n"
                        "(floors need token features of mean squared norm s^2 in [1e-6, 1e6], ||w*|| = 1; docs section 4.0b)")
    w_star: Literal["e1", "random"] = Field("e1", description="[reconstructed] P direction: first basis vector or a random unit vector per seed")
    q_centre: float = Field(0.0, ge=0, **Finite,
        description="[reconstructed] ||z|| of a common Q centre z (orthogonal to zeta1, zeta2) added to every\n"
                            "Q block: x2 = z + cluster + noise. Large ||z|| with small clusters is Li-Wei-Ma's high-curvature\n"
                            "direction (a large rate is unstable along V ~ z z^T); 0 = no centre")
    label_rule: Literal["shared", "composite"] = Field(
        "shared", description="[reconstructed] shared: P and Q both encode the label y; composite (the review's case): P's sign\n"
        "disagrees with y on a fraction p_flip of the tokens while Q always encodes y, so P alone cannot decide\n"
        "and Q is needed on every token (use with p0 = q0 = 0: both features in every token)")
    p_flip: float = Field(0.0, ge=0, le=0.5, description="[reconstructed] label_rule=composite: fraction of tokens whose P block carries -y")

    @model_validator(mode="after")
    def _mixture(self):
        if self.p0 + self.q0 > 1:
            raise ValueError(f"data.p0 + data.q0 = {self.p0 + self.q0:g}: must be <= 1")
        if self.q_geometry == "xor" and self.d < 2:
            raise ValueError("data.q_geometry=xor needs data.d >= 2 (two orthogonal cluster directions)")
        if self.q_centre > 0 and self.d < 3:
            raise ValueError(f"data.q_centre={self.q_centre:g} needs data.d >= 3 (z is orthogonal to zeta1, zeta2)")
        if self.label_rule == "shared" and self.p_flip > 0:
            raise ValueError(f"data.p_flip={self.p_flip:g} needs data.label_rule=composite")
        if self.q_noise_radius is not None and self.q_noise_radius >= math.sqrt(self.d):
            raise ValueError(f"data.q_noise_radius={self.q_noise_radius:g}: must be < sqrt(d) = {math.sqrt(self.d):.3g} "
                             "(q_noise per coordinate below ||zeta||)")
        return self

    @property
    def q_noise_std(self) -> float:
        """The Q noise std per coordinate in effect: q_noise_radius ||zeta|| / sqrt(d), or q_noise."""
        return self.q_noise if self.q_noise_radius is None else self.q_noise_radius * self.zeta / math.sqrt(self.d)


class ModelConfig(ConfigModel):
    output: Literal["split", "joint"] = Field(
        "split", description="[reconstructed] split: f = (1/L) sum_l y_l [ReLU(x_l1^T W q_1) + ReLU(x_l2^T V q_2)];\n"
        "joint: one ReLU over x_l^T blockdiag(W, V) q")
    normalizer: Literal["L", "L-1", "sum"] = Field(
        "L", description="[reconstructed] 1/L, 1/(L-1), or ReLU scores normalized to sum 1 (per branch)")
    weights: Literal["block", "full"] = Field(
        "block", description="[known] block: block-diagonal key-query blockdiag(W, V), W on P, V on Q;\n"
        "full: one full 2d x 2d matrix (outside the theory; comparison only)")
    init_scale: float = Field(0.01, ge=0, **Finite, description="[reconstructed] sigma0: i.i.d. normal init std (small)")
    dtype: Literal["float64", "float32"] = Field("float64", description="[reconstructed] float64 for reproducible small effects")


class TrainConfig(TrainBase):
    optimizer: Literal["gd", "sgd", "adam", "adamw"] = Field("gd", description="[known] full-batch GD; sgd (minibatches), adam, adamw are options")
    batch_size: int = Field(64, ge=1, description="[reconstructed] sgd minibatch size (prompts per step, drawn per member; >= N is full batch)")
    schedule: Literal["step", "constant", "cosine", "warmup"] = Field(
        "step", description="[known] step: lr_stage1 for t1 steps, then lr_stage2 (annealing); constant: lr_stage1 throughout;\n"
        "cosine: lr_stage1 -> lr_stage2 over all steps; warmup: linear 0 -> lr_stage1 over warmup_steps, then the step schedule")
    PATH = "train"
    RENAMED = {"eta1": "lr_stage1", "eta2": "lr_stage2"}
    ADDED = ("objective", "noise_stage2")
    lr_stage1: float = Field(1.0, gt=0, **Finite, description="[known] large learning rate eta1 of the elementary stage (was train.eta1);\n"
                             "value 1.0 [reconstructed] (our probes)")
    lr_stage2: float = Field(0.1, gt=0, **Finite, description="[known] annealed learning rate eta2 of the specialized stage (was train.eta2);\n"
                             "value 0.1 [reconstructed] (our probes)")
    t1: int = Field(300, ge=0, le=MAX_STEPS, description="[known] steps of the elementary stage; 300 [reconstructed]: P is learned by then\n"
                    "in every seed we ran, and Q has had little time (longer t1 lets noisy seeds pick Q up early)")
    steps: int = Field(6000, ge=1, le=MAX_STEPS, description="[reconstructed] total steps (Q settles within ~3000 annealed steps)")
    warmup_steps: int = Field(100, ge=0, le=MAX_STEPS, description="[run] warmup schedule: steps of linear warmup")
    objective: Literal["total", "branches"] = Field(
        "total", description="[reconstructed] total: the logistic loss of f = f1 + f2 (+ L2); branches: the sum of the branch losses\n"
        "K1(W) + K2(V) (+ L2), the review's notation (needs model.output=split, model.weights=block)")
    noise: float = Field(0.05, ge=0, **Finite,
        description="[reconstructed] Li-Wei-Ma update noise: N(0, (noise * lr)^2) added to every entry per step")
    noise_mode: Literal["lr", "constant", "stage1"] = Field(
        "lr", description="[reconstructed] update-noise std per entry: lr = noise * lr_t (Li-Wei-Ma's; annealing lowers rate and noise\n"
        "together); constant = noise * lr_stage1 at every step (annealing lowers the rate only); stage1 = noise * lr_t up to t1,\n"
        "0 after (the noise stops at t1)")
    noise_stage2: float = Field(1.0, ge=0, le=1, **Finite,
        description="[ours] scale of the update-noise std after t1, in every noise_mode (1: as noise_mode says; 0.5: half;\n"
        "0: none): the stage-2 noise as a lever of its own (issue 28's phase map); the no-anneal ablation keeps 1")
    l2: float = Field(0.01, ge=0, **Finite,
        description="[known] lambda of the L2 term (lambda/2)(||W||^2 + ||V||^2); value 0.01 [reconstructed] (our probes)\n"
        "(floors need lambda / s^4 in [1e-10, 1e3], s^2 the larger token block's mean squared norm, 2 by default; 0: no floor)")
    log_every: int = Field(20, ge=1, le=MAX_STEPS, description="[run] log train and test metrics every k steps (and at t1 and the end)")
    spectrum_every: int = Field(200, ge=1, le=MAX_STEPS, description="[run] log eigenvalues / singular values every k steps (and at t1 and the end)")
    checkpoint_every: int = Field(1000, ge=1, le=MAX_STEPS, description="[run] safetensors checkpoint every k steps (for --resume)")
    threads: Threads = Field("auto", description="[run] CPU threads; auto = the available cores when a step streams at least\n"
                                           "2e5 context features (members x N x (L-1) x d), else 1; on a busy machine set 1")

    @property
    def eta1(self) -> float:
        """The paper's eta1: :attr:`lr_stage1`."""
        return self.lr_stage1

    @property
    def eta2(self) -> float:
        """The paper's eta2: :attr:`lr_stage2`."""
        return self.lr_stage2

    @model_validator(mode="after")
    def _check(self):
        if self.t1 > self.steps:
            raise ValueError(f"train.t1={self.t1}: must be <= train.steps ({self.steps})")
        return self


class ThresholdConfig(ConfigModel):
    """Fixed before the runs (docs/disentangled.md section 4 gives the reasons)."""

    ADDED = ("drop_learned", "drop_flat", "anneal_gain")

    p_learned: float = Field(0.95, gt=0, le=1, description="[reconstructed] P-only test accuracy that counts as 'P learned' (with p_loss)")
    q_learned: float = Field(0.85, gt=0, le=1, description="[reconstructed] Q-only test accuracy of the accuracy-level claim q_accuracy_stage2")
    p_loss: float = Field(0.5, gt=0, le=1, description="[reconstructed] P learned: K1 on P-bearing queries <= p_loss * log 2")
    q_flat: float = Field(0.05, gt=0, le=1, description="[reconstructed] Q not learned: K2 on Q-bearing queries within q_flat * log 2 of log 2")
    q_loss: float = Field(0.5, gt=0, le=1,
        description="[reconstructed] Q learned: K2 on Q-bearing queries <= q_loss * log 2 (the issue's 'at most half')")
    control_quantile: float = Field(0.95, gt=0, le=1, description="[reconstructed] Q not learned also needs Q-only accuracy <= this quantile of the\n"
                                    "shuffled-label control's (pooled over its seeds, same step)")
    drop_learned: float = Field(0.5, gt=0, le=1,
        description="[reconstructed] relative form of 'learned': at least this fraction of the attainable drop log 2 - K* realised\n"
        "(K* the noise-free L2 floor of the branch loss; the relative twin of 'at most half of log 2')")
    drop_flat: float = Field(0.2, gt=0, le=1,
        description="[reconstructed] relative form of 'Q not learned at t1': at most this fraction of the attainable drop realised")
    anneal_gain: float = Field(0.1, gt=0, le=1,
        description="[reconstructed] causal accuracy claim: Q-part accuracy at the end with annealing minus the same member at a\n"
        "constant large rate (same data and noise draws), per seed, at least this (4 standard errors of the difference of two\n"
        "accuracies on ~800 Q-bearing test queries)")
    seed_fraction: float = Field(1.0, gt=0, le=1,
        description="[reconstructed] a per-seed claim holds when at least this fraction of seeds pass (1 = every seed)")


class ExperimentConfig(ConfigModel):
    kind: Literal["two-stage", "ablations", "spectral", "d-scaling", "grid", "robustness"] = Field(
        "two-stage", description="[run] two-stage: the staged run; ablations: the same data and seeds under each ablation;\n"
        "grid: every combination of experiment.grid's values, batched (the phase diagrams of the loss-level stages);\n"
        "spectral: spectra + truncation intervention; d-scaling: K^1, K^2 at the stage ends as d grows;\n"
        "robustness: the per-seed stage claims for every d in experiment.dims x seed block in experiment.seed_blocks")
    ablations: list[Literal["no-anneal", "small-lr", "no-noise", "no-l2", "joint", "mixture-off", "full",
                            "anneal-fixed-noise", "noise-off-t1"]] = Field(
        ["no-anneal", "small-lr", "no-noise", "no-l2", "joint", "mixture-off", "full", "anneal-fixed-noise", "noise-off-t1"],
        description="[run] ablations run beside the baseline (kind=ablations); anneal-fixed-noise: lr_stage1 -> lr_stage2\n"
        "with the noise std held at noise * lr_stage1; noise-off-t1: constant lr_stage1 with the noise stopped at t1\n"
        "(which of the two matters?)")
    PATH = "experiment"
    ADDED = ("floors", "floor_starts")
    RENAMED_KEYS = {"grid": {"eta1": "lr_stage1", "eta2": "lr_stage2"}}
    grid: dict[Literal["lr_stage1", "lr_stage2", "t1", "noise", "l2", "zeta", "q_centre", "p_flip", "batch_size"], list[float]] = Field(
        {"lr_stage1": [0.3, 1.0], "noise": [0.0, 0.02, 0.05, 0.1]},
        description="[run] kind=grid: values per hyper-parameter or data field (lr_stage1, lr_stage2, t1, noise, l2, zeta,\n"
        "q_centre, "
        "p_flip, batch_size with optimizer=sgd); the product runs as one batched computation (shapes are kept),\n"
        "each combination on the same seeds")
    floors: bool = Field(True, description="[run] compute the attainable floors K1*, K2* (noise-free L2 optimum of each member's\n"
                         "objective on its training prompts, and the two-scalar fixed point) after training; table floors\n"
                         "(from experiment.floor_starts: about 4x the 3 s of one start for the default preset's 16 members on a\n"
                         "quiet machine; false: the relative claims are not testable)")
    floor_starts: list[str] = Field(
        list(FLOOR_STARTS), description="[run] the starts the floors solver runs from (each member's floor is the lowest objective\n"
        "found over them; not testable only below every start's floor): init (the member's initial weights), small (a fresh\n"
        "draw at model.init_scale), aligned (W along w* w*^T, V along the Q signal directions), large (a random draw at\n"
        "the aligned start's norm); docs section 4.0b")
    control: bool = Field(True, description="[run] train a shuffled-label control beside every member (targets permuted across the\n"
                          "training prompts): the null that q_not_learned_stage1 is tested against")
    seed_blocks: list[Annotated[int, Field(ge=0, lt=MAX_SEED)]] = Field(
        [0, 1000, 2000], min_length=1, max_length=MAX_SEED_BLOCKS,
        description="[run] kind=robustness: first seed of each block of n_seeds seeds (disjoint blocks, at most 64)")
    truncation_ks: list[int] | None = Field(None, description="[run] k values for the top-k / bottom-k truncation; null = 0..2d in 8 steps")
    dims: list[int] = Field([8, 16, 32, 64, 128], description="[run] kind=d-scaling: the d values")
    scale_rules: bool = Field(True, description="[reconstructed] kind=d-scaling: 1/lambda ~ sqrt(log d) and L ~ sqrt(d) log d (the\n"
                              "assumptions' orders, anchored at the base config's d); lr_stage1, lr_stage2, t1 stay fixed (no rule known);\n"
                              "false keeps everything fixed")

    @field_validator("grid")
    @classmethod
    def _grid(cls, value):
        for key, values in value.items():
            if not values or any(not math.isfinite(v) or v < 0 for v in values):
                raise ValueError(f"experiment.grid.{key}={values}: need a non-empty list of finite values >= 0")
            if key in ("lr_stage1", "lr_stage2") and any(v <= 0 for v in values):
                raise ValueError(f"experiment.grid.{key}={values}: step sizes must be > 0")
            if key == "t1" and any(v != int(v) or v > MAX_STEPS for v in values):
                raise ValueError(f"experiment.grid.t1={values}: step counts must be integers (0..{MAX_STEPS})")
            if key == "batch_size" and any(v != int(v) or v < 1 for v in values):
                raise ValueError(f"experiment.grid.batch_size={values}: batch sizes must be integers >= 1")
            if key == "p_flip" and any(v > 0.5 for v in values):
                raise ValueError(f"experiment.grid.p_flip={values}: fractions must be in [0, 0.5]")
            if key == "zeta" and any(v <= 0 for v in values):
                raise ValueError(f"experiment.grid.zeta={values}: cluster norms must be > 0")
        return value

    @field_validator("floor_starts")
    @classmethod
    def _floor_starts(cls, value):
        allowed = ", ".join(FLOOR_STARTS)
        unknown = [s for s in value if s not in FLOOR_STARTS]
        if unknown:
            raise ValueError(f"unknown start {', '.join(map(repr, unknown))}; allowed: {allowed}")
        if not value or len(set(value)) != len(value):
            raise ValueError(f"need at least one start, each named once; allowed: {allowed}")
        return [s for s in FLOOR_STARTS if s in value]  # the declared order (ties go to the earlier start)

    @field_validator("dims")
    @classmethod
    def _dims(cls, value):
        if not value or any(d < 2 for d in value):
            raise ValueError("need a non-empty list of d >= 2")  # printed after experiment.dims=[...]
        return sorted(set(value))


class Config(RunBase):
    n_seeds: int = Field(8, ge=1, le=1024, description="[run] seeds per variant, batched as one ensemble (--seeds K), each with its\n"
                         "shuffled-label control; the stage claims are tested per seed")
    data: DataConfig = Field(default_factory=DataConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    thresholds: ThresholdConfig = Field(default_factory=ThresholdConfig)
    experiment: ExperimentConfig = Field(default_factory=ExperimentConfig)

    @model_validator(mode="after")
    def _cross_checks(self):
        """Checks across sections: truncation ks against 2d, grid axes against the data and
        optimizer they need, grid t1 values against train.steps."""
        width = 2 * self.data.d
        ks = self.experiment.truncation_ks
        if ks is not None and any(not 0 <= k <= width for k in ks):
            raise ValueError(f"experiment.truncation_ks={ks}: each k must be in 0..2d = 0..{width} (data.d={self.data.d})")
        grid = self.experiment.grid
        if any(v > 0 for v in grid.get("p_flip", [])) and self.data.label_rule != "composite":
            raise ValueError(f"experiment.grid.p_flip={grid['p_flip']} needs data.label_rule=composite")
        if any(v > 0 for v in grid.get("q_centre", [])) and self.data.d < 3:
            raise ValueError(f"experiment.grid.q_centre={grid['q_centre']} needs data.d >= 3")
        if "batch_size" in grid and self.train.optimizer != "sgd":
            raise ValueError(f"experiment.grid.batch_size needs train.optimizer=sgd (got {self.train.optimizer})")
        if self.train.objective == "branches" and (self.model.output != "split" or self.model.weights != "block"):
            raise ValueError(f"train.objective=branches needs model.output=split and model.weights=block "
                             f"(got {self.model.output}, {self.model.weights}): K1, K2 are the losses of the split output's parts")
        blocks = sorted(self.experiment.seed_blocks)
        overlap = next(((a, b) for a, b in zip(blocks, blocks[1:]) if b - a < self.n_seeds), None)
        if overlap is not None:
            raise ValueError(f"experiment.seed_blocks={self.experiment.seed_blocks}: blocks of n_seeds={self.n_seeds} seeds "
                             f"starting at {overlap[0]} and {overlap[1]} overlap; give first seeds at least n_seeds apart")
        t1s = self.experiment.grid.get("t1", [])
        if any(t > self.train.steps for t in t1s):
            raise ValueError(f"experiment.grid.t1={[int(t) for t in t1s]}: each must be <= train.steps ({self.train.steps})")
        return self

    def thread_count(self, members: int) -> int:
        """Resolved ``train.threads`` for an ensemble of ``members``: small steps are
        dispatch-bound (one thread is fastest), large ones bandwidth-bound (use the cores)."""
        if self.train.threads != "auto":
            return int(self.train.threads)
        work = members * self.data.n_train * (self.data.prompt_len - 1) * self.data.d
        return available_cores() if work >= 200_000 else 1
