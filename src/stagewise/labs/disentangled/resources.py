"""Up-front size estimate of a disentangled run (memory and metric disk) from the config
alone, before any prompt is drawn.

Memory, group by group (:func:`~.experiments.groups`; groups run one after another, so the
peak is the largest group's), U datasets as :func:`.train.data_layout` stores them (a
dataset once for the K members that share it), S members, N train / T test prompts, L
tokens, C = L - 1, d the block dimension, w the run dtype's bytes:

- features: (U_train N + U_test T) L 2d w, the only (U, N, L, 2d)-sized arrays (the sampler
  writes straight into them);
- labels: S (N + T)(C + 1) w + S (N + T) 8, the per-member context labels, targets, kinds;
- the larger of the sampler's temporaries (SAMPLER_CHUNKS float64 chunks of
  :data:`.data.CHUNK_ELEMENTS` values and SAMPLER_ROWS (N, L) float64 draws) and a step's or
  an evaluation's arrays: STEP_ARRAYS arrays of (S, 2, max(N, T), C) w;
- weights and their updates: WEIGHT_COPIES arrays of (S, 2d, 2d) w;
- with ``experiment.floors``: the floors' solver on the group's unique problems, each once per
  start (:func:`.floor_limits.floors_bytes` of its largest batch), alive beside the training ensemble;
- PROCESS_BASE: the interpreter, torch, pandas and the run store.
The constants were measured (VmHWM of ``stagewise run``, benchmarks/bench_disentangled.py
section 4 and tests/labs/disentangled/test_gate_noise.py); :func:`memory_parts` gives the parts.

Disk (:class:`~stagewise.runs.sizes.DiskBudget`, the peak of the run folder), group by group
(:func:`~.experiments.groups`): a stream line per variant at every logged or spectrum step
(t % log_every, t % spectrum_every, 0, t1, the end), whose names are those the lab's metric
functions return for the group (:func:`line_names` calls them on one member with PROBE_PROMPTS
prompts and d <= PROBE_D: the names depend on the model and the data rule, on d only through
the spectra and truncation families, whose names follow their documented formats); the
kept checkpoints (weights, Adam moments, the members' two generator states, the stage rows
so far) and one more at the peak; the ``stages`` table (two rows per member); the summary
(per variant and member); the figures of the experiment kind (:data:`FIGURES`).
"""

from __future__ import annotations

import json
import math
from typing import Any

from ...report.sizes import FigureSize
from ...runs.sizes import DiskBudget, safetensors_bytes, stream_bytes, stream_bytes_upto
from ..contract import Resources
from .config import Config

PROCESS_BASE = 400 << 20  # measured: see the module docstring
STEP_ARRAYS = 10  # (S, 2, N, C) arrays alive at a step's or an evaluation's peak (measured)
SAMPLER_CHUNKS = 5  # float64 chunks alive while drawing (noise draw, its correction, centre, block, cast)
SAMPLER_ROWS = 8  # (N, L) float64-sized draws of one member (y, u, kind, side, flip, masks)
WEIGHT_COPIES = 8  # (S, 2d, 2d) arrays: weights, gradients, L2 term, noise draws, optimizer moments

EXACT_LINES = 200_000  # up to this many logged steps a group's stream is counted line by line
PROBE_PROMPTS = 8  # prompts of the one-member ensemble whose metric names are read off ...
PROBE_D = 6  # ... and its d and prompt length at most (only the spectra's and truncation's names follow d)
RNG_STATE_BYTES = 5056  # torch's CPU generator state; each member keeps two (noise, batch)
STAGE_ROW_BYTES = 700  # a stage row in a checkpoint's JSON metadata (31 numbers and names)
STAGES_BYTES = 20_000  # tables/stages.parquet: schema and column chunks of its 32 columns ...
STAGES_BYTES_PER_ROW = 220  # ... and each row (measured ~170)
FLOORS_BYTES = 22_500  # tables/floors.parquet (experiment.floors): schema and chunks of its 35 columns (measured 20.7 kB
FLOORS_BYTES_PER_ROW = 170  # at 4 rows, 22.0 kB at 12) and each member's row (measured ~62 at 288 rows with 28 columns)
FLOOR_STARTS_BYTES = 10_000  # tables/floor_starts.parquet: schema and chunks of its 15 columns (measured 9.7 kB at 16 rows,
FLOOR_STARTS_BYTES_PER_ROW = 60  # 11.3 kB at 48) and each member-and-start row (measured ~51)
SUMMARY_BYTES = 9_000  # summary.json: claims and details (measured 8.7 kB + 0.74 kB per member) ...
SUMMARY_BYTES_PER_MEMBER = 800  # ... each member's per-seed values ...
SUMMARY_BYTES_PER_VARIANT = 3_000  # ... and (but for two-stage, spectral) each variant's or cell's stage values and claims
FIGURES = {  # measured, rounded up; ablations/grid: per variant panel (+ the table row)
    "two_stage": FigureSize(png=145_000, png_seeds=66_000, pdf=25_000, curves=12.6),
    "spectra": FigureSize(png=118_000, png_seeds=30_000, pdf=20_000, curves=2.8),
    "variants": FigureSize(png=21_000, png_seeds=10_000, pdf=18_000, curves=3.0, fixed_png=30_000, pdf_per_panel=800),
    "phase_diagram": FigureSize(png=57_000, pdf=21_000),  # per row of the further grid axes
    "robustness": FigureSize(png=20_000, pdf=12_500),  # + ROBUSTNESS_BYTES_PER_CELL per (d, seed block)
    "d_scaling": FigureSize(png=70_000, pdf=18_500),
}
ROBUSTNESS_BYTES_PER_CELL = 2_500


def memory_parts(config: Config) -> dict[str, int]:
    """Bytes of the largest group's memory by part (module docstring), and ``total`` (with
    PROCESS_BASE): what :func:`estimate` reports."""
    from .data import CHUNK_ELEMENTS, prompt_chunks
    from .experiments import groups

    best: dict[str, int] = {}
    for group in groups(config):
        parts = _group_memory(group, CHUNK_ELEMENTS, prompt_chunks)
        if not best or sum(parts.values()) > sum(best.values()):
            best = parts
    return {**best, "process": PROCESS_BASE, "total": PROCESS_BASE + sum(best.values())}


def _group_memory(group, chunk_elements: int, prompt_chunks) -> dict[str, int]:
    from dataclasses import replace

    from .train import data_layout

    cfg = group.config
    dc = cfg.data
    S, L, d, N, T = len(group.members), dc.prompt_len, dc.d, dc.n_train, dc.n_test
    width = 8 if cfg.model.dtype == "float64" else 4
    test_members = [replace(m, p0=dc.p0, q0=dc.q0, control=False) for m in group.members]
    u_train, u_test = len(data_layout(group.members)[0]), len(data_layout(test_members)[0])
    chunk = max(b - a for a, b in prompt_chunks(max(N, T), L, d, chunk_elements)) * L * d
    parts = {
        "features": (u_train * N + u_test * T) * L * 2 * d * width,
        "labels": S * (N + T) * (L * width + 8),
        "work": max(SAMPLER_CHUNKS * chunk * 8 + SAMPLER_ROWS * max(N, T) * L * 8, STEP_ARRAYS * S * 2 * max(N, T) * (L - 1) * width),
        "weights": WEIGHT_COPIES * S * (2 * d) ** 2 * width,
    }
    if cfg.experiment.floors:
        parts["floors"] = _floors_memory(group)
    return parts


def _floors_memory(group) -> int:
    """The floors' solver: :func:`.floor_limits.floors_bytes` of its largest batch (:func:`.floor_limits.batches`)
    of the group's unique problems with lambda > 0, each once per start (``experiment.floor_starts``)."""
    from .floor_limits import batches, floors_bytes, problem_key

    starts = len(group.config.experiment.floor_starts)
    problems = [m for m in {problem_key(m): m for m in group.members if m.l2 > 0}.values() for _ in range(starts)]
    return max((floors_bytes(group.config, b) for b in batches(group.config, problems, starts)), default=0)


def estimate(config: Config) -> Resources:
    parts = memory_parts(config)
    dc, ex = config.data, config.experiment
    dims = ex.dims if ex.kind in ("d-scaling", "robustness") else [dc.d]
    disk = disk_budget(config)
    size = ", ".join(f"{k} {v / 2**20:.0f} MiB" for k, v in parts.items() if k != "total")
    return Resources(int(parts["total"]), disk.peak, f"d={max(dims)}, L={dc.prompt_len}, N={dc.n_train}, test {dc.n_test}, "
                                                     f"{config.n_seeds} seeds; memory: {size}; disk: {disk.describe()}")


def line_names(group) -> dict[str, list[str]]:
    """The metric names of a group's stream lines: ``weights`` (norms), ``spectra`` (norms
    and spectra), ``evaluation`` (both splits), ``final`` (truncation and review, at the
    last step). The cheap families come from the lab's metric functions on one member and
    PROBE_PROMPTS prompts; the spectra and truncation names (an SVD per matrix and k) follow
    their documented formats (:func:`stagewise.measure.spectrum_metrics`,
    :func:`.experiments.truncation_metrics`)."""
    from ...config import deep_merge, validate
    from ...engine import resolve_dtype
    from .metrics import evaluate, review_metrics, weight_metrics
    from .train import build_ensemble, init_weights

    member = max(group.members, key=lambda m: m.p_flip)  # composite labels add names when some member flips
    shape = group.config.model_dump(mode="json", exclude={"seed", "n_seeds"})
    key = json.dumps([shape, member.p_flip], sort_keys=True)
    if key in _NAMES:
        return _NAMES[key]
    d = group.config.data.d
    small = {"n_train": PROBE_PROMPTS, "n_test": PROBE_PROMPTS, "d": min(d, PROBE_D),
             "prompt_len": min(group.config.data.prompt_len, PROBE_D), "q_noise_radius": None}  # names do not depend on it
    cfg = validate(Config, deep_merge(group.config.model_dump(mode="json"), {"data": small}))
    ens = build_ensemble(cfg, [member])
    weights = init_weights(cfg, [member], resolve_dtype(cfg.model.dtype))
    model = cfg.model
    evaluation: dict[str, Any] = {}  # only the names are kept
    for split, batch in (("train", ens.train), ("test", ens.test)):
        evaluation.update(evaluate(weights, batch, ens.hyper["l2"], model.output, model.normalizer, cfg.data.d, split))
    if cfg.data.label_rule == "composite" and member.p_flip > 0:  # on N prompts some flip, on the probe's maybe none
        evaluation.update({f"{split}.{m}.p_flipped": None for split in ("train", "test") for m in ("acc", "loss")})
    plain = list(weight_metrics(weights, cfg.data.d, False, ens.w_star, ens.zeta_basis))
    signal = [n for n in plain if not n.endswith((".fro", ".spectral"))]
    spectra = signal + [n for name, size in (("W", d), ("V", d), ("WV", 2 * d)) for n in _spectrum_names(name, size)]
    ks = cfg.experiment.truncation_ks or sorted({round(2 * d * i / 8) for i in range(9)})  # as truncation_metrics
    final = [f"truncate.{keep}.{k}.acc.{kind}" for keep in ("top", "bottom") for k in ks for kind in ("p_only", "q_only", "both")]
    if ens.w_star is None:  # build_ensemble sets every member's P direction
        raise RuntimeError("disentangled probe: the ensemble has no w_star")
    final += list(review_metrics(weights, ens.w_star, ens.test, model.normalizer, cfg.data.d))
    if len(_NAMES) >= NAMES_CACHE:
        _NAMES.pop(next(iter(_NAMES)))
    _NAMES[key] = {"weights": plain, "spectra": spectra, "evaluation": list(evaluation), "final": list(dict.fromkeys(final))}
    return _NAMES[key]


def _spectrum_names(name: str, n: int) -> list[str]:
    """spectrum_metrics' names for an (n, n) matrix with k = max(1, n // 4) (weight_metrics' k)."""
    fields = ("sv", "eig_abs", "eig_real", "eig_imag", "sym_eig")
    return ([f"{name}.fro", f"{name}.spectral", f"{name}.stable_rank", f"{name}.top{max(1, n // 4)}_share"]
            + [f"{name}.{field}.{i}" for field in fields for i in range(n)])


_NAMES: dict[str, dict[str, list[str]]] = {}  # line_names per group shape (seeds do not change the names)
NAMES_CACHE = 64


def _step_kinds(tc) -> dict[str, list[int] | int]:
    """Steps of each line kind of a group (``log``: evaluation and norms, ``spectra``,
    ``both``, ``final``): lists up to EXACT_LINES logged steps, else their counts."""
    total, marks = tc.steps, {0, tc.t1, tc.steps}
    le, se = tc.log_every, tc.spectrum_every
    both_every = math.lcm(le, se)

    def count(every: int) -> int:  # multiples of ``every`` in [0, total] and the marks
        return total // every + 1 + sum(1 for m in marks if m % every)

    n_log, n_spectra, n_both = count(le), count(se), count(both_every)
    if n_log + n_spectra - n_both > EXACT_LINES:
        return {"log": n_log - n_both, "spectra": n_spectra - n_both, "both": n_both - 1, "final": 1}
    logged = set(range(0, total + 1, le)) | marks
    spectral = set(range(0, total + 1, se)) | marks
    return {"log": sorted((logged - spectral) - {total}), "spectra": sorted((spectral - logged) - {total}),
            "both": sorted((logged & spectral) - {total}), "final": [total]}


def _group_stream(group, names: dict[str, list[str]]) -> tuple[int, int, int]:
    """(stream bytes, metric values, logged steps) of one group."""
    tc = group.config.train
    kinds = _step_kinds(tc)
    lines = {"log": ["stage", *names["weights"], *names["evaluation"]], "spectra": ["stage", *names["spectra"]],
             "both": ["stage", *names["spectra"], *names["evaluation"]],
             "final": ["stage", *names["spectra"], *names["evaluation"], *names["final"]]}
    per_variant: dict[str, int] = {}
    for m in group.members:
        variant = group.variant_of(m)
        per_variant[variant] = per_variant.get(variant, 0) + 1
    stream = values = 0
    for variant, size in per_variant.items():
        for kind, steps in kinds.items():
            n = steps if isinstance(steps, int) else len(steps)
            stream += (stream_bytes(lines[kind], size, steps, variant) if isinstance(steps, list)
                       else stream_bytes_upto(lines[kind], size, steps, tc.steps, variant))
            values += size * len(lines[kind]) * n
    logged = sum(steps if isinstance(steps, int) else len(steps) for steps in kinds.values())
    return stream, values, logged


def _checkpoint_bytes(group, rows: int) -> int:
    """One checkpoint of ``group``: weights, optimizer moments, generator states, ``rows`` stage rows."""
    cfg = group.config
    S, d = len(group.members), cfg.data.d
    width = 8 if cfg.model.dtype == "float64" else 4
    n_weights = 1 if cfg.model.weights == "full" else 2
    weights = S * (2 * d) ** 2 * width if n_weights == 1 else 2 * S * d * d * width
    adam = cfg.train.optimizer in ("adam", "adamw")
    moments = 2 * weights + n_weights * S * width if adam else 0
    tensors = n_weights * (4 if adam else 1) + 2
    return safetensors_bytes(weights + moments + 2 * S * RNG_STATE_BYTES, tensors, 400 + rows * STAGE_ROW_BYTES)


def disk_budget(config: Config) -> DiskBudget:
    """The run folder of ``config`` by part (see the module docstring)."""
    from .experiments import grid_variants, groups

    budget = DiskBudget()
    stream = values = members = 0
    variants: set[str] = set()
    checkpoints: list[tuple[int, int]] = []  # (count, bytes each) in the order they are saved
    logged = 0
    for group in groups(config):
        names = line_names(group)
        g_stream, g_values, g_logged = _group_stream(group, names)
        stream, values, logged = stream + g_stream, values + g_values, max(logged, g_logged)
        S, tc = len(group.members), group.config.train
        members += S
        variants |= {group.variant_of(m) for m in group.members}
        every = tc.checkpoint_every
        saved = (tc.steps // every if every > 0 else 0) + (0 if every > 0 and tc.steps % every == 0 else 1)
        checkpoints.append((saved, _checkpoint_bytes(group, 2 * S)))
    budget.add_metrics(stream, values)
    budget.add_checkpoint_runs(checkpoints)
    stages = STAGES_BYTES + 2 * members * STAGES_BYTES_PER_ROW
    starts = len(config.experiment.floor_starts)
    floors = (FLOORS_BYTES + members * FLOORS_BYTES_PER_ROW + FLOOR_STARTS_BYTES + members * starts * FLOOR_STARTS_BYTES_PER_ROW
              if config.experiment.floors else 0)
    budget.add("tables", stages + floors)
    budget.transient = max(budget.transient, stages)
    per_variant = SUMMARY_BYTES_PER_VARIANT * len(variants) if config.experiment.kind not in ("two-stage", "spectral") else 0
    budget.add("summary.json", SUMMARY_BYTES + per_variant + SUMMARY_BYTES_PER_MEMBER * members)
    budget.add("figures", figure_bytes(config, logged, grid_variants))
    return budget


def figure_bytes(config: Config, logged: int, grid_variants: Any) -> int:
    """PNG + PDF bytes of the experiment's figures (figures.make_figures)."""
    ex, S = config.experiment, config.n_seeds
    if ex.kind in ("grid", "ablations"):
        shown = len(grid_variants(config)) if ex.kind == "grid" else 1 + len(ex.ablations)
        out = FIGURES["variants"].bytes(S, logged, panels=shown)
        if ex.kind == "grid":
            rest = list(ex.grid.values())[2:]
            out += FIGURES["phase_diagram"].bytes(1) * max(1, math.prod(len(v) for v in rest))
        return out
    if ex.kind == "robustness":
        cells = len(ex.dims) * len(ex.seed_blocks)
        return FIGURES["robustness"].bytes(1) + ROBUSTNESS_BYTES_PER_CELL * cells
    if ex.kind == "d-scaling":
        return FIGURES["d_scaling"].bytes(1)
    return FIGURES["two_stage"].bytes(S, logged) + FIGURES["spectra"].bytes(S, logged)
