"""The fair two-task study (issue 27): held-out splits that never evaluate a training example,
label-prior floors and majority baselines in closed form, the permuted-labels control,
minimal pairs scored as `eval blimp` scores them, the redeclared claim's verdicts, and bad
config in one line (tiny fixtures; ../shared/data when present)."""

from __future__ import annotations

import json
import math
import signal
from collections import Counter

import numpy as np
import pandas as pd
import pytest
import torch
from cli_errors import one_error
from lm_fixtures import SHARED_DATA
from resume_helpers import signal_at_step
from runcache import without_run_figures

from stagewise import RunSpec, execute_spec
from stagewise.config import validate
from stagewise.errors import UserError
from stagewise.labs.lm import claimspecs as cs
from stagewise.labs.lm.claims import syntax_claim
from stagewise.labs.lm.config import Config
from stagewise.labs.lm.controls import heldout_paradigms, label_stream, permute_answers, stratified_mask
from stagewise.labs.lm.prepare import read_data
from stagewise.labs.lm.tasks import Example
from stagewise.labs.lm.twotask import label_prior, pair_accuracy, prior_metrics
from stagewise.labs.lm.twotask import beat_epoch

MIXED = {"task": {"name": "mixture", "sick_answers": "yes-maybe-no", "heldout": 0.5}}
TINY_RUN = {**MIXED, "model": {"compact_vocab": True, "tiny": {"n_layer": 1, "n_embd": 32, "n_head": 2}},
            "train": {"epochs": 2, "batch_size": 4, "lr": 3e-3, "log_every": 3, "eval_every": 1}}


def _paradigm(example_id: str) -> str:
    return example_id.split("/")[1]


# ------------------------------------------------------------------ splits
def test_split_never_evaluates_a_training_example():
    cfg = Config.model_validate(MIXED)
    train, held = read_data(cfg), read_data(cfg, heldout=True)
    everything = read_data(Config.model_validate({"task": {"name": "mixture", "sick_answers": "yes-maybe-no"}}))
    train_ids, held_ids = {e.id for e in train}, {e.id for e in held}
    assert train_ids.isdisjoint(held_ids) and train_ids | held_ids == {e.id for e in everything}
    assert {e.task for e in held} == {"blimp", "sick"}
    trained = {_paradigm(e.id) for e in train if e.task == "blimp"}
    assert trained.isdisjoint({_paradigm(e.id) for e in held if e.task == "blimp"}) and trained


@pytest.mark.skipif(not (SHARED_DATA / "blimp").is_dir(), reason=f"needs the shared data at {SHARED_DATA}")
def test_split_of_the_shared_data_by_paradigm_and_stratified_pairs():
    cfg = validate(Config, {**MIXED, "task": {**MIXED["task"], "heldout": 0.25, "limits": {"blimp": 2, "sick": 1340}},
                            "data": {"root": str(SHARED_DATA)}})
    train, held = read_data(cfg), read_data(cfg, heldout=True)
    held_paradigms = {_paradigm(e.id) for e in held if e.task == "blimp"}
    assert len(held_paradigms) == 17 and held_paradigms.isdisjoint({_paradigm(e.id) for e in train if e.task == "blimp"})
    assert {e.id for e in train}.isdisjoint({e.id for e in held})
    counts = [Counter(e.answer for e in part if e.task == "sick") for part in (train, held)]
    n = [sum(c.values()) for c in counts]
    for label in counts[0]:  # each label held out in its share, up to rounding one pair
        assert abs(counts[1][label] - 0.25 * (counts[0][label] + counts[1][label])) <= 0.5 + 1e-9
    assert n[1] == pytest.approx(0.25 * sum(n), abs=2)


def test_stratified_and_paradigm_choices_are_seeded_and_bounded():
    labels = np.array(["a"] * 10 + ["b"] * 3 + ["c"], dtype=object)
    held = stratified_mask(labels, 0.5, seed=3)
    assert Counter(labels[held]) == {"a": 5, "b": 2}  # floor(f n + 1/2), a label of one pair keeps it for training
    assert (stratified_mask(labels, 0.5, seed=3) == held).all() and not (stratified_mask(labels, 0.5, seed=4) == held).all()
    names = [f"p{i}" for i in range(67)]
    assert len(heldout_paradigms(names, 0.25, 0)) == 17 and heldout_paradigms(names, 0.25, 0) == heldout_paradigms(names, 0.25, 0)
    assert len(heldout_paradigms(names[:2], 0.99, 0)) == 1  # at least one paradigm left to train on
    assert heldout_paradigms(names, 0.25, 0, ["p5", "p1"]) == ("p1", "p5")  # listed, in the data's order


# ------------------------------------------------------------------ priors
def test_floor_is_the_entropy_of_the_label_marginal():
    prior = label_prior("sick", [" yes", " yes", " maybe", " no"])
    assert prior.floor == pytest.approx(1.5 * math.log(2), rel=1e-12)  # -(1/2 ln 1/2 + 2 x 1/4 ln 1/4)
    assert (prior.majority, prior.majority_share) == (" yes", 0.5)
    assert label_prior("blimp", [" good", " bad"] * 7).floor == pytest.approx(math.log(2), rel=1e-12)
    assert label_prior("sick", [" no"] * 3).floor == 0.0


def test_the_prior_itself_scores_zero_above_its_floor_and_majority():
    answers = [" yes"] * 5 + [" maybe"] * 3 + [" no"] * 2
    prior = label_prior("sick", answers)
    share = dict(zip(prior.labels, prior.shares))
    logprob = torch.tensor([math.log(share[a]) for a in answers], dtype=torch.float64)  # the input-blind prior predictor
    constant = torch.tensor([a == prior.majority for a in answers])  # always predicts the majority label
    out = prior_metrics("train", "sick", prior, logprob, constant)
    assert out["train.accuracy_minus_majority.sick"].item() == 0.0
    assert out["train.loss_minus_floor.sick"].item() == pytest.approx(0.0, abs=1e-12)  # cross-entropy H(p, p) = H(p)


# ------------------------------------------------------------------ permuted labels
def test_permuted_labels_keep_each_marginal_exactly():
    examples = [Example(f"sick/{i}", "sick", f"p{i}", [" yes", " maybe", " no"][i % 3 if i < 60 else 0], "g")
                for i in range(100)]
    permuted = permute_answers(examples, label_stream(0, "sick", "train"))
    assert Counter(e.answer for e in permuted) == Counter(e.answer for e in examples)
    assert [e.original_answer for e in permuted] == [e.answer for e in examples]
    assert sum(a.answer != b.answer for a, b in zip(permuted, examples)) > 30
    again = permute_answers(examples, label_stream(0, "sick", "train"))
    assert [e.answer for e in again] == [e.answer for e in permuted]
    cfg = Config.model_validate({**MIXED, "task": {**MIXED["task"], "permute_labels": True}})
    plain = Config.model_validate(MIXED)
    for heldout in (False, True):
        for task in ("blimp", "sick"):
            got = [e for e in read_data(cfg, heldout=heldout) if e.task == task]
            ref = [e for e in read_data(plain, heldout=heldout) if e.task == task]
            assert [e.id for e in got] == [e.id for e in ref]
            assert Counter(e.answer for e in got) == Counter(e.answer for e in ref)


# ------------------------------------------------------------------ minimal pairs
def test_pair_accuracy_counts_a_tie_as_right():
    nll = torch.tensor([1.0, 2.0, 3.0, 2.0, 2.0, 1.0], dtype=torch.float64)  # good 1, 2, 3; bad 2, 2, 1
    assert pair_accuracy(nll).item() == pytest.approx(2 / 3)


def test_minimal_pairs_score_as_eval_blimp_does(lm_data_root):
    from stagewise.lmkit.blimp import read_blimp_pairs, score_blimp
    from stagewise.lmkit.models import build, load_tokenizer
    from stagewise.labs.lm.train import evaluate_sentences
    from stagewise.labs.lm.twotask import heldout_data, in_rows

    cfg = Config.model_validate({**MIXED, "model": {"tiny": {"n_layer": 1, "n_embd": 16, "n_head": 2}}})
    tok = load_tokenizer(cfg.model)
    held = heldout_data(cfg, tok, read_data(cfg), read_data(cfg, heldout=True))
    loaded = build(cfg.model, seed=0, dtype=torch.float32, tokenizer=tok)  # the full vocabulary: lm-eval's softmax
    pairs = in_rows(cfg, held, loaded).pairs
    assert pairs is not None
    nll, _ = evaluate_sentences(loaded.model.eval(), pairs, cfg, torch.device("cpu"))
    paradigm = sorted({key.split("/")[1] for key in held.pair_keys})
    reference = score_blimp(loaded.model, tok, read_blimp_pairs(lm_data_root / "blimp", paradigm))
    reference.index = [f"blimp/{p}/{i}" for p, i in zip(reference["paradigm"], reference["pair_id"])]
    reference = reference.loc[list(held.pair_keys)]
    m = len(held.pair_keys)
    np.testing.assert_allclose(-nll[:m].numpy(), reference["ll_good"].to_numpy(), atol=1e-4)
    np.testing.assert_allclose(-nll[m:].numpy(), reference["ll_bad"].to_numpy(), atol=1e-4)
    assert pair_accuracy(nll).item() == reference["correct"].mean()


# ------------------------------------------------------------------ the claim
def _frame(series: dict[str, list[float]], epochs: list[float]) -> pd.DataFrame:
    rows = [(10 * i, "epoch", e) for i, e in enumerate(epochs)]
    rows += [(10 * i, name, v) for name, values in series.items() for i, v in enumerate(values)]
    return pd.DataFrame([{"step": s, "seed": 0, "variant": "", "metric": m, "value": v} for s, m, v in rows])


def _claim(blimp: list[float], sick: list[float], **task):
    cfg = Config.model_validate({"task": {"name": "mixture", "heldout": 0.25, **task}})
    epochs = [0.25 * i for i in range(len(blimp))]
    frame = _frame({"eval.accuracy_minus_majority.blimp": blimp, "eval.accuracy_minus_majority.sick": sick,
                    "eval.loss_minus_floor.blimp": [0.0] * len(blimp), "eval.loss_minus_floor.sick": [0.0] * len(sick)}, epochs)
    return syntax_claim(cfg, frame)


def test_beat_epoch_needs_the_margin_at_consecutive_records():
    epochs = np.arange(6) * 0.5
    m = cs.PRIOR_MARGIN
    assert beat_epoch(epochs, np.array([0, m, 0, m, m, 0])) == 1.5  # one record alone is not enough
    assert beat_epoch(epochs, np.array([0, 0, 0, 0, 0, m])) is None  # the last record has no next one
    assert beat_epoch(epochs, np.array([0, m - 1e-9, m, 0, 0, 0])) is None


def test_claim_verdicts_by_the_declared_rule():
    m = cs.PRIOR_MARGIN
    early, late, never = [0, m, m, m, m, m], [0, 0, 0, m, m, m], [0, 0, 0, 0, 0, m]
    claim, found = _claim(early, late)
    assert claim.verdict == "holds" and claim.value == 0.5 and found["blimp"]["beat_prior_epoch"] == 0.25
    assert _claim(late, early)[0].verdict == "fails"
    claim, _ = _claim(early, never)  # SICK never beats its prior: censored at the last record, a bound
    assert claim.verdict == "holds" and claim.value == 1.0 and "SICK never beats its prior" in claim.evidence
    claim, _ = _claim(never, late)
    assert claim.verdict == "fails" and "BLiMP never beats its prior" in claim.evidence
    claim, _ = _claim(never, never, permute_labels=True)
    assert claim.verdict == "not testable" and "neither task" in claim.reason and "permuted labels" in claim.statement
    assert _claim(early, early)[0].verdict == "not testable"


def test_claim_without_held_out_records_or_with_one_task():
    frame = _frame({"eval.accuracy_minus_majority.blimp": [0.0, 0.1, 0.1]}, [0, 1, 2])
    claim, _ = syntax_claim(Config.model_validate({"task": {"name": "mixture"}}), frame)
    assert claim is not None and claim.verdict == "not testable" and "task.heldout" in claim.reason
    claim, found = syntax_claim(Config.model_validate({"task": {"name": "blimp", "heldout": 0.5}}), frame)
    assert claim is not None and claim.verdict == "not applicable" and found["blimp"]["beat_prior_epoch"] == 1
    assert syntax_claim(Config.model_validate({"task": {"name": "blimp"}}), frame)[0] is None


# ------------------------------------------------------------------ bad config
@pytest.mark.parametrize("task, fragment", [
    ({"heldout": 0}, "task.heldout=0"),
    ({"heldout": 1}, "task.heldout=1"),
    ({"heldout_paradigms": ["anaphor_gender_agreement"]}, "needs task.heldout"),
    ({"name": "counterfact", "heldout": 0.5}, "only blimp and sick"),
    ({"permute_labels": True, "framing": "lm"}, "task.framing=answer"),
])
def test_bad_split_config_is_one_line(task, fragment):
    with pytest.raises(UserError) as err:
        validate(Config, {"task": {"name": "mixture", **task}})
    assert len(err.value.messages) == 1 and fragment in err.value.messages[0]


def test_a_held_out_paradigm_not_in_the_data_is_one_line(cli, tmp_path):
    line = one_error(cli, "run", "lm", "--set", "task.name=mixture", "--set", "task.heldout=0.5",
                     "--set", "task.heldout_paradigms=[anaphor_gender_agreemnt]", "--out", str(tmp_path / "r"))
    assert "'anaphor_gender_agreemnt' is not a BLiMP paradigm of the data" in line and "did you mean" in line
    assert not (tmp_path / "r").exists()


# ------------------------------------------------------------------ a run
@pytest.fixture
def no_lm_figures():
    """The test's in-process lm runs skip their figures (most of a tiny run's time)."""
    with without_run_figures(("lm",)):
        yield


def test_run_records_held_out_metrics_and_resumes_exactly(tmp_path, monkeypatch, no_lm_figures):
    execute_spec(RunSpec(lab="lm", overrides=TINY_RUN), tmp_path / "ref", raise_on_failure=True)
    metrics = pd.read_parquet(tmp_path / "ref" / "metrics.parquet")
    wanted = {f"{kind}.{task}" for kind in ("eval.loss_minus_floor", "eval.accuracy_minus_majority", "prior.floor",
                                            "train.loss_minus_floor") for task in ("blimp", "sick")}
    assert wanted | {"eval.blimp_minimal_pair"} <= set(metrics["metric"])
    held = pd.read_parquet(tmp_path / "ref" / "tables" / "heldout_predictions.parquet")
    trained = pd.read_parquet(tmp_path / "ref" / "tables" / "predictions.parquet")
    assert set(held["example_id"]).isdisjoint(trained["example_id"])
    assert held.groupby("_part").size().nunique() == 1 and held["_part"].nunique() == metrics["step"][metrics["metric"] == "epoch"].nunique()
    summary = json.loads((tmp_path / "ref" / "summary.json").read_text())
    floor = summary["details"]["two_task"]["blimp"]["prior.floor_end"]
    assert floor == pytest.approx(math.log(2), rel=1e-12)
    signal_at_step(monkeypatch, 4, signal.SIGTERM)  # mid epoch 2, after a record inside it
    with pytest.raises(KeyboardInterrupt):
        execute_spec(RunSpec(lab="lm", overrides=TINY_RUN), tmp_path / "r")
    monkeypatch.undo()
    execute_spec(RunSpec(lab="lm", overrides=TINY_RUN), tmp_path / "r", raise_on_failure=True)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "r" / "metrics.parquet"), metrics, check_exact=True)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "r" / "tables" / "heldout_predictions.parquet"), held,
                                  check_exact=True)


@pytest.mark.slow  # two minutes of training on the shared data (the quick reproduce's permuted-labels control)
@pytest.mark.skipif(not (SHARED_DATA / "blimp").is_dir(), reason=f"needs the shared data at {SHARED_DATA}")
def test_permuted_labels_make_the_claim_not_testable_or_fail(tmp_path, no_lm_figures):
    from stagewise.labs.lm.lab import _QUICK_TWO

    overrides = {**_QUICK_TWO, "data": {"root": str(SHARED_DATA)}}
    execute_spec(RunSpec(lab="lm", preset="blimp-sick-tiny-permuted", overrides=overrides), tmp_path / "r",
                 raise_on_failure=True)
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    claim = next(c for c in summary["claims"] if c["id"] == "syntax_before_semantics")
    # seed 0 at the quick size; at the full size seed 2 of the control "holds" (BLiMP +0.062 by chance at 2 records):
    # the declared margin is within the noise of 340 held-out BLiMP examples (docs/lm.md, "The two-task study")
    assert claim["verdict"] in ("not testable", "fails"), claim
