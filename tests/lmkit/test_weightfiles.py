"""Issue 26, section 5 (model folders): weights are read from safetensors or GGUF only. A
folder whose only weights are a pickle (zip-format or legacy torch.save) is one line in every
command that takes a model, before anything is made and without unpickling it; a malformed
GGUF file (a header only, a tensor count of 2**62, a truncated file) is one line too, in the
commands and in lmkit's loader, before transformers' parser sees it."""

from __future__ import annotations

import json
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from stagewise.errors import UserError
from stagewise.lmkit.weightfiles import check_gguf, check_weight_folder
from cli_errors import one_error_line

gguf = pytest.importorskip("gguf", reason="the gguf package (the test extra) writes the GGUF files")


class _TouchOnLoad:
    """Unpickling this creates the file ``path``: the proof that nothing unpickled it."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (Path.touch, (self.path,))


@pytest.fixture(scope="module")
def pickle_folders(tmp_path_factory) -> dict[str, Path]:
    """Model folders (config.json, GPT-2 tokenizer) whose only weights are pytorch_model.bin:
    zip-format and legacy torch.save of a real state dict, and a pickle that runs code on load."""
    import transformers

    from stagewise.lmkit.models import GPT2_VOCAB, gpt2_bpe

    root = tmp_path_factory.mktemp("pickles")
    config = transformers.GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=GPT2_VOCAB, n_positions=32)
    state = transformers.GPT2LMHeadModel(config).state_dict()
    tok = gpt2_bpe()
    folders = {}
    for kind in ("zip", "legacy", "hostile"):
        folder = root / kind
        config.save_pretrained(folder)
        tok.save_pretrained(folder)
        if kind == "hostile":
            (folder / "pytorch_model.bin").write_bytes(pickle.dumps({"w": _TouchOnLoad(root / "UNPICKLED")}))
        else:
            torch.save(state, folder / "pytorch_model.bin", _use_new_zipfile_serialization=kind == "zip")
        folders[kind] = folder
    return folders


@pytest.fixture
def no_torch_load(monkeypatch):
    """Any torch.load (weights_only or not) fails the test: the folder must be refused before."""
    def refuse(*args, **kwargs):
        raise AssertionError("torch.load was called on a pickle weight file")

    monkeypatch.setattr(torch, "load", refuse)


@pytest.mark.parametrize("kind", ["zip", "legacy", "hostile"])
def test_pickle_only_folder_is_one_line_in_every_command(cli, pickle_folders, tmp_path, lm_data_root, no_torch_load, kind):
    folder = pickle_folders[kind]
    commands = {
        "eval blimp": ["eval", "blimp", str(folder), "--data", str(lm_data_root / "blimp"), "--out", str(tmp_path / "b")],
        "lm reduce": ["lm", "reduce", str(folder), "--select", "blocks.0.attn.q", "--p", "0.5", "--out", str(tmp_path / "r")],
        "lm rank-curve": ["lm", "rank-curve", str(folder), "--task", "counterfact", "--out", str(tmp_path / "rc")],
        "run lm": ["run", "lm", "--set", f"model.name={folder}", "--out", str(tmp_path / "run")],
    }
    for name, args in commands.items():
        line = one_error_line(*cli(*args)[::2])
        assert "only pickle weights (pytorch_model.bin)" in line and "only safetensors weights" in line, (name, line)
        assert str(folder) in line, (name, line)
    assert list(tmp_path.iterdir()) == []  # no --out, no run folder
    assert not (folder.parent / "UNPICKLED").exists()


def test_weight_folder_rules(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(UserError, match="has no weights"):
        check_weight_folder("m", tmp_path)
    (tmp_path / "model.pt").write_bytes(b"x")
    (tmp_path / "pytorch_model-00001-of-00002.bin").write_bytes(b"x")
    with pytest.raises(UserError, match=r"only pickle weights \(model.pt, pytorch_model-00001-of-00002.bin\)"):
        check_weight_folder("m", tmp_path)
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"x")  # safetensors beside them: read those
    check_weight_folder("m", tmp_path)


def test_a_hub_cache_with_only_pickle_weights_is_one_line_offline(cli, tmp_path, monkeypatch):
    """A hub model cached before safetensors (config.json + pytorch_model.bin) while the hub is
    unreachable: one line saying so, not "not in the cache" and not a pickle load."""
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    snapshot = cache / "models--old-org--old-model" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    (snapshot / "pytorch_model.bin").write_bytes(b"not read")
    (cache / "models--old-org--old-model" / "refs").mkdir()
    (cache / "models--old-org--old-model" / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, _, err = cli("run", "lm", "--set", "model.name=old-org/old-model", "--out", str(tmp_path / "run"))
    line = one_error_line(code, err)
    assert "holds only pickle weights of old-org/old-model (pytorch_model.bin)" in line
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------ GGUF
def write_tiny_gguf(path: Path) -> Path:
    """A small well-formed GGUF file (llama metadata, two float32 tensors)."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.arange(32, dtype=np.float32).reshape(8, 4))
    writer.add_tensor("output_norm.weight", np.ones(4, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def malformed(kind: str, folder: Path) -> tuple[Path, str]:
    """(a malformed GGUF file, a fragment of its one-line error)."""
    good = write_tiny_gguf(folder / "good.gguf").read_bytes()
    path = folder / f"{kind}.gguf"
    if kind == "header-only":
        path.write_bytes(good[:24])
        return path, "metadata entries at byte 24, but the file ends there"
    if kind == "tensor-count-2**62":
        path.write_bytes(good[:8] + struct.pack("<Q", 2**62) + good[16:])
        return path, f"announces {2**62} tensor descriptions"
    if kind == "truncated":  # the last tensor's data cut in half
        last = gguf.GGUFReader(folder / "good.gguf").tensors[-1]
        path.write_bytes(good[:last.data_offset + last.n_bytes // 2])
        return path, f"truncated: tensor 'output_norm.weight' ends at byte {last.data_offset + last.n_bytes}"
    if kind == "cut-in-the-metadata":  # inside the value of general.architecture (the first entry)
        path.write_bytes(good[:24 + 8 + len("general.architecture") + 4 + 8 + 2])
        return path, "truncated: the value of metadata key 'general.architecture'"
    if kind == "empty":
        path.write_bytes(b"")
        return path, "0 bytes, too short for a GGUF header"
    if kind == "not-gguf":
        path.write_bytes(b"PK\x03\x04" + good[4:])
        return path, "does not start with the GGUF magic bytes"
    raise ValueError(kind)


KINDS = ["header-only", "tensor-count-2**62", "truncated", "cut-in-the-metadata", "empty", "not-gguf"]


def test_the_walk_accepts_what_the_gguf_reader_reads(tmp_path):
    path = write_tiny_gguf(tmp_path / "good.gguf")
    assert check_gguf(path) == len(gguf.GGUFReader(path).tensors) == 2


@pytest.mark.parametrize("kind", KINDS)
def test_malformed_gguf_is_one_line_in_lm_reduce(cli, tmp_path, kind):
    path, fragment = malformed(kind, tmp_path)
    out = tmp_path / "out"
    line = one_error_line(*cli("lm", "reduce", str(path), "--select", "blocks.0.attn.q", "--p", "0.5", "--out", str(out))[::2])
    assert f"{path}: not a readable GGUF file" in line and fragment in line, line
    assert not out.exists()


@pytest.mark.parametrize("kind", ["header-only", "tensor-count-2**62", "truncated"])
def test_malformed_gguf_is_one_line_in_the_loader_and_run_lm(cli, tmp_path, kind):
    from stagewise.lmkit import ModelConfig, build

    path, fragment = malformed(kind, tmp_path)
    with pytest.raises(UserError) as info:
        build(ModelConfig(gguf_file=str(path)), seed=0, dtype=torch.float32)
    assert f"model.gguf_file={path}: not a readable GGUF file" in str(info.value) and fragment in str(info.value)
    line = one_error_line(*cli("run", "lm", "--set", f"model.gguf_file={path}", "--out", str(tmp_path / "run"))[::2])
    assert fragment in line and not (tmp_path / "run").exists()


def test_a_well_formed_gguf_that_transformers_cannot_use_is_one_line(cli, tmp_path):
    """Past the walk, transformers' own refusal (no tokenizer in the metadata) is one line too."""
    path = write_tiny_gguf(tmp_path / "tiny.gguf")
    line = one_error_line(*cli("eval", "blimp", str(path), "--out", str(tmp_path / "b"))[::2])
    assert "tokenizer" in line and not (tmp_path / "b").exists()
