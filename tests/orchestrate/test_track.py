"""Tracked runs (issue 29): the lab's records of a training run elsewhere.

docs/probes.md's blocks run as written (the Hugging Face Trainer with StagewiseCallback, and
a plain loop with Tracker) on the CounterFact fixture, and their records are those of the lm
lab's own counterfact-tiny training (one cached lab run): identical category counts at every
epoch, the loss within a stated tolerance. Probing never changes the training (final weights
bit for bit, with dropout and with a probe that draws random numbers; the check sees a probe
that does not restore). Bad input is one line before anything is made; an interrupted tracked
run resumes to the uninterrupted records; ``stagewise show`` and ``stages`` read a tracked run.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from lm_fixtures import counterfact_records
from runcache import folder_digest, without_run_figures

from stagewise import RunSpec, StagewiseCallback, Tracker, UserError, resolve
from stagewise.labs import get_lab
from stagewise.labs.lm.prepare import prepare
from stagewise.orchestrate import track
from stagewise.orchestrate.schedule import MIN_BUDGET_GAP
from cli_errors import raised_one_line as one_line

pytestmark = pytest.mark.filterwarnings(  # the Trainer pins memory by default; this machine has no accelerator
    "ignore:'pin_memory' argument is set as true but no accelerator is found:UserWarning")

DOC = Path(__file__).resolve().parents[2] / "docs" / "probes.md"
EPOCHS = 30  # counterfact-tiny's, and the doc's blocks'
STEPS_PER_EPOCH = 2  # the fixture's 36 one-token examples in batches of 32
LAB_RUN = RunSpec(lab="lm", preset="counterfact-tiny", overrides={"baselines": {"kinds": []}}, name="counterfact-tiny")
"""The lab's own training the tracked trainings are compared with (no baselines: a tracked run has none)."""
LOSS_RTOL = 1e-5
"""Relative tolerance of ``train.loss`` between the lab's training and the same training done
by the Trainer or the doc's plain loop. Both are float32 AdamW on the same batches from the
same weights, but the Hugging Face loss takes the logits of every position of a batch one
column wider (the answer appended) where the lab computes only each prompt's last position,
so sums run in another order and the weights drift apart by rounding. Measured over the 30
epochs (60 steps): at most 2.3e-7 relative (Trainer) and 7.0e-7 (the doc's loop); 1e-5 leaves
a margin of about 15x and is still far below any change of the training (the Trainer's default
clipping at 1.0 moves the loss by up to 0.7)."""
COUNTS = ("train.semantic_correct", "train.type_correct", "train.type_wrong", "train.type_correct_open",
          "train.type_wrong_open", "train.excluded_open")


# ------------------------------------------------------------------ helpers
def doc_blocks() -> list[str]:
    """The ```python blocks of docs/probes.md, in order: the model and data, the Trainer, the loop,
    a tracker with a category rule of one's own (made and checked; it records nothing)."""
    return re.findall(r"^```python\n(.*?)^```$", DOC.read_text(encoding="utf-8"), flags=re.S | re.M)


def run_blocks(blocks: list[str], folder: Path) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        for block in blocks:
            exec(compile(block, str(DOC), "exec"), namespace)  # our own docs, as a reader runs them
    return namespace


def wide(folder: Path) -> pd.DataFrame:
    """metrics.parquet as one row per step, one column per metric."""
    metrics = pd.read_parquet(folder / "metrics.parquet")
    return metrics.pivot_table(index="step", columns="metric", values="value")


def at_epoch_ends(frame: pd.DataFrame) -> pd.DataFrame:
    """The records at whole epochs, indexed by epoch."""
    ends = frame[frame["epoch"] == frame["epoch"].round()]
    return ends.set_index(ends["epoch"].astype(int))




def tiny_config(**tiny: Any):
    lab = get_lab("lm")
    return resolve(lab.Config, lab.preset_overrides("counterfact-tiny"), extra={"model": {"tiny": tiny}} if tiny else None)


def train_loop(model: Any, collate: Any, data: list[dict], epochs: int, tracker: Tracker | None = None,
               stop_after: int | None = None, stop: BaseException | None = None) -> None:
    """A researcher's loop (AdamW 1e-3, batches of 32 in dataset order, model.train() once: a
    probe that left the model in eval mode would switch dropout off for good), calling
    ``tracker.step`` after every step (it probes when due) and at the end (forced); raises
    ``stop`` after step ``stop_after``."""
    torch.manual_seed(1234)  # dropout's draws: the same in every arm
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    batches = [data[i:i + 32] for i in range(0, len(data), 32)]
    if tracker is not None:
        tracker.step(0, epoch=0.0, force=True)
    model.train()
    step, total = 0, epochs * len(batches)
    for _ in range(epochs):
        for batch in batches:
            loss = model(**collate(batch)).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if tracker is not None:
                tracker.step(step, epoch=step / len(batches), force=step == total)
            if step == stop_after and stop is not None:
                raise stop


def assert_same_weights(a: Any, b: Any) -> None:
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    assert pa.keys() == pb.keys()
    different = [name for name in pa if not torch.equal(pa[name], pb[name])]
    assert not different, f"weights differ: {different[:5]}"


def assert_any_different(a: Any, b: Any) -> None:
    assert any(not torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


# ------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def lab_run(run_cache) -> Path:
    """The lab's own counterfact-tiny training on the fixture (30 epochs, ~4 s without figures)."""
    with without_run_figures(("lm",)):
        return run_cache.path(LAB_RUN)


@pytest.fixture(scope="module")
def setup_ns(tmp_path_factory) -> dict[str, Any]:
    """The doc's first block alone: the untrained model, tokenizer, data and collator (tests copy the model)."""
    return run_blocks(doc_blocks()[:1], tmp_path_factory.mktemp("probes_setup"))


@pytest.fixture(scope="module")
def doc_runs(tmp_path_factory) -> Path:
    """The doc's blocks run as written: runs/tracked (the Trainer) and runs/loop (a plain loop),
    then a tracker with its own category rule, made (every input checked) but never stepped."""
    folder = tmp_path_factory.mktemp("probes_doc")
    blocks = doc_blocks()
    assert len(blocks) == 4, "docs/probes.md: the model and data, the Trainer, the plain loop, your own categories"
    namespace = run_blocks(blocks, folder)
    assert namespace["tracker"].config.thresholds.type_rule == "user" and not (folder / "runs" / "mine").exists()
    return folder


# ------------------------------------------------------------------ parity with the lab's own training
@pytest.mark.parametrize("kind", ["tracked", "loop"])
def test_tracked_training_records_what_the_lab_records(kind, lab_run, doc_runs):
    """The Trainer (runs/tracked) and the plain loop (runs/loop) of docs/probes.md against the
    lab's training of counterfact-tiny: the same epochs, identical category counts under both
    type rules, identical per-example categories, and train.loss within LOSS_RTOL."""
    lab, tracked = at_epoch_ends(wide(lab_run)), at_epoch_ends(wide(doc_runs / "runs" / kind))
    assert list(lab.index) == list(tracked.index) == list(range(EPOCHS + 1))
    assert (lab.loc[:, list(COUNTS)] == tracked.loc[:, list(COUNTS)]).all().all(), \
        pd.concat({"lab": lab[list(COUNTS)], kind: tracked[list(COUNTS)]}, axis=1)
    rel = ((lab["train.loss"] - tracked["train.loss"]).abs() / lab["train.loss"]).max()
    assert rel <= LOSS_RTOL, f"train.loss differs by {rel:.2e} relative (tolerance {LOSS_RTOL:.0e})"
    assert lab.loc[0, "train.loss"] == tracked.loc[0, "train.loss"]  # the same initial weights, the same evaluation
    assert lab.loc[EPOCHS, "train.semantic_correct"] > lab.loc[0, "train.semantic_correct"]  # it learned something

    def categories(folder: Path) -> pd.DataFrame:
        pred = pd.read_parquet(folder / "tables" / "predictions.parquet")
        pred = pred[pred["epoch"] == pred["epoch"].round()]
        return pred.set_index(["epoch", "example_id"]).sort_index()[["category", "category_open"]]

    pd.testing.assert_frame_equal(categories(lab_run), categories(doc_runs / "runs" / kind))


def test_tracked_runs_hold_their_settings_and_records(doc_runs):
    trainer, loop = doc_runs / "runs" / "tracked", doc_runs / "runs" / "loop"
    for folder in (trainer, loop):
        manifest = json.loads((folder / "manifest.json").read_text())
        assert manifest["status"] == "done" and manifest["notes"]["examples"] == {"counterfact": 36}
        assert manifest["notes"]["dropped_multi_token"] == {"counterfact": 3}
        assert (folder / "summary.json").is_file() and (folder / "figures" / "categories.png").is_file()
        steps = wide(folder).index
        assert steps[0] == 0 and steps[-1] == EPOCHS * STEPS_PER_EPOCH
    source = yaml.safe_load((trainer / "config.yaml").read_text())["source"]
    assert source["kind"] == "tracked" and source["every"] == 0 and source["budget"] == 0.1
    args = source["settings"]["trainer"]
    assert args["learning_rate"] == 1e-3 and args["max_grad_norm"] == 0.0 and args["num_train_epochs"] == EPOCHS
    assert args["train_sampling_strategy"] == "sequential"
    loop_source = yaml.safe_load((loop / "config.yaml").read_text())["source"]
    assert loop_source["settings"] == {"optimizer": "AdamW", "lr": 1e-3, "batch_size": 32, "epochs": EPOCHS}


def test_show_and_stages_read_a_tracked_run(cli, doc_runs, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    folder = doc_runs / "runs" / "tracked"
    code, stdout, err = cli("show", str(folder))
    assert code == 0, err
    assert "status=done" in stdout and "type_before_fact" in stdout
    claims = {c["id"]: c for c in json.loads((folder / "summary.json").read_text())["claims"]}
    assert claims["type_before_fact"]["holds"] is True  # the fixture's run: types before facts, as in the lab's run
    assert claims["type_lead_beyond_baseline"]["holds"] is None  # no baselines beside a tracked training
    code, stdout, err = cli("stages", str(folder), "facts=train.accuracy>=0.5", "types=train.type_correct_open>=10")
    assert code == 0, err
    assert "facts" in stdout and "types" in stdout and "order (by median step): types -> facts" in stdout


# ------------------------------------------------------------------ probing changes nothing
def drawing(tracker: Tracker, monkeypatch, seen: list[bool] | None = None) -> None:
    """Make ``tracker``'s probe draw random numbers before each record (as a seeded randomized
    SVD or a sampled probe set would); ``seen`` gets the model's train flag during each record."""
    record = tracker.probe.record

    def draws(*args: Any, **kwargs: Any) -> None:
        torch.rand(100)
        record(*args, **kwargs)
        if seen is not None:
            seen.append(tracker.model.training)

    monkeypatch.setattr(tracker.probe, "record", draws)


def trainer_trained(model: Any, setup_ns: dict[str, Any], folder: Path, callbacks: list, monkeypatch) -> Any:
    """``model`` trained 3 epochs by the Trainer (the doc's arguments), the callbacks' probes drawing random numbers."""
    from transformers import Trainer, TrainingArguments

    args = TrainingArguments(output_dir=str(folder / "hf"), num_train_epochs=3, per_device_train_batch_size=32,
                             learning_rate=1e-3, weight_decay=0.0, lr_scheduler_type="constant", max_grad_norm=0.0,
                             train_sampling_strategy="sequential", remove_unused_columns=False, report_to="none",
                             save_strategy="no", logging_strategy="no", disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=setup_ns["train_data"], data_collator=setup_ns["collate"],
                      processing_class=setup_ns["tokenizer"], callbacks=callbacks)
    for callback in callbacks:
        drawing(callback.tracker, monkeypatch)
    trainer.train()
    return model


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_probing_leaves_the_trainer_training_bit_identical(dropout, setup_ns, tmp_path, monkeypatch):
    """The Trainer with a callback probing at every step and epoch end (a probe that draws
    random numbers) ends with the weights of the same Trainer without it (3 epochs)."""
    initial = prepare(tiny_config(dropout=dropout), quiet=True).loaded.model
    callback = StagewiseCallback(tmp_path / "tracked", lab="lm", preset="counterfact-tiny", every=1, at_epoch_end=True,
                                 vocab_ids=setup_ns["prep"].loaded.vocab_ids)
    with without_run_figures(("lm",)):
        probed = trainer_trained(copy.deepcopy(initial), setup_ns, tmp_path, [callback], monkeypatch)
    assert callback.tracker is not None and callback.tracker.records == 3 * STEPS_PER_EPOCH + 1  # every step and step 0
    assert_same_weights(probed, trainer_trained(copy.deepcopy(initial), setup_ns, tmp_path, [], monkeypatch))


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_probing_leaves_a_plain_loop_bit_identical(dropout, setup_ns, tmp_path, monkeypatch):
    """A loop probed at every step, by a probe that draws random numbers, ends with the weights
    of the loop without it; with dropout 0.1 both the train flags and the RNG state must be put
    back for that (the next test)."""
    prep = prepare(tiny_config(dropout=dropout), quiet=True)
    initial = prep.loaded.model
    assert any(isinstance(m, torch.nn.Dropout) and m.p == dropout for m in initial.modules())
    collate, data = setup_ns["collate"], setup_ns["train_data"]
    bare = copy.deepcopy(initial)
    train_loop(bare, collate, data, epochs=3)
    probed = copy.deepcopy(initial)
    with without_run_figures(("lm",)):  # the tracker's lab (its figures) is taken when it is made
        tracker = Tracker(tmp_path / "r", probed, prep.loaded.tokenizer, lab="lm", preset="counterfact-tiny", every=1,
                          vocab_ids=prep.loaded.vocab_ids)
        drawing(tracker, monkeypatch)
        with tracker:
            train_loop(probed, collate, data, epochs=3, tracker=tracker)
    assert tracker.records == 3 * STEPS_PER_EPOCH + 1
    assert_same_weights(probed, bare)


def flags_only(state: track.ModelState) -> None:
    for module, training in state.modes:
        module.training = training


@pytest.mark.parametrize("restore", [lambda state: None, flags_only], ids=["nothing", "flags-only"])
def test_the_identity_check_sees_a_probe_that_does_not_restore(restore, setup_ns, tmp_path, monkeypatch):
    """The check above has teeth: with dropout 0.1, a probe that puts back nothing (dropout then
    stays off) or only the train flags (its random draws shift dropout's masks) ends elsewhere."""
    prep = prepare(tiny_config(dropout=0.1), quiet=True)
    collate, data = setup_ns["collate"], setup_ns["train_data"]
    bare = copy.deepcopy(prep.loaded.model)
    train_loop(bare, collate, data, epochs=1)
    monkeypatch.setattr(track.ModelState, "restore", restore)
    probed = copy.deepcopy(prep.loaded.model)
    with without_run_figures(("lm",)):
        tracker = Tracker(tmp_path / "r", probed, prep.loaded.tokenizer, lab="lm", preset="counterfact-tiny", every=1,
                          vocab_ids=prep.loaded.vocab_ids)
        drawing(tracker, monkeypatch)
        with tracker:
            train_loop(probed, collate, data, epochs=1, tracker=tracker)
    assert_any_different(probed, bare)


def test_a_probe_puts_back_every_train_flag_and_the_rng_state(setup_ns, tmp_path, monkeypatch):
    model = copy.deepcopy(setup_ns["model"]).train()
    model.transformer.h[0].eval()  # a frozen block: its flag must stay as the training set it
    with without_run_figures(("lm",)):
        tracker = Tracker(tmp_path / "r", model, setup_ns["tokenizer"], lab="lm", preset="counterfact-tiny",
                          vocab_ids=setup_ns["prep"].loaded.vocab_ids)
    seen: list[bool] = []
    drawing(tracker, monkeypatch, seen)
    flags = [m.training for m in model.modules()]
    state = torch.get_rng_state()
    assert tracker.step(0, force=True) and seen == [False]  # the probe ran in eval mode
    assert torch.equal(torch.get_rng_state(), state)
    assert [m.training for m in model.modules()] == flags
    tracker.close()


# ------------------------------------------------------------------ bad input: one line, nothing made
def test_a_callback_without_a_tokenizer_stops_the_trainer_construction(setup_ns, tmp_path):
    from transformers import Trainer, TrainingArguments

    callback = StagewiseCallback(tmp_path / "tracked", lab="lm", preset="counterfact-tiny", vocab_ids=setup_ns["prep"].loaded.vocab_ids)
    args = TrainingArguments(output_dir=str(tmp_path / "hf"), report_to="none", remove_unused_columns=False)
    with pytest.raises(UserError) as err:
        Trainer(model=copy.deepcopy(setup_ns["model"]), args=args, train_dataset=setup_ns["train_data"],
                data_collator=setup_ns["collate"], callbacks=[callback])
    assert "processing_class" in one_line(err) and "tokenizer" in str(err.value)
    assert not (tmp_path / "tracked").exists()


def test_a_probe_set_without_usable_rows_is_one_line_before_the_folder(setup_ns, tmp_path):
    """Every answer more than one token for GPT-2's tokenizer (typed relations, so the data is
    otherwise valid): nothing to probe."""
    records = counterfact_records(multi_token=False)
    for r in records:
        r["requested_rewrite"]["target_true"]["str"] = "Ouagadougou Burkina"
    path = tmp_path / "multi.json"
    path.write_text(json.dumps(records), encoding="utf-8")
    with pytest.raises(UserError) as err:
        Tracker(tmp_path / "r", copy.deepcopy(setup_ns["model"]), setup_ns["tokenizer"], lab="lm", preset="counterfact-tiny",
                overrides={"data": {"path": str(path)}}, vocab_ids=setup_ns["prep"].loaded.vocab_ids)
    assert "one-token answer" in one_line(err)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("step", [-1, 1.5, True, "3"])
def test_a_bad_step_is_one_line_before_the_folder(step, setup_ns, tmp_path):
    tracker = Tracker(tmp_path / "r", copy.deepcopy(setup_ns["model"]), setup_ns["tokenizer"], lab="lm", preset="counterfact-tiny",
                      vocab_ids=setup_ns["prep"].loaded.vocab_ids)
    with pytest.raises(UserError) as err:
        tracker.step(step, force=True)
    assert "whole number >= 0" in one_line(err)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("kwargs, needle", [({"every": -1}, "every=-1"), ({"tokenizer": None}, "tokenizer"),
                                            ({"budget": 0}, "budget")])
def test_bad_tracker_arguments_are_one_line_before_the_folder(kwargs, needle, setup_ns, tmp_path):
    given = {"tokenizer": setup_ns["tokenizer"], **kwargs}
    with pytest.raises(UserError) as err:
        Tracker(tmp_path / "r", copy.deepcopy(setup_ns["model"]), lab="lm", preset="counterfact-tiny",
                vocab_ids=setup_ns["prep"].loaded.vocab_ids, **given)
    assert needle in one_line(err)
    assert not (tmp_path / "r").exists()


def test_a_finished_or_foreign_run_folder_is_refused_untouched(setup_ns, doc_runs, lab_run, tmp_path):
    """A finished tracked run (the doc's loop) and a lab run of another config (the cached
    lab run: the session checks its digest too)."""
    for folder, needle in ((doc_runs / "runs" / "loop", "finished tracked run"), (lab_run, "another config")):
        before = folder_digest(folder)
        settings = {"optimizer": "AdamW", "lr": 1e-3, "batch_size": 32, "epochs": EPOCHS}
        tracker = Tracker(folder, copy.deepcopy(setup_ns["model"]), setup_ns["tokenizer"], lab="lm", preset="counterfact-tiny",
                          vocab_ids=setup_ns["prep"].loaded.vocab_ids, settings=settings)
        with pytest.raises(UserError) as err:
            tracker.step(0, force=True)
        assert needle in one_line(err) and str(folder) in str(err.value)
        assert folder_digest(folder) == before


# ------------------------------------------------------------------ resume
@pytest.mark.parametrize("stop, status, said", [(RuntimeError("out of memory"), "failed", "RuntimeError: out of memory"),
                                               (KeyboardInterrupt(), "interrupted", "resume with: open a Tracker on")],
                         ids=["failed", "interrupted"])
def test_an_interrupted_tracked_run_resumes_to_the_uninterrupted_records(stop, status, said, setup_ns, tmp_path):
    """A loop probed every 2 steps stops after step 5 (its last record: step 4); a new tracker on
    the folder, with the training replayed from the start, probes only after step 4 and ends
    with the records of a loop that never stopped."""
    collate, data, vocab_ids = setup_ns["collate"], setup_ns["train_data"], setup_ns["prep"].loaded.vocab_ids

    def tracker(folder: Path) -> Tracker:
        return Tracker(folder, model, setup_ns["tokenizer"], lab="lm", preset="counterfact-tiny", every=2, vocab_ids=vocab_ids,
                       settings={"lr": 1e-3})

    with without_run_figures(("lm",)):
        model = copy.deepcopy(setup_ns["model"])
        with tracker(tmp_path / "whole") as whole:
            train_loop(model, collate, data, epochs=4, tracker=whole)
        model = copy.deepcopy(setup_ns["model"])
        with pytest.raises(type(stop)), tracker(tmp_path / "r") as first:
            train_loop(model, collate, data, epochs=4, tracker=first, stop_after=5, stop=stop)
        manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
        assert manifest["status"] == status and said in manifest["error"], manifest["error"]
        assert sorted(wide(tmp_path / "r").index) == [0, 2, 4]
        model = copy.deepcopy(setup_ns["model"])
        with tracker(tmp_path / "r") as second:
            train_loop(model, collate, data, epochs=4, tracker=second)
        assert second.records == 2  # steps 6 and 8
    assert json.loads((tmp_path / "r" / "manifest.json").read_text())["status"] == "done"
    for name in ("metrics.parquet", "tables/predictions.parquet"):
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "r" / name), pd.read_parquet(tmp_path / "whole" / name),
                                      check_exact=True)
    assert np.array_equal(sorted(wide(tmp_path / "r").index), [0, 2, 4, 6, 8])


def test_a_resumed_tracker_at_the_default_budget_probes_again(setup_ns, tmp_path):
    """every=0: the first step past the budget rule's gap after the last record probes (timing
    the probe for the budget again), not only the forced probes to come."""
    def tracker() -> Tracker:
        return Tracker(tmp_path / "r", copy.deepcopy(setup_ns["model"]), setup_ns["tokenizer"], lab="lm", preset="counterfact-tiny",
                       vocab_ids=setup_ns["prep"].loaded.vocab_ids)

    with without_run_figures(("lm",)):
        first = tracker()
        with pytest.raises(RuntimeError), first:
            assert first.step(0, force=True) and first.step(3, force=True)
            raise RuntimeError("stopped")
        second = tracker()
        assert not second.step(0, force=True) and not second.step(3, force=True)  # at or before the last record
        assert MIN_BUDGET_GAP == 2 and not second.step(4)  # never two steps in a row
        assert second.step(5)
        second.close()
    assert sorted(wide(tmp_path / "r").index) == [0, 3, 5]


# ------------------------------------------------------------------ schedules (issue 39)
@pytest.mark.parametrize("when, first, whole", [
    ({"schedule": "log", "log_until": 4, "every": 3}, [0, 1, 2, 4], [0, 1, 2, 4, 6, 8]),
    ({"steps": [0, 3, 5, 7]}, [0, 3, 5], [0, 3, 5, 7, 8]),
], ids=["log", "steps"])
def test_a_scheduled_tracked_run_resumes_to_the_uninterrupted_records(when, first, whole, setup_ns, tmp_path):
    """A log schedule (0, 1, 2, 4, then every 3) and an explicit list, each stopped after step 5
    and resumed with the training replayed: the records of a run that never stopped. The
    schedule is in config.yaml, so a tracker with another schedule is refused on the folder."""
    collate, data, vocab_ids = setup_ns["collate"], setup_ns["train_data"], setup_ns["prep"].loaded.vocab_ids

    def tracker(folder: Path, **schedule: Any) -> Tracker:
        return Tracker(folder, model, setup_ns["tokenizer"], lab="lm", preset="counterfact-tiny", vocab_ids=vocab_ids,
                       **(schedule or when))

    with without_run_figures(("lm",)):
        model = copy.deepcopy(setup_ns["model"])
        with tracker(tmp_path / "whole") as uninterrupted:
            train_loop(model, collate, data, epochs=4, tracker=uninterrupted)
        model = copy.deepcopy(setup_ns["model"])
        with pytest.raises(KeyboardInterrupt), tracker(tmp_path / "r") as stopped:
            train_loop(model, collate, data, epochs=4, tracker=stopped, stop_after=5, stop=KeyboardInterrupt())
        assert sorted(wide(tmp_path / "r").index) == first
        source = yaml.safe_load((tmp_path / "r" / "config.yaml").read_text())["source"]
        assert source["schedule"] == ("log" if "schedule" in when else "steps")
        assert (source["log_until"], source["probe_steps"], source["every"]) == \
            (when.get("log_until", 0), when.get("steps", []), when.get("every", 0))
        before = folder_digest(tmp_path / "r")
        with pytest.raises(UserError) as err:
            tracker(tmp_path / "r", every=2).step(0, force=True)
        assert "another config" in one_line(err) and folder_digest(tmp_path / "r") == before
        model = copy.deepcopy(setup_ns["model"])
        with tracker(tmp_path / "r") as resumed:
            train_loop(model, collate, data, epochs=4, tracker=resumed)
    for name in ("metrics.parquet", "tables/predictions.parquet"):
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "r" / name),
                                      pd.read_parquet(tmp_path / "whole" / name), check_exact=True)
    assert sorted(wide(tmp_path / "r").index) == whole


@pytest.mark.parametrize("when, steps", [({"schedule": "log", "log_until": 2, "every": 3}, [0, 1, 2, 3, 6]),
                                         ({"steps": [1, 4]}, [0, 1, 4, 6])], ids=["log", "steps"])
def test_the_callback_probes_on_its_schedule(when, steps, setup_ns, tmp_path, monkeypatch):
    """The Trainer (3 epochs of 2 steps) with a log schedule or a list: its steps, plus the
    training's start and end that the callback forces."""
    callback = StagewiseCallback(tmp_path / "tracked", lab="lm", preset="counterfact-tiny", vocab_ids=setup_ns["prep"].loaded.vocab_ids,
                                 **when)
    with without_run_figures(("lm",)):
        trainer_trained(copy.deepcopy(setup_ns["model"]), setup_ns, tmp_path, [callback], monkeypatch)
    assert list(wide(tmp_path / "tracked").index) == steps
    source = yaml.safe_load((tmp_path / "tracked" / "config.yaml").read_text())["source"]
    assert source["schedule"] == ("log" if "schedule" in when else "steps")


class SimulatedClock:
    """Seconds that pass only when the test says so (the budget rule's clock)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_trackers_budget_rule_spreads_its_probes_on_a_simulated_clock(setup_ns, tmp_path, monkeypatch):
    """The Tracker's budget rule on a simulated clock: 0.1 s a training step, the first probe 1 s
    (a warm-up), the others 0.05 s, forced probes every 140 steps. The rule before issue 39
    probed at 141 right after the forced 140 (and on every step after it); now no budget probe
    comes within MIN_BUDGET_GAP steps of the last record, they are spaced by a probe's time /
    budget (0.5 s: 5 steps), and the time probing stays within the budget."""
    clock = SimulatedClock()
    tracker = Tracker(tmp_path / "r", copy.deepcopy(setup_ns["model"]), setup_ns["tokenizer"], lab="lm", preset="counterfact-tiny",
                      vocab_ids=setup_ns["prep"].loaded.vocab_ids)
    tracker.budget_rule.clock = clock
    record = tracker.probe.record

    def timed(*args: Any, **kwargs: Any) -> None:
        record(*args, **kwargs)
        clock.now += 0.05 if tracker.records else 1.0

    monkeypatch.setattr(tracker.probe, "record", timed)
    records: list[tuple[int, bool]] = []
    with without_run_figures(("lm",)), tracker:
        for step in range(301):
            forced = step % 140 == 0 or step == 300
            if tracker.step(step, force=forced):
                records.append((step, forced))
            clock.now += 0.1
    steps = [s for s, _ in records]
    assert steps[:2] == [0, 140] and 145 <= steps[2] <= 146  # 5 steps of 0.1 s, give or take float rounding
    gaps = [b - a for (a, _), (b, forced) in zip(records, records[1:]) if not forced]
    assert min(gaps) >= 5 >= MIN_BUDGET_GAP
    rule = tracker.budget_rule
    assert rule.probing <= tracker.budget * (clock.now - rule.started - rule.probing) + 1e-9
    assert list(wide(tmp_path / "r").index) == steps


def test_probing_leaves_the_researchers_tokenizer_as_it_was(setup_ns, tmp_path):
    """A tokenizer without a pad token stays without one (issue 39: a collator that reads
    pad_token == eos_token masks every EOS label); the probe pads with EOS on its own copy."""
    tok = copy.deepcopy(setup_ns["tokenizer"])
    tok.pad_token = None
    before = (tok.pad_token, tok.pad_token_id, tok.padding_side, dict(tok.special_tokens_map), len(tok))
    with without_run_figures(("lm",)):
        tracker = Tracker(tmp_path / "r", copy.deepcopy(setup_ns["model"]), tok, lab="lm", preset="counterfact-tiny",
                          vocab_ids=setup_ns["prep"].loaded.vocab_ids)
    assert tracker.step(0, force=True)
    tracker.close()
    assert (tok.pad_token, tok.pad_token_id, tok.padding_side, dict(tok.special_tokens_map), len(tok)) == before
    assert before[0] is None
