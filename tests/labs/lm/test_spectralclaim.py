"""The spectral claim (`lm rank-curve --claim`; measured in rankcurve.py, judged in claims.py):
the claim's value from a hand-made table, the examples it counts (exactly those correct at both
checkpoints), p = 1 changes nothing, seeded random draws, the files and the verdict line, and bad
input as one line (tiny runs from configs, two seeds, through the session run cache)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from runcache import without_run_figures

from stagewise import RunSpec
from stagewise.labs.lm.claims import spectral_claim
from stagewise.labs.lm.rankcurve import draw_seed, pair_checkpoints, per_seed_values, spectral_curves
from stagewise.labs.lm.claimspecs import CLAIM_P, CLAIM_THRESHOLD, MIN_RANDOM_DAMAGE, SPECTRAL_SMALL_DIRECTIONS_EARLY
from stagewise.labs.lm.refs import load_ref

HAND_TOL = 1e-12
EARLY, LATE = 2, 6


def tiny(seed: int) -> RunSpec:
    """A 1-layer, d = 32 GPT-2 on the 36 fixture examples: 6 epochs, snapshots at 2 and 6 (~1 s without figures)."""
    return RunSpec(lab="lm", overrides={
        "seed": seed, "task": {"name": "counterfact"},
        "model": {"compact_vocab": True, "tiny": {"n_layer": 1, "n_embd": 32, "n_head": 2}},
        "train": {"epochs": LATE, "batch_size": 8, "lr": 3e-3, "log_every": 1, "snapshot_epochs": [EARLY]}})


@pytest.fixture(scope="module")
def runs(run_cache) -> tuple[Path, Path]:
    with without_run_figures(("lm",)):  # the runs' own figures are most of their time and not used here
        return run_cache.path(tiny(0)), run_cache.path(tiny(1))


def one_line(code: int, err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, (code, err)
    return lines[0]


# ---- the statistic on a hand-made table ------------------------------------------------------
def _table(retained: dict[tuple[int, str, str], list[float]], n: int = 100) -> pd.DataFrame:
    rows = [{"seed": seed, "stage": stage, "keep": keep, "p": CLAIM_P, "draw": d, "n": n, "retained": r}
            for (seed, stage, keep), values in retained.items() for d, r in enumerate(values)]
    rows += [{**row, "p": 1.0, "retained": 1.0} for row in rows]  # another p: must not enter the value
    return pd.DataFrame(rows)


def test_claim_value_matches_a_hand_computation():
    table = _table({
        (0, "early", "largest"): [0.9], (0, "early", "random"): [0.5, 0.7], (0, "early", "smallest"): [0.2],
        (0, "late", "largest"): [0.96], (0, "late", "random"): [0.1, 0.3], (0, "late", "smallest"): [0.0],
        (1, "early", "largest"): [0.7], (1, "early", "random"): [0.4, 0.4], (1, "early", "smallest"): [0.1],
        (1, "late", "largest"): [0.9], (1, "late", "random"): [0.2, 0.0], (1, "late", "smallest"): [0.0]})
    values = per_seed_values(table).set_index("seed")
    # seed 0: rho_early = (1 - 0.9) / (1 - 0.6) = 0.25, rho_late = 0.04 / 0.8 = 0.05 -> 0.2
    # seed 1: rho_early = 0.3 / 0.6 = 0.5, rho_late = 0.1 / 0.9 -> 0.5 - 1/9
    assert abs(values.loc[0, "rho_early"] - 0.25) < HAND_TOL and abs(values.loc[0, "rho_late"] - 0.05) < HAND_TOL
    assert abs(values.loc[0, "value"] - 0.2) < HAND_TOL and abs(values.loc[1, "value"] - (0.5 - 1 / 9)) < HAND_TOL
    assert abs(values.loc[0, "did"] - ((0.96 - 0.9) - (0.2 - 0.6))) < HAND_TOL  # 0.46
    assert abs(values.loc[0, "R_late_random"] - 0.2) < HAND_TOL and values.loc[0, "n"] == 100
    result = spectral_claim(values.reset_index())
    assert result.claim.verdict == "holds" and result.claim.per_seed == {"0": pytest.approx(0.2), "1": pytest.approx(0.5 - 1 / 9)}
    assert result.claim.value == pytest.approx(0.2) and result.claim.threshold == CLAIM_THRESHOLD
    # over seeds: 2 testable seeds, fewer than the declared 6 -> inconclusive, with the sign test beside it
    assert result.over_seeds == "inconclusive" and result.decision.reason == "inconclusive (2 of 6 seeds)"
    assert result.decision.interval is None and result.decision.sign.p == pytest.approx(0.25)
    assert "over seeds: inconclusive (inconclusive (2 of 6 seeds)" in result.line()
    assert "holds per seed (2/2 seeds" in result.line()


def test_a_seed_below_the_damage_floor_is_not_testable_and_saturation_fails():
    ok = 1 - MIN_RANDOM_DAMAGE / 2  # random removal costs less than the floor at the late checkpoint
    table = _table({(0, "early", "largest"): [0.99], (0, "early", "random"): [0.6], (0, "early", "smallest"): [0.5],
                    (0, "late", "largest"): [1.0], (0, "late", "random"): [ok], (0, "late", "smallest"): [0.9]})
    result = spectral_claim(per_seed_values(table))
    assert result.claim.verdict == "not testable" and "seed 0" in result.claim.reason
    assert result.decision.interval is None and result.over_seeds == "inconclusive"  # 0 of 6 testable seeds
    # keep-largest retains everything at both checkpoints while the late model is fragile to random removal:
    # the difference in differences is large, the claim's value is ~0 (it fails)
    table = _table({(0, "early", "largest"): [0.99], (0, "early", "random"): [0.75], (0, "early", "smallest"): [0.6],
                    (0, "late", "largest"): [1.0], (0, "late", "random"): [0.1], (0, "late", "smallest"): [0.03]})
    values = per_seed_values(table)
    assert values["did"].iloc[0] == pytest.approx(0.66) and values["value"].iloc[0] == pytest.approx(0.04)
    assert spectral_claim(values).claim.verdict == "fails"


def test_the_spec_is_declared_before_any_run():
    spec = SPECTRAL_SMALL_DIRECTIONS_EARLY
    assert (spec.relation, spec.threshold, spec.over) == (">", 0.1, "every") and CLAIM_P == 0.2
    assert "random" in spec.control and f"p = {CLAIM_P:g}" in spec.quantity


# ---- on tiny runs ------------------------------------------------------------------------------
def test_counts_exactly_the_examples_correct_at_both_checkpoints_and_p1_changes_nothing(runs):
    refs = [load_ref(f"{run}@{epoch}") for run in runs for epoch in (LATE, EARLY)]  # order within a run does not matter
    pairs = pair_checkpoints(refs)
    assert [(p.seed, p.early.epoch, p.late.epoch) for p in pairs] == [(0, EARLY, LATE), (1, EARLY, LATE)]
    curves = spectral_curves(pairs, [1.0, 0.5], draws=2, seed=3)
    table = curves.table
    assert sorted(table["p"].unique()) == [CLAIM_P, 0.5, 1.0]  # p* added
    for run, pair in zip(runs, pairs):
        pred = pd.read_parquet(run / "tables" / "predictions.parquet")
        correct = [set(pred[(pred["epoch"] == e) & (pred["category"] == "semantic-correct")]["example_id"]) for e in (EARLY, LATE)]
        rows = table[table["seed"] == pair.seed]
        assert set(rows["n"]) == {len(correct[0] & correct[1])} and len(correct[0] & correct[1]) > 0
    full = table[table["p"] == 1.0]
    assert (full["retained"] == 1.0).all() and len(full) == 2 * 2 * (2 + 2)  # seeds x stages x (largest, smallest, 2 draws)
    random = table[table["keep"] == "random"]
    assert set(zip(random["draw"], random["draw_seed"])) == {(0, draw_seed(3, 0)), (1, draw_seed(3, 1))}
    assert set(table["stage"]) == {"early", "late"} and curves.rule == "open"  # the default type rule
    again = spectral_curves(pairs, [1.0, 0.5], draws=2, seed=3).table
    pd.testing.assert_frame_equal(again, table)  # seeded: the same numbers


def test_cli_writes_the_table_the_claim_and_the_figure(cli, runs, tmp_path):
    out = tmp_path / "claim"
    args = [f"{runs[0]}@{EARLY}", f"{runs[0]}@{LATE}", f"{runs[1]}@{EARLY}", f"{runs[1]}@{LATE}"]
    code, stdout, err = cli("lm", "rank-curve", *args, "--claim", "--p", "1.0", "--draws", "2", "--rule", "closed",
                            "--out", str(out))
    assert code == 0, err
    data = json.loads((out / "spectral_claim.json").read_text())
    claim = data["claim"]
    assert claim["id"] == "spectral_small_directions_early" and claim["verdict"] in ("holds", "fails", "not testable")
    assert data["rule"] == "closed" and data["draws"] == 2 and data["p"] == CLAIM_P
    assert [row["seed"] for row in data["per_seed"]] == [0, 1]
    assert data["over_seeds"]["aggregation"] == "median" and data["over_seeds"]["verdict"] == "inconclusive"  # < 6 seeds
    assert data["over_seeds"]["judged_by"] == "stagewise.verdicts/1"
    table = pd.read_parquet(out / "spectral_curve.parquet")
    assert set(table["keep"]) == {"largest", "random", "smallest"} and set(table["p"]) == {CLAIM_P, 1.0}
    assert (out / "spectral_claim.png").exists() and (out / "spectral_claim.pdf").exists()
    verdict = [line for line in stdout.splitlines() if line.startswith("spectral_small_directions_early:")]
    assert len(verdict) == 1 and "over seeds" in verdict[0] and claim["verdict"] in verdict[0]


def _variant(run: Path, dest: Path, *, epoch: int | None = None, lr: float | None = None) -> Path:
    """A copy of a run with its early snapshot renamed to ``epoch`` or its config's lr changed."""
    shutil.copytree(run, dest)
    if epoch is not None:
        (dest / "snapshots" / f"epoch_{EARLY:05d}.safetensors").rename(dest / "snapshots" / f"epoch_{epoch:05d}.safetensors")
    if lr is not None:
        config = dest / "config.yaml"
        config.write_text(config.read_text().replace("lr: 0.003", f"lr: {lr}"))
    return dest


@pytest.mark.parametrize("case,fragment", [
    ("one model", "needs an early and a late checkpoint"),
    ("one checkpoint of a run", "got epoch 2"),
    ("the same epoch twice", "got epochs 2, 2"),
    ("other epochs", "every run needs the same early and late epochs"),
    ("another config", "differs from"),
    ("the same seed twice", "both have seed 0"),
    ("not a run", "not a run"),
])
def test_bad_input_is_one_line_exit_2(cli, runs, tmp_path, case, fragment):
    a, b = runs
    models = {
        "one model": [f"{a}@{EARLY}"],
        "one checkpoint of a run": [f"{a}@{EARLY}", f"{a}@{LATE}", f"{b}@{EARLY}"],
        "the same epoch twice": [f"{a}@{EARLY}", f"{a}@{EARLY}"],
        "other epochs": [f"{a}@{EARLY}", f"{a}@{LATE}", f"{_variant(b, tmp_path / 'b3', epoch=3)}@3", f"{tmp_path / 'b3'}@{LATE}"],
        "another config": [f"{a}@{EARLY}", f"{a}@{LATE}", f"{_variant(b, tmp_path / 'blr', lr=0.001)}@{EARLY}",
                           f"{tmp_path / 'blr'}@{LATE}"],
        "the same seed twice": [f"{a}@{EARLY}", f"{a}@{LATE}", f"{_variant(a, tmp_path / 'a2')}@{EARLY}", f"{tmp_path / 'a2'}@{LATE}"],
        "not a run": ["tiny-gpt2", f"{a}@{EARLY}"],
    }[case]
    out = tmp_path / "out"
    code, _, err = cli("lm", "rank-curve", *models, "--claim", "--p", "1.0", "--draws", "1", "--out", str(out))
    assert fragment in one_line(code, err)
    assert not out.exists()


@pytest.mark.parametrize("args,fragment", [(["--draws", "0"], "--draws 0"), (["--rule", "loose"], "--rule loose")])
def test_bad_curve_options_are_one_line(cli, tmp_path, args, fragment):
    code, _, err = cli("lm", "rank-curve", "tiny-gpt2", *args, "--out", str(tmp_path / "rc"))
    assert fragment in one_line(code, err)



def test_rank_curve_keep_random_has_one_row_per_draw(cli, runs, tmp_path):
    out = tmp_path / "rc"
    code, stdout, err = cli("lm", "rank-curve", f"{runs[0]}@{EARLY}", "--keep", "random", "--draws", "3", "--seed", "2",
                            "--p", "0.5,1.0", "--out", str(out))
    assert code == 0, err
    table = pd.read_parquet(out / "rank_curve.parquet")
    assert len(table) == 2 * 3 and list(table["draw"]) == [0, 1, 2, 0, 1, 2]
    assert list(table["draw_seed"][:3]) == [draw_seed(2, d) for d in range(3)]
    full = table[table["p"] == 1.0]
    assert full["semantic-correct"].nunique() == 1  # k = r: every draw is the unreduced model
    assert "mean of 3 draws" in stdout


@pytest.mark.parametrize("family", ["gpt2", "gpt_neox", "llama"])
def test_the_default_selector_names_the_weights_as_each_family_stores_them(family):
    """GPT-2 and GPT-NeoX store q, k, v fused: the rank curve's default cuts that matrix and o;
    Llama's separate q, k, v, o. Every target of the default parses against the model."""
    from transformers import GPT2Config, GPT2LMHeadModel, GPTNeoXConfig, GPTNeoXForCausalLM, LlamaConfig, LlamaForCausalLM

    from stagewise.lmkit.adapters import adapter_for
    from stagewise.lmkit.selectors import parse_selector
    from stagewise.labs.lm.rankcurve import default_selector

    model = {"gpt2": lambda: GPT2LMHeadModel(GPT2Config(vocab_size=64, n_layer=2, n_embd=32, n_head=4)),
             "gpt_neox": lambda: GPTNeoXForCausalLM(GPTNeoXConfig(vocab_size=64, num_hidden_layers=2, hidden_size=32,
                                                                  num_attention_heads=4, intermediate_size=64)),
             "llama": lambda: LlamaForCausalLM(LlamaConfig(vocab_size=64, num_hidden_layers=2, hidden_size=32,
                                                           num_attention_heads=4, intermediate_size=64))}[family]()
    selector = default_selector(model)
    assert selector == ("blocks.*.attn" if family == "llama" else "blocks.*.attn.{qkv,o}")
    targets = parse_selector(selector, adapter_for(model))
    assert len(targets) == 2 * (4 if family == "llama" else 2)
