"""Bytes of the run store's files from counts alone: what the labs' up-front disk
estimates are built from (the whole run folder, :class:`DiskBudget`).

* ``metrics.jsonl``: exact. A line is the stream's own encoding
  (:meth:`~.stream.MetricSink.encode`): JSON framing + the names + ``4 ceil(8 K S / 3)``
  base64 characters for K metrics of S seeds + the step's digits.
* ``metrics.parquet``: ``PARQUET_BASE_BYTES + PARQUET_BYTES_PER_VALUE * values`` (long form:
  one row per step, seed and metric).
* safetensors files (checkpoints, snapshots): the tensor bytes + a JSON header of
  ``SAFETENSORS_BYTES_PER_TENSOR`` per tensor + the metadata.
* config.yaml, manifest.json, .lock: ``FIXED_FILES_BYTES``.

The peak during a run is the final folder, or more when what exists only for a moment
(``DiskBudget.transient``: a checkpoint beyond the kept ones, written before the oldest is
deleted; the old copy of a table being rewritten) outweighs what is written only at the
finish, after the last checkpoint and table (``LATE_PARTS``: metrics.parquet, the summary,
the figures).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from .stream import MetricSink

FIXED_FILES_BYTES = 4096  # config.yaml + manifest.json (with its table entries and notes) + .lock
PARQUET_BASE_BYTES = 4096  # footer, schema and the five column chunks' headers
# long-form metrics: float64 values (dictionary-coded when they repeat) + run-length-coded
# step, seed, variant, metric; measured 4.9 to 7.5 bytes per value on the three labs' runs
# (7.5: full-matrix disentangled runs, where hardly a value repeats), 8 + ~0.5 at worst
PARQUET_BYTES_PER_VALUE = 8.5
SAFETENSORS_BYTES_PER_TENSOR = 96  # a tensor's entry in the JSON header: name, dtype, shape, offsets
SAFETENSORS_BASE_BYTES = 256  # the header's length, braces, sha256, step and group fields
CHECKPOINTS_KEPT = 2  # Checkpoints(keep=2): the newest two stay
LATE_PARTS = ("metrics.parquet", "summary.json", "figures")  # written when training has finished


def stream_bytes(names: Sequence[str], n_seeds: int, steps: Iterable[int], variant: str = "") -> int:
    """Bytes of the metrics.jsonl lines that log ``names`` for ``n_seeds`` seeds at each of
    ``steps`` (under ``variant``): exactly what :class:`~.stream.MetricSink` writes."""
    fixed = line_bytes(names, n_seeds, variant) - 1  # the line with a one-digit step, less that digit
    return sum(fixed + len(str(int(t))) for t in steps)


def line_bytes(names: Sequence[str], n_seeds: int, variant: str = "") -> int:
    """Bytes of one stream line at a one-digit step, from lengths alone (no line is built, so
    a 100,000-metric line costs microseconds per name): the JSON framing of an empty line,
    each name's JSON string and its ``", "`` separator, ``4 ceil(8 K S / 3)`` base64 characters."""
    empty = len(MetricSink.encode(0, [], np.zeros((0, n_seeds)), variant))
    listed = len(json.dumps([str(name) for name in names])) - 2  # the names, quoted and ", "-separated, less "[]"
    return empty + listed + 4 * math.ceil(8 * len(names) * n_seeds / 3)


def stream_bytes_upto(names: Sequence[str], n_seeds: int, lines: int, last_step: int, variant: str = "") -> int:
    """Upper bound of ``lines`` such lines at steps up to ``last_step`` (each with its digits)."""
    return lines * stream_bytes(names, n_seeds, [last_step], variant)


def metrics_parquet_bytes(values: int, per_value: float = PARQUET_BYTES_PER_VALUE) -> int:
    """Upper estimate of metrics.parquet holding ``values`` (step, seed, metric) rows
    (``per_value``: a lab whose metrics repeat much compresses better)."""
    return int(PARQUET_BASE_BYTES + per_value * values)


def safetensors_bytes(tensor_bytes: int, n_tensors: int, meta_bytes: int = 0) -> int:
    """A safetensors file of ``n_tensors`` tensors holding ``tensor_bytes`` bytes in all and
    ``meta_bytes`` bytes of JSON metadata (escaped once more inside the header)."""
    return int(SAFETENSORS_BASE_BYTES + SAFETENSORS_BYTES_PER_TENSOR * n_tensors + tensor_bytes + 1.1 * meta_bytes)


@dataclass
class DiskBudget:
    """The bytes of a run folder by part (``parts``: name -> bytes of the final folder) and
    ``transient`` (bytes that exist only for a moment at the peak); :attr:`peak` is what a
    run needs free."""

    parts: dict[str, int] = field(default_factory=dict)
    transient: int = 0

    def add(self, name: str, nbytes: float) -> None:
        self.parts[name] = self.parts.get(name, 0) + int(nbytes)

    def add_metrics(self, stream: int, values: int, per_value: float = PARQUET_BYTES_PER_VALUE) -> None:
        """metrics.jsonl (``stream`` bytes) and metrics.parquet of ``values`` rows; both stay."""
        self.add("metrics.jsonl", stream)
        self.add("metrics.parquet", metrics_parquet_bytes(values, per_value))

    def add_checkpoints(self, saved: int, nbytes: int) -> None:
        """``saved`` checkpoints of ``nbytes`` each over the run (the newest two are kept)."""
        self.add_checkpoint_runs([(saved, nbytes)])

    def add_checkpoint_runs(self, runs: Sequence[tuple[int, int]]) -> None:
        """Checkpoints saved in runs of (count, bytes each), in order: the last
        CHECKPOINTS_KEPT stay; just before the oldest is deleted, one more is on disk."""
        window = CHECKPOINTS_KEPT + 1
        sizes = [nbytes for count, nbytes in runs for _ in range(min(count, window))]  # every window sum survives
        kept = sum(sizes[-CHECKPOINTS_KEPT:]) if sizes else 0
        peak = max((sum(sizes[i:i + window]) for i in range(len(sizes))), default=0)
        self.add("checkpoints", kept)
        self.transient = max(self.transient, peak - kept)

    @property
    def final(self) -> int:
        return FIXED_FILES_BYTES + sum(self.parts.values())

    @property
    def peak(self) -> int:
        """The most the folder holds at any moment (see the module docstring)."""
        late = sum(self.parts.get(name, 0) for name in LATE_PARTS)
        return self.final + max(0, self.transient - late)

    def describe(self) -> str:
        """The largest parts, e.g. ``metrics.jsonl 1.2 MiB, figures 0.4 MiB``."""
        big = sorted(self.parts.items(), key=lambda kv: -kv[1])[:3]
        return ", ".join(f"{name} {n / 2**20:.1f} MiB" for name, n in big)
