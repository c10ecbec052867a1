"""The run store: run directories, manifests, streamed metrics, tables, checkpoints, locks,
groups of trainings in one run (:mod:`.groups`) and old metric names read as current ones
(:mod:`.names`).

The names load on first use (PEP 562): importing the package (or a light submodule such as
:mod:`.sizes`) imports no torch or pandas."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:
    from .context import Checkpoint, RunDirContext, RunPaths
    from .groups import GroupContext, resumed_group, run_groups
    from .manifest import read_manifest, update_manifest
    from .memory import MemoryContext
    from .names import current_name, current_names, rename_keys, rename_metrics
    from .store import (
        Checkpoints, MetricSink, RunLock, TableStore, atomic_write_bytes, atomic_write_json, atomic_write_text, load_snapshot,
        safe_csv, save_snapshot, write_parquet,
    )
    from .stops import Interrupted, StopSignals

_EXPORTS: dict[str, str] = {
    **dict.fromkeys(("Checkpoint", "RunDirContext", "RunPaths"), ".context"),
    **dict.fromkeys(("Interrupted", "StopSignals"), ".stops"),
    **dict.fromkeys(("GroupContext", "resumed_group", "run_groups"), ".groups"),
    **dict.fromkeys(("read_manifest", "update_manifest"), ".manifest"),
    "MemoryContext": ".memory",
    **dict.fromkeys(("current_name", "current_names", "rename_keys", "rename_metrics"), ".names"),
    **dict.fromkeys(("Checkpoints", "MetricSink", "RunLock", "TableStore", "atomic_write_bytes", "atomic_write_json",
                     "atomic_write_text", "load_snapshot", "safe_csv", "save_snapshot", "write_parquet"), ".store"),
}

__all__ = [
    "Checkpoint", "Checkpoints", "GroupContext", "Interrupted", "MemoryContext", "MetricSink", "RunDirContext", "RunLock",
    "RunPaths", "StopSignals", "TableStore", "atomic_write_bytes", "atomic_write_json", "atomic_write_text", "load_snapshot",
    "current_name", "current_names", "read_manifest", "rename_keys", "rename_metrics", "resumed_group", "run_groups",
    "safe_csv", "save_snapshot", "update_manifest", "write_parquet",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
