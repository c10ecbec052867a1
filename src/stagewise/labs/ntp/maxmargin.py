"""Max-margin targets of the NTP lab (Huang, Liang, Yang 2024, Eqs. 2-3).

Both targets are minimum-norm solutions of a margin problem ``min ||w||^2 s.t. A w >= 1``:

* ``W_ov*`` (``|V| x d``): ``(e_n(x) - e_v)^T W x >= 1`` for every token x and ``v != n(x)``.
* ``W_kq*`` (``d x d``, rows = key, columns = query): ``(x_opt - x_l)^T W x_L >= 1`` for every
  sample of length >= 2 and every token ``x_l`` of it other than its optimal token.

With orthonormal embeddings (``emb.T @ emb == I``) both problems live in token coordinates:
``W_ov* = M emb^T`` (closed form) and ``W_kq* = emb M emb^T`` with ``M`` the solution of a
sparse, per-query-column separable QP. Otherwise the full QP over ``vec(W)`` is solved.
Every QP goes through :func:`min_norm_margin`: Clarabel's interior point method followed by an
active-set polish that gives the exact solution (to round-off) with a KKT certificate.

Proposition 2's closed form is returned only as a diagnostic; it is not optimal in general.
"""

from __future__ import annotations

from dataclasses import dataclass

import clarabel
import numpy as np
import scipy.sparse as sp
from scipy.optimize import nnls
from scipy.sparse.csgraph import connected_components

from stagewise.labs.ntp.dataset import NTPDataset

_ORTHONORMAL_TOL = 1e-12
_FEAS_TOL = 1e-10  # polished w must satisfy A w >= 1 - _FEAS_TOL
_DUAL_TOL = 1e-10  # polished multipliers must be >= -_DUAL_TOL (relative to their max)
_EQ_TOL = 1e-9  # polished active rows must satisfy |A_act w - 1| <= _EQ_TOL
_STAT_TOL = 1e-9  # stationarity: ||A_act^T lam - w|| <= _STAT_TOL * max(1, ||w||)
_ACTIVE_TOLS = (1e-7, 1e-5)  # relative slack thresholds tried for the active set
_ACCEPTED = ("Solved", "AlmostSolved")


@dataclass(frozen=True, eq=False)
class MarginSolution:
    """Solution of ``min ||w||_2^2 s.t. A w >= 1``.

    Attributes:
        w: (n,) the minimizer.
        norm_sq: ``||w||_2^2``.
        n_active: number of constraints at equality (slack below the active threshold).
        polished: True when the active-set polish was accepted (exact KKT point).
        status: Clarabel's status string (``"Solved"``, ...), or ``"empty"`` without rows.
        multipliers: (m,) nonnegative dual variables ``lam`` with ``w = A^T lam``.
    """

    w: np.ndarray
    norm_sq: float
    n_active: int
    polished: bool
    status: str
    multipliers: np.ndarray


@dataclass(frozen=True, eq=False)
class MaxMarginTargets:
    """Max-margin directions of one dataset and embedding.

    Attributes:
        wov_star: (|V|, d) min-norm W_ov with all collocation margins >= 1.
        wkq_star: (d, d) min-norm W_kq with all attention margins >= 1 (the QP solution;
            NaN where none exists, see :func:`max_margin_targets`).
        prop2_wkq: (d, d) Proposition 2's closed form (diagnostic, not optimal in general).
        wov_star_norm: ``||W_ov*||_F`` (``sqrt(|V| - 1)`` for orthonormal embeddings).
        wkq_star_norm_sq: ``||W_kq*||_F^2``.
        prop2_wkq_norm_sq: ``||prop2_wkq||_F^2``.
        prop2_gap: ``||prop2_wkq - W_kq*||_F``.
    """

    wov_star: np.ndarray
    wkq_star: np.ndarray
    prop2_wkq: np.ndarray
    wov_star_norm: float
    wkq_star_norm_sq: float
    prop2_wkq_norm_sq: float
    prop2_gap: float


# --------------------------------------------------------------------------- core solver


def min_norm_margin(A: sp.spmatrix | sp.sparray | np.ndarray) -> MarginSolution:
    """Solve ``min ||w||_2^2 s.t. A w >= 1`` (elementwise) exactly.

    Args:
        A: (m, n) constraint matrix, dense or scipy sparse.

    Returns:
        A :class:`MarginSolution`; ``w = 0`` when ``m == 0``.

    Raises:
        RuntimeError: the problem is infeasible (e.g. a zero row) or the solver failed.
    """
    A = sp.csr_matrix(A, dtype=np.float64, copy=True)  # (m, n)
    A.eliminate_zeros()
    m, n = A.shape
    if m == 0:
        return MarginSolution(np.zeros(n), 0.0, 0, True, "empty", np.zeros(0))
    row_nnz = np.diff(A.indptr)
    zero_rows = np.flatnonzero(row_nnz == 0)
    if zero_rows.size:
        raise RuntimeError(
            f"margin problem infeasible: constraint row {int(zero_rows[0])} of A is all zeros"
        )
    if not np.all(np.isfinite(A.data)):
        raise RuntimeError("margin problem has non-finite entries in A")

    # Clarabel form: min 1/2 x^T P x + q^T x  s.t.  A_c x + s = b, s >= 0.
    # With A_c = -A, b = -1: s = A x - 1 >= 0.  P = I, so z (dual) satisfies x = A^T z.
    settings = clarabel.DefaultSettings()
    settings.verbose = False
    settings.max_threads = 1  # the KKT systems are small; threading overhead dominates
    solver = clarabel.DefaultSolver(
        sp.identity(n, format="csc"),
        np.zeros(n),
        sp.csc_matrix(-A),
        -np.ones(m),
        [clarabel.NonnegativeConeT(m)],
        settings,
    )
    result = solver.solve()
    status = str(result.status)
    if "Infeasible" in status:
        raise RuntimeError(f"margin problem infeasible: Clarabel status {status} ({m} rows)")
    w_ipm = np.asarray(result.x, dtype=np.float64)  # (n,)
    z_ipm = np.maximum(np.asarray(result.z, dtype=np.float64), 0.0)  # (m,)

    for tol in _ACTIVE_TOLS:
        polished = _polish(A, w_ipm, tol)
        if polished is not None:
            w, lam, n_active = polished
            return MarginSolution(w, float(w @ w), n_active, True, status, lam)
    if status not in _ACCEPTED:
        raise RuntimeError(f"margin problem not solved: Clarabel status {status} ({m} rows)")
    slack = A @ w_ipm - 1.0  # (m,)
    n_active = int(np.sum(slack <= _ACTIVE_TOLS[0] * _row_scale(A, w_ipm)))
    return MarginSolution(w_ipm, float(w_ipm @ w_ipm), n_active, False, status, z_ipm)


def _row_scale(A: sp.csr_matrix, w: np.ndarray) -> np.ndarray:
    """(m,) scale for relative slacks: ``max(1, ||A_i|| ||w||)``."""
    row_norms = np.sqrt(np.asarray(A.multiply(A).sum(axis=1)).ravel())  # (m,)
    return np.maximum(1.0, row_norms * np.linalg.norm(w))


def _polish(
    A: sp.csr_matrix, w_ipm: np.ndarray, tol: float
) -> tuple[np.ndarray, np.ndarray, int] | None:
    """Exact KKT point from the active set of ``w_ipm``, or None if it fails the checks.

    Solves ``A_act w = 1`` in the min-norm sense, ``w = A_act^T (A_act A_act^T)^+ 1``, one
    connected block of ``A_act`` at a time (blocks share no variable), then finds multipliers
    ``lam >= 0`` with ``A_act^T lam = w``. Accepted when every row is feasible and every
    active row holds with equality: then (w, lam) is a KKT point, so w is the optimum.
    Returns (w (n,), lam (m,), n_active).
    """
    m, n = A.shape
    active = np.flatnonzero(A @ w_ipm - 1.0 <= tol * _row_scale(A, w_ipm))  # (k,)
    if active.size == 0:
        return None
    A_act = A[active]  # (k, n)
    pattern = A_act.copy()
    pattern.data[:] = 1.0
    n_blocks, var_block = connected_components(pattern.T @ pattern, directed=False)  # (n,)
    row_block = var_block[A_act.indices[A_act.indptr[:-1]]]  # (k,) block of first nonzero
    w = np.zeros(n)
    lam_act = np.zeros(active.size)
    rows_by_block = np.argsort(row_block, kind="stable")
    bounds = np.searchsorted(row_block[rows_by_block], np.arange(n_blocks + 1))
    for b in range(n_blocks):
        rows = rows_by_block[bounds[b] : bounds[b + 1]]
        if rows.size == 0:
            continue  # variables touched by no active row stay 0
        block = A_act[rows]  # (k_b, n)
        cols = np.unique(block.indices)
        B = block[:, cols].toarray()  # (k_b, n_b)
        w_b = np.linalg.lstsq(B, np.ones(rows.size), rcond=None)[0]  # (n_b,) min-norm
        lam_b = _multipliers(B, w_b)  # (k_b,) w_b = B^T lam_b, lam_b >= 0
        if lam_b is None:
            return None
        w[cols] = w_b
        lam_act[rows] = lam_b
    if np.max(np.abs(A_act @ w - 1.0)) > _EQ_TOL:
        return None
    if np.min(A @ w) < 1.0 - _FEAS_TOL:
        return None
    lam = np.zeros(m)
    lam[active] = np.maximum(lam_act, 0.0)
    return w, lam, int(active.size)


def _multipliers(B: np.ndarray, w: np.ndarray) -> np.ndarray | None:
    """Nonnegative ``lam`` (k,) with ``B^T lam = w`` for B (k, n), or None if there is none.

    Tries the min-norm solution first; with dependent rows (e.g. cycles in a query's
    optimal/non-optimal graph) it can be negative while a nonnegative one exists, so NNLS
    decides then.
    """
    scale = max(1.0, float(np.linalg.norm(w)))
    lam = np.linalg.lstsq(B.T, w, rcond=None)[0]  # (k,)
    if np.min(lam) < -_DUAL_TOL * max(1.0, float(np.max(np.abs(lam)))):
        lam = nnls(B.T, w)[0]  # (k,)
    if np.linalg.norm(B.T @ lam - w) > _STAT_TOL * scale:
        return None
    return np.maximum(lam, 0.0)


# --------------------------------------------------------------------------- helpers


def _check_embedding(ds: NTPDataset, emb: np.ndarray) -> np.ndarray:
    """Validate ``emb`` (d, |V|) and return it as float64."""
    emb = np.asarray(emb, dtype=np.float64)
    if emb.ndim != 2 or emb.shape[1] != ds.vocab_size:
        raise ValueError(
            f"emb must have shape (d, |V|) = (d, {ds.vocab_size}), got {tuple(emb.shape)}"
        )
    if not np.all(np.isfinite(emb)):
        raise ValueError("emb has non-finite entries")
    return emb


def _is_orthonormal(emb: np.ndarray) -> bool:
    """True when the columns of ``emb`` (d, |V|) are orthonormal to 1e-12."""
    gram = emb.T @ emb  # (|V|, |V|)
    return bool(np.max(np.abs(gram - np.eye(gram.shape[0]))) <= _ORTHONORMAL_TOL)


def kq_constraints(ds: NTPDataset) -> np.ndarray:
    """Distinct attention constraints ``(opt, other, query)`` of the dataset, shape (m, 3).

    One row per sample of length >= 2, per optimal token (:meth:`NTPDataset.optimal_set`:
    one for realizable data) and per distinct other token of it; duplicates across samples
    are removed (they are the same constraint).
    """
    triples = {
        (top, tok, s.query)
        for i, s in enumerate(ds.samples)
        if len(s.input) >= 2
        for top in ds.optimal_set(i)
        for tok in set(s.input) - ds.optimal_set(i)
    }
    return np.array(sorted(triples), dtype=np.int64).reshape(-1, 3)  # (m, 3)


# --------------------------------------------------------------------------- W_ov*


def wov_star(ds: NTPDataset, emb: np.ndarray) -> np.ndarray:
    """Max-margin value-output matrix ``W_ov*``, shape (|V|, d).

    Args:
        ds: the dataset (only its collocation is used).
        emb: (d, |V|) token embeddings, one column per token.
    """
    emb = _check_embedding(ds, emb)
    if not _is_orthonormal(emb):
        return _wov_qp(ds, emb)
    V = ds.vocab_size
    M = np.full((V, V), -1.0 / V)  # (|V|, |V|) column x = e_n(x) - 1/|V|
    M[list(ds.collocation), np.arange(V)] += 1.0
    return M @ emb.T  # (|V|, d)


def _wov_qp(ds: NTPDataset, emb: np.ndarray) -> np.ndarray:
    """``W_ov*`` as the full QP over row-major ``vec(W)``; (|V|, d)."""
    d, V = emb.shape
    nxt = np.asarray(ds.collocation)
    x_idx, v_idx = np.nonzero(nxt[:, None] != np.arange(V)[None, :])  # (m,), (m,) pairs
    m = x_idx.size
    # row (x, v) = kron(e_n(x) - e_v, emb[:, x]): +x at block n(x), -x at block v
    rows = np.repeat(np.arange(m), 2 * d)  # (m * 2d,)
    blocks = np.stack([nxt[x_idx], v_idx], axis=1)  # (m, 2)
    cols = (blocks[:, :, None] * d + np.arange(d)[None, None, :]).ravel()  # (m * 2d,)
    vals = (emb.T[x_idx][:, None, :] * np.array([1.0, -1.0])[None, :, None]).ravel()
    A = sp.csr_matrix((vals, (rows, cols)), shape=(m, V * d))  # (m, |V| d)
    return min_norm_margin(A).w.reshape(V, d)  # (|V|, d)


# --------------------------------------------------------------------------- W_kq*


def wkq_star(ds: NTPDataset, emb: np.ndarray) -> np.ndarray:
    """Max-margin key-query matrix ``W_kq*`` (the QP solution), shape (d, d).

    Rows index keys, columns queries: ``score(x, q) = x^T W q``. Entries that no constraint
    touches (non-comparable tokens, tokens never used as a query) are 0.

    Args:
        ds: the dataset (samples and optimal tokens are used).
        emb: (d, |V|) token embeddings, one column per token.
    """
    emb = _check_embedding(ds, emb)
    if not _is_orthonormal(emb):
        return _wkq_qp(ds, emb)
    return emb @ wkq_token_coords(ds) @ emb.T  # (d, d)


def wkq_token_coords(ds: NTPDataset) -> np.ndarray:
    """``W_kq*`` in token coordinates (one-hot embeddings), shape (|V|, |V|).

    Variables are the entries ``M[key, q]`` that some constraint touches; all query columns
    go into one sparse QP (block separable, solved once).
    """
    V = ds.vocab_size
    cons = kq_constraints(ds)  # (m, 3) opt, other, query
    M = np.zeros((V, V))
    if cons.shape[0] == 0:
        return M
    keys = np.concatenate([cons[:, 0] * V + cons[:, 2], cons[:, 1] * V + cons[:, 2]])  # (2m,)
    entries, var = np.unique(keys, return_inverse=True)  # (n,), (2m,)
    m = cons.shape[0]
    rows = np.concatenate([np.arange(m), np.arange(m)])  # (2m,)
    vals = np.concatenate([np.ones(m), -np.ones(m)])  # (2m,)
    A = sp.csr_matrix((vals, (rows, var)), shape=(m, entries.size))  # (m, n)
    sol = min_norm_margin(A)
    M[entries // V, entries % V] = sol.w
    return M


def _wkq_qp(ds: NTPDataset, emb: np.ndarray) -> np.ndarray:
    """``W_kq*`` as the full QP over row-major ``vec(W)`` (d^2 variables); (d, d)."""
    d = emb.shape[0]
    cons = kq_constraints(ds)  # (m, 3)
    if cons.shape[0] == 0:
        return np.zeros((d, d))
    diff = emb[:, cons[:, 0]] - emb[:, cons[:, 1]]  # (d, m) x_opt - x_l
    query = emb[:, cons[:, 2]]  # (d, m) x_q
    A = np.einsum("im,jm->mij", diff, query).reshape(-1, d * d)  # (m, d^2) kron rows
    return min_norm_margin(A).w.reshape(d, d)  # (d, d)


def prop2_wkq(ds: NTPDataset, emb: np.ndarray) -> np.ndarray:
    """Proposition 2's closed-form ``W_kq`` (diagnostic only), shape (d, d).

    Per query column q with ``k = |optimal(q)|`` and ``m = |non_optimal(q)|``: optimal keys
    get ``m/(k+m)``, non-optimal keys ``-k/(k+m)``, all else 0; mapped by ``emb M emb^T``.
    """
    emb = _check_embedding(ds, emb)
    V = ds.vocab_size
    M = np.zeros((V, V))  # (|V|, |V|) token coordinates
    for q, st in ds.structure.items():
        k, m = len(st.optimal), len(st.non_optimal)
        if k + m == 0:
            continue
        M[sorted(st.optimal), q] = m / (k + m)
        M[sorted(st.non_optimal), q] = -k / (k + m)
    return emb @ M @ emb.T  # (d, d)


def max_margin_targets(ds: NTPDataset, emb: np.ndarray) -> MaxMarginTargets:
    """All max-margin targets of ``ds`` under embedding ``emb`` (d, |V|).

    On out-of-assumption data (``ds.violations``) whose W_kq problem is infeasible (a cycle
    in a query's order) ``wkq_star`` is all NaN: no max-margin target exists.
    """
    emb = _check_embedding(ds, emb)
    wov = wov_star(ds, emb)  # (|V|, d)
    try:
        wkq = wkq_star(ds, emb)  # (d, d)
    except RuntimeError as err:
        if not ds.violations or "infeasible" not in str(err):
            raise
        wkq = np.full((emb.shape[0], emb.shape[0]), np.nan)  # out-of-assumption data (a cycle): no target exists
    prop2 = prop2_wkq(ds, emb)  # (d, d)
    return MaxMarginTargets(
        wov_star=wov,
        wkq_star=wkq,
        prop2_wkq=prop2,
        wov_star_norm=float(np.linalg.norm(wov)),
        wkq_star_norm_sq=float(np.sum(wkq**2)),
        prop2_wkq_norm_sq=float(np.sum(prop2**2)),
        prop2_gap=float(np.linalg.norm(prop2 - wkq)),
    )
