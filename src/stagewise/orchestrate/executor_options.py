"""The executor settings of a sweep: :class:`ExecutorOptions`, every number finite and bounded.

They come from the sweep file's ``executor:`` section, ``--executor``, ``--max-parallel``
and ``--set executor.KEY=VALUE``; a bad value is one line naming the field, the value and
the allowed range, before anything is created::

    sweep s.yaml: executor.mem_gb: must be a finite number in [0.001, 65536] (GB of memory per run); got inf

The caps (:data:`BOUNDS`) are far above any real machine, so they only catch typos and
values that would overflow later (``int(mem_gb * 2**30)``, Ray's resource arithmetic,
SLURM's ``--time``): one run is one node (``nodes=1`` on SLURM), and the largest single
nodes have about 500 cores, 16 GPUs and 32 TiB of memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


@dataclass(frozen=True)
class Bound:
    """The allowed values of one numeric option: ``low <= x <= high`` (``low < x`` when
    ``low_open``), finite, whole when ``integer``; ``None`` too when ``optional``."""

    low: float
    high: float
    unit: str
    integer: bool = False
    optional: bool = False
    low_open: bool = False

    def describe(self) -> str:
        what = "a whole number" if self.integer else "a finite number"
        bracket = "(" if self.low_open else "["
        return f"{what} in {bracket}{self.low:g}, {self.high:g}] ({self.unit}){' or null' if self.optional else ''}"

    def holds(self, x: float) -> bool:
        above = x > self.low if self.low_open else x >= self.low
        return math.isfinite(x) and above and x <= self.high and (not self.integer or x == int(x))


MAX_PARALLEL = 100_000      # = sweepplan.MAX_POINTS: more runs at once than a sweep can have is a typo
MAX_CPUS_PER_RUN = 1024     # a run is one node; the largest nodes have ~500 cores
MAX_GPUS_PER_RUN = 64       # a run is one node; nodes carry at most 16 GPUs
MIN_RESOURCE = 1e-4         # Ray refuses fractional resources finer than 0.0001 (a CPU or GPU share)
MIN_MEM_GB = 0.001          # 1 MB: SLURM reads --mem=0 (what a smaller value rounds to) as "all of a node's memory"
MAX_MEM_GB = 65_536         # 64 TiB per run: twice the largest single-node memory
MAX_TIME_MIN = 525_600      # a year per job; a run that long checkpoints and is requeued instead
MAX_REQUEUES = 1000         # requeues of one preempted or timed-out run

BOUNDS: dict[str, Bound] = {
    "max_parallel": Bound(1, MAX_PARALLEL, "runs at once", integer=True, optional=True),
    "cpus_per_run": Bound(MIN_RESOURCE, MAX_CPUS_PER_RUN, "CPUs per run"),
    "gpus_per_run": Bound(0, MAX_GPUS_PER_RUN, f"GPUs per run; 0 or at least {MIN_RESOURCE:g}"),
    "mem_gb": Bound(MIN_MEM_GB, MAX_MEM_GB, "GB of memory per run", optional=True),
    "time_min": Bound(1, MAX_TIME_MIN, "minutes per job", integer=True),
    "max_requeues": Bound(0, MAX_REQUEUES, "requeues per run", integer=True),
}


SHOWN_CHARS = 40  # a refused value is quoted up to this many characters (an int of 400 digits is not)


def _shown(value: Any) -> str:
    text = f"{value:g}" if isinstance(value, float) else repr(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 3] + "..."


def bounded_number(name: str, value: Any) -> Any:
    """``value`` (YAML's number or ``--set``'s text) as the number option ``name`` allows;
    ValueError "must be ...; got VALUE" otherwise (pydantic adds the field's name)."""
    bound = BOUNDS[name]
    if value is None and bound.optional:
        return None
    number = None
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        try:
            number = float(value)  # an int above 1e308 overflows: refused below like inf
        except (ValueError, OverflowError):
            pass
    if number is None or not bound.holds(number) or (name == "gpus_per_run" and 0 < number < MIN_RESOURCE):
        raise ValueError(f"must be {bound.describe()}; got {_shown(value)}")
    return int(number) if bound.integer else number


class ExecutorOptions(BaseModel):
    """Executor settings (the sweep file's ``executor:`` section, ``--set executor.KEY=...``);
    every numeric field within :data:`BOUNDS`."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["local", "ray", "slurm"] = Field("local", description="local process pool, Ray tasks, or SLURM via submitit")
    max_parallel: int | None = Field(None, description="runs at once (local default: the cores; ray: the cluster's "
                                     "free resources; slurm: the job array's concurrency cap, default 64)")
    allow_large: bool = Field(False, description="every run: run even when a size estimate exceeds memory or disk")
    sinks: list[Literal["tensorboard", "wandb"]] = Field(default_factory=list, description="every run: also log to "
                                                         "these sinks (extras; the STAGEWISE_SINKS variable too)")
    wait_held: bool = Field(True, description="a run another sweep process holds is waited for, then skipped or resumed")
    address: str | None = Field(None, description="ray: an existing cluster ('auto', 'ray://host:10001', 'host:6379'); "
                                "none starts a local one")
    cpus_per_run: float = Field(1.0, description="ray: CPUs per run; slurm: cpus_per_task (rounded up)")
    gpus_per_run: float = Field(0.0, description="ray: GPUs per run, fractional allowed (0.25: four tiny runs per "
                                "GPU); slurm: gpus_per_node (a whole number)")
    mem_gb: float | None = Field(None, description="memory per run (ray: a memory resource; slurm: --mem)")
    partition: str | None = Field(None, description="slurm: --partition")
    account: str | None = Field(None, description="slurm: --account")
    qos: str | None = Field(None, description="slurm: --qos")
    time_min: int = Field(60, description="slurm: time limit per run in minutes (on timeout the run is requeued "
                          "and resumes from its checkpoint)")
    max_requeues: int = Field(3, description="slurm: how often a preempted or timed-out run is requeued")
    cluster: Literal["auto", "slurm", "local"] = Field("auto", description="slurm: submitit's cluster (auto needs "
                                                       "sbatch on PATH); local runs the jobs as processes on this "
                                                       "machine (tests, laptops)")

    @field_validator(*BOUNDS, mode="before")
    @classmethod
    def _finite_and_bounded(cls, value: Any, info) -> Any:
        return bounded_number(info.field_name, value)

    @model_validator(mode="after")
    def _whole_gpus_on_slurm(self):
        if self.kind == "slurm" and self.gpus_per_run != int(self.gpus_per_run):
            raise ValueError(f"gpus_per_run={self.gpus_per_run:g}: SLURM allocates whole GPUs; fractional GPUs need kind=ray")
        return self
