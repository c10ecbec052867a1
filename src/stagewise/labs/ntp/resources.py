"""Up-front size estimate of an NTP run (memory and the whole run folder on disk), from
the config alone: no dataset is generated beyond the first members' of a small vocabulary,
so absurd sizes are refused in milliseconds.

Sizes: S members, V vocabulary, d dimension, N samples per member (upper bound), L the
longest sentence, G generalization cases. The batched step keeps about ``WORKING_COPIES``
float tensors of each of (S, N, V), (S, V, V), (S, V, d), (S, d, d) alive, plus index
tensors (S, N, L) and the generalization suite (S, G, L); the max-margin QPs of one member
hold O(V^2 + N V) nonzeros.

Disk (:class:`~stagewise.runs.sizes.DiskBudget`, the peak of the run folder): the metric
stream line by line (the logged steps of :class:`~.train.LogSchedule`, LOGGED_METRICS plus
``test.acc.covered`` at suite steps, per compare variant) and its Parquet copy; the kept checkpoints
(weights, Adam moments, the active mask) and one more at the peak; the generalization table
(Parquet + CSV, one row per seed and unseen sentence: counted on the first members' suites
for a small vocabulary, else the cap of 6 categories x max_cases); the summary; the four
figures (:data:`FIGURES`).
"""

from __future__ import annotations

import json
import math

from ...report.sizes import FigureSize
from ...runs.sizes import PARQUET_BASE_BYTES, DiskBudget, safetensors_bytes, stream_bytes, stream_bytes_upto
from ..contract import Resources
from .config import Config

WORKING_COPIES = 12  # live float tensors per shape in a step with metrics (measured peak / size, rounded up)
PROCESS_BASE = 400 << 20  # torch + numpy + scipy + clarabel after import

# the names of every logged line (train.metrics + tiny_grad, frozen); suite steps add SUITE_METRICS
LOGGED_METRICS = ("stage", "train.loss.stage1", "train.loss", "train.loss.floor", "train.loss.gap", "W_ov.cos_target",
                  "W_ov.dist_target", "W_ov.fro", "W_kq.cos_target", "W_kq.dist_target", "W_kq.cos_prop2", "W_kq.dist_prop2",
                  "W_kq.fro", "train.opt_attn.min", "train.opt_attn.mean", "train.acc", "W_ov.grad_fro", "W_kq.grad_fro",
                  "train.score.optimal", "train.score.non_optimal", "train.score.non_comparable", "tiny_grad", "frozen")
SUITE_METRICS = ("test.acc.covered",)
EXACT_LINES = 200_000  # up to this many logged steps the stream is counted line by line
SUITE_CATEGORIES = 6  # generalize.build_suite: at most max_cases unseen sentences in each
SUITE_EXACT_VOCAB = 32  # up to this vocabulary the first members' suites are built and counted (~10 ms each at |V| = 20)
SUITE_EXACT_SAMPLES = 5_000  # ... and samples per member (a larger dataset is not built for an estimate)
SUITE_SAMPLE = 4  # members whose suites are counted (more seeds: their mean, times SUITE_SPREAD, for each)
SUITE_SPREAD = 1.05  # margin on the mean suite of the counted members (8 seeds at |V| = 20: within 4 %)
GEN_CSV_BYTES_PER_ROW = 125  # quoted CSV row of the generalization table (measured 114 to 123)
GEN_PARQUET_BYTES_PER_ROW = 16  # the same row in Parquet (measured 10 to 18), + PARQUET_BASE_BYTES
SUMMARY_BYTES = 21_000  # summary.json of one (variant's) run: declared claims (17 records of about 840 bytes), stages,
# rate fits (measured 23.1 kB at 2 seeds) ...
SUMMARY_BYTES_PER_SEED = 1_900  # ... and the per-seed values and per-seed claim values (measured 1.82 kB per seed, 2 -> 8 seeds)
FIGURES = {  # measured on one seed (rounded up) and their growth with the seed lines (report.sizes)
    "figure2": FigureSize(png=94_000, png_seeds=7_500, pdf=24_000, curves=6.4, pdf_per_point=2.2),
    "rate_fits": FigureSize(png=80_000, png_seeds=14_000, pdf=28_000, curves=2.0, pdf_per_point=2.2),
    "attention": FigureSize(png=62_000, png_seeds=32_000, pdf=21_000, curves=5.1, pdf_per_point=2.2),
}
PARQUET_BYTES_PER_VALUE = 6.0  # metrics.parquet: stage, frozen, tiny_grad, accuracies repeat (measured 4.9 to 5.8)
SUMMARY_BYTES_PER_VARIANT = 13_000  # each further compare variant's claims and details (measured 74.7 kB for 4 variants, 2 seeds)


def _file_sizes(path) -> tuple[int, int, int]:
    """(V, N, L) of a JSON dataset file (cheap header read; the file is read once here)."""
    try:
        obj = json.loads(path.read_text())
        tokens, samples = obj.get("tokens", []), obj.get("samples", [])
        longest = max((len(s.get("input", [])) for s in samples if isinstance(s, dict)), default=1)
        return len(tokens), len(samples) + len(tokens), longest
    except Exception:  # the data check reports a bad file with its own message
        return 1, 1, 1


def sizes(config: Config) -> tuple[int, int, int, int]:
    """(V, N, L, d): vocabulary, samples per member (upper bound), longest sentence, dimension."""
    dc = config.data
    if dc.source == "example1":
        V, N, L = 4, 12, 4
    elif dc.source == "file":
        V, N, L = _file_sizes(dc.file)
    else:
        V, L = dc.vocab_size, dc.max_len
        pairs = dc.optimal_per_query[1] * dc.non_optimal_per_query[1] if dc.complete else 0
        per_query = dc.sentences_per_query * (L if dc.prefix_closed else 1) + 2 * pairs
        N = V + V * per_query
    return V, N, L, dc.dim or V


def estimate(config: Config) -> Resources:
    """Peak memory and the peak size of the run folder of ``config``'s run (upper estimates)."""
    S = config.n_seeds
    V, N, L, d = sizes(config)
    G = 3 * config.generalize.max_cases
    width = 8 if config.model.dtype == "float64" else 4
    floats = S * (N * V + V * V + V * d + d * d) * WORKING_COPIES
    ints = S * (N * L + G * L) * 8 * 2
    qp = (V * V + N * V) * 8 * 16
    memory = PROCESS_BASE + floats * width + ints + qp
    disk = disk_budget(config)
    logged = schedule_of(config).count()
    return Resources(int(memory), disk.peak, f"S={S} members, |V|={V}, d={d}, N<={N} samples, L={L}, {logged} logged "
                                             f"steps; disk: {disk.describe()}")


def schedule_of(config: Config):
    from .train import LogSchedule  # train imports torch kernels; the estimate needs only the schedule

    return LogSchedule.of(config)


def logged_lines(config: Config) -> tuple[list[int] | int, list[int] | int, int]:
    """(steps logged without the suite, with the suite, how many logged): lists up to
    EXACT_LINES logged steps; beyond, the counts (each line then counted at the last step's
    digits, the suite at most once per interval plus 0, T and the end)."""
    schedule = schedule_of(config)
    count = schedule.count()
    if count <= EXACT_LINES:
        logged = schedule.steps()
        suite = [t for previous, t in zip([0, *logged], logged) if schedule.suite_after(t, previous)]
        chosen = set(suite)
        return [t for t in logged if t not in chosen], suite, count
    n_suite = min(count, schedule.total // schedule.suite_every + 4)
    return count - n_suite, n_suite, count


def suite_rows(config: Config, V: int) -> int:
    """Rows of the generalization table: the largest of the first members' suites times the
    seeds (small vocabularies), else the cap (every category full)."""
    cap = SUITE_CATEGORIES * config.generalize.max_cases
    if config.data.source == "file" or V > SUITE_EXACT_VOCAB or sizes(config)[1] > SUITE_EXACT_SAMPLES:
        return cap * config.n_seeds
    from .generalize import build_suite
    from .problem import STREAMS, member_dataset

    try:
        counted = [len(build_suite(member_dataset(config, s), config.generalize.max_cases,
                                   int(STREAMS.numpy(s, "suite").integers(2**31))))
                   for s in config.seed_list()[:SUITE_SAMPLE]]
    except Exception:  # bad data: the lab's check says so in its own words
        return cap * config.n_seeds
    if config.n_seeds <= len(counted):
        return sum(counted)
    return min(cap, math.ceil(SUITE_SPREAD * sum(counted) / len(counted))) * config.n_seeds


def checkpoint_bytes(config: Config, V: int, d: int, S: int) -> int:
    """One checkpoint: the weights, Adam's moments and counts when used, the active mask."""
    shapes = [(d, d), (d, d), (V, d), (d, d)] if config.model.factored else [(d, d), (V, d)]
    width = 8 if config.model.dtype == "float64" else 4
    weights = sum(S * a * b for a, b in shapes) * width
    moments = 2 * weights + len(shapes) * S * width if config.train.optimizer in ("adam", "adamw") else 0
    tensors = 1 + len(shapes) * (4 if moments else 1)
    meta = 400  # stage, the stream's cover (lines, bytes, sha256), the table parts
    return safetensors_bytes(weights + moments + S, tensors, meta)


def disk_budget(config: Config) -> DiskBudget:
    """The run folder of ``config`` by part (see the module docstring)."""
    V, _, _, d = sizes(config)
    from .compare import variant_config

    S, tc = config.n_seeds, config.train
    total = tc.steps_stage1 + tc.steps_stage2
    plain, suite, logged = logged_lines(config)
    variants: list[str] = list(config.compare) or [""]
    budget = DiskBudget()
    stream = values = 0
    n_suite = suite if isinstance(suite, int) else len(suite)
    for variant in variants:
        for names, steps in ((LOGGED_METRICS, plain), (LOGGED_METRICS + SUITE_METRICS, suite)):
            stream += (stream_bytes(names, S, steps, variant) if isinstance(steps, list)
                       else stream_bytes_upto(names, S, steps, total, variant))
        values += S * (len(LOGGED_METRICS) * logged + len(SUITE_METRICS) * n_suite)
    budget.add_metrics(stream, values, PARQUET_BYTES_PER_VALUE)
    every = tc.checkpoint_every
    saved = (total // every if every > 0 else 0) + (0 if every > 0 and total % every == 0 else 1)
    configs = [variant_config(config, v) for v in config.compare] or [config]
    budget.add_checkpoints(saved * len(variants) if total > 0 else 0, max(checkpoint_bytes(c, V, d, S) for c in configs))
    if not config.compare:
        rows = suite_rows(config, V)
        budget.add("tables", PARQUET_BASE_BYTES + rows * (GEN_PARQUET_BYTES_PER_ROW + GEN_CSV_BYTES_PER_ROW))
        budget.transient = max(budget.transient, PARQUET_BASE_BYTES + rows * GEN_PARQUET_BYTES_PER_ROW)
    budget.add("summary.json", SUMMARY_BYTES + SUMMARY_BYTES_PER_VARIANT * (len(variants) - 1)
               + SUMMARY_BYTES_PER_SEED * S * len(variants))
    for figure in FIGURES.values():
        budget.add("figures", figure.bytes(S, points=logged))
    return budget
