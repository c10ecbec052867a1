"""Config of the linear-modes lab: a two-layer linear network y = W2 W1 x learning a target
map's singular modes one after another (Saxe, McClelland & Ganguli, ICLR 2014).

Three sections: ``data`` (the target map), ``model`` (the network and its initialisation),
``train`` (gradient descent). ``controls`` names the control groups trained after the main
one in the same run, each the run's config with one change (:func:`control_overrides`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from stagewise.config import MAX_STEPS, ConfigModel, ProbeSource, RunBase, TrainBase, deep_merge, validate

NAME = "linear_modes"
"""The lab's name (its registry key and the ``lab`` of its summaries)."""
ControlName = Literal["equal-sv", "large-init"]
LARGE_INIT = 0.4
"""The large-init control's init scale as a fraction of the smallest singular value (below
1/2, so the closed form's half-time stays positive)."""


class DataConfig(ConfigModel):
    PATH = "data"
    singular_values: list[float] = Field([3.0, 2.0, 1.0], min_length=1, max_length=64,
                                         description="s_1 >= s_2 >= ... > 0: the target map's singular values, one mode each")
    d_in: int = Field(6, ge=1, le=1024, description="input dimension (inputs whitened: E[x x^T] = I)")
    d_out: int = Field(6, ge=1, le=1024, description="output dimension")

    @field_validator("singular_values")
    @classmethod
    def _decreasing(cls, values: list[float]) -> list[float]:
        if not all(0 < v < 1e6 for v in values) or any(b > a for a, b in zip(values, values[1:])):
            raise ValueError(f"data.singular_values={values}: must be positive, below 1e6 and non-increasing")
        return values


class ModelConfig(ConfigModel):
    PATH = "model"
    hidden: int = Field(16, ge=1, le=4096, description="h: hidden width (W1 is h x d_in, W2 is d_out x h)")
    init: Literal["decoupled", "random"] = Field(
        "decoupled", description="decoupled: Saxe's balanced init aligned with the target's modes (every mode strength\n"
        "starts at init_scale exactly); random: i.i.d. Gaussian entries of variance init_scale / sqrt(h)")
    init_scale: float = Field(1e-3, gt=0, allow_inf_nan=False,
                              description="a0: each mode's initial strength (decoupled) or its standard deviation (random)")


class TrainConfig(TrainBase):
    PATH = "train"
    steps: int = Field(400, ge=1, le=MAX_STEPS, description="gradient steps on the population loss")
    lr: float = Field(0.02, gt=0, le=10, allow_inf_nan=False, description="learning rate 1/tau (the closed form is gradient flow)")
    schedule: Literal["constant", "warmup"] = Field(
        "constant", description="constant: lr at every step; warmup: lr t / warmup_steps up to warmup_steps, lr after")
    warmup_steps: int = Field(0, ge=0, le=MAX_STEPS, description="length of the linear warmup (schedule=warmup)")


class Config(RunBase):
    ADDED = ("source",)
    n_seeds: int = Field(4, ge=1, le=4096, description="ensemble size: seeds draw the singular vectors and the init")
    controls: list[ControlName] = Field(["equal-sv", "large-init"],
                                        description="control groups trained after the main one: equal-sv (every singular value\n"
                                        "their mean), large-init (random init at 0.4 of the smallest singular value)")
    data: DataConfig = Field(default_factory=DataConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    source: ProbeSource = Field(default_factory=ProbeSource, description="where the model comes from: the lab trains it,\n"
                                "or a researcher's own training is probed (stagewise.Tracker, probe.py)")

    @model_validator(mode="after")
    def _consistent(self) -> "Config":
        s, r = self.data.singular_values, len(self.data.singular_values)
        if r > min(self.data.d_in, self.data.d_out):
            raise ValueError(f"data.singular_values: {r} modes need d_in, d_out >= {r} (got {self.data.d_in}, {self.data.d_out})")
        if self.model.init == "decoupled" and self.model.hidden < r:
            raise ValueError(f"model.hidden={self.model.hidden}: the decoupled init needs hidden >= {r} (one unit per mode)")
        if self.model.init_scale >= s[-1] / 2:
            raise ValueError(f"model.init_scale={self.model.init_scale:g}: must be below half the smallest singular value ({s[-1] / 2:g})")
        if self.train.warmup_steps > self.train.steps:
            raise ValueError(f"train.warmup_steps={self.train.warmup_steps}: must be <= train.steps ({self.train.steps})")
        if len(set(self.controls)) != len(self.controls):
            raise ValueError(f"controls={self.controls}: each control at most once")
        return self


def control_overrides(config: Config, name: str) -> dict[str, Any]:
    """The one change of control ``name`` to ``config`` (and no controls of its own)."""
    s = config.data.singular_values
    if name == "equal-sv":
        return {"data": {"singular_values": [sum(s) / len(s)] * len(s)}, "controls": []}
    return {"model": {"init": "random", "init_scale": LARGE_INIT * s[-1]}, "controls": []}


def control_config(config: Config, name: str) -> Config:
    """The config of control group ``name``: ``config`` with its one change."""
    return validate(Config, deep_merge(config.model_dump(mode="json"), control_overrides(config, name)))
