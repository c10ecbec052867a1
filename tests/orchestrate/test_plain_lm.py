"""Issue 39's plain-LM acceptance: a tiny GPT-2 pretrained by the Hugging Face Trainer on
TinyStories (../shared/data/text/tinystories_10k.txt), probed on a log schedule with no lab
task (``task.name=none``), only the researcher's own probe sets: a JSONL of questions with
groups and a category function of their own, held-out text by token-frequency bucket, and
BLiMP by field. Two order claims declared before the run, one the reverse of the other;
``stagewise show`` prints them with their verdicts within 80 columns.

What is asserted is what must be true of any such run, not its numbers: the records are at the
log schedule's steps; the text loss is the token-weighted mean of its bucket losses; the BLiMP
accuracy is the pair-weighted mean of its fields'; the category shares sum to 1; the two order
claims are judged from the records by the declared rule (recomputed here) and cannot both hold.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from lm_fixtures import SHARED_DATA

pytestmark = [pytest.mark.slow,  # trains a GPT-2 with the full 50,257-token vocabulary for 64 steps and probes it 9 times: ~22 s
              pytest.mark.skipif(not (SHARED_DATA / "text" / "tinystories_10k.txt").is_file(),
                                 reason=f"needs the shared data's TinyStories ({SHARED_DATA / 'text'})")]

STEPS = 64
LOG_UNTIL = 16
EVERY = 16
SUSTAIN = 2
THRESHOLD = 7.5
"""The order claims' threshold on the held-out loss (nats per token), fixed before the runs:
between the untrained model's ln(50257) = 10.8 and what the frequent tokens reach within 64 steps."""
QUESTIONS = [("Once upon a", " time", "opening"), ("Once upon a time, there was a little", " girl", "opening"),
             ("She was very", " happy", "feeling"), ("He was very", " sad", "feeling"),
             ("The dog wagged its", " tail", "body"), ("The cat licked its", " paw", "body")]
SCALE_TOL = 1e-9


def story_category(questions, predictions):
    """A researcher's own categories: does the top-1 token start a word, or is it punctuation?"""
    return ["word" if p[:1] == " " and p.strip().isalpha() else "other" for p in predictions]


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments, default_data_collator

    from stagewise import StagewiseCallback
    from stagewise.lmkit import gpt2_bpe

    root = tmp_path_factory.mktemp("plain-lm")
    lines = (SHARED_DATA / "text" / "tinystories_10k.txt").read_text(encoding="utf-8").splitlines()
    (root / "heldout.txt").write_text("\n".join(lines[-200:]), encoding="utf-8")
    (root / "questions.jsonl").write_text("".join(json.dumps({"prompt": p, "answer": a, "group": g}) + "\n"
                                                  for p, a, g in QUESTIONS), encoding="utf-8")
    tokenizer = gpt2_bpe()
    ids = tokenizer("\n".join(lines[:600]))["input_ids"]
    train = [{"input_ids": ids[i:i + 32], "labels": ids[i:i + 32]} for i in range(0, len(ids) - 32, 32)]
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_layer=1, n_embd=32, n_head=2, n_positions=64))
    probes = {"task": {"name": "none"},
              "probes": [{"name": "stories", "kind": "questions", "path": str(root / "questions.jsonl"),
                          "categories": ["word", "other"]},
                         {"name": "heldout", "kind": "text", "path": str(root / "heldout.txt"), "limit": 1024, "window": 32},
                         {"name": "blimp", "kind": "pairs", "path": str(SHARED_DATA / "blimp"), "limit": 1}],
              "order": [{"id": "frequent_first", "first": f"probe.heldout.loss.bucket_1 <= {THRESHOLD}",
                         "then": f"probe.heldout.loss.bucket_4 <= {THRESHOLD}", "sustain": SUSTAIN},
                        {"id": "rare_first", "first": f"probe.heldout.loss.bucket_4 <= {THRESHOLD}",
                         "then": f"probe.heldout.loss.bucket_1 <= {THRESHOLD}", "sustain": SUSTAIN}]}
    args = TrainingArguments(str(root / "trainer"), max_steps=STEPS, per_device_train_batch_size=8, learning_rate=2e-3,
                             seed=0, save_strategy="no", logging_strategy="no", report_to=[], use_cpu=True)
    callback = StagewiseCallback(root / "run", lab="lm", overrides=probes, schedule="log", log_until=LOG_UNTIL,
                                 every=EVERY, categorizers={"stories": story_category})
    Trainer(model=model, args=args, train_dataset=train, data_collator=default_data_collator, processing_class=tokenizer,
            callbacks=[callback]).train()
    return root / "run"


def test_records_are_at_the_log_schedule_and_consistent(plain_run):
    from stagewise import load_run

    run = load_run(plain_run)
    assert run.manifest["status"] == "done"
    metrics = run.metrics
    expected = sorted({0, *(2 ** k for k in range(LOG_UNTIL.bit_length())), *range(EVERY, STEPS + 1, EVERY), STEPS})
    assert sorted(metrics.loc[metrics["metric"] == "probe.heldout.loss", "step"].unique()) == expected
    wide = metrics.pivot_table(index="step", columns="metric", values="value")
    notes = run.manifest["notes"]["probe_sets"]
    assert notes["stories"]["kind"] == "questions" and notes["blimp"]["kind"] == "pairs"
    # the category shares partition the questions, the user's too
    shares = wide[[f"probe.stories.share.{c}" for c in ("semantic_correct", "type_correct", "type_wrong")]].sum(axis=1)
    np.testing.assert_allclose(shares, 1.0, atol=SCALE_TOL)
    np.testing.assert_allclose(wide["probe.stories.share.word"] + wide["probe.stories.share.other"], 1.0, atol=SCALE_TOL)
    # BLiMP: the overall accuracy is the pair-weighted mean of the fields' (one pair per paradigm here)
    from stagewise.lmkit.probesets import read_pairs

    pairs = read_pairs(SHARED_DATA / "blimp", limit=1)
    weights = pairs["field"].map(lambda f: f.replace("/", "_")).value_counts()
    fields = sum(wide[f"probe.blimp.field.{f}.accuracy"] * n for f, n in weights.items()) / weights.sum()
    np.testing.assert_allclose(fields, wide["probe.blimp.accuracy"], atol=SCALE_TOL)
    # held-out text: the loss falls as the model trains (150 tokens of stories per step)
    assert wide["probe.heldout.loss"].iloc[-1] < wide["probe.heldout.loss"].iloc[0]


def test_order_claims_follow_the_declared_rule_and_show_prints_them(plain_run, cli):
    from stagewise import load_run
    from stagewise.measure.stages import crossing_step

    run = load_run(plain_run)
    claims = {c.id: c for c in run.summary.claims}
    assert set(claims) == {"probe_order_frequent_first", "probe_order_rare_first"}
    metrics = run.metrics

    def reach(metric: str) -> float:
        rows = metrics[metrics["metric"] == metric]
        return crossing_step(rows["step"].to_numpy(), rows["value"].to_numpy(), THRESHOLD, "below", SUSTAIN)

    frequent, rare = reach("probe.heldout.loss.bucket_1"), reach("probe.heldout.loss.bucket_4")
    last = float(metrics["step"].max())
    for cid, (a, b) in {"probe_order_frequent_first": (frequent, rare), "probe_order_rare_first": (rare, frequent)}.items():
        claim = claims[cid]
        if np.isnan(a) and np.isnan(b):
            assert claim.verdict == "not testable"
        elif np.isnan(a):
            assert claim.verdict == "fails" and claim.value is None
        else:
            lead = (b if not np.isnan(b) else last + 1) - a
            assert claim.value == pytest.approx(lead) and claim.verdict == ("holds" if lead > 0 else "fails")
    assert not (claims["probe_order_frequent_first"].verdict == claims["probe_order_rare_first"].verdict == "holds")
    assert claims["probe_order_frequent_first"].verdict == "holds"  # frequent tokens are learned first (measured: step 32)
    code, out, err = cli("show", str(plain_run))
    assert code == 0, err
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines if str(plain_run) not in line)
    for cid, claim in claims.items():
        assert any(line.split()[:2] == [cid, str(claim.verdict).split()[0]] for line in lines), (cid, out)
    assert isinstance(pd.read_parquet(plain_run / "metrics.parquet"), pd.DataFrame)
