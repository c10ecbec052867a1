"""Progress wherever work runs: plain lines outside a terminal (time-based, with an ETA),
events to Python callbacks, nothing with quiet; and the commands that can take long print a
line while they work with stderr not a terminal."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import time

import pytest

from stagewise.errors import UserError
from stagewise.progress import (ENV_EVERY, MAX_EVERY_S, MIN_EVERY_S, PLAIN_EVERY_S, Progress, ProgressEvent, on_progress,
                                plain_every_s)
from tests.runcache import EXAMPLE1_SHORT


def test_plain_lines_come_by_time_even_without_a_finished_unit(monkeypatch):
    monkeypatch.setenv(ENV_EVERY, str(MIN_EVERY_S))
    stream = io.StringIO()
    with Progress(10, "sweep", unit="points", stream=stream) as bar:
        time.sleep(0.3)  # no unit done: a long first run still shows a sign of life
        bar.advance(4, detail="done p1")
        time.sleep(0.35)
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 3
    assert lines[0].startswith("sweep: 0/10 points (0%)") and "ETA" not in lines[0]
    assert lines[-1].startswith("sweep: 4/10 points (40%)") and "ETA" in lines[-1] and lines[-1].endswith("(done p1)")


def test_quiet_and_zero_interval_print_nothing(monkeypatch):
    stream = io.StringIO()
    monkeypatch.setenv(ENV_EVERY, str(MIN_EVERY_S))
    with Progress(5, "training", stream=stream, quiet=True) as bar:
        time.sleep(0.05)
        bar.advance(5)
    monkeypatch.setenv(ENV_EVERY, "0")
    with Progress(5, "training", stream=stream) as bar:
        time.sleep(0.05)
        bar.advance(5)
    assert stream.getvalue() == ""


BAD_INTERVALS = ["-1", "abc", "x", "inf", "nan", "1e23", "0.001", "0.09", "86401"]
"""Round 4 (issue 39): 1e23 passed the check, then the ticker's wait raised OverflowError in its
thread (a traceback); 0.001 printed thousands of lines."""


@pytest.mark.parametrize("value", BAD_INTERVALS)
def test_a_bad_interval_is_one_line_naming_the_variable_and_the_range(monkeypatch, value):
    monkeypatch.setenv(ENV_EVERY, value)
    with pytest.raises(UserError) as caught:
        plain_every_s()
    (line,) = caught.value.lines
    assert line.startswith(f"{ENV_EVERY}={value!r}: must be 0 (no progress lines) or a number of seconds from 0.1 to 86400")


@pytest.mark.parametrize("value,seconds", [("0", 0.0), (str(MIN_EVERY_S), MIN_EVERY_S), ("86400", MAX_EVERY_S),
                                           (" 2.5 ", 2.5), ("", PLAIN_EVERY_S)])
def test_an_interval_in_the_range_is_taken(monkeypatch, value, seconds):
    monkeypatch.setenv(ENV_EVERY, value)
    assert plain_every_s() == seconds


@pytest.mark.parametrize("value", ["1e23", "0.001", "nan", "x", "-1"])
def test_a_bad_interval_at_the_cli_is_one_line_exit_2_and_nothing_made(cli, tmp_path, monkeypatch, value):
    monkeypatch.setenv(ENV_EVERY, value)
    code, out, err = cli("run", "ntp", "--preset", "example1", "--out", str(tmp_path / "r"))
    assert code == 2 and out == "", err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and ENV_EVERY in lines[0] and "86400" in lines[0], err
    assert list(tmp_path.iterdir()) == []


def test_a_bad_interval_from_python_makes_no_run_folder(tmp_path, monkeypatch):
    from stagewise import execute_spec

    monkeypatch.setenv(ENV_EVERY, "1e23")
    with pytest.raises(UserError, match=ENV_EVERY):
        execute_spec(EXAMPLE1_SHORT, tmp_path / "run", progress=False)
    assert list(tmp_path.iterdir()) == []


def test_callbacks_get_events_throttled_and_the_last_one(monkeypatch):
    events: list[ProgressEvent] = []
    with on_progress(events.append):
        with Progress(1000, "training", start=200, quiet=True) as bar:
            for _ in range(800):
                bar.advance()
    assert 1 <= len(events) <= 5  # at most one per CALLBACK_EVERY_S, and the end
    assert events[-1].done == events[-1].total == 1000 and events[-1].eta_s == 0
    assert [e.done for e in events] == sorted(e.done for e in events)


def test_a_resumed_count_starts_where_it_was_and_the_eta_counts_only_work_done_here():
    with Progress(100, "training", start=50, quiet=True) as bar:
        assert bar.event().eta_s is None  # nothing done here yet: no rate to go by
        bar.advance(10)
        event = bar.event()
    assert event.done == 60 and event.fraction == 0.6
    assert event.eta_s is not None and event.eta_s == pytest.approx(event.elapsed_s / 10 * 40, rel=1e-6)


@pytest.mark.usefixtures("no_run_figures")
def test_execute_spec_sends_training_progress_to_a_callback(tmp_path):
    from stagewise import execute_spec

    events: list[ProgressEvent] = []
    manifest = execute_spec(EXAMPLE1_SHORT, tmp_path / "run", progress=events.append)
    assert manifest["status"] == "done"
    assert events and events[-1].what == "ntp" and events[-1].done == events[-1].total == 40
    assert all(0 <= e.done <= e.total for e in events)


@pytest.mark.usefixtures("no_run_figures")
def test_run_without_a_terminal_prints_progress_lines(cli, tmp_path, monkeypatch):
    """`stagewise run` with stderr not a terminal (a log, CI, nohup): lines while it trains (the
    figures, not what is tested, are skipped)."""
    monkeypatch.setenv(ENV_EVERY, str(MIN_EVERY_S))
    code, _, err = cli("run", "ntp", "--preset", "example1", "--set", "train.steps_stage1=1500",
                       "--set", "train.steps_stage2=1500", "--out", str(tmp_path / "r"))
    assert code == 0, err
    lines = [line for line in err.splitlines() if re.fullmatch(r"ntp: \d+/3000 steps \(\d+%\), .* elapsed.*", line)]
    assert lines, err


@pytest.mark.slow  # a sweep and a quick reproduction through the CLI in fresh processes: ~45 s
def test_sweep_and_reproduce_without_a_terminal_print_progress_lines(tmp_path):
    env = {**os.environ, ENV_EVERY: "0.5"}
    spec = tmp_path / "s.yaml"
    spec.write_text('{"lab": "ntp", "preset": "example1", "set": {"train.steps_stage1": 3000, "train.steps_stage2": 3000},'
                    ' "axes": {"seed": [0, 1]}}')
    sweep = subprocess.run([sys.executable, "-m", "stagewise.cli", "sweep", "run", str(spec), "--out", str(tmp_path / "sw"),
                            "--max-parallel", "1", "--no-collect"], capture_output=True, text=True, env=env, timeout=300)
    assert sweep.returncode == 0, sweep.stderr
    assert any(re.fullmatch(r"sweep: [0-2]/2 points \(\d+%\), .* elapsed.*", line) for line in sweep.stderr.splitlines()), sweep.stderr
    rep = subprocess.run([sys.executable, "-m", "stagewise.cli", "reproduce", "ntp", "--quick", "--out", str(tmp_path / "rq")],
                         capture_output=True, text=True, env=env, timeout=300)
    assert rep.returncode == 0, rep.stderr
    assert any(re.fullmatch(r"reproduce ntp: [0-4]/4 points \(\d+%\), .* elapsed.*", line)
               for line in rep.stderr.splitlines()), rep.stderr
