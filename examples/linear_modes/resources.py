"""Up-front size estimate of a run from its config alone (what the runner refuses on).

Memory: PROCESS_BASE (interpreter, torch, pandas, matplotlib) plus, for the largest group,
ARRAY_COPIES copies of the float64 arrays of S members: W1 (h, d_in), W2 (d_out, h), M and
the residual (d_out, d_in), U (d_out, d_out), V (d_in, d_in). Disk: the metric stream and
its Parquet file (exact line sizes, :mod:`stagewise.runs.sizes`), the kept checkpoints,
the summary and the figure.
"""

from __future__ import annotations

from stagewise.labs.contract import Resources
from stagewise.runs.sizes import DiskBudget, safetensors_bytes, stream_bytes

from .config import Config

PROCESS_BASE = 450 << 20  # measured: peak RSS 407 MiB of the default run (3 groups, 4 seeds), rounded up
ARRAY_COPIES = 6  # weights, gradients, updated weights and temporaries of one step
SUMMARY_BYTES, SUMMARY_PER_SEED = 6_000, 400  # summary.json: claims, details; per seed and group
FIGURE_BYTES, FIGURE_PER_LINE = 30_000, 2_000  # mode_strengths.png + .pdf: per panel (measured 40 kB for 3 modes, 4 seeds), per seed line


def estimate(config: Config) -> Resources:
    S, h = config.n_seeds, config.model.hidden
    d_in, d_out, r = config.data.d_in, config.data.d_out, len(config.data.singular_values)
    floats = S * (h * d_in + d_out * h + 2 * d_out * d_in + d_out**2 + d_in**2)
    memory = PROCESS_BASE + 8 * ARRAY_COPIES * floats
    tc, groups = config.train, 1 + len(config.controls)
    logged = sorted({*range(0, tc.steps + 1, tc.log_every), tc.steps})
    names = ["train.loss", *(f"W2W1.mode_strength.{i}" for i in range(r))]
    disk = DiskBudget()
    disk.add_metrics(groups * stream_bytes(names, S, logged, variant="large-init"), groups * len(logged) * len(names) * S)
    checkpoint = safetensors_bytes(8 * S * (h * d_in + d_out * h), 2, 64)
    disk.add_checkpoints(groups * (tc.steps // tc.checkpoint_every + 1), checkpoint)
    disk.add("summary.json", groups * (SUMMARY_BYTES + SUMMARY_PER_SEED * S))
    disk.add("figures", groups * (FIGURE_BYTES + FIGURE_PER_LINE * min(S, 16) * r))
    return Resources(memory_bytes=memory, disk_bytes=disk.peak, detail=disk.describe())
