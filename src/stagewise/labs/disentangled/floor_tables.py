"""The attainable floors of a run's members as tables (``floors``, ``floor_starts``) and the
report of ``stagewise floors disentangled``: :func:`.floors.solve` under every declared start
(``experiment.floor_starts``), the lowest objective found per member, its test columns, the
spread over starts and the analytic fixed point beside it. The solver itself is :mod:`.floors`."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

import torch

from ...engine import resolve_device
from ...config import available_cores
from ...engine.perf import training_threads
from ...errors import UserError
from ...progress import Progress
from . import theory
from .config import Config
from .data import validate_spec
from .floor_limits import GRAD_TOL, batches, floor_reason, floors_bytes, problem_key
from .floor_starts import START_COLUMNS, FloorsReport, FloorTables, spread
from . import floors  # floors.solve and its limits read at call time (a test or a benchmark may wrap them)
from .floors import Solution
from .train import Member, data_spec, members_from_config

TEST_COLUMNS = {"K1": "test.K1.p_queries", "K2": "test.K2.q_queries", "K1.all": "test.K1", "K2.all": "test.K2",
                "m_P": "m_P", "m_Q": "m_Q", "acc.p_only": "test.acc.p_only", "acc.q_only": "test.acc.q_only",
                "acc.p_part": "test.acc.p_part", "acc.q_part": "test.acc.q_part", "acc": "test.acc"}
"""Row column -> the test metric at the optimum it holds (K1, K2: the claims' P-/Q-bearing queries)."""


def floor_tables(config: Config, members: list[Member], interrupt: Callable[[], None] | None = None) -> FloorTables:
    """The floors of ``members``: table ``floors`` (one row per member: seed, variant, control,
    l2, objective, the numerical floor of the chosen start (K1, K2 = test K1.p_queries /
    K2.q_queries, K1.all, K2.all, m_P, m_Q, accuracies, J, grad_norm, iterations, kinks,
    converged, reason), the spread over starts (:data:`.floor_starts.SPREAD_COLUMNS`) and the
    analytic floor (``analytic.*``, analytic.reason)) and table ``floor_starts`` (one row per
    member and start, :data:`.floor_starts.START_COLUMNS`). Identical problems are solved once
    per start (``experiment.floor_starts``); the chosen start is the lowest objective over the
    converged ones (:func:`.floor_starts.choose`). A member :func:`floor_reason` refuses (lambda =
    0, out of range, too large, gate-noise regime) gives no floor and that reason, a start that
    ends unconverged (MAX_ITER, TIME_LIMIT_S) its reason (values kept), non-finite NaN values and
    its reason. ``interrupt()`` is called between Newton iterations (a run's stop request)."""
    keys = [problem_key(m) for m in members]
    skipped = {k: floor_reason(config, m) for k, m in zip(keys, members)}
    unique = {k: m for k, m in zip(keys, members) if skipped[k] is None}
    order = sorted(unique, key=lambda k: (k[0], *k[2:], k[1]))  # data-major: the lambda variants of one dataset together
    starts = list(config.experiment.floor_starts)
    solutions, failed = _solve_all(config, [unique[k] for k in order], starts, interrupt)
    rows, start_rows = [], []
    for key, m in zip(keys, members):
        cols = [_columns(solutions.get((key, s)), failed.get((key, s)) or skipped[key] or "") for s in starts]
        best, extra = spread(cols, starts, sum((key, s) in solutions for s in starts))
        base = {"seed": m.seed, "variant": m.variant, "control": m.control}
        start_rows += [{**base, "start": s, **{c: col[c] for c in START_COLUMNS[4:]}} for s, col in zip(starts, cols)]
        rows.append({**base, "l2": m.l2, "objective": config.train.objective, **cols[best], **extra,
                     **theory.analytic_floor(config, m)})
    return FloorTables(rows, start_rows)


def floor_rows(config: Config, members: list[Member]) -> list[dict[str, Any]]:
    """Table ``floors`` of :func:`floor_tables`: one row per member, the lowest objective found."""
    return floor_tables(config, members).rows


def floor_workers(config: Config, batches: int) -> int:
    """How many batches are solved side by side: on the CPU one per core (``train.threads``, auto:
    the available cores), each on one torch thread, at most ``batches``; 1 on an accelerator. A
    floors step is hundreds of small operations (batched Cholesky, projected Newton on the dual
    QP, a BVLS certificate), so one batch gains little from a second torch thread (measured at the
    default size: 12.6 s on 1 thread, 12.0 s on 2), while two batches side by side take 1.6x less
    wall time; a batch's result does not depend on its neighbours. With ``train.threads=auto`` the
    lab's own rule decides whether the problems are large enough to use the cores
    (``config.thread_count`` of one batch: the default preset's are; a test's d 8 problems are
    not, and stay on one core)."""
    if resolve_device(config.device).type != "cpu":
        return 1
    if config.train.threads != "auto":
        cores = int(config.train.threads)
    else:
        cores = available_cores() if config.thread_count(len(config.experiment.floor_starts)) > 1 else 1
    return max(1, min(cores, batches))


def _solve_all(config: Config, members: list[Member], starts: list[str],
               interrupt: Callable[[], None] | None = None) -> tuple[dict[tuple, Solution], dict[tuple, str]]:
    """(solutions, failures) keyed by (problem_key, start) of every unique member under every
    start, solved in :func:`batches` (a member's starts consecutive), :func:`floor_workers` of them
    at a time. ``interrupt()`` is called between Newton iterations (a run's stop request raises
    there, so a floors solve stops at the next iteration, not at its end); when one batch raises,
    the others stop at their next iteration and the exception propagates."""
    problems = [(m, s) for m in members for s in starts]  # member-major
    jobs, offset = [], 0
    for batch in batches(config, [m for m, _ in problems], len(starts)):
        jobs.append((batch, [s for _, s in problems[offset:offset + len(batch)]]))
        offset += len(batch)
    workers = floor_workers(config, len(jobs))
    cancel = threading.Event()
    solutions: dict[tuple, Solution] = {}
    failed: dict[tuple, str] = {}

    def between(_: int) -> None:  # before each Newton iteration of every batch
        if cancel.is_set():
            raise _Cancelled
        if interrupt is not None:
            interrupt()

    def solve(batch: list[Member], names: list[str]) -> tuple[list[tuple], list[Solution] | str]:
        keys = [(problem_key(m), s) for m, s in zip(batch, names)]
        try:
            return keys, floors.solve(config, batch, starts=names, on_iteration=between, threads=1 if workers > 1 else None)
        except torch.linalg.LinAlgError as err:  # not seen inside the checked ranges; a run's rows say it, not a traceback
            return keys, f"solver failed: {str(err).splitlines()[0]}"

    def collect(keys: list[tuple], out: list[Solution] | str) -> None:
        if isinstance(out, str):
            failed.update({k: out for k in keys})
        else:
            solutions.update(zip(keys, out))

    with Progress(len(problems), "floors", unit="problems") as shown:  # a solve can take minutes: a sign of life
        shown.note(f"{len(members)} members x {len(starts)} starts, {workers} at a time")
        if workers == 1:
            for batch, names in jobs:
                collect(*solve(batch, names))
                shown.advance(len(batch))
            return solutions, failed
        with training_threads(1), ThreadPoolExecutor(workers, thread_name_prefix="stagewise-floors") as pool:
            pending = {pool.submit(solve, batch, names): len(batch) for batch, names in jobs}
            try:
                for done in as_completed(pending):
                    collect(*done.result())
                    shown.advance(pending[done])
            except BaseException:
                cancel.set()  # the other batches stop at their next Newton iteration
                raise
    return solutions, failed


class _Cancelled(Exception):
    """A batch stopped because another one raised (its own result is not wanted)."""


def _columns(sol: Solution | None, reason: str) -> dict[str, Any]:
    """One start's floor columns (TEST_COLUMNS, J, grad_norm, iterations, kinks, converged,
    reason); NaN with ``reason`` without a solution."""
    if sol is None:
        return {**{c: math.nan for c in TEST_COLUMNS}, "J": math.nan, "grad_norm": math.nan, "iterations": 0, "kinks": 0,
                "converged": False, "reason": reason}
    finite = math.isfinite(sol.objective) and all(math.isfinite(sol.test[t]) for t in ("test.K1", "test.K2"))
    stop = f" (stopped at the time limit of {floors.TIME_LIMIT_S:g} s)" if sol.timed_out else ""
    return {**{c: sol.test[t] if finite else math.nan for c, t in TEST_COLUMNS.items()}, "J": sol.objective,
            "grad_norm": sol.grad_norm, "iterations": sol.iterations, "kinks": sol.kinks, "converged": sol.converged,
            "reason": ("" if sol.converged else "solver diverged: non-finite objective or test loss" if not finite else
                       f"not converged: max |generalised grad| {sol.grad_norm:.2e} >= {GRAD_TOL:g} after {sol.iterations} "
                       f"iterations{stop}")}


def floors_report(config: Config, memory_limit: int | None = None) -> FloorsReport:
    """The floors of the config's baseline members (n_seeds seeds, no controls), without
    training. Raises UserError (one line), before any prompt is drawn, for lambda = 0, a mixture
    without P- or Q-bearing tokens (p0 = 1 or q0 = 1), what :func:`floor_reason` refuses (lambda
    or feature scale outside float64's range, more than MAX_WEIGHTS weights, the gate-noise
    regime) or a size above ``memory_limit`` bytes (what the solver may use beyond the process);
    after the solve for a solver that ends non-finite. Unconverged rows (MAX_ITER, TIME_LIMIT_S)
    are kept with their reason."""
    members = members_from_config(config)
    validate_spec(data_spec(config, members[0]))
    dc = config.data
    if not config.train.l2 > 0:
        raise UserError(f"train.l2={config.train.l2:g}: {theory.NO_L2}; floors need train.l2 > 0")
    if dc.p0 >= 1 or dc.q0 >= 1:
        missing, only = ("P", "Q") if dc.q0 >= 1 else ("Q", "P")
        raise UserError(f"data.p0={dc.p0:g}, data.q0={dc.q0:g}: every token is {only}-only, so no query bears {missing} and "
                        f"K{1 if missing == 'P' else 2}* (the floor on {missing}-bearing queries) is undefined; "
                        "floors need data.p0 < 1 and data.q0 < 1")
    reason = floor_reason(config, members[0])  # the members differ only in their seed
    if reason is not None:
        raise UserError(reason)
    starts = len(config.experiment.floor_starts)
    problems = [m for m in {problem_key(m): m for m in members}.values() for _ in range(starts)]  # one per member and start
    need = max(floors_bytes(config, b) for b in batches(config, problems, starts))
    if memory_limit is not None and need > memory_limit:
        raise UserError(f"floors need about {need / 2**30:.2f} GiB (n_seeds={config.n_seeds}, d={config.data.d}, "
                        f"N={config.data.n_train}, test {config.data.n_test}), above the available {memory_limit / 2**30:.2f} GiB; "
                        "use fewer seeds or prompts")
    start = time.perf_counter()
    rows = floor_rows(config, members)
    bad = [r for r in rows if not math.isfinite(r["J"])]
    if bad:
        raise UserError(f"floors: the solver diverged for seed {bad[0]['seed']} ({bad[0]['reason']})")
    note = (f"disentangled floors: {config.n_seeds} seeds from {config.seed}, d={config.data.d}, L={config.data.prompt_len}, "
            f"N={config.data.n_train}, test {config.data.n_test}, zeta={config.data.zeta:g}, lambda={config.train.l2:g}")
    return FloorsReport(rows, time.perf_counter() - start, note, ", ".join(config.experiment.floor_starts))
