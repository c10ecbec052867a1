"""The run store: run directories, manifests, streamed metrics, tables, checkpoints, locks."""

from .context import Checkpoint, Interrupted, RunDirContext, RunPaths
from .manifest import read_manifest, update_manifest
from .memory import MemoryContext
from .store import (
    Checkpoints, MetricSink, RunLock, TableStore, atomic_write_bytes, atomic_write_json, atomic_write_text, load_snapshot,
    safe_csv, save_snapshot, write_parquet,
)

__all__ = [
    "Checkpoint", "Checkpoints", "Interrupted", "MemoryContext", "MetricSink", "RunDirContext", "RunLock", "RunPaths",
    "TableStore", "atomic_write_bytes", "atomic_write_json", "atomic_write_text", "load_snapshot", "read_manifest",
    "safe_csv", "save_snapshot", "update_manifest", "write_parquet",
]
