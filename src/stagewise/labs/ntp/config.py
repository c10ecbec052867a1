"""Config of the NTP lab. Tags in descriptions: [paper] stated by Huang, Liang, Yang
(NeurIPS 2024), [derived] follows from it, [default] our choice."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from ...config import MAX_STEPS, ConfigModel, IntervalOrAuto, RunBase, Threads, TrainBase, available_cores


LOG_POINTS = 200  # train.log_every=auto: about this many logged steps per run (the figures' curves)
SUITE_POINTS = 30  # generalize.every=auto: about this many evaluations of the generalization suite
STAGE1_LR_SCALE = 0.2  # train.lr_stage1 = null: 0.2 / sqrt(d) [paper experiment]
STAGE2_LR_SCALE = 0.05  # train.lr_stage2 = null: 0.05 / sqrt(d) [paper experiment]
EXAMPLE1_VOCAB = 4  # data.source=example1: the tokens S, V, O, P (tests check it against data.example1())


class DataConfig(ConfigModel):
    source: Literal["random", "example1", "file"] = Field(
        "random", description="random: the realizable generator [default]; example1: the paper's Example 1 [paper];\n"
        "file: a JSON dataset given by data.file (set automatically when data.file is set)")
    file: Path | None = Field(None, description='JSON dataset {"tokens": [...], "samples": [{"input": [...], "next": "..."}]}')
    vocab_size: int = Field(20, ge=3, description="|V| of the random generator [paper experiment: 20]")
    dim: int | None = Field(None, ge=1, description="embedding dimension d; null = |V| (one-hot) [paper]; d > |V| is an option")
    embedding: Literal["onehot", "rotated", "gaussian"] = Field(
        "onehot", description="onehot [paper]; rotated: a random orthogonal rotation (results must not change);\n"
        "gaussian: random unit-norm, non-orthonormal columns (outside the theory; max-margin via full QPs)")
    optimal_per_query: tuple[int, int] = Field((1, 3), description="generator: range of optimal tokens per query [default]")
    non_optimal_per_query: tuple[int, int] = Field((2, 6), description="generator: range of non-optimal tokens per query, query included [default]")
    sentences_per_query: int = Field(4, ge=1, description="generator: sentences drawn per query [default]")
    complete: bool = Field(False, description="generator: cover every optimal x non-optimal pair")
    prefix_closed: bool = Field(False, description="generator: also keep all prefixes (sentences breaking the assumptions are rejected)")
    weights: Literal["empirical", "uniform"] = Field("empirical", description="sample weights pi: empirical frequency [paper, Eq. 1] or uniform")
    max_len: int = Field(8, ge=2, description="longest sentence (L_max)")
    vary_with_seed: bool = Field(True, description="draw a new dataset / rotation for every seed (false: all seeds share seed's data)")
    out_of_assumption: list[Literal["stochastic-next", "non-injective", "confused", "conflicting-orders", "sparse-optimal"]] = Field(
        default_factory=list, description="reviewers' questions: breach these assumptions on purpose (outside the theory).\n"
        "random data: the generator adds the breach (see breaches.py); file data: the violation is allowed.\n"
        "The validator then warns instead of failing, and the theory's claims become null")

    @model_validator(mode="before")
    @classmethod
    def _file_implies_source(cls, data):
        if isinstance(data, dict) and data.get("file") is not None and "source" not in data:
            data = {**data, "source": "file"}
        return data

    @field_validator("file")
    @classmethod
    def _absolute(cls, value: Path | None) -> Path | None:
        """Stored absolute, so that --resume works from any directory."""
        return value.expanduser().resolve() if value is not None else None

    @model_validator(mode="after")
    def _check(self):
        for name in ("optimal_per_query", "non_optimal_per_query"):
            lo, hi = getattr(self, name)
            if not 1 <= lo <= hi:
                raise ValueError(f"data.{name}={[lo, hi]}: need 1 <= low <= high")
        if self.source == "file" and self.file is None:
            raise ValueError("data.source=file needs data.file=PATH.json")
        if self.source != "file" and self.file is not None:
            raise ValueError(f"data.file is set but data.source={self.source}; use data.source=file")
        if len(set(self.out_of_assumption)) != len(self.out_of_assumption):
            raise ValueError(f"data.out_of_assumption={self.out_of_assumption}: each kind at most once")
        if self.out_of_assumption and self.source == "example1":
            raise ValueError("data.out_of_assumption needs data.source=random or file (example1 is fixed)")
        return self


class ModelConfig(ConfigModel):
    init: Literal["zero", "random"] = Field("zero", description="zero init [paper]; random: i.i.d. normal entries of std init_scale")
    init_scale: float = Field(0.05, ge=0, allow_inf_nan=False, description="std of random init (the paper's Figure 2 looks like ~0.05)")
    factored: bool = Field(False, description="train factors W_kq = W_k^T W_q and W_ov = W_o W_v instead of the merged matrices")
    dtype: Literal["float64", "float32"] = Field("float64", description="float64 by default: normalized GD amplifies round-off")


class TrainConfig(TrainBase):
    algorithm: Literal["two_stage", "joint"] = Field(
        "two_stage", description="two_stage: W_ov for T steps, then W_kq for T1 steps [paper, Algorithm 1];\n"
        "joint: both matrices for T+T1 steps, one gradient normalized jointly, step eta0 (ablation)")
    optimizer: Literal["normalized_gd", "gd", "adam", "adamw"] = Field(
        "normalized_gd", description="normalized_gd [paper]: W <- W - eta g/||g||_F; gd, adam, adamw are ablations")
    PATH = "train"
    RENAMED = {"eta0": "lr_stage1", "eta": "lr_stage2"}
    lr_stage1: float | None = Field(None, gt=0, allow_inf_nan=False, description="stage-1 step size eta0 (was train.eta0); null = 0.2/sqrt(d)\n"
                                    "[paper experiment], written into the run's config.yaml as the value used")
    lr_stage2: float | None = Field(None, gt=0, allow_inf_nan=False, description="stage-2 step size eta (was train.eta); null = 0.05/sqrt(d)\n"
                                    "[paper experiment], written into the run's config.yaml as the value used")
    steps_stage1: int = Field(900, ge=0, le=MAX_STEPS, description="T [paper experiment: 900]")
    steps_stage2: int = Field(900, ge=0, le=MAX_STEPS, description="T1 [paper experiment: 900]")
    loss_reduction: Literal["mean", "sum"] = Field("mean", description="mean (pi-weighted) or sum; normalized GD iterates are identical")
    grad_tol: float = Field(1e-14, ge=0, description="tiny-gradient guard: below this ||g||_F round-off steers normalized GD")
    on_tiny_grad: Literal["stop", "flag"] = Field("stop", description="stop: that seed stops updating (flagged); flag: keep going, flagged")
    log_every: IntervalOrAuto = Field(  # type: ignore[assignment]  # ntp adds "auto" (Config.log_interval resolves it); nothing reads TrainBase.log_every as an int
        "auto", description="log metrics every k steps; auto: about 200 points over the run (1800 steps: every 9).\n"
        "Stage ends and the last step are always logged; with auto also the first 10 steps of each stage")
    threads: Threads = Field(
        "auto", description="CPU threads for torch while training; auto = min(available cores, n_seeds // 16), at least 1.\n"
        "Small ensembles run fastest on one thread; large ones gain from more (64 seeds: 1.8x on 2 cores); on a busy machine set 1")

    @property
    def eta0(self) -> float | None:
        """Old name of :attr:`lr_stage1`."""
        return self.lr_stage1

    @property
    def eta(self) -> float | None:
        """Old name of :attr:`lr_stage2`."""
        return self.lr_stage2

    @model_validator(mode="after")
    def _check(self):
        if self.steps_stage1 + self.steps_stage2 < 1:
            raise ValueError("train.steps_stage1 + train.steps_stage2 must be >= 1")
        return self


class GeneralizeConfig(ConfigModel):
    max_cases: int = Field(200, ge=1, description="at most this many unseen sentences per category and seed")
    every: IntervalOrAuto = Field("auto", description="evaluate the suite's accuracy (test.acc.covered) every k steps (and at stage ends);\n"
                                  "auto: about 30 times over the run. Logged at the logged steps that fall on it")


class Config(RunBase):
    data: DataConfig = Field(default_factory=DataConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    generalize: GeneralizeConfig = Field(default_factory=GeneralizeConfig)
    compare: list[Literal["two_stage", "joint", "adam", "adamw"]] = Field(
        default_factory=list, description="comparison experiment: train each variant on the same data and seeds in one run\n"
        "(two_stage: normalized GD [paper]; joint: both matrices, one normalized gradient; adam; adamw with\n"
        "train.weight_decay); records carry the variant. Overrides train.algorithm / train.optimizer. Empty: one training")

    @model_validator(mode="after")
    def _check(self):
        if len(set(self.compare)) != len(self.compare):
            raise ValueError(f"compare={self.compare}: each variant at most once")
        if self.model.factored and self.model.init == "zero":
            raise ValueError("model.factored=true needs model.init=random (zero factors get zero gradients forever)")
        if self.model.factored and self.model.init_scale == 0:
            raise ValueError("model.factored=true needs model.init_scale > 0")
        return self

    def thread_count(self) -> int:
        """Resolved ``train.threads``."""
        if self.train.threads != "auto":
            return int(self.train.threads)
        return max(1, min(available_cores(), self.n_seeds // 16))

    def log_interval(self) -> int:
        """Resolved ``train.log_every``: ``auto`` logs about LOG_POINTS points over the run."""
        if self.train.log_every != "auto":
            return int(self.train.log_every)
        return max(1, (self.train.steps_stage1 + self.train.steps_stage2) // LOG_POINTS)

    def suite_interval(self) -> int:
        """Resolved ``generalize.every``: ``auto`` evaluates the suite about SUITE_POINTS times."""
        if self.generalize.every != "auto":
            return int(self.generalize.every)
        return max(1, (self.train.steps_stage1 + self.train.steps_stage2) // SUITE_POINTS)

    def step_sizes(self, dim: int) -> tuple[float, float]:
        """(eta0, eta) = (lr_stage1, lr_stage2) with the paper's defaults 0.2/sqrt(d), 0.05/sqrt(d) filled in:
        the two rates of the training's step schedule (:func:`stagewise.engine.schedules.two_stage`)."""
        eta0 = self.train.lr_stage1 if self.train.lr_stage1 is not None else STAGE1_LR_SCALE / math.sqrt(dim)
        eta = self.train.lr_stage2 if self.train.lr_stage2 is not None else STAGE2_LR_SCALE / math.sqrt(dim)
        return eta0, eta

    def vocab_size(self) -> int | None:
        """|V| of the data this config makes, without building it (None: a data file that
        cannot be read; the lab's check reports it)."""
        if self.data.source == "random":
            return self.data.vocab_size
        if self.data.source == "example1":
            return EXAMPLE1_VOCAB
        try:
            tokens = json.loads(Path(self.data.file).read_text(encoding="utf-8"))["tokens"]  # type: ignore[arg-type]
            return len(tokens) if isinstance(tokens, list) else None
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def derived(self) -> dict[str, Any]:
        """data.dim = |V| (one-hot), train.lr_stage1 = 0.2/sqrt(d), train.lr_stage2 = 0.05/sqrt(d)."""
        vocab = self.vocab_size()
        if vocab is None:
            return {}
        dim = self.data.dim or vocab
        eta0, eta = STAGE1_LR_SCALE / math.sqrt(dim), STAGE2_LR_SCALE / math.sqrt(dim)
        return {"data.dim": vocab, "train.lr_stage1": eta0, "train.lr_stage2": eta}
