"""One learning-rate vocabulary: old names still accepted (with a note), hashes unchanged by the
rename, derived defaults written into config.yaml as the values used without changing the hash."""

from __future__ import annotations

import hashlib
import json
import math
import warnings

import pytest
import yaml

from stagewise.config import canonical, config_hash, materialize, resolve, to_yaml
from stagewise.errors import RenamedOption, UserError
from stagewise.labs import get_lab
from stagewise.labs.ntp.config import EXAMPLE1_VOCAB, Config as NTPConfig
from stagewise.labs.ntp.data import example1


def _legacy_hash(dumped: dict) -> str:
    """The hash as computed before the rename: sha256 of the sorted JSON dump, 16 hex digits."""
    return hashlib.sha256(json.dumps(dumped, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def test_old_names_are_accepted_with_a_note():
    with pytest.warns(RenamedOption) as notes:
        old = resolve(NTPConfig, {"train": {"eta0": 0.1, "eta": 0.02}})
    assert sorted(str(n.message).split(" (")[0] for n in notes) == ["train.eta is now train.lr_stage2",
                                                                    "train.eta0 is now train.lr_stage1"]
    new = resolve(NTPConfig, {"train": {"lr_stage1": 0.1, "lr_stage2": 0.02}})
    assert old == new and config_hash(old) == config_hash(new)
    with pytest.warns(RenamedOption):
        via_set = resolve(NTPConfig, None, None, ["train.eta=0.02", "train.eta0=0.1"])
    assert via_set == new


def test_old_and_new_name_together_is_one_error():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RenamedOption)
        with pytest.raises(UserError, match="same setting"):
            resolve(NTPConfig, {"train": {"eta0": 0.1, "lr_stage1": 0.1}})


def test_hash_equals_the_pre_rename_hash():
    """The hash is taken with renamed fields under their old names: the dump the old code
    hashed (keys eta0/eta, derived values null) gives the same digest."""
    config = resolve(NTPConfig, {"train": {"lr_stage1": 0.3}})
    dumped = config.model_dump(mode="json")
    train = dumped["train"]
    train["eta0"], train["eta"] = train.pop("lr_stage1"), train.pop("lr_stage2")
    assert config_hash(config) == _legacy_hash(dumped)


@pytest.mark.parametrize("overrides", [{}, {"data": {"vocab_size": 30}}, {"data": {"vocab_size": 12, "dim": 16}},
                                       {"data": {"source": "example1"}}])
def test_derived_defaults_are_written_and_keep_the_hash(overrides):
    config = resolve(NTPConfig, overrides)
    full = materialize(config)
    vocab = config.vocab_size()
    dim = config.data.dim or vocab
    assert full.data.dim == dim
    assert full.train.lr_stage1 == pytest.approx(0.2 / math.sqrt(dim), rel=0, abs=0)
    assert full.train.lr_stage2 == pytest.approx(0.05 / math.sqrt(dim), rel=0, abs=0)
    assert full.step_sizes(dim) == config.step_sizes(dim)  # the values used are the values written
    written = yaml.safe_load(to_yaml(config))
    assert written["train"]["lr_stage1"] == full.train.lr_stage1 and written["data"]["dim"] == dim
    reread = resolve(NTPConfig, written)
    assert config_hash(reread) == config_hash(config) == config_hash(full)
    # an explicit value different from the derivation is a different run
    other = resolve(NTPConfig, {**overrides, "train": {"lr_stage1": full.train.lr_stage1 * 2}})
    assert config_hash(other) != config_hash(config)
    assert canonical(other)["train"]["eta0"] == full.train.lr_stage1 * 2


def test_example1_vocab_constant_matches_the_dataset():
    assert EXAMPLE1_VOCAB == example1().vocab_size


def test_file_data_derives_from_the_file(tmp_path):
    path = tmp_path / "d.json"
    path.write_text(json.dumps({"tokens": list("abcdefg"), "samples": []}))
    config = resolve(NTPConfig, {"data": {"file": str(path)}})
    assert materialize(config).data.dim == 7
    missing = resolve(NTPConfig, {"data": {"file": str(tmp_path / "none.json")}})
    assert missing.derived() == {} and materialize(missing) == missing  # left null: the lab's check reports the file


@pytest.mark.parametrize("name", ["ntp", "disentangled", "lm"])
def test_every_preset_materializes_to_the_same_hash(name):
    lab = get_lab(name)
    for preset in lab.presets:
        config = resolve(lab.Config, lab.preset_overrides(preset))
        assert config_hash(materialize(config)) == config_hash(config), preset


def test_disentangled_rates_and_grid_keys_keep_their_old_names_and_hash():
    from stagewise.labs.disentangled.config import Config as DisConfig
    from stagewise.labs.disentangled.experiments import grid_variants, seed_major

    with pytest.warns(RenamedOption):
        old = resolve(DisConfig, {"train": {"eta1": 0.5}, "experiment": {"kind": "grid", "grid": {"eta2": [0.1, 0.2]}}})
    new = resolve(DisConfig, {"train": {"lr_stage1": 0.5}, "experiment": {"kind": "grid", "grid": {"lr_stage2": [0.1, 0.2]}}})
    assert old == new and config_hash(old) == config_hash(new)
    dumped = new.model_dump(mode="json")
    dumped["train"]["eta1"], dumped["train"]["eta2"] = dumped["train"].pop("lr_stage1"), dumped["train"].pop("lr_stage2")
    dumped["experiment"]["grid"] = {"eta2": dumped["experiment"]["grid"]["lr_stage2"]}
    for section in ("data", "train", "thresholds", "experiment"):  # fields added later did not exist then
        for name in type(getattr(new, section)).ADDED:
            dumped[section].pop(name)
    assert config_hash(new) == _legacy_hash(dumped)
    # an added field away from its default does change the hash
    assert config_hash(resolve(DisConfig, {"train": {"lr_stage1": 0.5, "objective": "branches"}})) != config_hash(
        resolve(DisConfig, {"train": {"lr_stage1": 0.5}}))
    # a preset's old grid key and a --set of the new one are one entry, not two
    with pytest.warns(RenamedOption):
        merged = resolve(DisConfig, {"experiment": {"grid": {"eta1": [1.0, 3.0]}}}, None, ["experiment.grid.lr_stage1=[1, 2]"])
    assert merged.experiment.grid == {"lr_stage1": [1.0, 2.0]}
    members = seed_major(merged, grid_variants(merged))
    assert sorted({m.lr_stage1 for m in members}) == [1.0, 2.0]  # grid values reach the members' lr_stage1


def test_old_and_new_name_of_one_setting_together_are_refused(cli, tmp_path):
    """--set train.eta (old) and --set train.lr_stage2 (current) name one setting: refused whichever comes
    first, exit 2, nothing made; the same in a config file layer."""
    for first, second in (("train.eta=0.1", "train.lr_stage2=0.2"), ("train.lr_stage2=0.2", "train.eta=0.1")):
        code, _, err = cli("run", "ntp", "--set", first, "--set", second, "--out", str(tmp_path / "r"))
        assert code == 2 and "same setting" in err and "give train.lr_stage2 only" in err, err
        assert not (tmp_path / "r").exists()
    config = tmp_path / "c.yaml"
    config.write_text("train:\n  eta: 0.1\n  lr_stage2: 0.2\n")
    code, _, err = cli("run", "ntp", "--config", str(config), "--out", str(tmp_path / "r"))
    assert code == 2 and "same setting" in err and not (tmp_path / "r").exists()
