"""lmkit attention spectra and the lab-independent singular-value statistics (sv_stats):
closed forms, factored W_Q W_K^T against the direct product, per-head reference values, GQA
mapping, GPT-NeoX's fused query_key_value split as transformers splits it, metric names, the
long table, and invariance under a rotation of the residual basis."""

from __future__ import annotations

import math
import re

import pytest
import torch

from stagewise.errors import UserError
from stagewise.measure.spectra import SV_STATS, sv_stats

transformers = pytest.importorskip("transformers")

from stagewise.lmkit.adapters import adapter_for  # noqa: E402
from stagewise.lmkit.spectra import (  # noqa: E402
    SPECTRA_PROJECTIONS, TABLE_COLUMNS, attention_spectra, qk_singular_values, spectra_hook,
)

TOL = 1e-10  # float64 identities
VOCAB, D_MODEL, N_HEADS, N_KV, N_LAYERS = 64, 32, 4, 2, 2
NAME = re.compile(r"^blocks\.(\d+)\.attn\.head\.(\d+)\.(q|k|v|o|qk)\.(sv_max|sv_top_share|stable_rank|effective_rank)$")


def gpt2(seed: int = 0):
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(n_layer=N_LAYERS, n_embd=D_MODEL, n_head=N_HEADS, vocab_size=VOCAB, n_positions=32,
                                  bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(cfg).eval()


def llama(seed: int = 0):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=D_MODEL, intermediate_size=64, num_hidden_layers=N_LAYERS,
                                   num_attention_heads=N_HEADS, num_key_value_heads=N_KV, max_position_embeddings=64,
                                   bos_token_id=0, eos_token_id=0)
    return transformers.LlamaForCausalLM(cfg).eval()


def gpt_neox(seed: int = 0, rotary_pct: float = 0.25):
    torch.manual_seed(seed)
    cfg = transformers.GPTNeoXConfig(vocab_size=VOCAB, hidden_size=D_MODEL, intermediate_size=64, num_hidden_layers=N_LAYERS,
                                     num_attention_heads=N_HEADS, rotary_pct=rotary_pct, max_position_embeddings=64,
                                     bos_token_id=0, eos_token_id=0)
    return transformers.GPTNeoXForCausalLM(cfg).eval()


MODELS = {"gpt2": gpt2, "llama": llama, "gpt_neox": gpt_neox}


def with_singular_values(s: torch.Tensor, m: int, n: int, seed: int = 0) -> torch.Tensor:
    """(B, m, n) matrices U diag(s) V^T with random orthonormal U, V for s (B, r), r <= min(m, n)."""
    gen = torch.Generator().manual_seed(seed)
    b, r = s.shape
    u = torch.linalg.qr(torch.randn(b, m, r, generator=gen, dtype=torch.float64)).Q  # (B, m, r)
    v = torch.linalg.qr(torch.randn(b, n, r, generator=gen, dtype=torch.float64)).Q  # (B, n, r)
    return (u * s[:, None, :]) @ v.transpose(-1, -2)  # (B, m, n)


# ---- sv_stats -------------------------------------------------------------------------------
def test_sv_stats_closed_forms():
    s = torch.tensor([[2.0, 2.0, 2.0, 2.0, 2.0],   # 5 equal values
                      [3.0, 0.0, 0.0, 0.0, 0.0],   # rank one
                      [1.0, 2.0, 1.0, 2.0, 0.0],   # two levels, unsorted
                      [0.0, 0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)  # zero matrix
    for k in (1, 2, 7):
        st = sv_stats(s, k)
        assert set(st) == set(SV_STATS)
        kk = min(k, 5)
        expected = {
            "sv_max": [2.0, 3.0, 2.0, 0.0],
            "sv_top_share": [kk / 5, 1.0, [4 / 10, 8 / 10, 9 / 10][min(kk, 3) - 1] if kk < 4 else 1.0, 0.0],
            "stable_rank": [5.0, 1.0, 10 / 4, 0.0],
            "effective_rank": [5.0, 1.0, math.exp(2 * (1 / 3) * math.log(3) + 2 * (1 / 6) * math.log(6)), 0.0],
        }
        for name, values in expected.items():
            torch.testing.assert_close(st[name], torch.tensor(values, dtype=torch.float64), atol=1e-12, rtol=0)


def test_sv_stats_of_matrices_match_their_norms():
    s = torch.rand(6, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64) + 0.1
    w = with_singular_values(s, 9, 7)  # (6, 9, 7)
    st = sv_stats(torch.linalg.svdvals(w), 2)
    fro2 = torch.linalg.matrix_norm(w).square()  # (6,)
    spec = torch.linalg.matrix_norm(w, ord=2)  # (6,)
    torch.testing.assert_close(st["sv_max"], spec, atol=TOL, rtol=0)
    torch.testing.assert_close(st["stable_rank"], fro2 / spec.square(), atol=TOL, rtol=0)
    top2 = s.sort(descending=True).values[:, :2].square().sum(-1)  # (6,)
    torch.testing.assert_close(st["sv_top_share"], top2 / fro2, atol=TOL, rtol=0)
    p = s / s.sum(-1, keepdim=True)  # (6, 5)
    torch.testing.assert_close(st["effective_rank"], torch.exp(-(p * p.log()).sum(-1)), atol=TOL, rtol=0)
    with pytest.raises(ValueError):
        sv_stats(s[0], 1)
    with pytest.raises(ValueError):
        sv_stats(s, -1)


# ---- factored qk ----------------------------------------------------------------------------
@pytest.mark.parametrize("d_model,d_head", [(24, 6), (4, 6), (16, 16)])
def test_factored_qk_equals_direct(d_model, d_head):
    gen = torch.Generator().manual_seed(d_model)
    w_q = torch.randn(5, d_model, d_head, generator=gen, dtype=torch.float64)  # (B, d_model, d_head)
    w_k = torch.randn(5, d_model, d_head, generator=gen, dtype=torch.float64)  # (B, d_model, d_head)
    w_q[1, :, 0] = w_q[1, :, 1]  # rank-deficient factor
    r = min(d_model, d_head)
    direct = torch.linalg.svdvals(w_q @ w_k.transpose(-1, -2))[:, :r]  # (B, r)
    torch.testing.assert_close(qk_singular_values(w_q, w_k), direct, atol=TOL * direct.max().item(), rtol=0)


# ---- attention spectra ----------------------------------------------------------------------
@pytest.mark.parametrize("family", ["gpt2", "llama", "gpt_neox"])
def test_spectra_match_a_per_head_reference(family):
    model = MODELS[family]()
    a = adapter_for(model)
    res = attention_spectra(a, model, top_k=3)
    kv = [h // (a.n_heads // a.n_kv_heads) for h in range(a.n_heads)]  # HF repeat_kv: query head h reads K/V head h // groups
    for layer in range(a.n_layers):
        heads = {p: a.heads(model, layer, p).double() for p in ("q", "k", "v", "o")}
        for proj in ("q", "k", "v", "o"):
            for h in range(heads[proj].shape[0]):
                torch.testing.assert_close(res.sv[proj][layer, h], torch.linalg.svdvals(heads[proj][h]), atol=TOL, rtol=0)
        for h in range(a.n_heads):
            direct = torch.linalg.svdvals(heads["q"][h] @ heads["k"][kv[h]].T)[:a.d_head]  # (d_head,)
            torch.testing.assert_close(res.sv["qk"][layer, h], direct, atol=TOL, rtol=0)
            if a.n_kv_heads > 1:
                wrong = torch.linalg.svdvals(heads["q"][h] @ heads["k"][1 - kv[h]].T)[:a.d_head]
                assert not torch.allclose(res.sv["qk"][layer, h], wrong)
    for proj, values in res.sv.items():
        st = sv_stats(values.flatten(0, 1), 3)
        for i, (layer, head) in enumerate((n, h) for n in range(values.shape[0]) for h in range(values.shape[1])):
            for stat in SV_STATS:
                assert res.metrics[f"blocks.{layer}.attn.head.{head}.{proj}.{stat}"].item() == st[stat][i].item()


@pytest.mark.parametrize("family", ["gpt2", "llama", "gpt_neox"])
def test_metric_names_follow_the_grammar_and_table_is_long(family):
    model = MODELS[family]()
    a = adapter_for(model)
    res = attention_spectra(a, model)
    n_of = {"q": a.n_heads, "o": a.n_heads, "qk": a.n_heads, "k": a.n_kv_heads, "v": a.n_kv_heads}
    expected = {f"blocks.{n}.attn.head.{h}.{p}.{s}" for p in SPECTRA_PROJECTIONS for n in range(a.n_layers)
                for h in range(n_of[p]) for s in SV_STATS}
    assert set(res.metrics) == expected
    for name, value in res.metrics.items():
        m = NAME.match(name)
        assert m and int(m.group(1)) < a.n_layers and int(m.group(2)) < n_of[m.group(3)]
        assert value.ndim == 0 and value.dtype == torch.float64
    table = res.table
    assert tuple(table.columns) == TABLE_COLUMNS
    assert len(table) == sum(v.numel() for v in res.sv.values())
    for proj, values in res.sv.items():
        sub = table[table["proj"] == proj].sort_values(["layer", "head", "index"])
        assert sub["value"].tolist() == values.reshape(-1).tolist()
        assert sub["head"].max() == n_of[proj] - 1 and sub["index"].max() == values.shape[-1] - 1
    metrics, frame = spectra_hook(model)(model)
    assert metrics.keys() == res.metrics.keys() and frame.equals(table)


@pytest.mark.parametrize("family", ["gpt2", "llama", "gpt_neox"])
def test_rotating_the_residual_basis_leaves_spectra_unchanged(family):
    model = MODELS[family]().double()
    a = adapter_for(model)
    before, q0 = attention_spectra(a, model), a.heads(model, 0, "q")
    rot = torch.linalg.qr(torch.randn(a.d_model, a.d_model, generator=torch.Generator().manual_seed(3),
                                      dtype=torch.float64)).Q  # (d_model, d_model) orthogonal
    for layer in range(a.n_layers):
        for proj in ("q", "k"):  # x -> x R; W -> R^T W keeps x W
            a.set_heads(model, layer, proj, torch.einsum("dc,hde->hce", rot, a.heads(model, layer, proj)))
    after = attention_spectra(a, model)
    assert (a.heads(model, 0, "q") - q0).abs().max() > 1e-3  # the weights did change
    for proj in SPECTRA_PROJECTIONS:
        torch.testing.assert_close(after.sv[proj], before.sv[proj], atol=TOL, rtol=0)


@pytest.mark.parametrize("rotary_pct", [0.25, 1.0])
def test_gpt_neox_spectra_equal_svds_of_the_stored_weights(rotary_pct):
    """Spectra of a GPT-NeoX model against SVDs of its stored weights, split per head as
    transformers' forward splits query_key_value (output viewed (..., H, 3 d_head), chunked in 3)."""
    model = gpt_neox(rotary_pct=rotary_pct)
    a = adapter_for(model)
    res = attention_spectra(a, model)
    for layer, block in enumerate(model.gpt_neox.layers):
        w = block.attention.query_key_value.weight.detach().double()  # (3 d_model, d_model), (out, in)
        q, k, v = w.reshape(N_HEADS, 3 * a.d_head, D_MODEL).chunk(3, dim=1)  # 3 x (H, d_head, d_model)
        o = block.attention.dense.weight.detach().double().reshape(D_MODEL, N_HEADS, a.d_head)  # (d_model, H, d_head)
        expected = {"q": torch.linalg.svdvals(q), "k": torch.linalg.svdvals(k), "v": torch.linalg.svdvals(v),
                    "o": torch.linalg.svdvals(o.permute(1, 0, 2)),  # (H, d_model, d_head): head h's columns of dense
                    "qk": torch.linalg.svdvals(q.transpose(1, 2) @ k)[:, :a.d_head]}  # W_Q W_K^T = q^T k, (H, d_model, d_model)
        for proj, values in expected.items():
            torch.testing.assert_close(res.sv[proj][layer], values, atol=TOL, rtol=0)


def test_bad_top_k_is_a_user_error():
    model = gpt2()
    for bad in (0, -2, 1.5, True):
        with pytest.raises(UserError, match="top_k"):
            attention_spectra(adapter_for(model), model, top_k=bad)
