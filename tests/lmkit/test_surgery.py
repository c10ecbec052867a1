"""lmkit: attention weight adapters (split/merge, agreement with the model's own forward pass,
GQA, GPT-NeoX's per-head fused query_key_value with partial rotary) and rank-reduction surgery
(selectors, Eckart-Young, keep-smallest, per head, p = 1 parity, randomized SVD), on tiny random
GPT-2, Llama and GPT-NeoX models built from configs."""

from __future__ import annotations

import copy
import math
import re
from fractions import Fraction

import pytest
import torch

transformers = pytest.importorskip("transformers")

from stagewise.errors import UserError  # noqa: E402
from stagewise.lmkit.adapters import GPT2Adapter, GPTNeoXAdapter, LlamaAdapter, adapter_for  # noqa: E402
from stagewise.lmkit.surgery import (  # noqa: E402
    RankReducer, Target, kept_rank, low_rank, parse_selector, random_directions, reduce_rank)

VOCAB, D_MODEL, N_HEADS, N_KV, N_LAYERS = 64, 32, 4, 2, 2
FWD_TOL = 1e-6  # float32 forward pass vs our per-head recomputation
SVD_TOL = 1e-10  # float64 identities
HEAD_PROJS = ("q", "k", "v", "o")


def _noisy_biases(model: torch.nn.Module) -> torch.nn.Module:
    """HF initializes biases to 0, which would hide bias handling; make them nonzero."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.1)
    return model.eval()


def gpt2(seed: int = 0, base: bool = False) -> torch.nn.Module:
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(n_layer=N_LAYERS, n_embd=D_MODEL, n_head=N_HEADS, vocab_size=VOCAB, n_positions=32,
                                  bos_token_id=0, eos_token_id=0, attn_implementation="eager")
    cls = transformers.GPT2Model if base else transformers.GPT2LMHeadModel
    return _noisy_biases(cls(cfg))


def llama(seed: int = 0, bias: bool = True) -> torch.nn.Module:
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=D_MODEL, intermediate_size=64, num_hidden_layers=N_LAYERS,
                                   num_attention_heads=N_HEADS, num_key_value_heads=N_KV, max_position_embeddings=64,
                                   attention_bias=bias, bos_token_id=0, eos_token_id=0, attn_implementation="eager")
    return _noisy_biases(transformers.LlamaForCausalLM(cfg))


def gpt_neox(seed: int = 0, rotary_pct: float = 0.25, parallel: bool = True, base: bool = False) -> torch.nn.Module:
    torch.manual_seed(seed)
    cfg = transformers.GPTNeoXConfig(vocab_size=VOCAB, hidden_size=D_MODEL, intermediate_size=64, num_hidden_layers=N_LAYERS,
                                     num_attention_heads=N_HEADS, rotary_pct=rotary_pct, use_parallel_residual=parallel,
                                     max_position_embeddings=64, bos_token_id=0, eos_token_id=0, attn_implementation="eager")
    cls = transformers.GPTNeoXModel if base else transformers.GPTNeoXForCausalLM
    return _noisy_biases(cls(cfg))


MODELS = {"gpt2": gpt2, "llama": llama, "gpt_neox": gpt_neox}
BASES = {"gpt2-base": lambda: gpt2(base=True), "gpt_neox-base": lambda: gpt_neox(base=True)}


def tokens(seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (2, 7), generator=torch.Generator().manual_seed(seed))  # (B, T)


def params(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def stored_part(adapter, model, layer, proj, head=None) -> tuple[str, torch.Tensor]:
    """Evaluate ``adapter.location`` ("name", "name[a:b, :]", "name[:, a:b]" or GPT-NeoX's
    "name.view(H, 3, d_head, d_model)[:, t]") against the stored parameter."""
    loc = adapter.location(layer, proj, head)
    m = re.fullmatch(r"([\w.]+?)(?:\[(\d+):(\d+), :\]|\[:, (\d+):(\d+)\]|\.view\((\d+), 3, (\d+), (\d+)\)\[:, ([012])\])?", loc)
    assert m, loc
    param = dict(model.named_parameters())[m.group(1)].detach()
    if m.group(2):
        return m.group(1), param[int(m.group(2)):int(m.group(3)), :]
    if m.group(4):
        return m.group(1), param[:, int(m.group(4)):int(m.group(5))]
    if m.group(6):
        n, dh, d = int(m.group(6)), int(m.group(7)), int(m.group(8))
        return m.group(1), param.view(n, 3, dh, d)[:, int(m.group(9))].reshape(n * dh, d)  # (H*d_head, d_model): rows of one projection
    return m.group(1), param


def as_x_at_w(adapter, stored: torch.Tensor) -> torch.Tensor:
    return stored.T if isinstance(adapter, (LlamaAdapter, GPTNeoXAdapter)) else stored  # Linear stores (out, in)


def neox_split(weight: torch.Tensor, n_heads: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Heads (H, d_head, d_model) of q, k, v from a query_key_value weight or bias (3 d_model, ...)
    by transformers' own split: ``qkv.view(..., H, 3 * d_head).chunk(3, dim=-1)`` on the output."""
    rows = weight.reshape(n_heads, -1, *weight.shape[1:])  # (H, 3 d_head, ...): the output's view(..., H, 3 d_head)
    q, k, v = rows.chunk(3, dim=1)  # 3 x (H, d_head, ...)
    return q, k, v


# ---- adapters -------------------------------------------------------------------------------
@pytest.mark.parametrize("family", ["gpt2", "gpt2-base", "llama", "gpt_neox", "gpt_neox-base"])
def test_adapter_dims_and_locations(family):
    model = BASES[family]() if family in BASES else MODELS[family]()
    a = adapter_for(model)
    assert (a.n_layers, a.n_heads, a.d_model, a.d_head) == (N_LAYERS, N_HEADS, D_MODEL, D_MODEL // N_HEADS)
    assert a.n_kv_heads == (N_KV if family == "llama" else N_HEADS)
    assert a.family == family.split("-")[0]
    names = dict(model.named_parameters())
    for layer in range(a.n_layers):
        for proj in a.projections:
            assert a.param_name(layer, proj) in names
            _, stored = stored_part(a, model, layer, proj)
            if proj == "qkv" and isinstance(a, GPTNeoXAdapter):  # [Q | K | V]: the stored rows regrouped by projection
                q, k, v = neox_split(stored, a.n_heads)  # 3 x (H, d_head, d_model)
                stored = torch.cat([q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1)])  # (3 d_model, d_model)
            assert torch.equal(as_x_at_w(a, stored), a.matrix(model, layer, proj))
            if proj == "qkv":
                assert torch.equal(a.matrix(model, layer, proj), torch.cat([a.matrix(model, layer, p) for p in "qkv"], dim=1))
                continue
            heads = a.heads(model, layer, proj)
            assert heads.shape == (a.n_heads_of(proj), *a.head_shape(proj))
            for h in range(heads.shape[0]):
                assert torch.equal(as_x_at_w(a, stored_part(a, model, layer, proj, h)[1]), heads[h])


@pytest.mark.parametrize("family", ["gpt2", "llama", "gpt_neox"])
def test_split_merge_and_write_round_trips_are_exact(family):
    model = MODELS[family]()
    a = adapter_for(model)
    before = params(model)
    ptrs = {n: p.data_ptr() for n, p in model.named_parameters()}
    gen = torch.Generator().manual_seed(5)
    for layer in range(a.n_layers):
        for proj in HEAD_PROJS:
            m = a.matrix(model, layer, proj)
            assert torch.equal(a.merge_heads(proj, a.split_heads(proj, m)), m)
            a.set_heads(model, layer, proj, a.heads(model, layer, proj))
            a.set_matrix(model, layer, proj, a.matrix(model, layer, proj))
    after = params(model)
    assert all(torch.equal(before[n], after[n]) for n in before)
    for layer in range(a.n_layers):  # write random heads, read them back
        for proj in a.projections:
            if proj == "qkv":
                new = torch.randn(a.matrix_shape(proj), generator=gen)
                a.set_matrix(model, layer, proj, new)
                assert torch.equal(a.matrix(model, layer, proj), new)
                continue
            new = torch.randn(a.n_heads_of(proj), *a.head_shape(proj), generator=gen)
            a.set_heads(model, layer, proj, new)
            assert torch.equal(a.heads(model, layer, proj), new)
    assert {n: p.data_ptr() for n, p in model.named_parameters()} == ptrs  # same storage, in place
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters() if n.endswith("bias"))


def test_setters_keep_dtype_and_reject_bad_shapes():
    model = llama().double()
    a = adapter_for(model)
    value = torch.randn(a.matrix_shape("k"), dtype=torch.float32)
    a.set_matrix(model, 1, "k", value)
    assert model.model.layers[1].self_attn.k_proj.weight.dtype == torch.float64
    assert torch.equal(a.matrix(model, 1, "k"), value.double())
    with pytest.raises(ValueError, match="expected shape"):
        a.set_matrix(model, 1, "k", value.T)
    with pytest.raises(ValueError, match="expected shape"):
        a.set_head(model, 1, "q", 0, torch.zeros(a.d_head, a.d_model))


def test_gpt2_heads_agree_with_the_forward_pass():
    model = gpt2()
    a = adapter_for(model)
    layer = 1
    attn = model.transformer.h[layer].attn
    seen = {}
    hooks = [attn.c_attn.register_forward_hook(lambda m, i, o: seen.update(x=i[0], qkv=o)),
             attn.c_proj.register_forward_hook(lambda m, i, o: seen.update(z=i[0], out=o))]
    with torch.no_grad():
        out = model(tokens(), output_attentions=True)
    for h in hooks:
        h.remove()
    x, dh = seen["x"], a.d_head  # (B, T, d_model)
    b = attn.c_attn.bias.detach()  # (3 d_model,)
    per = {p: torch.einsum("btd,hde->bhte", x, a.heads(model, layer, p)) for p in ("q", "k", "v")}  # (B, H, T, d_head)
    for i, p in enumerate(("q", "k", "v")):
        bias = b[i * a.d_model:(i + 1) * a.d_model].reshape(a.n_heads, 1, dh)  # (H, 1, d_head)
        per[p] = per[p] + bias
        model_part = seen["qkv"][..., i * a.d_model:(i + 1) * a.d_model].unflatten(-1, (a.n_heads, dh)).transpose(1, 2)  # (B, H, T, d_head)
        torch.testing.assert_close(per[p], model_part, atol=FWD_TOL, rtol=0)
    scores = per["q"] @ per["k"].transpose(-1, -2) / math.sqrt(dh)  # (B, H, T, T)
    causal = torch.ones(scores.shape[-2:], dtype=torch.bool).tril()  # (T, T)
    pattern = scores.masked_fill(~causal, float("-inf")).softmax(-1)  # (B, H, T, T)
    torch.testing.assert_close(pattern, out.attentions[layer], atol=FWD_TOL, rtol=0)
    z = pattern @ per["v"]  # (B, H, T, d_head)
    torch.testing.assert_close(z.transpose(1, 2).flatten(2), seen["z"], atol=FWD_TOL, rtol=0)
    o = torch.einsum("bhte,hed->btd", z, a.heads(model, layer, "o")) + attn.c_proj.bias  # (B, T, d_model)
    torch.testing.assert_close(o, seen["out"], atol=FWD_TOL, rtol=0)


def test_llama_heads_agree_with_the_forward_pass_with_gqa():
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    model = llama()
    a = adapter_for(model)
    assert a.kv_head_of.tolist() == [0, 0, 1, 1]
    layer = 1
    attn = model.model.layers[layer].self_attn
    seen = {}
    hooks = [attn.register_forward_pre_hook(lambda m, args, kw: seen.update(x=kw["hidden_states"], pe=kw["position_embeddings"]),
                                            with_kwargs=True),
             attn.o_proj.register_forward_hook(lambda m, i, o: seen.update(z=i[0], out=o))]
    with torch.no_grad():
        out = model(tokens(), output_attentions=True)
    for h in hooks:
        h.remove()
    x, dh = seen["x"], a.d_head  # (B, T, d_model)
    per = {}
    for p in ("q", "k", "v"):
        bias = getattr(attn, f"{p}_proj").bias.detach().reshape(-1, 1, dh)  # (H_p, 1, d_head)
        per[p] = torch.einsum("btd,hde->bhte", x, a.heads(model, layer, p)) + bias  # (B, H_p, T, d_head)
    q, k = apply_rotary_pos_emb(per["q"], per["k"], *seen["pe"])  # (B, H, T, dh), (B, H_kv, T, dh)
    k, v = k[:, a.kv_head_of], per["v"][:, a.kv_head_of]  # (B, H, T, d_head): query head h reads K/V head kv(h)
    scores = q @ k.transpose(-1, -2) / math.sqrt(dh)  # (B, H, T, T)
    causal = torch.ones(scores.shape[-2:], dtype=torch.bool).tril()  # (T, T)
    pattern = scores.masked_fill(~causal, float("-inf")).softmax(-1)  # (B, H, T, T)
    torch.testing.assert_close(pattern, out.attentions[layer], atol=FWD_TOL, rtol=0)
    z = pattern @ v  # (B, H, T, d_head)
    torch.testing.assert_close(z.transpose(1, 2).flatten(2), seen["z"], atol=FWD_TOL, rtol=0)
    o = torch.einsum("bhte,hed->btd", z, a.heads(model, layer, "o")) + attn.o_proj.bias  # (B, T, d_model)
    torch.testing.assert_close(o, seen["out"], atol=FWD_TOL, rtol=0)


@pytest.mark.parametrize("rotary_pct,parallel", [(0.25, True), (1.0, False)])
def test_gpt_neox_heads_agree_with_the_forward_pass(rotary_pct, parallel):
    """Per-head W_Q, W_K, W_V, W_O reproduce transformers' own fused-qkv split, the partial
    rotary attention pattern, the heads' mixed values and the dense output."""
    from transformers.models.gpt_neox.modeling_gpt_neox import apply_rotary_pos_emb

    model = gpt_neox(rotary_pct=rotary_pct, parallel=parallel)
    a = adapter_for(model)
    layer = 1
    attn = model.gpt_neox.layers[layer].attention
    assert attn.rotary_ndims == int(a.d_head * rotary_pct) and model.config.use_parallel_residual == parallel
    seen = {}
    hooks = [attn.register_forward_pre_hook(lambda m, args, kw: seen.update(pe=kw["position_embeddings"]), with_kwargs=True),
             attn.query_key_value.register_forward_hook(lambda m, i, o: seen.update(x=i[0], qkv=o)),
             attn.dense.register_forward_hook(lambda m, i, o: seen.update(z=i[0], out=o))]
    with torch.no_grad():
        out = model(tokens(), output_attentions=True)
    for h in hooks:
        h.remove()
    x, dh = seen["x"], a.d_head  # (B, T, d_model)
    model_qkv = seen["qkv"].view(*x.shape[:-1], a.n_heads, 3 * dh).transpose(1, 2).chunk(3, dim=-1)  # 3 x (B, H, T, d_head)
    biases = neox_split(attn.query_key_value.bias.detach(), a.n_heads)  # 3 x (H, d_head)
    per = {}
    for p, model_part, bias in zip(("q", "k", "v"), model_qkv, biases):
        per[p] = torch.einsum("btd,hde->bhte", x, a.heads(model, layer, p)) + bias[:, None, :]  # (B, H, T, d_head)
        torch.testing.assert_close(per[p], model_part, atol=FWD_TOL, rtol=0)
    q, k = apply_rotary_pos_emb(per["q"], per["k"], *seen["pe"])  # (B, H, T, d_head): the first rotary_ndims dims rotated
    scores = q @ k.transpose(-1, -2) / math.sqrt(dh)  # (B, H, T, T)
    causal = torch.ones(scores.shape[-2:], dtype=torch.bool).tril()  # (T, T)
    pattern = scores.masked_fill(~causal, float("-inf")).softmax(-1)  # (B, H, T, T)
    torch.testing.assert_close(pattern, out.attentions[layer], atol=FWD_TOL, rtol=0)
    z = pattern @ per["v"]  # (B, H, T, d_head)
    torch.testing.assert_close(z.transpose(1, 2).flatten(2), seen["z"], atol=FWD_TOL, rtol=0)
    o = torch.einsum("bhte,hed->btd", z, a.heads(model, layer, "o")) + attn.dense.bias  # (B, T, d_model)
    torch.testing.assert_close(o, seen["out"], atol=FWD_TOL, rtol=0)


def test_gpt_neox_rank_surgery_writes_the_fused_weight():
    """Cutting q, k, v heads to rank r edits only their rows of query_key_value (read back by
    transformers' split), leaves every bias and dense as they were, and the model still runs."""
    model = gpt_neox()
    a = adapter_for(model)
    rank = 3
    before, x = params(model), tokens()
    red = reduce_rank(model, "blocks.*.attn.{q,k}.head.*, blocks.1.attn.v.head.2", "largest", rank / a.d_head)
    assert {i.kept for i in red.items} == {rank} and all(i.changed for i in red.items)
    assert red["blocks.1.attn.v.head.2"].location == "gpt_neox.layers.1.attention.query_key_value.weight[64:72, :]"
    for layer in range(a.n_layers):
        name = a.param_name(layer, "q")
        q, k, v = neox_split(dict(model.named_parameters())[name].detach(), a.n_heads)  # 3 x (H, d_head, d_model), float32
        q0, k0, v0 = neox_split(before[name], a.n_heads)
        for new, old, p in ((q, q0, "q"), (k, k0, "k")):
            assert torch.linalg.matrix_rank(new).max().item() <= rank  # float32 tolerance: the cast back adds round-off
            best = torch.linalg.svd(old.double(), full_matrices=False)  # Eckart-Young: the top-r part of each head
            top = (best.U[..., :rank] * best.S[:, None, :rank]) @ best.Vh[:, :rank]  # (H, d_head, d_model)
            torch.testing.assert_close(new.double(), top, atol=FWD_TOL, rtol=0)
            assert torch.equal(a.heads(model, layer, p), new.transpose(1, 2))
        assert torch.linalg.matrix_rank(q.transpose(1, 2) @ k).max().item() <= rank  # (H, d_model, d_model): W_Q W_K^T per head
        kept_v = [h for h in range(a.n_heads) if (layer, h) != (1, 2)]
        assert torch.equal(v[kept_v], v0[kept_v])
        if layer == 1:
            assert torch.linalg.matrix_rank(v[2]).item() == rank
    unchanged = [n for n in before if "query_key_value.weight" not in n]
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters() if n in unchanged)
    with torch.no_grad():
        logits = model(x).logits  # (B, T, V)
    assert logits.shape == (*x.shape, VOCAB) and bool(torch.isfinite(logits).all())


def test_gpt_neox_fused_qkv_reduction_is_the_stored_weights():
    """blocks.L.attn.qkv is the stored query_key_value up to a permutation of rows: the same
    singular values, and its rank-k cut is the stored weight's best rank-k approximation."""
    model = gpt_neox().double()
    a = adapter_for(model)
    name = a.param_name(0, "qkv")
    stored = dict(model.named_parameters())[name].detach().clone()  # (3 d_model, d_model)
    torch.testing.assert_close(torch.linalg.svdvals(a.matrix(model, 0, "qkv")), torch.linalg.svdvals(stored), atol=SVD_TOL, rtol=0)
    red = reduce_rank(model, "blocks.0.attn.qkv", "largest", 0.25)
    k = red.items[0].kept
    assert (k, red.items[0].location) == (a.d_model // 4, name)
    u, s, vh = torch.linalg.svd(stored, full_matrices=False)  # (3 d_model, d_model), (d_model,), (d_model, d_model)
    best = (u[:, :k] * s[:k]) @ vh[:k]  # (3 d_model, d_model)
    torch.testing.assert_close(dict(model.named_parameters())[name].detach(), best, atol=SVD_TOL, rtol=0)


@pytest.mark.parametrize("family", ["gpt2", "llama", "gpt_neox"])
@pytest.mark.parametrize("proj", HEAD_PROJS)
def test_writing_one_head_changes_only_its_slice(family, proj):
    model = MODELS[family]()
    a = adapter_for(model)
    before = params(model)
    head, layer = 1, 1
    new = torch.randn(a.head_shape(proj), generator=torch.Generator().manual_seed(2))
    a.set_head(model, layer, proj, head, new)
    assert torch.equal(a.heads(model, layer, proj)[head], new)
    name = a.param_name(layer, proj)
    mask = torch.zeros_like(before[name], dtype=torch.bool)
    stored_part(a, _MaskModel(name, mask), layer, proj, head)[1].fill_(True)  # True on the head's stored slice
    after = params(model)
    for n in before:
        if n == name:
            assert torch.equal(after[n][~mask], before[n][~mask])
            assert not torch.equal(after[n][mask], before[n][mask])
        else:
            assert torch.equal(after[n], before[n]), n


class _MaskModel:
    """Stand-in exposing one tensor under a parameter name (to address a location in a mask)."""

    def __init__(self, name, tensor):
        self._named = {name: tensor}

    def named_parameters(self):
        return self._named.items()


def test_adapter_for_rejects_other_models_and_accepts_llama_families():
    with pytest.raises(UserError, match=r"Linear .*supported families: gpt2 .*llama") as err:
        adapter_for(torch.nn.Linear(2, 2))
    assert "\n" not in str(err.value)
    for cfg_cls, model_cls in [(transformers.MistralConfig, transformers.MistralForCausalLM),
                               (transformers.Qwen2Config, transformers.Qwen2ForCausalLM)]:
        cfg = cfg_cls(vocab_size=VOCAB, hidden_size=D_MODEL, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=N_HEADS, num_key_value_heads=N_KV, max_position_embeddings=64)
        a = adapter_for(model_cls(cfg))
        assert isinstance(a, LlamaAdapter) and (a.n_heads, a.n_kv_heads) == (N_HEADS, N_KV)
    assert isinstance(adapter_for(gpt2()), GPT2Adapter) and isinstance(adapter_for(gpt_neox()), GPTNeoXAdapter)


# ---- selectors ------------------------------------------------------------------------------
def names(targets) -> set[str]:
    return {t.name for t in targets}


def test_parse_selector_forms():
    g, ll = adapter_for(gpt2()), adapter_for(llama())
    assert parse_selector("blocks.1.attn.q.head.0", g) == (Target(1, "q", 0),)
    assert Target(1, "q", 0).name == "blocks.1.attn.q.head.0" and Target(0, "qkv").name == "blocks.0.attn.qkv"
    assert names(parse_selector("blocks.0-1.attn", g)) == {f"blocks.{i}.attn.{p}" for i in (0, 1) for p in HEAD_PROJS}
    assert names(parse_selector("blocks.{0,1}.attn.{qkv,o}", g)) == {f"blocks.{i}.attn.{p}" for i in (0, 1) for p in ("qkv", "o")}
    got = parse_selector("blocks.1.attn.{q,k}.head.0-2, blocks.0.attn.v.head.{3,1}", g)
    assert names(got) == {f"blocks.1.attn.{p}.head.{h}" for p in "qk" for h in range(3)} | {"blocks.0.attn.v.head.1", "blocks.0.attn.v.head.3"}
    assert list(got) == sorted(got, key=Target.sort_key)
    assert names(parse_selector("blocks.*.attn.k.head.*", ll)) == {f"blocks.{i}.attn.k.head.{h}" for i in range(N_LAYERS) for h in range(N_KV)}
    assert names(parse_selector("blocks.{0-1}.attn.q.head.{0,2-3}", ll)) == {f"blocks.{i}.attn.q.head.{h}" for i in (0, 1) for h in (0, 2, 3)}
    dup = parse_selector("blocks.1.attn.o , blocks.1.attn.o,blocks.1.attn.{o,o}", g)
    assert dup == (Target(1, "o"),)


ERRORS = [
    ("gpt2", "", "empty"),
    ("gpt2", "blocks.1", "expected '.' at position 8"),
    ("gpt2", "blocks.1.mlp", "expected 'attn' at position 9"),
    ("gpt2", "layers.1.attn", "expected 'blocks' at position 0"),
    ("gpt2", "blocks.{0,1.attn", "expected ',' or '}' at position 11"),
    ("gpt2", "blocks.1.attn.q.head", "expected '.' at position 20"),
    ("gpt2", "blocks.1.attn,", "expected 'blocks' at position 14"),
    ("gpt2", "blocks.1.attn.q extra", "expected ',' or the end at position 16"),
    ("gpt2", "blocks.1.attn.x", "unknown projection 'x'; allowed: q, k, v, o, qkv"),
    ("gpt2", "blocks.2.attn", "layer 2 out of range; this gpt2 model has layers 0..1"),
    ("gpt2", "blocks.0-5.attn.o", "layer 5 out of range"),
    ("gpt2", "blocks.1.attn.q.head.4", "q head 4 out of range; this gpt2 model has 4 query heads (0..3)"),
    ("gpt2", "blocks.1-0.attn", "matches nothing"),
    ("gpt2", "blocks.1.attn.q.head.3-2", "matches nothing"),
    ("gpt2", "blocks.1.attn.qkv.head.0", "qkv has no heads"),
    ("gpt2", "blocks.1.attn.{qkv,k}", "ambiguous: blocks.1.attn.k and blocks.1.attn.qkv"),
    ("gpt2", "blocks.1.attn.q, blocks.1.attn.q.head.0", "ambiguous: blocks.1.attn.q and blocks.1.attn.q.head.0"),
    ("llama", "blocks.1.attn.qkv",
     "qkv is the fused input projection (GPT-2's c_attn, GPT-NeoX's query_key_value); this llama model has separate projections, use {q,k,v}"),
    ("llama", "blocks.1.attn.k.head.2", "k head 2 out of range; this llama model has 2 K/V heads (0..1)"),
    ("llama", "blocks.1.attn.{q,v}.head.3", "v head 3 out of range"),
    ("gpt_neox", "blocks.1.attn.qkv.head.0", "qkv has no heads"),
    ("gpt_neox", "blocks.0.attn.{qkv,v}.head.1", "qkv has no heads"),
    ("gpt_neox", "blocks.1.attn.{qkv,k}", "ambiguous: blocks.1.attn.k and blocks.1.attn.qkv"),
    ("gpt_neox", "blocks.1.attn.k.head.4", "k head 4 out of range; this gpt_neox model has 4 K/V heads (0..3)"),
    ("gpt_neox", "blocks.2.attn", "layer 2 out of range; this gpt_neox model has layers 0..1"),
]


@pytest.mark.parametrize("family,text,fragment", ERRORS)
def test_parse_selector_errors_are_one_line(family, text, fragment):
    with pytest.raises(UserError) as err:
        parse_selector(text, adapter_for(MODELS[family]()))
    msg = str(err.value)
    assert len(err.value.messages) == 1 and "\n" not in msg
    assert fragment in msg and repr(text.strip())[1:-1] in msg, msg


# ---- rank reduction -------------------------------------------------------------------------
def test_kept_rank_is_the_exact_floor():
    assert kept_rank(0.7, 10) == 7 and kept_rank(1.0, 768) == 768
    for r in range(1, 80):
        for i in range(1, 101):
            assert kept_rank(i / 100, r) == math.floor(Fraction(i, 100) * r)


@pytest.mark.parametrize("family", ["gpt2", "llama", "gpt_neox"])
def test_p_one_leaves_the_model_bit_identical(family):
    model = MODELS[family]()
    before, x = params(model), tokens()
    with torch.no_grad():
        logits = model(x).logits
    fused = "qkv" in adapter_for(model).projections
    selectors = ["blocks.*.attn", "blocks.*.attn.{q,v}.head.*"] + (["blocks.*.attn.qkv"] if fused else [])
    for sel in selectors:
        red = reduce_rank(model, sel, "largest", 1.0)
        assert all(not i.changed and i.kept == i.rank and i.fro_kept == 1.0 for i in red.items)
    with torch.no_grad():
        assert torch.equal(model(x).logits, logits)
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())


def _svdvals(m: torch.Tensor) -> torch.Tensor:
    return torch.linalg.svdvals(m.double())


@pytest.mark.parametrize("family,selector", [("gpt2", "blocks.1.attn.{qkv,o}"), ("llama", "blocks.0-1.attn"),
                                             ("gpt_neox", "blocks.0-1.attn.{qkv,o}"), ("gpt_neox", "blocks.1.attn")])
def test_largest_is_the_eckart_young_optimum(family, selector):
    model = MODELS[family]().double()
    a = adapter_for(model)
    targets = parse_selector(selector, a)
    orig = {t: a.matrix(model, t.layer, t.proj) for t in targets}
    red = reduce_rank(model, selector, "largest", 0.4)
    for t in targets:
        s = _svdvals(orig[t])
        r, k = len(s), math.floor(0.4 * len(s))
        new = a.matrix(model, t.layer, t.proj)
        item = red[t.name]
        assert (item.rank, item.kept, item.changed, item.shape) == (r, k, True, tuple(new.shape))
        assert torch.linalg.matrix_rank(new).item() == k
        err = torch.linalg.matrix_norm(orig[t] - new)
        assert abs(err - s[k:].square().sum().sqrt()) < SVD_TOL
        assert abs(item.fro_kept - (s[:k].square().sum() / s.square().sum()).sqrt()) < SVD_TOL
        assert abs(item.rel_error ** 2 + item.fro_kept ** 2 - 1) < SVD_TOL


def test_smallest_keeps_exactly_the_bottom_k():
    model = gpt2().double()
    a = adapter_for(model)
    orig = a.matrix(model, 0, "qkv")
    small, large = copy.deepcopy(model), copy.deepcopy(model)
    reduce_rank(small, "blocks.0.attn.qkv", "smallest", 0.25)
    reduce_rank(large, "blocks.0.attn.qkv", "largest", 0.75)
    s, s_small = _svdvals(orig), _svdvals(a.matrix(small, 0, "qkv"))
    r, k = len(s), math.floor(0.25 * len(s))
    torch.testing.assert_close(s_small[:k], s[r - k:], atol=SVD_TOL, rtol=0)
    assert s_small[k:].abs().max() < SVD_TOL
    torch.testing.assert_close(a.matrix(small, 0, "qkv") + a.matrix(large, 0, "qkv"), orig, atol=SVD_TOL, rtol=0)


@pytest.mark.parametrize("family,layer,proj,head", [("gpt2", 1, "q", 2), ("gpt2", 0, "o", 3), ("llama", 0, "k", 1),
                                                    ("llama", 1, "o", 2), ("gpt_neox", 1, "k", 2), ("gpt_neox", 0, "v", 0),
                                                    ("gpt_neox", 1, "o", 3)])
def test_per_head_reduction_changes_only_that_head(family, layer, proj, head):
    model = MODELS[family]()
    a = adapter_for(model)
    before, heads_before = params(model), a.heads(model, layer, proj)
    others_before = {p: a.heads(model, layer, p) for p in HEAD_PROJS if p != proj}  # e.g. q and v sharing a fused weight
    red = reduce_rank(model, f"blocks.{layer}.attn.{proj}.head.{head}", "largest", 0.5)
    heads_after = a.heads(model, layer, proj)
    others = [h for h in range(heads_before.shape[0]) if h != head]
    assert torch.equal(heads_after[others], heads_before[others])
    assert all(torch.equal(a.heads(model, layer, p), w) for p, w in others_before.items())
    assert torch.linalg.matrix_rank(heads_after[head]).item() == red.items[0].kept == a.d_head // 2
    name = a.param_name(layer, proj)
    assert red.items[0].location == a.location(layer, proj, head)
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters() if n != name)


def test_one_batched_svd_per_projection(monkeypatch):
    model = gpt2()
    calls = []
    real = torch.linalg.svd
    monkeypatch.setattr(torch.linalg, "svd", lambda a, **kw: calls.append(tuple(a.shape)) or real(a, **kw))
    reduce_rank(model, "blocks.*.attn.q.head.*, blocks.*.attn.o", "largest", 0.5)
    assert sorted(calls) == sorted([(N_LAYERS * N_HEADS, D_MODEL, D_MODEL // N_HEADS), (N_LAYERS, D_MODEL, D_MODEL)])


def test_rank_reducer_reuses_one_svd_for_several_p(monkeypatch):
    model = llama()
    selector = "blocks.*.attn.{q,o}, blocks.1.attn.k.head.0"  # 3 groups: q whole, o whole, k heads
    settings = [(keep, p) for p in (0.2, 0.5, 1.0) for keep in ("largest", "smallest")]
    direct = {}
    for keep, p in settings:
        copy_ = copy.deepcopy(model)
        direct[(keep, p)] = (reduce_rank(copy_, selector, keep, p), list(copy_.parameters()))
    calls = []
    real = torch.linalg.svd
    monkeypatch.setattr(torch.linalg, "svd", lambda a, **kw: calls.append(tuple(a.shape)) or real(a, **kw))
    reducer = RankReducer(model, selector)
    for keep, p in settings:
        target = copy.deepcopy(model)
        red = reducer.apply(target, keep, p)
        assert red == direct[(keep, p)][0]
        assert all(torch.equal(x, y) for x, y in zip(target.parameters(), direct[(keep, p)][1]))
    assert len(calls) == 3  # one SVD per group, cached across p and keep
    target = copy.deepcopy(model)
    reducer.apply(target, "largest", 0.5)
    once = params(target)
    reducer.apply(target, "largest", 0.5)  # starts from the snapshot: no compounding
    assert all(torch.equal(once[n], p) for n, p in target.named_parameters())


def test_randomized_is_seeded_and_close_to_exact_on_a_decaying_spectrum():
    model = gpt2().double()
    a = adapter_for(model)
    gen = torch.Generator().manual_seed(0)
    m, n = a.matrix_shape("qkv")
    u = torch.linalg.qr(torch.randn(m, m, generator=gen, dtype=torch.float64)).Q  # (m, m)
    v = torch.linalg.qr(torch.randn(n, m, generator=gen, dtype=torch.float64)).Q  # (n, m)
    a.set_matrix(model, 0, "qkv", (u * 0.6 ** torch.arange(m, dtype=torch.float64)) @ v.T)
    runs = [copy.deepcopy(model) for _ in range(3)]
    for run, method in zip(runs, ("randomized", "randomized", "exact")):
        reduce_rank(run, "blocks.0.attn.qkv", "largest", 0.25, method=method, seed=7, oversample=5, n_iter=2)
    r1, r2, exact = (a.matrix(run, 0, "qkv") for run in runs)
    assert torch.equal(r1, r2)
    assert torch.linalg.matrix_norm(r1 - exact) < 1e-8 * torch.linalg.matrix_norm(exact)
    other = copy.deepcopy(model)
    reduce_rank(other, "blocks.0.attn.qkv", "largest", 0.25, method="randomized", seed=8, oversample=5, n_iter=2)
    assert not torch.equal(a.matrix(other, 0, "qkv"), r1)


@pytest.mark.parametrize("kwargs,fragment", [
    ({"p": 0.0}, "p=0.0"), ({"p": 1.5}, "p=1.5"), ({"p": float("nan")}, "p=nan"), ({"p": True}, "p=True"),
    ({"p": "0.5"}, "p='0.5'"), ({"keep": "top"}, "keep='top'"), ({"method": "svd"}, "method='svd'"),
    ({"method": "randomized", "keep": "smallest"}, "only keeps the largest"), ({"oversample": -1}, "oversample=-1"),
])
def test_reduce_rank_rejects_bad_arguments(kwargs, fragment):
    model = gpt2()
    before = params(model)
    args = {"keep": "largest", "p": 0.5, **kwargs}
    with pytest.raises(UserError) as err:
        reduce_rank(model, "blocks.0.attn.o", args.pop("keep"), args.pop("p"), **args)
    assert fragment in str(err.value) and "\n" not in str(err.value)
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())


def test_reduction_table_lists_every_target():
    model = llama()
    red = reduce_rank(model, "blocks.1.attn.{q,o}, blocks.0.attn.v.head.1", "smallest", 0.5)
    table = red.table()
    assert list(table["name"]) == list(red.names) == ["blocks.0.attn.v.head.1", "blocks.1.attn.q", "blocks.1.attn.o"]
    assert list(table["kept"]) == [4, 16, 16] and list(table["rank"]) == [8, 32, 32]
    assert set(table["keep"]) == {"smallest"} and list(table["location"])[0] == "model.layers.0.self_attn.v_proj.weight[8:16, :]"
    with pytest.raises(KeyError):
        red["blocks.0.attn.q"]


# ---- keep="random": the control of keep-largest / keep-smallest -----------------------------
def test_random_directions_choose_k_uniformly():
    gen = torch.Generator().manual_seed(0)
    mask = random_directions(4000, 6, 2, gen)  # (4000, 6)
    assert mask.dtype == torch.bool and bool((mask.sum(1) == 2).all())
    freq = mask.double().mean(0)  # each index kept with probability k / r = 1/3
    assert (freq - 1 / 3).abs().max() < 0.03  # 4000 draws: sd 0.0075 per index
    pairs = {tuple(torch.nonzero(row).flatten().tolist()) for row in mask}
    assert len(pairs) == math.comb(6, 2)  # every 2-subset occurs


def test_random_keeps_k_of_the_matrix_own_singular_directions():
    model = gpt2().double()
    a = adapter_for(model)
    orig = a.matrix(model, 0, "qkv")
    red = reduce_rank(model, "blocks.0.attn.qkv", "random", 0.25, seed=3)
    s, s_new = _svdvals(orig), _svdvals(a.matrix(model, 0, "qkv"))
    k = math.floor(0.25 * len(s))
    kept = s_new[:k]
    assert s_new[k:].abs().max() < SVD_TOL  # rank k
    match = (kept[:, None] - s[None, :]).abs().argmin(1)  # each kept value is one of the original's
    torch.testing.assert_close(kept, s[match], atol=SVD_TOL, rtol=0)
    assert len(set(match.tolist())) == k and sorted(match.tolist()) != list(range(k))  # k distinct, not simply the top k
    assert abs(red.items[0].fro_kept ** 2 - float(kept.square().sum() / s.square().sum())) < SVD_TOL
    assert red.items[0].kept == k and red.items[0].changed


def test_random_with_k_equal_r_is_the_identity():
    model = gpt2().double()
    a = adapter_for(model)
    w = a.matrix(model, 1, "o")[None]  # (1, m, n)
    torch.testing.assert_close(low_rank(w, min(w.shape[-2:]), "random", seed=5), w, atol=SVD_TOL, rtol=0)
    before = params(model)
    red = reduce_rank(model, "blocks.*.attn", "random", 1.0, seed=5)
    assert not any(i.changed for i in red.items)
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())


def test_random_draws_are_seeded_and_agree_between_the_entry_points():
    model = llama()
    selector = "blocks.*.attn.{q,o}, blocks.1.attn.k.head.0"
    reducer = RankReducer(model, selector)
    runs = {}
    for name, seed in (("a", 11), ("b", 11), ("c", 12)):
        target = copy.deepcopy(model)
        reducer.apply(target, "random", 0.5, seed=seed)
        runs[name] = params(target)
    direct = copy.deepcopy(model)
    reduce_rank(direct, selector, "random", 0.5, seed=11)
    assert all(torch.equal(runs["a"][n], p) for n, p in runs["b"].items())
    assert all(torch.equal(runs["a"][n], p) for n, p in params(direct).items())
    assert any(not torch.equal(runs["a"][n], p) for n, p in runs["c"].items())
    one = RankReducer(model, "blocks.0.attn.o")  # one group: the same draw as low_rank with that seed
    target = copy.deepcopy(model)
    one.apply(target, "random", 0.5, seed=4)
    a = adapter_for(model)
    expected = low_rank(a.matrix(model, 0, "o")[None], a.d_model // 2, "random", seed=4)[0].to(torch.float32)
    torch.testing.assert_close(a.matrix(target, 0, "o"), expected, atol=1e-6, rtol=0)


def test_randomized_svd_refuses_random_directions():
    with pytest.raises(UserError, match="only keeps the largest"):
        reduce_rank(gpt2(), "blocks.0.attn.o", "random", 0.5, method="randomized")
