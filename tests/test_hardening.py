"""Hostile and careless input: every bad value is one line on stderr and exit code 2, before
any run directory exists; nothing a user can type makes a traceback or eats the machine."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pandas as pd
import pytest

from stagewise.config import MAX_STEPS, load_yaml, resolve
from stagewise.yamlio import MAX_YAML_BYTES
from stagewise.errors import MAX_LINES, UserError, cap_lines, problem_kind
from stagewise.labs.disentangled.config import Config as DisConfig
from stagewise.labs.ntp.config import Config as NTPConfig

BILLION_LAUGHS = "\n".join(
    ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    + [f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]" for a, b in zip("abcdefgh", "bcdefghi")]
) + "\n"

FLOW_LAUGHS = "[&a [1, 1, 1, 1, 1, 1, 1, 1, 1], " + ", ".join(
    f"&{b} [{', '.join([f'*{a}'] * 9)}]" for a, b in zip("abcde", "bcdef")) + "]"


def _lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


def _one_error(cli, *args: str) -> str:
    """Run the CLI, check exit 2 with exactly one `error:` line, return that line."""
    code, _, stderr = cli(*args)
    lines = _lines(stderr)
    assert code == 2, (code, stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert "Traceback" not in stderr
    return lines[0]


# ------------------------------------------------------------------- 1. strict types
@pytest.mark.parametrize("item,line", [
    ("train.steps_stage2=no", "error: train.steps_stage2=false: must be an integer, not a boolean"),
    ("train.steps_stage2=false", "error: train.steps_stage2=false: must be an integer, not a boolean"),
    ("train.log_every=true", "error: train.log_every=true: must be an integer or 'auto', not a boolean"),
    ("seed=on", "error: seed=true: must be an integer, not a boolean"),
    ("train.lr_stage2=yes", "error: train.lr_stage2=true: must be a number or null, not a boolean"),
    ("model.init_scale=off", "error: model.init_scale=false: must be a number, not a boolean"),
    ("train.threads=true", "error: train.threads=true: must be an integer or 'auto', not a boolean"),
    ("train.betas=[true, 0.5]", "error: train.betas=[true, 0.5]: item 0 must be a number, not a boolean"),
])
def test_bool_for_a_number_is_one_line(cli, tmp_path, item, line):
    assert _one_error(cli, "run", "ntp", "--set", item, "--out", str(tmp_path / "r")) == line
    assert not (tmp_path / "r").exists()


def test_bool_for_a_number_in_config_file_and_preset(cli, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  steps_stage2: no\n")
    line = _one_error(cli, "run", "ntp", "--config", str(path), "--out", str(tmp_path / "r"))
    assert line == "error: train.steps_stage2=false: must be an integer, not a boolean"
    with pytest.raises(UserError) as err:
        resolve(NTPConfig, {"train": {"log_every": True}})
    assert err.value.messages == ("train.log_every=true: must be an integer or 'auto', not a boolean",)
    with pytest.raises(UserError) as err:
        resolve(DisConfig, sets=["experiment.grid.t1=[true]"])
    assert err.value.messages == ("experiment.grid.t1=[true]: item 0 must be a number, not a boolean",)


def test_legitimate_coercions_still_work():
    cfg = resolve(NTPConfig, sets=["data.optimal_per_query=[1, 2]", "train.lr_stage2=1", "train.threads=auto",
                                   "data.complete=yes", "data.file=x.json", "data.dim=21"])
    assert cfg.data.optimal_per_query == (1, 2) and isinstance(cfg.train.lr_stage2, float) and cfg.train.lr_stage2 == 1.0
    assert cfg.train.threads == "auto" and cfg.data.complete is True and isinstance(cfg.data.file, Path)
    assert resolve(NTPConfig, sets=["train.threads=2"]).train.threads == 2
    dis = resolve(DisConfig, sets=["train.lr_stage1=2", "experiment.grid.t1=[10, 20]"])
    assert dis.train.lr_stage1 == 2.0 and dis.experiment.grid["t1"] == [10, 20]
    assert set(dis.experiment.grid) == {"lr_stage1", "noise", "t1"}  # one entry set, the others kept


# ------------------------------------------------------------------ 2. empty --set value
def test_empty_set_value_is_an_error(cli, tmp_path):
    line = _one_error(cli, "run", "ntp", "--set", "data.file=", "--out", str(tmp_path / "r"))
    assert line == "error: --set data.file=: empty value; give a value or null"
    assert not (tmp_path / "r").exists()
    cfg = resolve(NTPConfig, sets=["data.file=null"])
    assert cfg.data.file is None and cfg.data.source == "random"


# ------------------------------------------------------------------ 3. billion laughs
def test_billion_laughs_config_exits_2_quickly(cli, tmp_path):
    path = tmp_path / "lol.yaml"
    path.write_text(BILLION_LAUGHS)
    assert len(BILLION_LAUGHS.encode()) < 500
    start = time.perf_counter()
    line = _one_error(cli, "run", "ntp", "--config", str(path), "--out", str(tmp_path / "r"))
    assert time.perf_counter() - start < 5
    assert "lol.yaml" in line and "aliases" in line
    start = time.perf_counter()
    line = _one_error(cli, "run", "ntp", "--set", f"seed={FLOW_LAUGHS}", "--out", str(tmp_path / "r"))
    assert time.perf_counter() - start < 5 and line.startswith("error: --set seed: ") and "aliases" in line


def test_doubling_aliases_are_caught(tmp_path):
    """40 levels of [*prev, *prev]: 2^40 values from 1 KiB."""
    text = "l0: &l0 [1, 2]\n" + "".join(f"l{i}: &l{i} [*l{i - 1}, *l{i - 1}]\n" for i in range(1, 41))
    path = tmp_path / "doubling.yaml"
    path.write_text(text)
    with pytest.raises(UserError, match="aliases are expanded"):
        load_yaml(path)


@pytest.mark.parametrize("text,needle", [
    ("seed: &a [1, *a]\n", "recursive alias"),
    ("seed: " + "[" * 3000 + "]" * 3000 + "\n", "nested deeper than"),
    ("seed: " + "1" * 5000 + "\n", "digits"),
])
def test_hostile_yaml_is_one_line(cli, tmp_path, text, needle):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    line = _one_error(cli, "run", "ntp", "--config", str(path), "--out", str(tmp_path / "r"))
    assert needle in line and "c.yaml" in line


def test_oversized_config_file(cli, tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("# " + "x" * MAX_YAML_BYTES + "\n")
    line = _one_error(cli, "run", "ntp", "--config", str(path), "--out", str(tmp_path / "r"))
    assert "file too large" in line and "big.yaml" in line


# --------------------------------------------------- 4. binary, directory, unicode
@pytest.mark.parametrize("content", [os.urandom(256), b"\x89PNG\r\n\x1a\n" + bytes(range(256)), b"train:\n  eta: 0.1\x00\n"],
                         ids=["random", "png", "nul"])
def test_binary_config_is_one_line(cli, tmp_path, content):
    path = tmp_path / "c.yaml"
    path.write_bytes(content)
    line = _one_error(cli, "run", "ntp", "--config", str(path), "--out", str(tmp_path / "r"))
    assert line.startswith(f"error: --config {path}: not a text YAML file (")


def test_config_directory_says_so(cli, tmp_path):
    line = _one_error(cli, "run", "ntp", "--config", str(tmp_path), "--out", str(tmp_path / "r"))
    assert "is a directory" in line and "not found" not in line


def test_unicode_values_are_shown_as_characters(cli, tmp_path):
    line = _one_error(cli, "run", "ntp", "--set", "model.init=ёжик", "--out", str(tmp_path / "r"))
    assert 'model.init="ёжик"' in line and "\\u" not in line


# ------------------------------------------------------------------ 5. stages
@pytest.fixture
def metrics_dir(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    frame = pd.DataFrame({"step": [0, 1, 2, 3] * 2, "seed": [0] * 4 + [1] * 4, "metric": ["loss"] * 8,
                          "value": [1.0, 0.6, 0.4, 0.2, 1.0, 0.9, 0.45, 0.1], "variant": ["base"] * 8})
    frame.to_parquet(run / "metrics.parquet")
    return run


def test_stages_ignores_extra_columns(cli, metrics_dir):
    code, stdout, stderr = cli("stages", str(metrics_dir), "P=loss<=0.5")
    assert code == 0 and "2/2" in stdout and "order (by median step): P" in stdout, stderr


@pytest.mark.parametrize("args,needle", [
    (["P=loss<=0.5", "--sustain", "0"], "--sustain 0: must be >= 1"),
    (["P=loss<=0.5", "--sustain", "-1"], "--sustain -1: must be >= 1"),
    (["=loss<=0.5"], "empty NAME"),
    (["P=<=0.5"], "empty METRIC"),
    (["P=loss<=nan"], "not finite"),
    (["P=loss>=inf"], "not finite"),
    (["P=loss<=-inf"], "not finite"),
    (["P=loss<=0.5", "P=loss<=0.3"], "stage name 'P' is given twice"),
])
def test_stages_bad_criteria_one_line(cli, metrics_dir, args, needle):
    assert needle in _one_error(cli, "stages", str(metrics_dir), *args)


def test_stages_corrupt_or_wrong_metrics(cli, tmp_path):
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "metrics.parquet").write_bytes(os.urandom(600))
    assert "not a readable metrics file" in _one_error(cli, "stages", str(corrupt), "P=loss<=0.5")
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    pd.DataFrame({"step": [1], "seed": [0], "value": [0.1]}).to_parquet(wrong / "metrics.parquet")
    line = _one_error(cli, "stages", str(wrong), "P=loss<=0.5")
    assert "no column(s) metric" in line and "step, seed, metric, value" in line
    typed = tmp_path / "typed"
    typed.mkdir()
    pd.DataFrame({"step": ["a"], "seed": [0], "metric": ["loss"], "value": [0.1]}).to_parquet(typed / "metrics.parquet")
    assert "column step" in _one_error(cli, "stages", str(typed), "P=loss<=0.5")


# ------------------------------------------------------------------ 6. usage errors
@pytest.mark.parametrize("args,needle", [
    (["stages"], "Missing argument"),
    (["config"], "Missing argument"),
    (["run", "ntp", "--bogus"], "No such option: --bogus"),
    (["run", "ntp", "--seeds", "abc"], "--seeds"),
    (["run", "ntp", "--out"], "requires an argument"),
    (["nope"], "No such command"),
    (["run", "ntp", "--preset", "example1", "--preset", "small"], "--preset given more than once"),
    (["run", "ntp", "-p", "example1", "--preset=small"], "--preset given more than once"),
    (["run", "ntp", "-qpexample1", "-p", "x"], "--preset given more than once"),
    (["run", "ntp", "--config", "a.yaml", "-c", "b.yaml"], "--config given more than once"),
    (["run", "ntp", "--out", "a", "-o", "b"], "--out given more than once"),
    (["run", "ntp", "--seeds", "2", "--seeds", "3"], "--seeds given more than once"),
    (["run", "--resume", "a", "--resume", "b"], "--resume given more than once"),
])
def test_usage_errors_are_one_line(cli, tmp_path, monkeypatch, args, needle):
    monkeypatch.chdir(tmp_path)
    assert needle in _one_error(cli, *args)
    assert not (tmp_path / "runs").exists()


def test_option_values_are_not_scanned_and_help_works(cli, tmp_path):
    code, stdout, _ = cli("run", "--help")
    assert code == 0 and "--preset" in stdout
    code, stdout, _ = cli("--help")
    assert code == 0 and "stages" in stdout
    line = _one_error(cli, "run", "ntp", "--set", "train.etaa=--preset", "--preset", "example1", "--out", str(tmp_path / "r"))
    assert "did you mean 'train.lr_stage2'" in line


# ------------------------------------------------------------------ 7. capped messages
def test_user_error_caps_lines_with_a_summary():
    messages = [f"data.file=x.json: unknown token 'z{i}' in sample \"a z{i}\" -> b" for i in range(200_000)]
    messages += ["data.file=x.json: Assumption 3 fails in sample \"a b b c\" -> d"] * 5
    err = UserError(*messages)
    assert len(err.messages) == 200_005 and len(err.lines) == MAX_LINES + 1
    assert err.lines[:MAX_LINES] == tuple(messages[:MAX_LINES])
    assert err.lines[-1] == ("... and 199985 more problems (2 kinds: unknown token x199980, Assumption 3 fails x5)")
    assert str(err).count(";") == MAX_LINES
    assert cap_lines(("a", "b")) == ("a", "b")
    assert problem_kind("token 'b' is confused under query 'd'") == "token"
    assert cap_lines(tuple(f"x=1: bad value {i}" for i in range(30)))[-1] == "... and 10 more problems of the same kinds (1 kind: bad value x10)"


def test_ntp_file_with_200k_violations_prints_few_lines(cli, tmp_path):
    base = [{"input": ["a"], "next": "b"}, {"input": ["b"], "next": "c"}, {"input": ["c"], "next": "a"}]
    samples = base + [{"input": ["a", f"z{i}"], "next": "b"} for i in range(200_000)]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"tokens": ["a", "b", "c"], "samples": samples}))
    start = time.perf_counter()
    code, _, stderr = cli("run", "ntp", "--set", f"data.file={path}", "--out", str(tmp_path / "r"))
    elapsed = time.perf_counter() - start
    lines = _lines(stderr)
    assert code == 2 and len(lines) == MAX_LINES + 1 and all(line.startswith("error: ") for line in lines)
    assert lines[-1] == "error: ... and 199980 more problems of the same kinds (1 kind: unknown token x199980)"
    assert elapsed < 60 and not (tmp_path / "r").exists()


def test_ntp_20k_sample_file_validates_quickly(tmp_path):
    """20,000 distinct valid samples: query q's optimal tokens are q+1..q+5, its
    non-optimal ones q+100..q+149 (mod |V|), so every sentence is realizable."""
    import random

    from stagewise.labs.ntp.data import load_json_dataset

    vocab, rng = 200, random.Random(0)
    samples = [{"input": [f"t{i}"], "next": f"t{(i + 1) % vocab}"} for i in range(vocab)]
    seen: set[tuple[int, ...]] = set()
    while len(samples) < 20_000:
        q = rng.randrange(vocab)
        o = (q + rng.randrange(1, 6)) % vocab
        body = [o] + rng.sample([(q + j) % vocab for j in range(100, 150)], rng.randrange(0, 4))
        rng.shuffle(body)
        inp = tuple(body + [q])
        if inp not in seen:
            seen.add(inp)
            samples.append({"input": [f"t{x}" for x in inp], "next": f"t{(o + 1) % vocab}"})
    path = tmp_path / "ok.json"
    path.write_text(json.dumps({"tokens": [f"t{i}" for i in range(vocab)], "samples": samples}))
    start = time.perf_counter()
    ds = load_json_dataset(path)
    assert len(ds.samples) == 20_000 and time.perf_counter() - start < 20


# ------------------------------------------------------------------ 8. figures
@pytest.mark.slow
def test_dollar_token_draws_figures(cli, tmp_path):
    tok = "$\\foo$"
    data = {"tokens": [tok, "b", "c"], "samples": [{"input": [tok], "next": "b"}, {"input": ["b"], "next": "c"},
                                                 {"input": ["c"], "next": tok}, {"input": [tok, "c"], "next": "b"}]}
    path = tmp_path / "dollar.json"
    path.write_text(json.dumps(data))
    out = tmp_path / "r"
    code, _, stderr = cli("run", "ntp", "--set", f"data.file={path}", "--set", "train.steps_stage1=5",
                          "--set", "train.steps_stage2=5", "--out", str(out), "-q")
    assert code == 0, stderr
    assert (out / "tables" / "generalization.parquet").exists() and (out / "figures" / "figure2.png").exists()


# ------------------------------------------------------------------ 9. disentangled
@pytest.mark.parametrize("sets,line", [
    (["experiment.truncation_ks=[-5,1000]"], "error: experiment.truncation_ks=[-5, 1000]: each k must be in 0..2d = 0..60 (data.d=30)"),
    (["experiment.grid.t1=[1.5]"], "error: experiment.grid.t1=[1.5]: step counts must be integers (0..1000000000)"),
    (["train.steps=40", "train.t1=10", "experiment.grid.t1=[100000]"], "error: experiment.grid.t1=[100000]: each must be <= train.steps (40)"),
    (["experiment.dims=[]"], "error: experiment.dims=[]: need a non-empty list of d >= 2"),
    (["experiment.grid.noize=[1]"], "error: --set experiment.grid.noize: unknown key 'noize' in experiment.grid (did you mean 'noise'?); allowed: lr_stage1, lr_stage2, t1, noise, l2, zeta, q_centre, p_flip, batch_size"),  # noqa: E501 (the whole line the user sees)
])
def test_disentangled_experiment_values_checked_up_front(cli, tmp_path, sets, line):
    args = [item for s in sets for item in ("--set", s)]
    assert _one_error(cli, "run", "disentangled", *args, "--out", str(tmp_path / "r")) == line
    assert not (tmp_path / "r").exists()


def test_truncation_ks_follow_d():
    assert resolve(DisConfig, sets=["data.d=4", "experiment.truncation_ks=[0, 8]"]).experiment.truncation_ks == [0, 8]
    with pytest.raises(UserError, match=r"0\.\.8 \(data.d=4\)"):
        resolve(DisConfig, sets=["data.d=4", "experiment.truncation_ks=[9]"])


# ------------------------------------------------------------------ 10. step bounds
@pytest.mark.parametrize("lab,item", [
    ("ntp", "train.steps_stage1=10000000000"), ("ntp", "train.steps_stage2=100000000000000000000000000"),
    ("ntp", "train.log_every=10000000000"), ("disentangled", "train.steps=10000000000"),
    ("disentangled", "train.t1=10000000000"),
])
def test_step_counts_are_bounded(cli, tmp_path, lab, item):
    line = _one_error(cli, "run", lab, "--set", item, "--out", str(tmp_path / "r"))
    assert f"must be less than or equal to {MAX_STEPS}" in line and item.split("=")[0] in line


def test_float_step_count_in_file_is_one_line(cli, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  steps_stage1: 1.0e+26\n")
    assert "train.steps_stage1=1e+26" in _one_error(cli, "run", "ntp", "--config", str(path), "--out", str(tmp_path / "r"))
    with pytest.raises(UserError):
        resolve(NTPConfig, {"train": {"steps_stage1": 1e26}})


# ------------------------------------------------------------------ 11. dependencies
def test_pyarrow_floor_excludes_cve_2023_47248():
    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert '"pyarrow>=15"' in text and '"pyarrow>=14"' not in text
