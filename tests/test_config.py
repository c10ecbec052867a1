"""Config resolution: presets, files, --set overrides, one-line errors, stable hashes; strict
types (a boolean is never a number), empty --set values, bounded step counts, values shown as
characters, and 'did you mean' with the full dotted path across config sections."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cli_errors import one_error as _one_error
from stagewise.config import MAX_STEPS, config_hash, parse_overrides, resolve, to_commented_yaml
from stagewise.errors import UserError
from stagewise.labs import get_lab
from stagewise.labs.disentangled.config import Config as DisConfig
from stagewise.labs.ntp.config import Config, Config as NTPConfig
from stagewise.overrides import config_paths


def test_defaults_are_the_paper_experiment():
    cfg = Config()
    assert cfg.data.vocab_size == 20 and cfg.train.steps_stage1 == 900 and cfg.train.steps_stage2 == 900
    assert cfg.step_sizes(20) == pytest.approx((0.2 / 20**0.5, 0.05 / 20**0.5))


def test_overrides_parse_yaml_values():
    out = parse_overrides(Config, ["train.lr_stage2=0.5", "data.complete=true", "data.optimal_per_query=[1, 2]", "seed=3"])
    assert out == {"train": {"lr_stage2": 0.5}, "data": {"complete": True, "optimal_per_query": [1, 2]}, "seed": 3}


def test_unknown_key_suggests_closest():
    with pytest.raises(UserError) as err:
        parse_overrides(Config, ["train.etaa=1"])
    assert "did you mean 'train.lr_stage2'" in err.value.messages[0]


def test_every_bad_value_is_one_line():
    with pytest.raises(UserError) as err:
        resolve(Config, sets=["train.lr_stage1=-1", "model.init=foo", "data.vocab_size=2"])
    msgs = err.value.messages
    assert len(msgs) == 3
    assert any(m.startswith("train.lr_stage1=-1:") for m in msgs)
    assert any("model.init" in m and "'zero' or 'random'" in m for m in msgs)
    assert all("\n" not in m for m in msgs)


def test_nan_step_size_rejected():
    with pytest.raises(UserError):
        resolve(Config, sets=["train.lr_stage2=.nan"])


def test_precedence_preset_file_set(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  steps_stage1: 5\n  steps_stage2: 7\n")
    cfg = resolve(Config, {"train": {"steps_stage1": 1}}, path, ["train.steps_stage2=9"], {"n_seeds": 4})
    assert (cfg.train.steps_stage1, cfg.train.steps_stage2, cfg.n_seeds) == (5, 9, 4)


def test_bad_yaml_names_file_and_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("train:\n  eta: [1, 2\n")
    with pytest.raises(UserError) as err:
        resolve(Config, file=path)
    assert "bad.yaml" in err.value.messages[0] and "line" in err.value.messages[0]


def test_unknown_key_in_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("trian:\n  eta: 1\n")
    with pytest.raises(UserError) as err:
        resolve(Config, file=path)
    assert "did you mean 'train'" in err.value.messages[0]


def test_file_implies_source():
    assert resolve(Config, sets=["data.file=x.json"]).data.source == "file"
    with pytest.raises(UserError):
        resolve(Config, {"data": {"source": "example1"}}, sets=["data.file=x.json"])


def test_factored_needs_random_init():
    with pytest.raises(UserError) as err:
        resolve(Config, sets=["model.factored=true"])
    assert "model.init=random" in err.value.messages[0]


def test_hash_stable_and_sensitive():
    a, b = Config(), Config.model_validate({"train": {"lr_stage2": None}})
    assert config_hash(a) == config_hash(b)
    assert config_hash(a) != config_hash(Config.model_validate({"seed": 1}))


def test_commented_yaml_round_trips():
    cfg = resolve(Config, {"data": {"source": "example1"}})
    text = to_commented_yaml(cfg)
    lines = text.splitlines()
    for name, field in Config.model_fields["train"].annotation.model_fields.items():
        if field.description:
            at = next(i for i, line in enumerate(lines) if line.startswith(f"  {name}:"))
            assert lines[at - 1] == f"  # {field.description.splitlines()[-1]}", name
    assert Config.model_validate(yaml.safe_load(text)) == cfg


def test_union_field_one_line_and_keys_with_values_together():
    with pytest.raises(UserError) as err:
        resolve(Config, sets=["train.threads=foo", "train.etaa=1", "train.lr_stage1=-1"])
    msgs = err.value.messages
    assert len(msgs) == 3
    assert any(m.startswith('train.threads="foo":') and " or " in m for m in msgs)
    assert any("did you mean 'train.lr_stage2'" in m for m in msgs) and any(m.startswith("train.lr_stage1=-1") for m in msgs)


# ------------------------------------------------------------------- strict types
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


# ------------------------------------------------------------------ empty --set value
def test_empty_set_value_is_an_error(cli, tmp_path):
    line = _one_error(cli, "run", "ntp", "--set", "data.file=", "--out", str(tmp_path / "r"))
    assert line == "error: --set data.file=: empty value; give a value or null"
    assert not (tmp_path / "r").exists()
    cfg = resolve(NTPConfig, sets=["data.file=null"])
    assert cfg.data.file is None and cfg.data.source == "random"


# ------------------------------------------------------------------ values shown as characters
def test_unicode_values_are_shown_as_characters(cli, tmp_path):
    line = _one_error(cli, "run", "ntp", "--set", "model.init=ёжик", "--out", str(tmp_path / "r"))
    assert 'model.init="ёжик"' in line and "\\u" not in line


# ------------------------------------------------------------------ step bounds
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


# ------------------------------------------------------------------ did you mean: full dotted paths
def _hint(lab: str, key: str) -> str:
    with pytest.raises(UserError) as err:
        parse_overrides(get_lab(lab).Config, [f"{key}=1"])
    (message,) = err.value.messages
    return message


def _suggested(message: str) -> list[str]:
    hint = message.split("(did you mean ", 1)[1].split("?)", 1)[0]
    return [part.strip("'") for part in hint.replace(" or ", ", ").split(", ")]


@pytest.mark.parametrize("lab,key,best", [
    ("ntp", "eta", "train.lr_stage2"),  # an old leaf name given without its section: the field's new path
    ("ntp", "vocab", "data.vocab_size"),  # one word of a leaf's name
    ("ntp", "train.etta", "train.lr_stage2"),  # a typo of an old name inside a section
    ("ntp", "trian.lr_stage1", "train.lr_stage1"),  # a typo in the section name
    ("ntp", "sede", "seed"),  # a top-level typo
    ("ntp", "model.dim", "data.dim"),  # a leaf in the wrong section
    ("disentangled", "steps", "train.steps"),
    ("lm", "lr", "train.lr"),
    ("lm", "modle", "model"),
])
def test_unknown_key_suggests_the_closest_full_dotted_paths(lab, key, best):
    message = _hint(lab, key)
    suggested = _suggested(message)
    assert suggested[0] == best, message
    assert set(suggested) <= set(config_paths(get_lab(lab).Config))  # only real paths are suggested
    # and the suggestion is accepted as it stands
    resolve(get_lab(lab).Config, sets=[f"{best}={_value_of(lab, best)}"])


def _value_of(lab: str, path: str) -> str:
    """The default value of ``path`` as --set text (so setting it is valid)."""
    import json

    value = resolve(get_lab(lab).Config).model_dump(mode="json")
    for part in path.split("."):
        value = value[part]
    return json.dumps(value) if not isinstance(value, dict) else "{}"


def test_cli_unknown_key_is_one_line_with_the_full_path_and_nothing_is_made(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli("run", "ntp", "--set", "eta=0.1")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith("error: --set eta: ") and "did you mean 'train.lr_stage2'" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("lab", ["ntp", "disentangled", "lm"])
def test_seeds_out_of_range_are_one_line_and_nothing_is_made(cli, tmp_path, lab):
    """A seed at or above MAX_SEED (int64 with room for offsets) is refused before any work: one line, exit 2."""
    from stagewise.config import MAX_SEED

    for seed in (MAX_SEED, 10**30):
        code, _, err = cli("run", lab, "--set", f"seed={seed}", "--out", str(tmp_path / "r"))
        assert code == 2 and err.count("\n") == 1 and "seed=" in err, err
        assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("blocks, why", [
    ("[]", "at least 1"), ("[0, 0]", "overlap"), ("[0, 1]", "overlap"), ("[-1]", "greater than or equal to 0"),
    (str(list(range(0, 100 * 65, 100))), "at most 64"),
])
def test_robustness_seed_blocks_are_checked_up_front(cli, tmp_path, blocks, why):
    """Seed blocks of the robustness preset: non-empty, disjoint (n_seeds apart), in range, at most MAX_SEED_BLOCKS."""
    code, _, err = cli("run", "disentangled", "--preset", "robustness", "--seeds", "2",
                       "--set", f"experiment.seed_blocks={blocks}", "--out", str(tmp_path / "r"))
    assert code == 2 and why in err and err.count("\n") == 1, err
    assert not (tmp_path / "r").exists()
