"""Shared by the resume tests: kill a run after its N-th metric record, then resume it; deliver a
signal at a chosen optimizer step."""

from __future__ import annotations

import pytest

from stagewise.orchestrate import execute, prepare
from stagewise.runs import RunDirContext
from stagewise.testing.checks import kill_after


def crash_then_resume(lab, config, folder, monkeypatch, crash_at_line: int):
    """Run ``config`` into ``folder``, raise KeyboardInterrupt right after the
    ``crash_at_line``-th logged record, then ``--resume`` it to the end; the run's paths."""
    paths = prepare(lab, config, folder)
    with kill_after(crash_at_line), pytest.raises(KeyboardInterrupt):
        execute(lab, config, paths, progress=False)
    execute(lab, config, paths, resume=True, progress=False)
    return paths


def signal_at_step(monkeypatch, step: int, signum: int) -> None:
    """Deliver ``signum`` as the runner's handler does, at optimizer step ``step`` (the lab
    polls ctx.stop_requested once per step)."""
    calls, real = {"n": 0}, RunDirContext.stop_requested

    def stop_requested(self):
        calls["n"] += 1
        if calls["n"] == step:
            self.request_stop(signum)
        return real(self)

    monkeypatch.setattr(RunDirContext, "stop_requested", stop_requested)
