"""A tracker's bad input (issue 39, round 4 of the attack): each case one UserError line and
nothing made or written; numpy and torch integers are steps; a closed tracker writes nothing
into its finished run; a SIGTERM while the run is closed (or its failure recorded) never
leaves the manifest ``running``."""

from __future__ import annotations

import copy
import json
import os
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
from runcache import folder_digest, without_run_figures

from stagewise import StagewiseCallback, Tracker, UserError, get_lab, resolve
from stagewise.labs.lm.prepare import prepare
from stagewise.orchestrate import track
from stagewise.runs import Interrupted
from cli_errors import raised_one_line as one_line




@pytest.fixture(scope="module")
def prep() -> Any:
    """counterfact-tiny's seeded model (45 rows of GPT-2's 50,257 ids), its tokenizer and row ids."""
    lab = get_lab("lm")
    return prepare(resolve(lab.Config, lab.preset_overrides("counterfact-tiny")), quiet=True).loaded


def tracker_of(prep: Any, out: Path, **kwargs: Any) -> Tracker:
    given = {"model": copy.deepcopy(prep.model), "tokenizer": prep.tokenizer, "lab": "lm", "preset": "counterfact-tiny",
             "vocab_ids": prep.vocab_ids, **kwargs}
    return Tracker(out, **given)


def steps_of(folder: Path) -> list[int]:
    return sorted(pd.read_parquet(folder / "metrics.parquet")["step"].unique().tolist())


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


def self_referencing() -> dict[str, Any]:
    value: dict[str, Any] = {"lr": 1e-3, "inner": {}}
    value["inner"]["outer"] = value
    return value


def small_vocab_model() -> Any:
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(vocab_size=100, n_layer=1, n_embd=16, n_head=2, bos_token_id=0, eos_token_id=0))


def meta_model() -> Any:
    from transformers import GPT2Config, GPT2LMHeadModel

    with torch.device("meta"):
        return GPT2LMHeadModel(GPT2Config(vocab_size=50257, n_layer=1, n_embd=16, n_head=2))


BAD = {
    "config-int": ({"config": 3}, "config=3: a YAML file's path or a mapping"),
    "config-list": ({"config": [1]}, "config=[1]"),
    "overrides-list": ({"overrides": [1]}, "overrides=[1]: give a mapping"),
    "overrides-str": ({"overrides": "task.name=sick"}, "overrides='task.name=sick': give a mapping"),
    "overrides-recursive": ({"overrides": self_referencing()}, "contains itself"),
    "settings-list": ({"settings": [1, 2]}, "settings=[1, 2]: give a mapping"),
    "settings-recursive": ({"settings": self_referencing()}, "settings['inner']['outer']: contains itself"),
    "settings-deep": ({"settings": nested(100)}, "nested deeper than 64 levels"),
    "lab-int": ({"lab": 3}, "lab=3"),
    "lab-missing": ({"lab": None}, "lab: name the lab whose probes apply (labs with probes: lm"),
    "lab-without-probe": ({"lab": "ntp"}, "lab 'ntp' has no probes"),
    "option-unknown": ({"colour": "red"}, "colour=...: not an option of lab 'lm''s probe (it takes: name, vocab_ids"),
    "preset-int": ({"preset": 3}, "preset=3"),
    "name-int": ({"name": 3}, "name=3"),
    "out-int": ({"out": 3}, "out=3: the run directory"),
    "out-empty": ({"out": ""}, "out='': the run directory"),
    "vocab_ids-str": ({"vocab_ids": "x"}, "vocab_ids='x'"),
    "vocab_ids-short": ({"vocab_ids": [1, 2]}, "vocab_ids: 2 ids for 45 embedding rows"),
    "vocab_ids-float": ({"vocab_ids": torch.zeros(45)}, "whole numbers"),
    "vocab_ids-repeat": ({"vocab_ids": [0] * 45}, "an id repeats"),
    "vocab_ids-range": ({"vocab_ids": list(range(50300, 50345))}, "the tokenizer's ids are 0 to 50256"),
    "tokenizer-str": ({"tokenizer": "gpt2"}, "tokenizer='gpt2': not a Hugging Face tokenizer"),
    "model-str": ({"model": "gpt2"}, "model='gpt2': the model being trained, a torch.nn.Module"),
    "model-none": ({"model": None}, "model=None"),
    "model-no-embeddings": ({"model": torch.nn.Linear(2, 2)}, "not a Hugging Face causal LM"),
    "model-fewer-rows": ({"model": "small", "vocab_ids": None}, "100 embedding rows for a tokenizer of 50257 tokens"),
    "model-meta": ({"model": "meta", "vocab_ids": None}, "on the meta device"),
    "categorize-none": ({"categorize": lambda examples, predictions: None}, "categorize returned None"),
    "every-float": ({"every": 2.5}, "every=2.5"),
    "schedule-bad": ({"schedule": "cosine"}, "schedule='cosine'"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_tracker_input_is_one_line_and_nothing_is_made(case, prep, tmp_path, monkeypatch):
    kwargs, needle = BAD[case]
    kwargs = dict(kwargs)
    if kwargs.get("model") in ("small", "meta"):
        kwargs["model"] = small_vocab_model() if kwargs["model"] == "small" else meta_model()
    monkeypatch.chdir(tmp_path)  # out='' would be this folder
    out = kwargs.pop("out", tmp_path / "r")
    with pytest.raises(UserError) as err:
        tracker_of(prep, out, **kwargs)
    assert needle in one_line(err)
    assert list(tmp_path.iterdir()) == []


def test_bad_callback_arguments_are_one_line_before_the_trainer(tmp_path):
    for kwargs, needle in (({"schedule": "log", "log_until": -1}, "log_until=-1"), ({"steps": [4, 2]}, "steps[1]=2"),
                           ({"settings": [1]}, "settings=[1]"), ({"every": 3, "steps": [1]}, "give one schedule")):
        with pytest.raises(UserError) as err:
            StagewiseCallback(tmp_path / "r", lab="lm", preset="counterfact-tiny", **kwargs)
        assert needle in one_line(err)
    with pytest.raises(UserError) as err:
        StagewiseCallback(None)  # type: ignore[arg-type]
    assert "out=None" in one_line(err)
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ steps and epochs
def test_numpy_and_torch_integers_are_steps(prep, tmp_path):
    tracker = tracker_of(prep, tmp_path / "r")
    with without_run_figures(("lm",)):
        assert tracker.step(np.int64(0), epoch=np.float32(0.0), force=True)
        assert tracker.step(np.uint8(3), epoch=np.float64(0.5), force=True)
        assert tracker.step(torch.tensor(5), epoch=1, force=True)
        tracker.close()
    assert steps_of(tmp_path / "r") == [0, 3, 5]
    epochs = pd.read_parquet(tmp_path / "r" / "metrics.parquet").query("metric == 'epoch'")["value"].tolist()
    assert epochs == [0.0, 0.5, 1.0]


@pytest.mark.parametrize("step, epoch, needle", [
    (10**30, None, "fits int64"), (2**63, None, "fits int64"), (-1, None, "whole number >= 0"),
    (np.float64(3.0), None, "whole number"), (7, float("nan"), "epoch=nan"), (7, "x", "epoch='x'"),
    (7, float("inf"), "epoch=inf"), (7, -1.0, "epoch=-1.0"), (7, True, "epoch=True"), (7, 10**400, "finite"),
], ids=["1e30", "2^63", "negative", "float", "nan", "str", "inf", "negative-epoch", "bool", "huge-int"])
def test_a_bad_step_or_epoch_is_one_line_and_writes_nothing(step, epoch, needle, prep, tmp_path):
    """Before the folder exists (nothing made) and after a first record (nothing written)."""
    fresh = tracker_of(prep, tmp_path / "fresh")
    with pytest.raises(UserError) as err:
        fresh.step(step, epoch=epoch, force=True)
    assert needle in one_line(err) and not (tmp_path / "fresh").exists()
    tracker = tracker_of(prep, tmp_path / "r")
    assert tracker.step(0, force=True)
    before = folder_digest(tmp_path / "r")
    with pytest.raises(UserError) as err:
        tracker.step(step, epoch=epoch, force=True)
    assert needle in one_line(err) and folder_digest(tmp_path / "r") == before
    with without_run_figures(("lm",)):
        tracker.close()
    assert steps_of(tmp_path / "r") == [0]


@pytest.mark.parametrize("ending", ["close", "fail"])
def test_a_closed_tracker_refuses_step_and_writes_nothing(ending, prep, tmp_path):
    """Before issue 39, step() after close() appended a record to metrics.jsonl and the
    predictions that metrics.parquet and summary.json lacked."""
    tracker = tracker_of(prep, tmp_path / "r")
    with without_run_figures(("lm",)):
        tracker.step(0, force=True)
        if ending == "close":
            tracker.close()
        else:
            tracker.fail(RuntimeError("the training stopped"))
    before = folder_digest(tmp_path / "r")
    with pytest.raises(UserError) as err:
        tracker.step(5, force=True)
    assert "this tracker is closed" in one_line(err) and "step(5)" in str(err.value)
    assert folder_digest(tmp_path / "r") == before
    status = json.loads((tmp_path / "r" / "manifest.json").read_text())["status"]
    assert status == ("done" if ending == "close" else "failed")


# ------------------------------------------------------------------ a stop while the run is closed
@pytest.fixture
def sigterm_caught():
    """A SIGTERM handler of the test's own while it runs, so a tracker that installs none fails the
    test instead of ending pytest; yields the signals it caught."""
    caught: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: caught.append(signum))
    yield caught
    signal.signal(signal.SIGTERM, previous)


@pytest.mark.parametrize("where", ["start", "summary"])
@pytest.mark.parametrize("how", ["with", "close"])
def test_sigterm_while_closing_records_interrupted_and_resumes(how, where, prep, tmp_path, monkeypatch, sigterm_caught):
    """A SIGTERM as close() starts, or once metrics.parquet is written (inside the summary):
    the run is recorded ``interrupted`` (never left ``running``), Interrupted is raised, and a
    tracker opened on the folder again finishes it with the same records."""
    tracker = tracker_of(prep, tmp_path / "r")

    def term() -> None:
        os.kill(os.getpid(), signal.SIGTERM)

    if where == "start":
        finish = track.finish

        def terminated(*args: Any, **kwargs: Any) -> Any:
            term()
            return finish(*args, **kwargs)

        monkeypatch.setattr(track, "finish", terminated)
    else:
        class StoppedInSummary:
            """This tracker's lab, whose summary (after metrics.parquet is written) gets a SIGTERM."""

            def __init__(self, lab: Any) -> None:
                self.lab = lab

            def __getattr__(self, name: str) -> Any:
                return getattr(self.lab, name)

            def summary(self, *args: Any, **kwargs: Any) -> Any:
                assert (tmp_path / "r" / "metrics.parquet").is_file()
                term()
                return self.lab.summary(*args, **kwargs)

        tracker.lab = StoppedInSummary(tracker.lab)  # type: ignore[assignment]
    with without_run_figures(("lm",)), pytest.raises(Interrupted):
        if how == "with":
            with tracker:
                tracker.step(0, force=True)
                tracker.step(4, force=True)
        else:
            tracker.step(0, force=True)
            tracker.step(4, force=True)
            tracker.close()
    assert sigterm_caught == []  # the tracker's handler took it
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and "SIGTERM" in manifest["error"]
    monkeypatch.undo()
    again = tracker_of(prep, tmp_path / "r")
    with without_run_figures(("lm",)):
        assert not again.step(4, force=True)  # recorded before the stop
        assert again.close()["status"] == "done"
    assert steps_of(tmp_path / "r") == [0, 4]
    assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL  # the test's handler is back


def test_sigterm_while_a_failure_is_recorded_is_ignored(prep, tmp_path, monkeypatch, sigterm_caught):
    """fail(): a SIGTERM while the failure is written does not cut it short."""
    tracker = tracker_of(prep, tmp_path / "r")
    record_failure = track.record_failure

    def terminated(*args: Any, **kwargs: Any) -> Any:
        os.kill(os.getpid(), signal.SIGTERM)
        return record_failure(*args, **kwargs)

    monkeypatch.setattr(track, "record_failure", terminated)
    with pytest.raises(RuntimeError, match="out of memory"), tracker:
        tracker.step(0, force=True)
        raise RuntimeError("out of memory")
    assert sigterm_caught == []
    assert json.loads((tmp_path / "r" / "manifest.json").read_text())["status"] == "failed"


TRACKED_LOOP = """
import sys, time, torch
from stagewise import Tracker
sys.path.insert(0, sys.argv[2])
from linear_modes.lab import LAB
net = torch.nn.Sequential(torch.nn.Linear(3, 4, bias=False), torch.nn.Linear(4, 3, bias=False)).double()
settings = {"data": {"singular_values": [3.0, 1.0], "d_in": 3, "d_out": 3}, "model": {"hidden": 4}}
with Tracker(sys.argv[1], net, lab=LAB, overrides=settings, every=1) as tracker:
    tracker.step(0, force=True)
    print("ready", flush=True)
    for step in range(1, 10**9):
        time.sleep(0.001)
        tracker.step(step)
"""


@pytest.mark.parametrize("second", [None, 0.2], ids=["one-sigterm", "second-sigterm-200ms-later"])
def test_a_second_sigterm_ends_the_process_as_the_first_does(second, tmp_path):
    """Round 4: a scheduler's second SIGTERM 100-500 ms after the first ended the process with -15
    during its exit (the interpreter puts its own handlers back to the default at shutdown). Now
    the run is recorded interrupted and the process ends by the first one's Interrupted (exit 1,
    its traceback) however many SIGTERMs follow."""
    import subprocess
    import sys
    import time

    examples = Path(__file__).resolve().parents[2] / "examples"
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", TRACKED_LOOP, str(out), str(examples)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    ready = proc.stdout.readline().strip()
    assert ready == "ready", proc.stderr.read()[-1500:]
    time.sleep(0.3)  # in the loop, probing every step
    proc.send_signal(signal.SIGTERM)
    if second is not None:
        time.sleep(second)
        proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, (proc.returncode, err[-1500:])
    assert err.strip().splitlines()[-1] == "stagewise.runs.stops.Interrupted: SIGTERM"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and "SIGTERM" in manifest["error"]
