"""The run store: run directories, manifests, streamed metrics, checkpoints, resume."""

from .memory import MemoryContext
from .runner import Diverged, RunContext, RunPaths, execute, load_for_resume, prepare, read_manifest
from .store import Checkpoints, MetricSink, atomic_write_bytes, atomic_write_json, atomic_write_text

__all__ = [
    "Checkpoints", "Diverged", "MemoryContext", "MetricSink", "RunContext", "RunPaths", "atomic_write_bytes",
    "atomic_write_json", "atomic_write_text", "execute", "load_for_resume", "prepare", "read_manifest",
]
