"""Closed forms and invariances for measure.spectra."""

from __future__ import annotations

import math

import pytest
import torch

from stagewise.measure import spectrum, spectrum_metrics, truncate, truncate_eig

D = torch.float64


def _random(S: int, n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(S, n, n, generator=g, dtype=D)


def test_diagonal_closed_form():
    m = torch.diag(torch.tensor([1.0, -3.0, 2.0], dtype=D)).unsqueeze(0)  # (1, 3, 3)
    spec = spectrum(m)
    torch.testing.assert_close(spec.eig_real[0], torch.tensor([-3.0, 2.0, 1.0], dtype=D))
    torch.testing.assert_close(spec.eig_imag[0], torch.zeros(3, dtype=D))
    torch.testing.assert_close(spec.eig_abs[0], torch.tensor([3.0, 2.0, 1.0], dtype=D))
    torch.testing.assert_close(spec.sym_eig[0], torch.tensor([2.0, 1.0, -3.0], dtype=D))
    torch.testing.assert_close(spec.sv[0], torch.tensor([3.0, 2.0, 1.0], dtype=D))
    torch.testing.assert_close(spec.fro, torch.tensor([math.sqrt(14.0)], dtype=D))
    torch.testing.assert_close(spec.spectral_norm, torch.tensor([3.0], dtype=D))
    torch.testing.assert_close(spec.stable_rank, torch.tensor([14.0 / 9.0], dtype=D))
    torch.testing.assert_close(spec.top_share(1), torch.tensor([9.0 / 14.0], dtype=D))
    torch.testing.assert_close(spec.top_share(3), torch.tensor([1.0], dtype=D))


def test_rotation_eigenvalues_are_conjugate_pair():
    theta = 0.7
    c, s = math.cos(theta), math.sin(theta)
    m = torch.tensor([[[c, -s], [s, c]]], dtype=D)  # (1, 2, 2)
    spec = spectrum(m)
    torch.testing.assert_close(spec.eig_abs[0], torch.ones(2, dtype=D))
    torch.testing.assert_close(spec.eig_real[0], torch.full((2,), c, dtype=D))
    torch.testing.assert_close(spec.eig_imag[0], torch.tensor([s, -s], dtype=D))  # +i first on ties
    torch.testing.assert_close(spec.sym_eig[0], torch.full((2,), c, dtype=D))
    torch.testing.assert_close(spec.sv[0], torch.ones(2, dtype=D))
    torch.testing.assert_close(spec.stable_rank, torch.tensor([2.0], dtype=D))


def test_ties_in_modulus_broken_by_real_part():
    m = torch.diag(torch.tensor([-2.0, 2.0, 1.0], dtype=D)).unsqueeze(0)
    spec = spectrum(m)
    torch.testing.assert_close(spec.eig_real[0], torch.tensor([2.0, -2.0, 1.0], dtype=D))


def test_symmetric_matrix_eig_equals_sym_eig():
    a = _random(3, 4, seed=1)
    sym = a + a.transpose(-1, -2)  # (3, 4, 4)
    spec = spectrum(sym)
    torch.testing.assert_close(spec.eig_imag, torch.zeros(3, 4, dtype=D), atol=1e-10, rtol=0)
    torch.testing.assert_close(torch.sort(spec.eig_real, dim=-1, descending=True).values, spec.sym_eig)
    torch.testing.assert_close(spec.sv, spec.sym_eig.abs().sort(dim=-1, descending=True).values)


def test_rank_one_and_zero_matrix():
    u = torch.tensor([1.0, 2.0, -1.0], dtype=D)
    v = torch.tensor([0.5, 0.0, 3.0], dtype=D)
    m = torch.stack([torch.outer(u, v), torch.zeros(3, 3, dtype=D)])  # (2, 3, 3)
    spec = spectrum(m)
    torch.testing.assert_close(spec.stable_rank, torch.tensor([1.0, 0.0], dtype=D))
    torch.testing.assert_close(spec.top_share(1), torch.tensor([1.0, 0.0], dtype=D))
    assert torch.isfinite(spec.stable_rank).all() and torch.isfinite(spec.top_share(2)).all()
    torch.testing.assert_close(spec.spectral_norm[0], u.norm() * v.norm())


def test_batch_equals_loop_and_sort_orders():
    m = _random(5, 4, seed=2)
    batch = spectrum(m)
    for field in ("eig_real", "eig_imag", "eig_abs", "sym_eig", "sv", "fro", "spectral_norm", "stable_rank"):
        looped = torch.cat([getattr(spectrum(m[i : i + 1]), field) for i in range(5)])
        torch.testing.assert_close(getattr(batch, field), looped)
    assert (batch.eig_abs[:, :-1] >= batch.eig_abs[:, 1:] - 1e-12).all()
    assert (batch.sym_eig[:, :-1] >= batch.sym_eig[:, 1:]).all()
    assert (batch.sv[:, :-1] >= batch.sv[:, 1:]).all()
    eig = torch.linalg.eigvals(m)
    torch.testing.assert_close(batch.eig_abs.sum(-1), eig.abs().sum(-1))
    torch.testing.assert_close(batch.eig_real.sum(-1), torch.diagonal(m, dim1=-2, dim2=-1).sum(-1))
    torch.testing.assert_close(batch.fro, torch.linalg.matrix_norm(m))


def test_n_one_and_float32():
    m = torch.tensor([[[-2.5]]], dtype=torch.float32)  # (1, 1, 1)
    spec = spectrum(m)
    assert spec.sv.dtype == D and spec.sv.shape == (1, 1)
    torch.testing.assert_close(spec.eig_real, torch.tensor([[-2.5]], dtype=D))
    torch.testing.assert_close(spec.stable_rank, torch.tensor([1.0], dtype=D))
    torch.testing.assert_close(truncate(m, 1), m.to(D))


def test_spectrum_metrics_names():
    m = _random(2, 3, seed=3)
    out = spectrum_metrics("blocks.0.W", m, k=2)
    expected = {"blocks.0.W.fro", "blocks.0.W.spectral", "blocks.0.W.stable_rank", "blocks.0.W.top2_share"}
    for field in ("sv", "eig_abs", "eig_real", "eig_imag", "sym_eig"):
        expected |= {f"blocks.0.W.{field}.{i}" for i in range(3)}
    assert set(out) == expected
    assert all(v.shape == (2,) for v in out.values())
    assert "W.top2_share" not in "".join(spectrum_metrics("W", m))
    torch.testing.assert_close(out["blocks.0.W.sv.1"], spectrum(m).sv[:, 1])


@pytest.mark.parametrize("k", [0, 1, 2, 4])
def test_truncate_top_plus_bottom_is_m(k):
    m = _random(3, 4, seed=4)
    torch.testing.assert_close(truncate(m, k, "top") + truncate(m, 4 - k, "bottom"), m, atol=1e-12, rtol=0)
    sym = 0.5 * (m + m.transpose(-1, -2))
    torch.testing.assert_close(truncate_eig(m, k, "top") + truncate_eig(m, 4 - k, "bottom"), sym, atol=1e-12, rtol=0)


def test_truncate_edges_and_ranks():
    m = _random(2, 4, seed=5)
    torch.testing.assert_close(truncate(m, 4), m, atol=1e-12, rtol=0)
    assert torch.count_nonzero(truncate(m, 0)) == 0
    top1 = truncate(m, 1)
    torch.testing.assert_close(spectrum(top1).stable_rank, torch.ones(2, dtype=D))
    torch.testing.assert_close(spectrum(top1).sv[:, 0], spectrum(m).sv[:, 0])
    diag = torch.diag(torch.tensor([3.0, -5.0, 1.0], dtype=D)).unsqueeze(0)
    torch.testing.assert_close(truncate_eig(diag, 1, "top")[0], torch.diag(torch.tensor([3.0, 0.0, 0.0], dtype=D)))
    torch.testing.assert_close(truncate_eig(diag, 1, "bottom")[0], torch.diag(torch.tensor([0.0, -5.0, 0.0], dtype=D)))


def test_bad_input_raises():
    with pytest.raises(ValueError, match="shape"):
        spectrum(torch.zeros(3, 3))
    with pytest.raises(ValueError, match="k must be"):
        truncate(torch.zeros(1, 3, 3), 4)
    with pytest.raises(ValueError, match="keep"):
        truncate_eig(torch.zeros(1, 3, 3), 1, keep="middle")
