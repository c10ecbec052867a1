"""Claims on tracked runs (issue 29): one training probed twice, as the real run and as its
probe-side control (shuffled groups), judged over the two by ``stagewise claims lm --runs``
with the lab's declared aggregation, as sweeps and reproduce judge lab runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from lm_fixtures import write_layout  # noqa: E402

from stagewise import Tracker, get_lab  # noqa: E402
from stagewise.config import deep_merge, validate  # noqa: E402

EPOCHS = 8


@pytest.fixture(scope="module")
def tracked_pair(tmp_path_factory) -> tuple[Path, Path]:
    """The real run and its shuffled-groups control of one plain-loop training (seed 3)."""
    from stagewise.labs.lm.batching import dataset_batches
    from stagewise.labs.lm.prepare import prepare
    from stagewise.labs.lm.train import batch_loss, make_optimizer

    tmp = tmp_path_factory.mktemp("tracked")
    root = write_layout(tmp / "data")
    lab = get_lab("lm")
    data = {"data": {"root": str(root)}}
    config = validate(lab.Config, {**lab.preset_overrides("counterfact-tiny"), **data})
    prep = prepare(config)
    model = prep.loaded.model
    opt = make_optimizer(config, list(model.parameters()))
    common = {"lab": "lm", "preset": "counterfact-tiny", "vocab_ids": prep.loaded.vocab_ids, "seed": 3, "settings": {"lr": 1e-3}}
    real = Tracker(tmp / "real", model, prep.loaded.tokenizer, overrides=data, **common)
    control = Tracker(tmp / "control", model, prep.loaded.tokenizer,
                      overrides={**data, "task": {"name": "counterfact", "shuffle_groups": True}}, **common)
    with real, control:
        step = 0
        for tracker in (real, control):
            tracker.step(0, 0.0, force=True)
        for epoch in range(1, EPOCHS + 1):
            model.train()
            for rows in dataset_batches(len(prep.encoded), config.train.batch_size):
                loss = batch_loss(model, prep.encoded, rows, config, prep.device)
                opt.zero_grad()
                loss.backward()
                opt.step()
                step += 1
            for tracker in (real, control):
                tracker.step(step, float(epoch), force=True)
    return tmp / "real", tmp / "control"


def test_the_claims_over_a_tracked_run_and_its_control(cli, tracked_pair):
    real, control = tracked_pair
    for folder in (real, control):
        assert json.loads((folder / "manifest.json").read_text())["status"] == "done"
    summary = json.loads((control / "summary.json").read_text())
    assert summary["details"]["control"] == "shuffled groups"
    assert any("control: shuffled groups" in c["statement"] for c in summary["claims"])
    code, out, err = cli("claims", "lm", "--runs", str(real), "--runs", str(control), "--json")
    assert code == 0, err
    claims = {c["id"]: c for c in json.loads(out)}
    over = claims["type_before_fact_over_seeds"]
    assert over["verdict"] == "inconclusive" and "of 6 seeds" in over["reason"]  # one seed: the engine cannot decide
    assert "shuffled groups" in json.dumps(over)  # judged against the control, which is named
    # the baseline claims do not apply to a model trained elsewhere: never judged, never "fails"
    per_run = {c["id"]: c for c in json.loads((real / "summary.json").read_text())["claims"]}
    assert per_run["type_lead_beyond_baseline"]["verdict"] == "not applicable"
    assert "source.kind=tracked" in per_run["type_lead_beyond_baseline"]["reason"]
    assert "type_lead_beyond_baseline_over_seeds" not in claims


def test_claims_over_runs_refuses_a_folder_that_is_not_a_finished_run(cli, tracked_pair, tmp_path):
    code, _, err = cli("claims", "lm", "--runs", str(tracked_pair[0]), "--runs", str(tmp_path))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "not a run directory" in err
    code, _, err = cli("claims", "ntp", "--runs", str(tracked_pair[0]))  # ntp declares no claims across runs
    assert code == 2 and len(err.strip().splitlines()) == 1 and "ntp" in err


def test_a_tracked_two_task_run_records_per_task_loss_minimal_pairs_and_spectra(tmp_path):
    """The probe sets of the two-task study (BLiMP + SICK with held-out examples) on a plain
    loop: per-task losses, the held-out BLiMP minimal-pair accuracy, the label priors, the
    per-head spectra at every record, and the syntax claim with a verdict."""
    from stagewise.labs.lm.batching import dataset_batches
    from stagewise.labs.lm.prepare import prepare
    from stagewise.labs.lm.train import batch_loss, make_optimizer

    root = write_layout(tmp_path / "data")
    lab = get_lab("lm")
    data = {"data": {"root": str(root)}, "task": {"limits": {"blimp": 3, "sick": 4}}}
    config = validate(lab.Config, deep_merge(lab.preset_overrides("blimp-sick-tiny"), data))
    prep = prepare(config)
    model = prep.loaded.model
    opt = make_optimizer(config, list(model.parameters()))
    out = tmp_path / "run"
    with Tracker(out, model, prep.loaded.tokenizer, lab="lm", preset="blimp-sick-tiny", overrides=data, every=2, spectra=True,
                 vocab_ids=prep.loaded.vocab_ids) as tracker:
        step = 0
        tracker.step(0, 0.0)
        for _ in range(2):
            for rows in dataset_batches(len(prep.encoded), 4):
                loss = batch_loss(model, prep.encoded, rows, config, prep.device)
                opt.zero_grad()
                loss.backward()
                opt.step()
                step += 1
                tracker.step(step, step / 4)
    import pandas as pd

    metrics = pd.read_parquet(out / "metrics.parquet")
    names = set(metrics["metric"])
    assert {"train.loss.blimp", "train.loss.sick", "eval.blimp_minimal_pair", "eval.accuracy_minus_majority.blimp"} <= names
    records = sorted(metrics[metrics["metric"] == "epoch"]["step"])
    assert records == list(range(0, step + 1, 2))  # every 2 steps, the first step included
    spectra = pd.read_parquet(out / "tables" / "spectra.parquet")
    assert sorted(spectra["step"].unique()) == records
    summary = json.loads((out / "summary.json").read_text())
    syntax = next(c for c in summary["claims"] if c["id"] == "syntax_before_semantics")
    assert syntax["verdict"] in ("holds", "fails", "not testable")
    notes = json.loads((out / "manifest.json").read_text())["notes"]
    assert set(notes["label_priors"]) == {"blimp", "sick"} and notes["examples"]


def capitalised_rule(examples, predictions):
    """A researcher's own rule: the answer is semantic-correct, another capitalised word is the
    right kind (the fixture's answers are places, languages and cities), anything else is not."""
    return ["semantic-correct" if p.strip().lower() == e.answer.strip().lower() else
            "type-correct" if p.strip()[:1].isupper() else "type-wrong" for e, p in zip(examples, predictions)]


def test_a_user_category_rule_is_recorded_and_judges_the_claims(tmp_path):
    import pandas as pd

    from stagewise.labs.lm.prepare import prepare

    root = write_layout(tmp_path / "data")
    lab = get_lab("lm")
    data = {"data": {"root": str(root)}}
    config = validate(lab.Config, deep_merge(lab.preset_overrides("counterfact-tiny"), data))
    prep = prepare(config)
    out = tmp_path / "run"
    with Tracker(out, prep.loaded.model, prep.loaded.tokenizer, lab="lm", preset="counterfact-tiny", overrides=data,
                 vocab_ids=prep.loaded.vocab_ids, categorize=capitalised_rule) as tracker:
        tracker.step(0, 0.0, force=True)
        tracker.step(1, 1.0, force=True)
    rows = pd.read_parquet(out / "tables" / "predictions.parquet")
    top1 = [prep.loaded.tokenizer.decode([int(ids[0])]) for ids in rows["top_ids"]]
    expected = capitalised_rule([next(e for e in tracker.probe._items if e.id == i) for i in rows["example_id"]], top1)
    assert list(rows["category_user"]) == expected  # the function's own verdicts, example by example
    metrics = pd.read_parquet(out / "metrics.parquet")
    at0 = metrics[(metrics["step"] == 0) & metrics["metric"].str.endswith("_user")].set_index("metric")["value"]
    assert at0["train.type_correct_user"] == expected[:len(rows) // 2].count("type-correct")
    config_text = (out / "config.yaml").read_text()
    assert "capitalised_rule" in config_text and "type_rule: user" in config_text
    summary = json.loads((out / "summary.json").read_text())
    assert summary["details"]["type_rule"] == "user"


@pytest.mark.parametrize("rule, needle", [
    (lambda examples, predictions: ["right"] * len(examples), "categorize returned 'right' for example"),
    (lambda examples, predictions: [], "categorize returned 0 categories"),
])
def test_a_bad_user_rule_is_one_line_before_the_folder(tmp_path, rule, needle):
    from stagewise import UserError
    from stagewise.labs.lm.prepare import prepare

    root = write_layout(tmp_path / "data")
    lab = get_lab("lm")
    data = {"data": {"root": str(root)}}
    prep = prepare(validate(lab.Config, deep_merge(lab.preset_overrides("counterfact-tiny"), data)))
    with pytest.raises(UserError) as err:
        Tracker(tmp_path / "run", prep.loaded.model, prep.loaded.tokenizer, lab="lm", preset="counterfact-tiny", overrides=data,
                vocab_ids=prep.loaded.vocab_ids, categorize=rule)
    assert len(err.value.messages) == 1 and needle in err.value.messages[0]
    assert not (tmp_path / "run").exists()
