"""Tests of the NTP max-margin targets (stagewise.labs.ntp.maxmargin)."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import nnls

from stagewise.labs.ntp.dataset import NTPDataset, QueryStructure, Sample
from stagewise.labs.ntp.maxmargin import (
    _wkq_qp,
    _wov_qp,
    kq_constraints,
    max_margin_targets,
    min_norm_margin,
    prop2_wkq,
    wkq_star,
    wov_star,
)


def make_dataset(tokens, collocation, sentences) -> NTPDataset:
    """Dataset from sentences (token-name strings, query last), structure computed here.

    The optimal token of a sentence is the token whose collocation is its next token, which
    the caller gives as ``(sentence, next_name)``; length-1 samples are added for all tokens.
    """
    idx = {t: i for i, t in enumerate(tokens)}
    inv = {n: x for x, n in enumerate(collocation)}
    samples = [Sample((x,), collocation[x]) for x in range(len(tokens))]
    for sent, nxt in sentences:
        samples.append(Sample(tuple(idx[t] for t in sent), idx[nxt]))
    relations: dict[int, set[tuple[int, int]]] = {}
    for s in samples:
        if len(s.input) >= 2:
            opt = inv[s.next]
            for tok in set(s.input) - {opt}:
                relations.setdefault(s.query, set()).add((opt, tok))
    structure = {}
    for q, rel in relations.items():
        greater = {a for a, _ in rel}
        lesser = {b for _, b in rel}
        structure[q] = QueryStructure(
            query=q,
            relations=frozenset(rel),
            optimal=frozenset(greater - lesser),
            non_optimal=frozenset(lesser - greater),
            non_comparable=frozenset(set(range(len(tokens))) - greater - lesser),
        )
    return NTPDataset(
        tokens=tuple(tokens),
        samples=tuple(samples),
        weights=tuple([1.0 / len(samples)] * len(samples)),
        collocation=tuple(collocation),
        structure=structure,
        optimal_token=tuple(inv[s.next] for s in samples),
    )


def example1() -> NTPDataset:
    # S, V, O, P = 0..3; collocation S->V->O->P->S; prefixes of SVOP, VOP, OPP, PSV.
    sentences = [("SV", "O"), ("SVO", "P"), ("VO", "P"), ("OP", "P"), ("PS", "V")]
    return make_dataset("SVOP", (1, 2, 3, 0), sentences)


def prop2_counterexample() -> NTPDataset:
    # One query q; optimal {a, b}, non-optimal {q, c, d}; a meets only q, b meets c, d, q.
    # QP: column q = (a 1/2, b 2/3, c -1/3, d -1/3, q -1/2), norm^2 7/6;
    # Prop 2 (k=2, m=3): 3/5 and -2/5, norm^2 6/5.
    tokens = ("a", "b", "c", "d", "q")
    collocation = (1, 2, 3, 4, 0)  # a->b, b->c, c->d, d->q, q->a
    return make_dataset(tokens, collocation, [("aq", "b"), ("bcdq", "c")])


EXAMPLE1_WKQ = np.zeros((4, 4))
EXAMPLE1_WKQ[[0, 3], 0] = [1 / 2, -1 / 2]  # column S
EXAMPLE1_WKQ[[1, 0], 1] = [1 / 2, -1 / 2]  # column V
EXAMPLE1_WKQ[[2, 0, 1], 2] = [2 / 3, -1 / 3, -1 / 3]  # column O
EXAMPLE1_WKQ[[2, 3], 3] = [1 / 2, -1 / 2]  # column P


def random_orthogonal(d: int, seed: int) -> np.ndarray:
    q, r = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, d)))
    return q * np.sign(np.diag(r))


def kq_matrix(ds: NTPDataset, emb: np.ndarray) -> np.ndarray:
    """(m, d^2) constraint rows vec((x_opt - x_l) x_q^T), built independently of the module."""
    rows = [np.outer(emb[:, o] - emb[:, n], emb[:, q]).ravel() for o, n, q in kq_constraints(ds)]
    return np.array(rows)


def ov_matrix(ds: NTPDataset, emb: np.ndarray) -> np.ndarray:
    V = ds.vocab_size
    rows = []
    for x in range(V):
        for v in range(V):
            if v != ds.collocation[x]:
                e = np.zeros(V)
                e[ds.collocation[x]], e[v] = 1.0, -1.0
                rows.append(np.outer(e, emb[:, x]).ravel())
    return np.array(rows)


def assert_kkt(A: np.ndarray, w: np.ndarray, tol: float = 1e-8) -> None:
    """min slack 1, and w = A_act^T lam with lam >= 0 on the active rows."""
    margins = A @ w
    assert margins.min() == pytest.approx(1.0, abs=tol)
    active = margins <= 1.0 + 1e-7
    lam, residual = nnls(A[active].T, w)
    assert residual <= 1e-7 * max(1.0, np.linalg.norm(w))


# ----------------------------------------------------------------------------- Example 1


def test_example1_one_hot_values():
    ds = example1()
    t = max_margin_targets(ds, np.eye(4))
    np.testing.assert_allclose(t.wkq_star, EXAMPLE1_WKQ, atol=1e-9)
    assert t.wkq_star_norm_sq == pytest.approx(13 / 6, abs=1e-9)
    assert t.wov_star_norm == pytest.approx(np.sqrt(3), abs=1e-12)
    np.testing.assert_allclose(t.prop2_wkq, EXAMPLE1_WKQ, atol=1e-12)
    assert t.prop2_gap < 1e-9
    assert t.prop2_wkq_norm_sq == pytest.approx(13 / 6, abs=1e-12)


def test_example1_wov_closed_form_matches_qp():
    ds = example1()
    emb = random_orthogonal(4, seed=3)
    closed = wov_star(ds, emb)
    np.testing.assert_allclose(closed, _wov_qp(ds, emb), atol=1e-9)
    assert_kkt(ov_matrix(ds, emb), closed.ravel())


def test_example1_full_qp_matches_token_coordinates():
    ds = example1()
    np.testing.assert_allclose(_wkq_qp(ds, np.eye(4)), EXAMPLE1_WKQ, atol=1e-9)


# ----------------------------------------------------------------------------- Prop 2


def test_prop2_not_optimal_in_general():
    ds = prop2_counterexample()
    emb = np.eye(5)
    t = max_margin_targets(ds, emb)
    a, b, c, d, q = range(5)
    expected = np.zeros((5, 5))
    expected[[a, b, c, d, q], q] = [1 / 2, 2 / 3, -1 / 3, -1 / 3, -1 / 2]
    np.testing.assert_allclose(t.wkq_star, expected, atol=1e-9)
    assert t.wkq_star_norm_sq == pytest.approx(7 / 6, abs=1e-9)
    assert t.prop2_wkq_norm_sq == pytest.approx(6 / 5, abs=1e-12)
    assert t.wkq_star_norm_sq < t.prop2_wkq_norm_sq - 1e-3
    assert t.prop2_gap > 1e-2
    # independent check with cvxpy
    A = kq_matrix(ds, emb)
    w = cp.Variable(25)
    cp.Problem(cp.Minimize(cp.sum_squares(w)), [A @ w >= 1]).solve(solver=cp.CLARABEL)
    np.testing.assert_allclose(t.wkq_star.ravel(), w.value, atol=1e-6)
    # Prop 2 is still feasible
    assert (A @ t.prop2_wkq.ravel()).min() >= 1 - 1e-12


# ----------------------------------------------------------------------------- embeddings


@pytest.mark.parametrize("make_ds", [example1, prop2_counterexample])
def test_rotation_invariance(make_ds):
    ds = make_ds()
    V = ds.vocab_size
    one_hot = max_margin_targets(ds, np.eye(V))
    R = random_orthogonal(V, seed=11)
    rot = max_margin_targets(ds, R)
    np.testing.assert_allclose(rot.wkq_star, R @ one_hot.wkq_star @ R.T, atol=1e-9)
    np.testing.assert_allclose(rot.prop2_wkq, R @ one_hot.prop2_wkq @ R.T, atol=1e-12)
    np.testing.assert_allclose(rot.wov_star, one_hot.wov_star @ R.T, atol=1e-12)
    assert rot.wkq_star_norm_sq == pytest.approx(one_hot.wkq_star_norm_sq, abs=1e-9)
    assert rot.wov_star_norm == pytest.approx(np.sqrt(V - 1), abs=1e-12)
    assert rot.prop2_gap == pytest.approx(one_hot.prop2_gap, abs=1e-9)


def test_wider_embedding_same_norms():
    ds = example1()
    emb = random_orthogonal(7, seed=5)[:, :4]  # (d=7, |V|=4)
    t = max_margin_targets(ds, emb)
    assert t.wov_star.shape == (4, 7) and t.wkq_star.shape == (7, 7)
    assert t.wkq_star_norm_sq == pytest.approx(13 / 6, abs=1e-9)
    assert t.wov_star_norm == pytest.approx(np.sqrt(3), abs=1e-12)
    np.testing.assert_allclose(t.wkq_star, emb @ EXAMPLE1_WKQ @ emb.T, atol=1e-9)
    # the full QP over vec(W) agrees with the token-coordinate solution
    np.testing.assert_allclose(_wkq_qp(ds, emb), t.wkq_star, atol=1e-9)


@pytest.mark.parametrize("make_ds", [example1, prop2_counterexample])
def test_non_orthonormal_embedding_full_qp(make_ds):
    ds = make_ds()
    V = ds.vocab_size
    emb = np.random.default_rng(0).standard_normal((V + 1, V))
    wkq = wkq_star(ds, emb)
    assert wkq.shape == (V + 1, V + 1)
    assert_kkt(kq_matrix(ds, emb), wkq.ravel())
    wov = wov_star(ds, emb)
    assert wov.shape == (V, V + 1)
    assert_kkt(ov_matrix(ds, emb), wov.ravel())


def test_bad_embedding_shape():
    with pytest.raises(ValueError, match="shape"):
        wkq_star(example1(), np.eye(5))
    with pytest.raises(ValueError, match="shape"):
        prop2_wkq(example1(), np.eye(4)[:, :3])


# ----------------------------------------------------------------------------- solver


def test_min_norm_margin_matches_cvxpy():
    rng = np.random.default_rng(1)
    m, n = 40, 25
    A = rng.standard_normal((m, n))
    A[np.abs(A) < 0.5] = 0.0  # some sparsity
    A += 0.3 * np.abs(rng.standard_normal(n))[None, :]  # feasible: rows lean the same way
    sol = min_norm_margin(sp.csr_matrix(A))
    w = cp.Variable(n)
    prob = cp.Problem(cp.Minimize(cp.sum_squares(w)), [A @ w >= 1])
    prob.solve(solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    assert sol.polished
    np.testing.assert_allclose(sol.w, w.value, atol=1e-8)
    assert sol.norm_sq == pytest.approx(prob.value, abs=1e-8)
    margins = A @ sol.w
    active = margins <= 1 + 1e-7
    assert active.sum() == sol.n_active
    np.testing.assert_allclose(margins[active], 1.0, atol=1e-12)
    assert margins.min() >= 1 - 1e-12
    # KKT certificate
    assert sol.multipliers.min() >= 0
    np.testing.assert_allclose(A.T @ sol.multipliers, sol.w, atol=1e-10)
    assert np.all(sol.multipliers[~active] == 0)
    # dense input gives the same answer
    np.testing.assert_allclose(min_norm_margin(A).w, sol.w, atol=1e-12)


def test_min_norm_margin_degenerate_and_duplicates():
    # x1 + x2 >= 1 is weakly active at the optimum (1, 0); duplicated row x1 >= 1
    A = np.array([[1.0, 1.0], [1.0, 0.0], [1.0, 0.0]])
    sol = min_norm_margin(A)
    assert sol.polished
    np.testing.assert_allclose(sol.w, [1.0, 0.0], atol=1e-14)
    assert sol.norm_sq == pytest.approx(1.0, abs=1e-14)


def test_min_norm_margin_empty_and_infeasible():
    sol = min_norm_margin(np.zeros((0, 3)))
    np.testing.assert_array_equal(sol.w, np.zeros(3))
    assert sol.norm_sq == 0.0 and sol.status == "empty"
    with pytest.raises(RuntimeError, match="infeasible"):
        min_norm_margin(np.array([[1.0, 0.0], [-1.0, 0.0]]))
    with pytest.raises(RuntimeError, match="all zeros"):
        min_norm_margin(np.array([[1.0, 0.0], [0.0, 0.0]]))


def test_min_norm_margin_dependent_rows_need_nonnegative_multipliers():
    # One query column: optimal keys {0, 4, 6}, non-optimal {1, 2, 3, 5}, edges with cycles.
    # The min-norm multipliers of the active rows have a negative entry; a nonnegative set
    # exists (found by NNLS), so the polish must still be accepted.
    edges = [(0, 1), (0, 2), (0, 3), (0, 5), (4, 1), (4, 3), (6, 1), (6, 5)]
    A = np.zeros((len(edges), 7))
    for r, (o, n) in enumerate(edges):
        A[r, o], A[r, n] = 1.0, -1.0
    sol = min_norm_margin(A)
    assert sol.polished and sol.n_active == len(edges)
    expected = np.where(np.isin(np.arange(7), [0, 4, 6]), 4 / 7, -3 / 7)
    np.testing.assert_allclose(sol.w, expected, atol=1e-13)
    assert sol.multipliers.min() >= 0
    np.testing.assert_allclose(A.T @ sol.multipliers, sol.w, atol=1e-12)
    assert np.linalg.lstsq(A.T, sol.w, rcond=None)[0].min() < -1e-3  # min-norm one fails
