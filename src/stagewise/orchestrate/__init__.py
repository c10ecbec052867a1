"""Orchestration: execute a spec in a run directory (create, resume, record), reproduce."""

from .runner import check_size, execute, execute_spec, load_for_resume, prepare, start_run, writable_dir
from .reproduction import reproduce

__all__ = ["check_size", "execute", "execute_spec", "load_for_resume", "prepare", "reproduce", "start_run", "writable_dir"]
