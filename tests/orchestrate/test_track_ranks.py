"""Multi-process training (issue 39): only rank 0 writes, the other ranks answer with its
decisions and wait at a barrier, sharded models are one line.

The default tier checks the rank logic without processes (``RANK=1`` as torchrun sets it, a
fake process group); the slow tier runs ``torchrun --nproc_per_node 2`` (CPU, gloo) with the
Trainer and a plain DDP loop (tests/orchestrate/ddp_training.py) and compares the Trainer's
records with a 1-process run on the same global batches.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest
import torch

from stagewise import StagewiseCallback, Tracker, UserError, resolve
from stagewise.labs import get_lab
from stagewise.labs.lm.prepare import prepare
from stagewise.orchestrate import ranks
from cli_errors import raised_one_line as one_line

pytestmark = pytest.mark.filterwarnings(  # the Trainer pins memory by default; this machine has no accelerator
    "ignore:'pin_memory' argument is set as true but no accelerator is found:UserWarning")

SCRIPT = Path(__file__).with_name("ddp_training.py")
RECORD_RTOL = 1e-5
"""Relative tolerance of every recorded metric between the 2-process (DDP) Trainer and the
1-process Trainer on the same global batches (2 x 6 examples per step against 12): the
averaged gradients are the same mean over the same 12 examples, summed in another order, and
each rank pads its own 6 examples to a narrower batch. Measured: at most 1.7e-8 (train.loss;
the counts are equal), so 1e-5 leaves a wide margin and still sees any change of the training."""




@pytest.fixture(scope="module")
def prep() -> Any:
    lab = get_lab("lm")
    return prepare(resolve(lab.Config, lab.preset_overrides("counterfact-tiny")), quiet=True)


def tracker(prep: Any, out: Path, **kwargs: Any) -> Tracker:
    return Tracker(out, prep.loaded.model, prep.loaded.tokenizer, lab="lm", preset="counterfact-tiny",
                   vocab_ids=prep.loaded.vocab_ids, **kwargs)


STEPS = list(range(0, 21))
FORCED = {0, 7, 20}


def answers(t: Tracker) -> list[bool]:
    out = [t.step(s, force=s in FORCED) for s in STEPS]
    t.close()
    return out


# ------------------------------------------------------------------ ranks without processes
@pytest.mark.parametrize("schedule", [{"every": 3}, {"schedule": "log", "log_until": 8, "every": 5},
                                      {"steps": [1, 2, 9, 15]}], ids=["every", "log", "steps"])
def test_a_rank_1_tracker_makes_nothing_and_answers_as_rank_0(schedule, prep, tmp_path, monkeypatch, no_run_figures):
    """RANK=1 (as torchrun sets it, no process group): no folder, no file, and step() answers
    exactly as rank 0's tracker on the same steps and forces; close() returns {}."""
    monkeypatch.delenv("RANK", raising=False)
    main = tracker(prep, tmp_path / "rank0", **schedule)
    assert main.main
    expected = answers(main)
    assert json.loads((tmp_path / "rank0" / "manifest.json").read_text())["status"] == "done"
    monkeypatch.setenv("RANK", "1")
    other = tracker(prep, tmp_path / "rank1", **schedule)
    assert not other.main
    with other:
        got = [other.step(s, force=s in FORCED) for s in STEPS]
    assert got == expected and sum(got) > len(FORCED)
    assert other.close() == {} and other.records == sum(expected)
    assert not (tmp_path / "rank1").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["rank0"]


def test_main_process_overrides_the_rank(prep, tmp_path, monkeypatch):
    """main_process=False (the callback's state.is_world_process_zero) on RANK 0 makes nothing."""
    monkeypatch.setenv("RANK", "0")
    other = tracker(prep, tmp_path / "r", every=1, main_process=False)
    assert other.step(0, force=True) and other.step(1) and other.close() == {}
    assert not (tmp_path / "r").exists()


class FakeGroup:
    """A stand-in for torch.distributed with a process group of 2, seen from ``rank``: rank 0's
    broadcasts are scripted (``heard``), every barrier is counted."""

    def __init__(self, rank: int, heard: list[int] | None = None):
        self.rank, self.heard, self.sent, self.barriers = rank, list(heard or []), [], 0

    def get_rank(self) -> int:
        return self.rank

    def get_backend(self) -> str:
        return "gloo"

    def barrier(self) -> None:
        self.barriers += 1

    def broadcast(self, box: torch.Tensor, src: int) -> None:
        assert src == 0
        if self.rank == 0:
            self.sent.append(int(box.item()))
        else:
            box.fill_(self.heard.pop(0))


def test_the_budget_rule_is_rank_0s_decision_broadcast(prep, tmp_path, monkeypatch):
    """Under a process group, rank 1 answers each budget-rule step with what rank 0 broadcast
    (its own clock is never read), waits at a barrier for each probe and at close; rank 0
    broadcasts its last record at open (none: -1) and every budget decision."""
    heard = [-1, 0, 1, 0, 0, 1]  # open: no record yet; then steps 1..5 (step 0 is forced: nothing broadcast)
    group = FakeGroup(1, heard)
    monkeypatch.setattr(ranks, "_dist", lambda: group)
    other = tracker(prep, tmp_path / "r")
    other.budget_rule.clock = lambda: pytest.fail("rank 1 read its own budget clock")  # type: ignore[assignment]
    got = [other.step(s, force=s == 0) for s in range(6)]
    assert got == [True, False, True, False, False, True] and not group.heard
    assert group.barriers == 3
    assert other.close() == {} and group.barriers == 4
    assert not (tmp_path / "r").exists()


def test_rank_0_broadcasts_its_decisions_and_waits(prep, tmp_path, monkeypatch, no_run_figures):
    group = FakeGroup(0)
    monkeypatch.setattr(ranks, "_dist", lambda: group)
    main = tracker(prep, tmp_path / "r", budget=1.0)
    got = [main.step(s, force=s == 0) for s in range(4)]
    main.close()
    assert group.sent == [-1, *[int(x) for x in got[1:]]]  # the last record at open, then each decision
    assert group.barriers == sum(got) + 1  # after each probe and at close


def test_a_resumed_run_s_last_record_is_heard_by_the_other_ranks(prep, tmp_path, monkeypatch):
    group = FakeGroup(1, [5])  # rank 0 resumed a run whose last record is step 5
    monkeypatch.setattr(ranks, "_dist", lambda: group)
    other = tracker(prep, tmp_path / "r", every=2)
    assert [other.step(s) for s in (4, 5, 6)] == [False, False, True]


def test_rank_0_failing_to_open_stops_the_other_ranks_in_one_line(prep, tmp_path, monkeypatch):
    from stagewise.orchestrate.track import OPEN_FAILED

    monkeypatch.setattr(ranks, "_dist", lambda: FakeGroup(1, [OPEN_FAILED]))
    other = tracker(prep, tmp_path / "r", every=2)
    with pytest.raises(UserError) as err:
        other.step(0)
    assert "rank 0 could not open the run" in one_line(err)


# ------------------------------------------------------------------ sharded models
def fsdp_wrapped(model: torch.nn.Module) -> torch.nn.Module:
    class FullyShardedDataParallel(torch.nn.Module):  # what FSDP1 keeps: the wrapped module
        def __init__(self, inner: torch.nn.Module):
            super().__init__()
            self._fsdp_wrapped_module = inner

    return FullyShardedDataParallel(model)


def zero3(model: torch.nn.Module) -> torch.nn.Module:
    for parameter in model.parameters():
        parameter.ds_id = 0  # type: ignore[attr-defined]  # DeepSpeed ZeRO-3 marks its partitioned weights
    return model


class FakeDTensor(torch.nn.Parameter):
    pass


def dtensors(model: torch.nn.Module) -> torch.nn.Module:
    model.weight = FakeDTensor(model.weight.detach().clone())
    return model


@pytest.mark.parametrize("shard,what", [(fsdp_wrapped, "wrapped in FSDP"), (zero3, "DeepSpeed ZeRO-3"),
                                        (dtensors, "DTensors")], ids=["fsdp", "zero3", "dtensor"])
def test_a_sharded_model_is_one_line_before_anything_is_made(shard, what, prep, tmp_path, monkeypatch):
    monkeypatch.setattr(ranks, "_dtensor_class", lambda: FakeDTensor)
    with pytest.raises(UserError) as err:
        Tracker(tmp_path / "r", shard(torch.nn.Linear(2, 2)), prep.loaded.tokenizer, lab="lm", preset="counterfact-tiny")
    text = one_line(err)
    assert what in text and "not supported" in text and "stagewise LAB trajectory" in text
    assert not (tmp_path / "r").exists()
    ranks.check_not_sharded(torch.nn.Linear(2, 2))  # a plain model passes


@pytest.mark.parametrize("args", [SimpleNamespace(fsdp=["full_shard"], deepspeed=None),
                                  SimpleNamespace(fsdp=[], deepspeed={"zero_optimization": {"stage": 3}})],
                         ids=["fsdp", "zero3"])
def test_the_callback_refuses_fsdp_and_zero3_when_the_trainer_is_made(args, prep, tmp_path, monkeypatch):
    import transformers.integrations.deepspeed as hfds

    monkeypatch.setattr(hfds, "is_deepspeed_zero3_enabled", lambda: True)
    args.to_dict, args.seed = (lambda: {}), 0
    callback = StagewiseCallback(tmp_path / "r", lab="lm", preset="counterfact-tiny", vocab_ids=prep.loaded.vocab_ids)
    with pytest.raises(UserError) as err:
        callback.on_init_end(args, SimpleNamespace(is_world_process_zero=True), None, model=prep.loaded.model,
                             processing_class=prep.loaded.tokenizer)
    assert "not supported" in one_line(err) and not (tmp_path / "r").exists()
    with pytest.raises(UserError) as err:  # and a model the Trainer wrapped, at the training's start
        callback.on_train_begin(args, SimpleNamespace(global_step=0, epoch=0.0), None, model=fsdp_wrapped(prep.loaded.model))
    assert "wrapped in FSDP" in one_line(err)


# ------------------------------------------------------------------ the real thing: torchrun, 2 processes
@pytest.mark.slow  # two torchrun processes and one plain one (CPU, gloo), each a Trainer run: ~25 s on 2 busy cores
def test_ddp_training_records_once_what_one_process_records(tmp_path):
    """The acceptance of issue 39: ``torchrun --nproc_per_node 2`` (CPU, gloo), the callback on
    every rank at every=2, exits 0 with exactly the run folders rank 0 makes (the Trainer's and
    the plain DDP loop's), both done; the Trainer's records equal those of a 1-process Trainer
    on the same global batches (2 x 6 against 12 examples per step) within RECORD_RTOL, the
    categories exactly; in the plain loop (budget rule) both ranks gave the same answers at
    every step, and rank 0 recorded exactly the steps they said."""
    env = {**os.environ, "STAGEWISE_FIGURES": "0", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2] / "src"), os.environ.get("PYTHONPATH", "")])}
    env.pop("RANK", None)
    two, one = tmp_path / "two", tmp_path / "one"
    common = ["--epochs", "4", "--every", "2"]
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           str(SCRIPT), str(two), "--batch", "6", *common, "--loop-epochs", "20"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    done = subprocess.run([sys.executable, str(SCRIPT), str(one), "--batch", "12", *common],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]

    made = sorted(str(p.parent.relative_to(two)) for p in two.rglob("manifest.json"))
    assert made == ["runs/loop", "runs/trainer"]
    for folder in made:
        assert json.loads((two / folder / "manifest.json").read_text())["status"] == "done"

    def records(root: Path) -> pd.Series:
        return pd.read_parquet(root / "runs" / "trainer" / "metrics.parquet").set_index(["step", "metric"])["value"].sort_index()

    ddp, single = records(two), records(one)
    assert list(ddp.index) == list(single.index)
    assert sorted(ddp.index.get_level_values("step").unique()) == [0, 2, 4, 6, 8, 10, 12]
    rel = ((ddp - single).abs() / single.abs().clip(lower=1e-12)).max()
    assert rel <= RECORD_RTOL, f"records differ by {rel:.2e} relative (tolerance {RECORD_RTOL:.0e})"

    def predictions(root: Path) -> pd.DataFrame:
        pred = pd.read_parquet(root / "runs" / "trainer" / "tables" / "predictions.parquet")
        return pred.set_index(["epoch", "example_id"]).sort_index()

    ddp_pred, single_pred = predictions(two), predictions(one)
    columns = ["category", "category_open", "answer_rank"]
    pd.testing.assert_frame_equal(ddp_pred[columns], single_pred[columns])
    pd.testing.assert_series_equal(ddp_pred["answer_logprob"], single_pred["answer_logprob"], rtol=RECORD_RTOL)

    rank0, rank1 = (json.loads((two / f"decisions-{r}.json").read_text()) for r in (0, 1))
    assert rank0 == rank1 and sum(rank0[1:-1]) >= 1  # the budget rule probed during the training too
    loop_steps = sorted(pd.read_parquet(two / "runs" / "loop" / "metrics.parquet")["step"].unique())
    assert loop_steps == [s for s, probed in enumerate(rank0) if probed]
