"""Stop requests: a second signal never cuts off the recording of the first, and every
command turns SIGINT/SIGTERM into one line and exit 128 + signum (never a silent death)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

import pytest

from stagewise.runs.stops import Interrupted, StopSignals

# A run whose training loop sends itself SIGTERM at its 5th step (the graceful stop), and
# whose recording of that stop is hit by a second SIGTERM (the race of the round-3 attack:
# before, the second one found the default handler and killed the process, manifest 'running').
SCRIPT = textwrap.dedent("""
    import os, signal, sys
    from stagewise.orchestrate import runner
    from stagewise.runs import RunDirContext

    calls = {"n": 0}
    real_due, real_keep = RunDirContext.should_checkpoint, runner._keep_metrics

    def should_checkpoint(self, step):
        calls["n"] += 1
        if calls["n"] == 5:
            os.kill(os.getpid(), signal.SIGTERM)
        return real_due(self, step)

    def keep_metrics(*args):
        os.kill(os.getpid(), signal.SIGTERM)  # the second signal, while the first one's stop is recorded
        os.kill(os.getpid(), signal.SIGINT)
        return real_keep(*args)

    RunDirContext.should_checkpoint = should_checkpoint
    runner._keep_metrics = keep_metrics
    sys.argv = ["stagewise", "run", "ntp", "--preset", "example1", "--out", sys.argv[1], "-q"]
    from stagewise.cli import main
    main()
""")


def test_a_second_sigterm_while_the_first_is_recorded_is_ignored(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and "SIGTERM" in manifest["error"]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("interrupted (SIGTERM); resume with:"), proc.stderr


def test_stop_signals_raise_once_then_ignore(monkeypatch):
    import os

    with StopSignals() as stops:
        with pytest.raises(Interrupted) as caught:
            os.kill(os.getpid(), signal.SIGTERM)
            signal.sigtimedwait([], 0) if hasattr(signal, "sigtimedwait") else None  # let the handler run
        assert caught.value.signum == signal.SIGTERM and stops.signum == signal.SIGTERM
        os.kill(os.getpid(), signal.SIGINT)  # ignored: the stop is under way
        os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL or callable(signal.getsignal(signal.SIGTERM))


def test_a_stop_outside_any_run_is_one_line_and_exit_143(tmp_path):
    """SIGTERM while a command that records nothing works (here: stuck in its planning)."""
    script = textwrap.dedent("""
        import os, signal, sys
        def slow(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGTERM)
            raise AssertionError("not reached: the signal stops the command")
        import stagewise.labs as labs
        labs.get_lab = slow
        sys.argv = ["stagewise", "claims", "ntp"]
        from stagewise.cli import main
        main()
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    assert [line for line in proc.stderr.splitlines() if line.strip()] == ["interrupted (SIGTERM)"]
