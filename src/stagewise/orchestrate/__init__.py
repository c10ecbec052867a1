"""Orchestration: execute a spec in a run directory (create, resume, record), reproduce."""

from .execute import check_size, execute, execute_spec, load_for_resume, prepare
from .reproduce import reproduce

__all__ = ["check_size", "execute", "execute_spec", "load_for_resume", "prepare", "reproduce"]
