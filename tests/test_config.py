"""Config resolution: presets, files, --set overrides, one-line errors, stable hashes."""

from __future__ import annotations

import pytest
import yaml

from stagewise.config import config_hash, parse_overrides, resolve, to_commented_yaml
from stagewise.errors import UserError
from stagewise.labs.ntp.config import Config


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
