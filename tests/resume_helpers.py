"""Shared by the resume tests: kill a run after its N-th metric record, then resume it."""

from __future__ import annotations

import pytest

from stagewise.orchestrate import execute, prepare
from stagewise.runs import RunDirContext


def crash_then_resume(lab, config, folder, monkeypatch, crash_at_line: int):
    """Run ``config`` into ``folder``, raise KeyboardInterrupt right after the
    ``crash_at_line``-th logged record, then ``--resume`` it to the end; the run's paths."""
    original = RunDirContext.log
    count = {"n": 0}

    def crashing(self, step, values, **kw):
        original(self, step, values, **kw)
        count["n"] += 1
        if count["n"] == crash_at_line:
            raise KeyboardInterrupt("simulated kill")

    paths = prepare(lab, config, folder)
    monkeypatch.setattr(RunDirContext, "log", crashing)
    with pytest.raises(KeyboardInterrupt):
        execute(lab, config, paths, progress=False)
    monkeypatch.setattr(RunDirContext, "log", original)
    execute(lab, config, paths, resume=True, progress=False)
    return paths
