"""Optional metric sinks fed from the records that go to ``metrics.jsonl``: TensorBoard
event files and W&B offline runs. Off by default and no part of the config (they never
change a config hash).

Selection: the environment variable ``STAGEWISE_SINKS`` (comma list, e.g.
``tensorboard,wandb``) read when a run directory context starts, plus the ``sinks``
parameter of :class:`~stagewise.runs.RunDirContext`; the union of both is used.

Every record ``(step, variant, names, values (K, S))`` becomes one scalar per metric and
seed, named ``{metric}/seed{seed}`` where ``metric`` is the ``metric`` column of
``metrics.parquet`` (``{variant}/{name}`` when a variant is set). Sinks open on their first
record (a resumed run that replays steps writes a new event file / a new W&B offline run),
flush with every checkpoint and close with the metric stream. A sink that fails warns once
and is dropped; the run and its metric stream go on.
"""

from __future__ import annotations

import os
import re
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import NotAvailable, UserError

if TYPE_CHECKING:
    from torch.utils.tensorboard.writer import FileWriter

ENV_VAR = "STAGEWISE_SINKS"
SINK_PACKAGES = {"tensorboard": ("tensorboard",), "wandb": ("wandb",)}
"""Sink name -> the modules it imports (each sink is an extra: ``pip install -e '.[NAME]'``)."""

TB_FOLDER = "tensorboard"
TB_QUEUE = 1024  # events the writer's thread may hold before an add waits (all written at each checkpoint)
TB_FLUSH_SECS = 120  # the writer's own periodic flush, between checkpoints
TB_STAMP_WAIT = 2.0  # most seconds a resumed run waits so its event file's stamp sorts after the earlier ones
WANDB_PROJECT = "stagewise"
WANDB_SETTINGS = {"console": "off", "silent": True, "disable_git": True, "save_code": False,
                  "x_disable_stats": True, "x_disable_meta": True, "x_save_requirements": False}
"""No console capture, system statistics, git or code snapshots: only the metric records."""


# -------------------------------------------------------------------------- selection
def resolve_sinks(requested: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The sinks to use: ``requested`` plus ``STAGEWISE_SINKS`` of ``environ`` (default
    ``os.environ``), deduplicated, in the order of :data:`SINK_PACKAGES`.

    Raises UserError (one line) for an unknown name or a sink whose package is missing.
    """
    environ = os.environ if environ is None else environ
    if isinstance(requested, str):
        requested = requested.split(",")
    from_env = environ.get(ENV_VAR, "")
    named = [(str(n), "") for n in (requested or ())] + [(n, f"{ENV_VAR}={from_env!r}: ") for n in from_env.split(",")]
    chosen = set()
    for raw, where in named:
        name = raw.strip().lower()
        if not name:
            continue
        if name not in SINK_PACKAGES:
            raise UserError(f"{where}unknown sink {raw.strip()!r}; allowed: {', '.join(SINK_PACKAGES)}")
        chosen.add(name)
    for name in chosen:
        for package in SINK_PACKAGES[name]:
            if find_spec(package) is None:
                raise NotAvailable(package, f"sink {name!r} needs the {package} package, which is not installed: "
                                f"pip install -e '.[{name}]'")
    return tuple(n for n in SINK_PACKAGES if n in chosen)


def open_sinks(names: Sequence[str], root: str | Path, seeds: Sequence[int]) -> SinkFanout | None:
    """Sinks for the run directory ``root`` (nothing is written before the first record);
    None when ``names`` is empty."""
    makers = {"tensorboard": TensorBoardSink, "wandb": WandbSink}
    return SinkFanout([makers[n](Path(root), seeds) for n in names]) if names else None


def scalar_tag(metric: str, seed: int) -> str:
    """The name of one metric of one seed in a sink: ``{metric}/seed{seed}``."""
    return f"{metric}/seed{seed}"


def _scalar_tags(variant: str, names: Sequence[str], seeds: Sequence[int]) -> list[str]:
    """Tags of a (K, S) record, metric-major (the order of ``values.ravel()``)."""
    return [scalar_tag(f"{variant}/{n}" if variant else n, s) for n in names for s in seeds]


class SinkFanout:
    """Hands every record to each sink; a sink that raises warns once and is dropped."""

    def __init__(self, sinks: Sequence[Any]):
        self.sinks = list(sinks)

    def _each(self, method: str, *args: Any) -> None:
        for sink in list(self.sinks):
            try:
                getattr(sink, method)(*args)
            except Exception as err:  # an auxiliary output never fails the run
                self.sinks.remove(sink)
                warnings.warn(f"{sink.name} sink: {type(err).__name__}: {err}; it records nothing more in this run",
                              RuntimeWarning, stacklevel=3)
                if method != "close":
                    with suppress(Exception):
                        sink.close()

    def write(self, step: int, variant: str, names: Sequence[str], values: np.ndarray) -> None:
        """One record: ``values`` (K, S) float64 for the K ``names`` and the run's S seeds."""
        self._each("write", step, variant, names, values)

    def flush(self) -> None:
        self._each("flush")

    def close(self) -> None:
        self._each("close")


# ------------------------------------------------------------------------- TensorBoard
class TensorBoardSink:
    """Event files under ``ROOT/tensorboard/``, one per start or resume of the run, written
    by PyTorch's TensorBoard writer (``torch.utils.tensorboard.writer.FileWriter``, which
    frames the records and their checksums through tensorboard's own ``RecordWriter``).

    One ``Event`` per record, its ``Summary`` holding one ``Value(tag="{metric}/seed{seed}",
    simple_value=float32)`` per metric and seed (K x S values, metric-major). The messages of
    a record shape are built once and their values refilled per record (the writer
    serializes each event as it is added; a fresh Summary of 24 x 64 values costs about 10
    times more). A file's name starts ``events.out.tfevents.{stamp}`` (seconds, the
    writer's): a resumed run whose earlier file has this second's stamp waits for the next
    second (at most :data:`TB_STAMP_WAIT` s), so its file sorts last and TensorBoard shows
    its values where it repeats steps. At close (and at a flush that saw new metrics) a
    Custom Scalars layout is written (``torch.utils.tensorboard.summary.custom_scalars``):
    one chart per metric with all seeds, one category per variant.
    """

    name = "tensorboard"

    def __init__(self, root: Path, seeds: Sequence[int]):
        self.folder = root / TB_FOLDER
        self.seeds = list(seeds)
        self._writer: FileWriter | None = None  # opened at the first write
        self._events: dict[tuple[str, tuple[str, ...]], tuple[Any, list[Any]]] = {}  # shape -> (Event, its Values)
        self._metrics: dict[str, str] = {}  # metric -> variant, in first-logged order
        self._layout_size = 0  # metrics covered by the last layout written

    def _open(self) -> FileWriter:
        if self._writer is None:
            from torch.utils.tensorboard.writer import FileWriter

            parts = [p.name.split(".") for p in self.folder.glob("events.out.tfevents.*")] if self.folder.is_dir() else []
            latest = max([int(n[3]) for n in parts if len(n) > 3 and n[3].isdigit()], default=-1)
            wait = latest + 1 - time.time()  # the new file's stamp must exceed every earlier file's
            if wait > TB_STAMP_WAIT:
                raise RuntimeError(f"{self.folder} holds an event file stamped {latest}, later than the clock")
            if wait > 0:
                time.sleep(wait)
            self._writer = FileWriter(str(self.folder), max_queue=TB_QUEUE, flush_secs=TB_FLUSH_SECS)
        return self._writer

    def _record_event(self, variant: str, names: Sequence[str]) -> tuple[Any, list[Any]]:
        """The Event of a record shape and its K x S Values (metric-major), built at first use."""
        key = (variant, tuple(names))
        if key not in self._events:
            from tensorboard.compat.proto import event_pb2, summary_pb2

            values = [summary_pb2.Summary.Value(tag=tag) for tag in _scalar_tags(variant, names, self.seeds)]
            event = event_pb2.Event(summary=summary_pb2.Summary(value=values))
            self._events[key] = (event, list(event.summary.value))  # the slots inside `event`
            for n in names:
                self._metrics.setdefault(f"{variant}/{n}" if variant else n, variant)
        return self._events[key]

    def write(self, step: int, variant: str, names: Sequence[str], values: np.ndarray) -> None:
        event, slots = self._record_event(variant, names)
        for slot, value in zip(slots, np.asarray(values, dtype=float).reshape(-1).tolist(), strict=True):
            slot.simple_value = value  # float32, rounded to nearest (beyond float32: inf)
        self._open().add_event(event, step=int(step))  # serialized here: the slots may be refilled at once

    def _write_layout(self) -> None:
        from torch.utils.tensorboard.summary import custom_scalars

        layout: dict[str, dict[str, list[Any]]] = {}
        for metric, variant in self._metrics.items():
            layout.setdefault(variant or "metrics", {})[metric] = ["Multiline", [f"^{re.escape(metric)}/seed-?[0-9]+$"]]
        self._open().add_summary(custom_scalars(layout), global_step=0)  # already open: only flush() calls this
        self._layout_size = len(self._metrics)

    def flush(self) -> None:
        if self._writer is not None:
            if len(self._metrics) != self._layout_size:
                self._write_layout()
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self.flush()
            writer, self._writer = self._writer, None
            writer.close()
            self._layout_size = 0  # a reopened file gets its own layout


# ------------------------------------------------------------------------------- W&B
@contextmanager
def _environment(**values: str) -> Iterator[None]:
    """Set environment variables for the duration of the block, then restore them."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


class WandbSink:
    """A W&B offline run under ``ROOT/wandb/offline-run-*`` (never the network), one per
    start or resume of the run: project ``stagewise``, name = the run directory's name,
    config = ``config.yaml``. Each record is one history row: ``step`` (the x axis of every
    chart) and one key ``{metric}/seed{seed}`` per value (float64). Upload later with
    ``wandb sync ROOT/wandb/offline-run-*``.
    """

    name = "wandb"

    def __init__(self, root: Path, seeds: Sequence[int]):
        self.root = root
        self.seeds = list(seeds)
        self._run = None
        self._tags: dict[tuple[str, tuple[str, ...]], list[str]] = {}

    def _open(self):
        if self._run is None:
            import wandb
            import yaml

            config_path = self.root / "config.yaml"
            config = yaml.safe_load(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
            known = wandb.Settings.model_fields  # the settings of this wandb version (>= 0.19: pydantic)
            settings = wandb.Settings(**{k: v for k, v in WANDB_SETTINGS.items() if k in known})
            with _environment(WANDB_MODE="offline", WANDB_SILENT="true"):
                run = wandb.init(mode="offline", dir=str(self.root), project=WANDB_PROJECT, name=self.root.name,
                                 config=config or {}, settings=settings)
            run.define_metric("step")
            run.define_metric("*", step_metric="step")
            self._run = run
        return self._run

    def write(self, step: int, variant: str, names: Sequence[str], values: np.ndarray) -> None:
        key = (variant, tuple(names))
        tags = self._tags.get(key)
        if tags is None:
            tags = self._tags[key] = _scalar_tags(variant, names, self.seeds)
        row = dict(zip(tags, np.asarray(values, dtype=float).reshape(-1).tolist()))
        row["step"] = int(step)
        self._open().log(row)

    def flush(self) -> None:
        """Nothing to do: the W&B service writes the offline file as rows arrive."""

    def close(self) -> None:
        if self._run is not None:
            run, self._run = self._run, None
            run.finish()
