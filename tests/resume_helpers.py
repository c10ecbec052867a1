"""Shared by the resume tests: kill a run after its N-th metric record, then resume it."""

from __future__ import annotations

import pytest

from stagewise.orchestrate import execute, prepare
from stagewise.testing.checks import kill_after


def crash_then_resume(lab, config, folder, monkeypatch, crash_at_line: int):
    """Run ``config`` into ``folder``, raise KeyboardInterrupt right after the
    ``crash_at_line``-th logged record, then ``--resume`` it to the end; the run's paths."""
    paths = prepare(lab, config, folder)
    with kill_after(crash_at_line), pytest.raises(KeyboardInterrupt):
        execute(lab, config, paths, progress=False)
    execute(lab, config, paths, resume=True, progress=False)
    return paths
