"""The lab contract as code: :class:`Lab`, :class:`RunContext`, :class:`RunResult`,
:class:`Reproduction` (plain-data :class:`~stagewise.labs.spec.RunSpec` values) and the
shared :class:`~stagewise.report.claims.Summary` / ``Claim``. Imports no torch or pandas at
runtime (annotations only), so listing labs and their claims stays cheap.

A lab is one frozen :class:`Lab` value in its ``lab.py`` (``LAB = Lab(...)``) and one line
in :data:`stagewise.labs.REGISTRY`. Everything above the labs (execute, resume, reproduce,
sweeps, the CLI) works on this contract only.

Life of a run::

    config = lab.Config(...)                   # validated (pydantic v2)
    lab.check(config)                          # every input check, before any work
    lab.estimate(config) -> Resources          # memory/disk, refused up front if too big
    result = lab.run(config, ctx)              # streams metrics + tables through ctx
    summary = lab.summary(config, metrics, tables, result)     # lab.summarize + lab.sources
    lab.make_figures(config, metrics, tables, summary, folder)  # PNG + PDF

Beside these, a lab declares data the layers above use generically: its claims and the
papers they cite (``claims``, ``sources``), extra commands (``commands``: ``stagewise NAME
LAB ...``), tables ``stagewise show`` prints from its summary (``summary_tables``) and the
old names of renamed metrics (``metric_aliases``).
"""

from __future__ import annotations

import difflib
import importlib
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence

from pydantic import BaseModel

from ..config import deep_merge
from ..errors import UserError
from ..report.claims import Claim, ClaimSpec, Summary
from .spec import RunSpec

if TYPE_CHECKING:  # annotations only: the contract imports no torch or pandas at runtime
    import pandas as pd
    import torch

    from ..runs.context import Checkpoint

__all__ = ["Checkpoint", "Claim", "ClaimSpec", "Lab", "LabCommand", "Probing", "Reproduction", "Resources", "RunContext",
           "RunResult", "Series", "Summary", "SummaryTable", "Tables", "reproduction"]


def __getattr__(name: str) -> Any:
    """``Checkpoint`` (re-exported from :mod:`stagewise.runs.context`, which needs torch) on first use."""
    if name == "Checkpoint":
        from ..runs.context import Checkpoint

        return Checkpoint
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class RunContext(Protocol):
    """What a lab sees of the run store while it runs. Implemented by the run directory
    (:class:`stagewise.runs.RunDirContext`) and in memory (:class:`stagewise.runs.MemoryContext`).

    Attributes:
        seeds: the ensemble's seeds, in the order of the ensemble axis (S,).
    """

    seeds: list[int]

    def log(self, step: int, values: Mapping[str, torch.Tensor], *, variant: str = "") -> None:
        """Per-seed values of one step, each (S,). ``variant`` names the group/variant of
        these values (metric names become ``{variant}/{name}``)."""

    def log_table(self, name: str, frame: pd.DataFrame, *, part: str | int = "all", csv: bool = False) -> None:
        """Rows of table ``name`` for one ``part`` (e.g. an epoch); logging a part again replaces it."""

    def should_checkpoint(self, step: int) -> bool:
        """True when the lab should save a checkpoint now (interval reached or stop requested)."""

    def stop_requested(self) -> bool:
        """True once a SIGINT/SIGTERM asked the loop to stop: save a checkpoint at once
        (labs whose checkpoint interval is not in steps poll this every step)."""

    def note(self, key: str, value: Any) -> None:
        """Record a JSON-able fact of the run in the manifest's ``notes`` (e.g. dropped examples)."""

    def save_snapshot(self, name: str, tensors: Mapping[str, torch.Tensor], meta: Mapping[str, Any] | None = None) -> Any:
        """Keep weights under ``snapshots/NAME.safetensors`` (not pruned like checkpoints)."""

    def save_checkpoint(self, step: int, tensors: Mapping[str, torch.Tensor], meta: Mapping[str, Any] | None = None,
                        *, group: int = 0) -> None:
        """Save a resumable state; may raise ``Interrupted`` right after saving if a stop was requested."""

    def resume_state(self) -> Checkpoint | None:
        """The checkpoint to continue from, or None for a fresh start."""

    def progress(self, total: int, description: str = "training",
                 start: int | None = None) -> AbstractContextManager[Callable[..., None]]:
        """A progress bar around a training loop; yields ``advance(n=1)``. Inside it, a
        SIGINT/SIGTERM is turned into a checkpoint at the next step (see should_checkpoint)."""

    def finished_part(self, key: str, config_hash: str) -> tuple[pd.DataFrame, Tables] | None:
        """(metrics, tables) of the finished run ``parts/runs/KEY`` of this run when its config
        hash is ``config_hash`` (a part dispatched to an executor: a trajectory's checkpoint),
        else None (not there, unfinished, another config, or no run directory)."""


def part_key(index: int) -> str:
    """The name of checkpoint ``index``'s own run under ``parts/runs/`` (a trajectory's part,
    dispatched to an executor and found again by :meth:`RunContext.finished_part`)."""
    return f"ckpt-{index:04d}"


@dataclass(frozen=True)
class RunResult:
    """What ``lab.run`` returns: JSON-able facts the summary needs (sizes, targets, ...)."""

    extras: dict[str, Any] = field(default_factory=dict)


class Tables(Protocol):
    """Read access to a run's tables (``tables/NAME.parquet``)."""

    def names(self) -> list[str]: ...

    def get(self, name: str) -> pd.DataFrame | None: ...


@dataclass(frozen=True)
class Resources:
    """Estimated peak memory and disk of a run, in bytes (what the runner refuses on)."""

    memory_bytes: int
    disk_bytes: int = 0
    detail: str = ""


@dataclass(frozen=True)
class Reproduction:
    """The runs of ``stagewise reproduce LAB``: the full set and the ``--quick`` set."""

    full: tuple[RunSpec, ...]
    quick: tuple[RunSpec, ...]

    def specs(self, quick: bool) -> tuple[RunSpec, ...]:
        return self.quick if quick else self.full


def reproduction(lab: str, rows: Sequence[tuple[str, str | None, dict[str, Any], dict[str, Any] | None]]) -> Reproduction:
    """A Reproduction from rows (name, preset, extra overrides, quick overrides or None to
    leave the run out of ``--quick``); quick overrides are merged over the extra ones."""
    full = tuple(RunSpec(lab=lab, preset=preset, overrides=extra, name=name) for name, preset, extra, _ in rows)
    quick = tuple(RunSpec(lab=lab, preset=preset, overrides=deep_merge(extra, quick), name=name)
                  for name, preset, extra, quick in rows if quick is not None)
    return Reproduction(full=full, quick=quick)


def deferred(module: str, name: str) -> Callable[..., Any]:
    """``module.name``, imported when first called: how a ``lab.py`` names its functions
    without importing torch or pandas (``stagewise labs | config | claims`` stay light), e.g.
    ``summarize = deferred("stagewise.labs.lm.summary", "summarize")``."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"``{module}.{name}`` (imported when called)."
    return call


def _no_estimate(config: Any) -> Resources:
    return Resources(0, 0, "no estimate")


@dataclass(frozen=True)
class LabCommand:
    """An extra command a lab declares (``Lab.commands``, name -> this), which the CLI offers
    as ``stagewise NAME LAB [--preset P] [--config FILE] [--set a.b=v ...] [--seeds K]
    [--json FILE]``: the config is resolved and checked (``lab.check``), then ``run(config,
    memory_limit)`` computes, without training, an object with ``text() -> list[str]`` (the
    lines printed) and ``rows`` (a list of dicts, written to ``--json FILE`` as ``{"lab",
    "preset", "rows"}``); ``memory_limit`` is the memory the machine has in bytes (None:
    unknown). ``run`` raises UserError (one line) for a config it cannot handle."""

    help: str
    """The command's help line (``stagewise NAME --help``)."""
    what: str
    """What it computes, for the error of a lab without it: ``lab 'X' declares no WHAT``."""
    run: Callable[[Any, int | None], Any]


@dataclass(frozen=True)
class SummaryTable:
    """A table ``stagewise show`` prints from a run's summary (``Lab.summary_tables``):
    ``columns`` (the first heads the rows' labels) and ``rows`` of values (a float shown to
    4 significant digits, None as "-", anything else as text)."""

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]


def _no_overrides(options: Mapping[str, Any]) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class Series:
    """How a lab reads one model's saved checkpoints as one run (``source.kind=trajectory``,
    :mod:`stagewise.orchestrate.trajectory`); every function raises one UserError line for
    what it cannot take, before any folder is made.

    Life of a trajectory::

        forced = series.config(names, steps)      # the source (kind=trajectory, checkpoints), what the model is
        config = resolve(lab.Config, preset, file, sets, forced)
        series.check(config)                      # the probe sets usable with the checkpoints (e.g. their tokenizer)
        points = series.points(config)            # (step, epoch) per checkpoint, checked in training order
        part = series.part(config, i, points[i])  # checkpoint i's own run (source.kind=checkpoint), as data
    """

    config: Callable[[Sequence[str], Sequence[int] | None], dict[str, Any]]
    """(checkpoint names as given, their steps or None) -> the config overrides the trajectory
    forces: ``source`` (``kind=trajectory``, the checkpoints as the folders they resolve to) and
    whatever the lab reads the model by."""
    check: Callable[[Any], None]
    """Every check of the checkpoints and probe sets beyond ``lab.check`` (a config of the trajectory)."""
    points: Callable[[Any], list[tuple[int, float]]]
    """(step, epoch) of every checkpoint in order (read from the folders; an order that
    contradicts their own steps is one line)."""
    part: Callable[[Any, int, tuple[int, float]], dict[str, Any]]
    """(config, index, point) -> the config, as data, of checkpoint ``index``'s own run
    (``source.kind=checkpoint``), which an executor runs as a task of its own."""


@dataclass(frozen=True)
class Probing:
    """A lab's measurements of a model it did not train (issues 29, 39): what
    :class:`stagewise.orchestrate.track.Tracker`, the Trainer callback and trajectories call.
    The lab's config has a ``source`` section (:class:`stagewise.config.ProbeSource` or a
    subclass) that says where the model comes from.

    ``make(config, model, tokenizer, **options)`` reads and checks the config's probe sets
    (one UserError line: a wrong model, a missing tokenizer where the lab needs one) and
    returns an object with ``note(ctx)`` (the run's facts into the manifest), ``record(ctx,
    step, epoch)`` (one evaluation's records; the caller runs it without gradients and restores
    the model's modes and RNG) and ``extras(steps)`` (the ``RunResult`` extras of the summary).
    The same object works in a notebook on a :class:`stagewise.runs.MemoryContext`."""

    make: Callable[..., Any]
    options: tuple[str, ...] = ()
    """The keywords ``make`` takes beside (config, model, tokenizer) (the lm lab's: ``name``,
    ``vocab_ids``, ``categorize``, ``spectra``); any other is one line."""
    overrides: Callable[[Mapping[str, Any]], dict[str, Any]] = _no_overrides
    """(options given) -> config overrides they imply, recorded in the run's config (the lm
    lab: ``spectra=True`` -> ``source.spectra``, a ``categorize`` function -> its name)."""
    tracked: Mapping[str, Any] = field(default_factory=dict)
    """Config overrides every tracked run gets (what only the lab's own training has, turned
    off: the lm lab's baselines, the example lab's controls)."""
    series: Series | None = None
    """Checkpoint series (trajectories); None: the lab probes only a training that runs."""


@dataclass(frozen=True)
class Lab:
    """A lab: identity, config model, presets, reproduction set and its five functions."""

    name: str
    description: str
    Config: type[BaseModel]
    presets: Mapping[str, tuple[str, dict[str, Any]]]
    reproduce: Reproduction
    check: Callable[[Any], None]
    run: Callable[[Any, RunContext], RunResult]
    summarize: Callable[[Any, pd.DataFrame, Tables, RunResult], Summary]
    make_figures: Callable[[Any, pd.DataFrame, Tables, Summary, Path], list[Path]]
    estimate: Callable[[Any], Resources] = _no_estimate
    smoke: Mapping[str, Any] = field(default_factory=dict)
    """Overrides for a seconds-long run with several checkpoints (the conformance test's run)."""
    key_metrics: tuple[str, ...] = ()
    """Names in ``summary.per_seed`` that sweeps plot by default against each axis (most telling first)."""
    claims: tuple[ClaimSpec, ...] = ()
    """The lab's declared claims (``stagewise claims LAB``): every claim in a summary instantiates one (``spec_id``)."""
    conformance_skips: Mapping[str, str] = field(default_factory=dict)
    """Checks of :func:`stagewise.testing.check_lab` this lab declares it cannot pass: check name -> reason."""
    sources: Mapping[str, str] = field(default_factory=dict)
    """The papers its claims cite: key (``Source.paper``, e.g. ``paper1``) -> heading ``"SHORT:
    citation"`` (``"paper 1: A. Author et al., arXiv 0000.00000 (topic)"``). Reports group
    claims under the heading, in the order of the keys; SHORT (the text before the first
    ``": "``) names the paper in a claim's source label (``paper 1, Theorem 2``). Every
    summary carries them (``Summary.sources``, see :meth:`summary`)."""
    commands: Mapping[str, LabCommand] = field(default_factory=dict)
    """Extra commands of the CLI: name -> :class:`LabCommand` (``stagewise NAME LAB ...``); a
    name the CLI already has is not offered."""
    summary_tables: Mapping[str, Callable[[Summary], SummaryTable | None]] = field(default_factory=dict)
    """Tables ``stagewise show`` prints after the summary's scalars: name -> a function of the
    run's Summary giving a :class:`SummaryTable`, or None when the summary holds nothing for it."""
    across_runs: Callable[[Sequence[tuple[Any, Summary]]], list[Claim]] | None = None
    """The lab's claims over seeds: given the (config, summary) of every finished run of a sweep
    or a reproduce, the claims judged by their declared aggregation (``ClaimSpec.aggregation``)
    across the runs that differ only in seed and control; shown beside the claims matrix."""
    probe: Probing | None = None
    """The lab's measurements of a model it did not train (:class:`Probing`): a researcher's own
    training (``Tracker``, ``StagewiseCallback``) and saved checkpoints (trajectories). None:
    the lab measures only what it trains."""
    metric_aliases: Mapping[str, str] = field(default_factory=dict)
    """Old metric names the lab no longer logs -> their current names (``{"opt_attn_min":
    "train.opt_attn.min"}``). Run folders written before a rename read with the current names:
    the runner applies them to the stream when it writes ``metrics.parquet`` (a run resumed
    across the rename holds only current names), ``stages`` and ``show`` to an old run's
    metrics and summary, ``stages`` criteria and sweep report entries to the names a user
    gives (with a note). An alias covers every variant (``{variant}/{old}``). Not config: no
    config hash changes (:mod:`stagewise.runs.names`)."""

    def summary(self, config: Any, metrics: pd.DataFrame, tables: Tables, result: RunResult) -> Summary:
        """``summarize``'s Summary carrying the lab's ``sources`` (what ``summary.json`` holds)."""
        summary = self.summarize(config, metrics, tables, result)
        return summary.model_copy(update={"sources": {**self.sources, **summary.sources}})

    def preset_overrides(self, preset: str | None) -> dict[str, Any]:
        """The overrides of a named preset (None: the lab's defaults); one-line error otherwise."""
        if preset is None:
            return {}
        if preset not in self.presets:
            close = difflib.get_close_matches(preset, list(self.presets), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise UserError(f"--preset {preset}: unknown preset for lab '{self.name}'{hint}; "
                            f"available: {', '.join(self.presets)}")
        return self.presets[preset][1]
