"""The limits and sizes of the disentangled floors solver (:mod:`.floors`): which configs it
takes (the weights per problem, the gate-noise regime, lambda and feature scale through
:func:`.theory.floor_range_reason`), how many bytes a batch of problems needs, and how the
problems are cut into batches. Checked from the config alone, before any prompt is drawn:
``stagewise floors`` refuses in one line, a run's floor rows carry the reason instead.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ...engine import resolve_device
from . import theory
from .config import Config
from .train import DATA_FIELDS, Member, data_layout

GRAD_TOL = 1e-8  # converged: max |entry| of the minimum-norm Clarke subgradient (incl. L2) per problem (floors.certificate)
MAX_ITER = 100  # Newton iterations of a solve
MAX_NEAR = 200  # candidate kinks: the MAX_NEAR closest at most per member
FEATURE_COPIES = 2  # (N + T, L, 2d) float64 arrays per problem: stored once, plus the solver's passes over them
# (measured peak 1.67x the features at d 100, L 500, N = T = 200; the sampler writes chunk by chunk)
STEP_COPIES = 10  # score-sized (N, C) float64 arrays per problem and pass (value_grad, certificate)
BATCH_BYTES = 4 << 30  # problems are solved in batches of at most this floors_bytes (at least one problem a batch):
# the floors do not depend on the batching (tests/labs/disentangled/test_floors.py), only the peak memory does
CPU_BATCH = 1  # members per batch on the CPU (each with all its starts, sharing its prompts; members converge one by
# one, the others go on without them). Before that per-member convergence a batch iterated until its slowest member
# converged: 170 s batched vs 23.5 s one by one (2 cores, zeta = 2, 4 seeds of the default size). Batches run on the
# available cores side by side (floor_tables.floor_workers)
CERTIFICATE_COPIES = 4  # (P, MAX_NEAR) float64 arrays of the certificate's dense columns (einsum, scaled copy, lstsq's)
MAX_WEIGHTS = 200_000  # P (weights per problem) at most: the certificate's least squares on (P, |Z|) columns costs
# O(P |Z|^2) per Newton iteration (measured 6 s a solve at P = 180,000: d = 300, N = 100), up to MAX_ITER iterations


def problem_key(member: Member) -> tuple:
    """What decides a member's floor problem: seed (data, init), lambda, data fields, control."""
    return (member.seed, member.l2, *(getattr(member, k) for k in DATA_FIELDS))


def weights_per_problem(config: Config) -> int:
    """P: the weights of one floor problem (2 d^2 for block weights, (2d)^2 for full)."""
    return (4 if config.model.weights == "full" else 2) * config.data.d ** 2


def floors_bytes(config: Config, members: list[Member]) -> int:
    """A bytes bound of one :func:`.floors.solve` of ``members`` (one entry per problem: a member
    under one start, so a member solved from several starts is listed once per start) beyond the
    process itself: the prompts (stored once per dataset, :func:`.ensemble.data_layout`, as
    build_ensemble does), score-sized work arrays of train and test and the Newton solver (a few
    (2N)^2 arrays) per problem, and the certificate's dense (P, MAX_NEAR) columns (one problem at
    a time)."""
    dc = config.data
    problems = len(members)
    L, d = dc.prompt_len, dc.d
    params = weights_per_problem(config)
    tested = [replace(m, p0=dc.p0, q0=dc.q0, control=False) for m in members]  # the test prompts' members (ensemble._prompts)
    datasets = (len(data_layout(members)[0]) * dc.n_train + len(data_layout(tested)[0]) * dc.n_test) if members else 0
    features = datasets * L * 2 * d * 8 * FEATURE_COPIES
    steps = problems * max(dc.n_train, dc.n_test) * (L - 1) * 8 * STEP_COPIES * 2  # value_grad and the certificate
    solver = problems * (params * 8 * 12 + (2 * dc.n_train) ** 2 * 8 * 4)  # iterates, steps; the prompt-space Cholesky
    certificate = params * MAX_NEAR * 8 * CERTIFICATE_COPIES if problems else 0
    return features + steps + solver + certificate


def size_reason(config: Config) -> str | None:
    """Why the floor problems of ``config`` are too large to solve (None: they are not): more
    than MAX_WEIGHTS weights per problem."""
    params = weights_per_problem(config)
    if params <= MAX_WEIGHTS:
        return None
    full = config.model.weights == "full"
    d_max = math.isqrt(MAX_WEIGHTS // 4) if full else math.isqrt(MAX_WEIGHTS // 2)
    return (f"data.d={config.data.d}: {params:,} weights per problem ({'(2d)^2, full' if full else '2 d^2, block'} weights) are above "
            f"the {MAX_WEIGHTS:,} the floors solver takes: its optimality certificate is a dense least-squares problem on "
            f"(weights x kinks) columns at every Newton iteration (6 s at 180,000 weights, up to {MAX_ITER} iterations; "
            f"{params / 180_000:.3g}x that here); floors need data.d <= {d_max}")


def regime_reason(config: Config, member: Member) -> str | None:
    """Why the solver is not run for ``member``'s data (None: it is): the gate-noise regime, a Q
    noise radius q_noise sqrt(d) of at least gate_noise.RADIUS_RANGE[0] ||zeta|| (token-level kinks
    everywhere: max |generalised grad| 1.2e-3 after 100 iterations at d 50, L 250, hours at the
    preset's size; docs/disentangled.md section 6)."""
    from .gate_noise import RADIUS_RANGE

    dc = config.data
    radius = dc.model_copy(update={"zeta": member.zeta}).q_noise_std * math.sqrt(dc.d) / member.zeta
    if radius < RADIUS_RANGE[0]:
        return None
    set_by = f"data.q_noise_radius={dc.q_noise_radius:g}" if dc.q_noise_radius is not None else f"data.q_noise={dc.q_noise:g}"
    return (f"{set_by}: a Q noise radius q_noise sqrt(d) = {radius:.3g} ||zeta|| (>= {RADIUS_RANGE[0]:g}) is the token-level "
            "gate-noise regime (--preset gate-noise), where the floors solver does not converge (max |generalised grad| 1.2e-3 "
            f"after {MAX_ITER} iterations at d 50, L 250; docs/disentangled.md section 6); floors need a Q noise radius below "
            f"{RADIUS_RANGE[0]:g} ||zeta|| (e.g. the two-stage preset, data.q_noise_radius=null)")


def floor_reason(config: Config, member: Member) -> str | None:
    """Why ``member`` has no numerical floor (None: it has one): lambda = 0, lambda or the
    feature scale outside float64's range (:func:`.theory.floor_range_reason`), too many weights
    (:func:`size_reason`) or the gate-noise regime (:func:`regime_reason`). Checked from the
    config alone, before any prompt is drawn."""
    return theory.floor_range_reason(config, member) or size_reason(config) or regime_reason(config, member)


def batches(config: Config, members: list[Member], per_member: int = 1) -> list[list[Member]]:
    """``members`` (the problems in order: each unique member ``per_member`` times in a row, once
    per start) cut into consecutive batches of at most BATCH_BYTES of :func:`floors_bytes` each
    (one problem at least). A batch of at least ``per_member`` problems holds whole members (a
    multiple of ``per_member``), so a member's starts share its stored prompts; on the CPU a
    batch is at most CPU_BATCH members with their starts."""
    per = floors_bytes(config, members[:1]) if members else 0
    size = max(1, BATCH_BYTES // max(1, per))
    if resolve_device(config.device).type == "cpu":
        size = min(size, CPU_BATCH * per_member)
    if size >= per_member > 1:
        size -= size % per_member
    return [members[i:i + size] for i in range(0, len(members), size)]
