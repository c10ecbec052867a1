"""Memory and disk estimate of an LM-lab run (what the runner refuses on).

Disk (:class:`~stagewise.runs.sizes.DiskBudget`, the peak of the run folder) follows the
training loop of :mod:`.train` from the data's size: the examples (and, for a tiny model
with ``compact_vocab``, the vocabulary rows V') are counted by reading and tokenizing the
data as the run will (:func:`data_stats`; ~ms for the tiny sets, cached), the weights are
tiny-gpt2's parameter count with V' rows or the files of a local model. Then

* the stream: a line per evaluation (epochs + 1, + ``eval_every`` ones) with the
  answer/sentence metrics (overall, + per task in a mixture), a line per logged step
  (``train.batch_loss``, ``lr``, + per task), the spectra lines (``spectra_every``);
* checkpoints (weights + AdamW's two moments + step counts + the RNG state, every
  ``checkpoint_every`` epochs before the last), snapshots (weights + ``vocab_ids``);
* a run that only evaluates saved models (``source.kind`` checkpoint or trajectory,
  :data:`PROBED`): one evaluation per saved model, no training lines, no snapshots, and
  resume checkpoints of one index each (a trajectory's; no weights);
* tables: ``predictions`` (answer framing: a row per example and evaluation, with the top-k
  ids and probabilities) or ``sentence_losses`` (lm framing), ``spectra`` (every singular
  value of every head at each epoch end); the table being rewritten is transient;
* the summary and the figures (:data:`FIGURES`).

Where the data cannot be read here (the lab's check then says why), the old upper bounds
hold: 60k examples (all of BLiMP) and GPT-2's full vocabulary.
"""

from __future__ import annotations

import json
from pathlib import Path

import math
from dataclasses import dataclass
from typing import Any

from ...lmkit.models import GPT2_VOCAB, PKG, is_tiny, package_folder
from ...report.sizes import FigureSize
from ...runs.sizes import PARQUET_BASE_BYTES, DiskBudget, safetensors_bytes, stream_bytes
from ..contract import Resources
from .config import QUESTION_TASKS, Config

BYTES_PER_PARAM_TRAIN = 4 * 4  # fp32 weights, gradients and AdamW's two moments
GGUF_EXPANSION = 8  # a 4-bit GGUF file de-quantized to float32 (32 / 4 bits)
MAX_EXAMPLES = 60_000  # upper bound on the examples when the data cannot be read here (all of BLiMP)
PREDICTION_ROW_BYTES = 34  # a predictions row in Parquet without its top-k lists, both rules' categories (measured ~23)
PREDICTION_BYTES_PER_TOP = 7  # each of the top_k (id, probability) pairs (measured ~6.5)
SENTENCE_ROW_BYTES = 24  # a sentence_losses row (measured ~16)
SPECTRA_ROW_BYTES = 14  # a spectra-table row: layer, head, proj, index, value, epoch, step (measured ~10)
SV_STATS = 4  # sv_max, sv_top_share, stable_rank, effective_rank per head and projection
PROJECTIONS = 5  # q, k, v, o, qk
RNG_STATE_BYTES = 5056  # torch's CPU generator state (uint8)
SUMMARY_BYTES = 3_600  # summary.json of a one-task run (measured 2.1 to 3.3 kB)
SUMMARY_BYTES_PER_TASK = 3_100  # each further task of a mixture (measured 3.0 kB in the answer framing)
FIGURES = {  # one panel per task where a figure has them; measured, rounded up
    "loss": FigureSize(png=58_000, pdf=17_000, curves=1.0),
    "categories": FigureSize(png=46_000, pdf=15_500, curves=5.0),  # three categories + the open rule's two
    "answer_rank": FigureSize(png=54_000, pdf=15_500, curves=3.0),
    "spectra": FigureSize(png=64_000, pdf=16_000, curves=5.0),
}
FIGURE_BYTES_PER_TASK = {"loss": 10_000, "categories": 40_000}  # PNG + PDF bytes of each further task's curves or panel
BASELINE_ROW_BYTES = 50  # a baseline_predictions row (measured ~44 on the smoke run)
SUMMARY_TYPE_BYTES = 16_000  # the type claims' details: both rules' counts, sensitivity, the prior, descriptions (measured ~14 kB)
SUMMARY_BYTES_PER_BASELINE_RECORD = 90  # one baseline's category counts at one record in summary.json
HELDOUT_SUMMARY_BYTES_PER_TASK = 5_000  # details.two_task per task: floors, majority, beat-the-prior records (measured ~4.5 kB)
HELDOUT_NAMES_PER_TASK = 12  # prior.*, eval.* and train.*_minus_* metrics per task and record (twotask.py)
ACTIVATION_FACTOR = 16  # bytes per (token x d_model x layer) of activations kept for backward
PROBED = ("checkpoint", "trajectory")
"""The source kinds whose run only evaluates saved models: no training lines, no weights in its
checkpoints, no snapshots (a trajectory's resume checkpoint holds the index of the last one done)."""
PROBE_CHECKPOINT_TENSOR_BYTES = 8  # a trajectory's resume checkpoint: the last evaluated checkpoint's index (int64)


def tiny_params(config: Config, vocab_rows: int = GPT2_VOCAB) -> tuple[int, int, int]:
    """(parameters, d_model, layers) of tiny-gpt2 with ``vocab_rows`` embedding rows (tied
    output; default GPT-2's full vocabulary, the upper bound)."""
    t = config.model.tiny
    per_block = 12 * t.n_embd ** 2 + 13 * t.n_embd
    return vocab_rows * t.n_embd + t.n_positions * t.n_embd + t.n_layer * per_block + 2 * t.n_embd, t.n_embd, t.n_layer


@dataclass(frozen=True)
class DataStats:
    """What the run's size follows from the data: examples per task and the model's rows."""

    examples: dict[str, int]
    vocab_rows: int | None  # V' of a compact vocabulary (tiny model), None: the model's own


def data_stats(config: Config) -> DataStats | None:
    """Examples per task (and V' for a tiny compact model), read and tokenized as the run
    will; None when the data cannot be read here (the lab's check reports it). Cached per
    task, data and model settings (a sweep estimates many points of one dataset)."""
    import os

    from .config import DATA_ENV

    key = config.model_dump_json(include={"task", "data", "model"}) + os.environ.get(DATA_ENV, "")
    if key not in _STATS:
        if len(_STATS) >= STATS_CACHE:
            _STATS.pop(next(iter(_STATS)))
        _STATS[key] = _read_stats(config)
    return _STATS[key]


_STATS: dict[str, DataStats | None] = {}
STATS_CACHE = 64  # data_stats results kept


def _read_stats(config: Config) -> DataStats | None:
    from .prepare import read_data, tokenize_data

    try:
        if not is_tiny(config.model):
            items = read_data(config)  # before dropping multi-token answers: an upper bound
            vocab = None
        else:
            from ...lmkit.models import load_tokenizer

            tok = load_tokenizer(config.model)
            data = tokenize_data(config, tok, quiet=True)
            items = data.items
            specials = {i for i in (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) if i is not None}
            vocab = len(set(data.used_ids().tolist()) | specials) if config.model.compact_vocab else None
    except Exception:  # unreadable data: the check says so in its own words
        return None
    counts: dict[str, int] = {}
    for item in items:
        counts[item.task] = counts.get(item.task, 0) + 1
    return DataStats(counts, vocab)


def _folder_bytes(config: Config) -> int | None:
    name = config.model.name
    try:
        folder = package_folder(name[len(PKG):]) if name.startswith(PKG) else Path(name)
    except Exception:
        return None
    if config.model.gguf_file is not None:
        f = Path(config.model.gguf_file)
        path = f if f.is_file() else folder / f
        return path.stat().st_size * GGUF_EXPANSION if path.is_file() else None
    if not folder.is_dir():
        return None
    return sum(p.stat().st_size for p in folder.glob("*.safetensors")) or None


def estimate(config: Config) -> Resources:
    """Training state (4 copies of the weights), activations of one batch; the run folder."""
    t = config.train
    stats = data_stats(config)
    if stats is None:  # hub data, or data this machine cannot read (the check says which): no bound worth refusing on
        return Resources(0, 0, "no estimate until the data is read (its size is known after loading)")
    weight_bytes: int | None
    if is_tiny(config.model):
        rows = stats.vocab_rows if stats is not None and stats.vocab_rows else GPT2_VOCAB
        params, d, layers = tiny_params(config, rows)
        weight_bytes = params * 4
        width = config.model.tiny.n_positions
    else:
        weight_bytes = _folder_bytes(config)
        if weight_bytes is None:
            return Resources(0, 0, f"no estimate for {config.model.name} (a hub model: its size is known after download)")
        d, layers, width = 1024, 24, 128
        cfg = Path(config.model.name) / "config.json"
        if cfg.is_file():
            raw = json.loads(cfg.read_text())
            d, layers = raw.get("hidden_size", raw.get("n_embd", d)), raw.get("num_hidden_layers", raw.get("n_layer", layers))
    memory = weight_bytes // 4 * BYTES_PER_PARAM_TRAIN + t.batch_size * width * d * layers * ACTIVATION_FACTOR
    disk = disk_budget(config, weight_bytes, stats)
    n = sum(stats.examples.values())
    evaluations = f"{_records(config)} saved models evaluated" if config.source.kind in PROBED else f"{t.epochs + 1} evaluations"
    return Resources(int(memory), disk.peak, f"weights {weight_bytes / 2**20:.1f} MiB; training state x4; {n} examples, "
                                             f"{evaluations}; disk: {disk.describe()}")


PROBE_PAIR_PARADIGMS = 70
"""Paradigms a pairs probe set without a list is counted with (BLiMP has 67; Zorro 23)."""
PROBE_GROUPS = 64
"""Groups a questions probe set is counted with (each its own accuracy record)."""


def probe_records(config: Config) -> tuple[int, str]:
    """(records per evaluation of the researcher's own probe sets, the longest such name), an
    upper bound: questions 5 + groups + categories; text 1 + buckets; pairs 1 + fields +
    paradigms."""
    count, longest = 0, ""
    for p in config.probes:
        if p.kind == "questions":
            count += 5 + PROBE_GROUPS + len(p.categories)
        elif p.kind == "text":
            count += 1 + p.buckets
        else:
            count += 1 + 2 * (len(p.paradigms) if p.paradigms else PROBE_PAIR_PARADIGMS)
        longest = max(longest, f"probe.{p.name}.paradigm.wh_vs_that_with_gap_long_distance.accuracy", key=len)
    return count, longest


def _records(config: Config) -> int:
    """The evaluations of a run that only evaluates saved models (:data:`PROBED`): one per model."""
    return len(config.source.checkpoints) if config.source.kind == "trajectory" else 1


def _heads(config: Config) -> tuple[int, int, int]:
    """(layers, heads, d_model) of the model, for the spectra records."""
    if is_tiny(config.model):
        tc = config.model.tiny
        return tc.n_layer, tc.n_head, tc.n_embd
    raw: dict[str, Any] = {}
    cfg = Path(config.model.name) / "config.json"
    if cfg.is_file():
        raw = json.loads(cfg.read_text())
    return (raw.get("num_hidden_layers", raw.get("n_layer", 24)), raw.get("num_attention_heads", raw.get("n_head", 16)),
            raw.get("hidden_size", raw.get("n_embd", 1024)))


def disk_budget(config: Config, weight_bytes: int | None = None, stats: DataStats | None = None) -> DiskBudget:
    """The run folder of ``config`` by part (see the module docstring)."""
    t, task = config.train, config.task
    if weight_bytes is None:
        stats = data_stats(config)
        rows = stats.vocab_rows if stats is not None and stats.vocab_rows else GPT2_VOCAB
        weight_bytes = tiny_params(config, rows)[0] * 4 if is_tiny(config.model) else (_folder_bytes(config) or 0)
    tasks = task.tasks()
    T = len(tasks)
    n = sum(stats.examples.values()) if stats is not None else MAX_EXAMPLES
    answer = task.framing != "lm"
    width = 2 if config.dtype == "bfloat16" else 4
    weight_bytes = weight_bytes // 4 * width
    n_batches = max(1, math.ceil(n / t.batch_size))
    probed = config.source.kind in PROBED  # saved models evaluated, nothing trained (module docstring)
    total = n_batches * t.epochs
    if probed:
        total = max([*config.source.steps, config.source.step, len(config.source.checkpoints), 1])  # the records' steps
    digits = len(str(total))
    budget = DiskBudget()

    # stream: evaluations, logged training steps, spectra
    mixture = T > 1
    kinds = list(config.baselines.kinds) if answer and not probed else []  # the baselines trained beside the model
    held = answer and (task.heldout is not None or bool(task.heldout_paradigms))
    share = task.heldout if task.heldout is not None else 0.25
    n_held = math.ceil(n * share / (1 - share)) if held else 0  # held-out examples beside the n trained ones
    if answer:
        eval_names = 8 * (1 + (T if mixture else 0)) + 1  # loss, three counts, accuracy, the open rule's three (+ per task), epoch
        eval_names += 7 * len(kinds)  # baseline.NAME.{loss, three counts, the open rule's three}
        eval_names += (HELDOUT_NAMES_PER_TASK * T + 2) if held else 0  # the held-out evaluation (+ minimal pairs, epoch)
    else:
        eval_names = 1 + (T if mixture else 0) + 1  # loss (+ per task), epoch
    inside = (total // t.eval_every - t.epochs if t.eval_every and t.eval_every <= n_batches else 0)  # evaluations inside epochs
    evaluations = _records(config) if probed else t.epochs + 1 + max(0, inside)
    ends = sum(1 for e in range(1, t.epochs + 1) if (e * n_batches) % t.log_every)
    logged = 0 if probed else total // t.log_every + ends
    train_names = 2 + (T if mixture else 0)
    layers, heads, d_model = _heads(config)
    spectra_lines = (total // t.spectra_every + 1) if t.spectra_every else 0
    if probed:
        spectra_lines = evaluations if config.source.spectra else 0
    spectra_names = PROJECTIONS * layers * heads * SV_STATS
    name = "blocks.00.attn.head.00.qk.effective_rank"  # the longest form of a spectra metric name
    longest = max(tasks, key=len, default="")
    probe_names, probe_name = probe_records(config)
    stream = (evaluations * _line(["train.type_correct_open." + longest] * eval_names, digits)
              + evaluations * _line([probe_name] * probe_names, digits)
              + logged * _line(["train.batch_loss." + longest] * train_names, digits)
              + spectra_lines * _line([name] * spectra_names, digits))
    budget.add_metrics(stream, evaluations * (eval_names + probe_names) + logged * train_names
                       + spectra_lines * spectra_names)

    # checkpoints and snapshots
    tensors = 2 + 12 * layers + 2 if is_tiny(config.model) else 4 + 12 * layers
    saved = max(0, (t.epochs - 1) // t.checkpoint_every)
    states = 2 if t.optimizer in ("adam", "adamw") else 0
    meta = 400 + 8 * evaluations * 3  # epoch, batch, step, the stream's cover, the table parts
    recorder = n * (16 * t.top_k + 17) if answer and t.record == "train-before-step" else 0  # its (N, k) x 2 + 3 (N,) buffers
    b_rows = stats.vocab_rows if stats is not None and stats.vocab_rows else GPT2_VOCAB
    b_params = sum((b_rows + 1) * config.baselines.d + b_rows * ((0 if k == "bow" else config.baselines.last_k) + 1)
                   * config.baselines.d + b_rows for k in kinds)  # embed (V'+1, d), out (V', (k+1) d), bias (V',)
    b_state = (1 + states) * 4 * b_params + len(kinds) * recorder
    checkpoint = safetensors_bytes((1 + states) * weight_bytes + tensors * 4 + RNG_STATE_BYTES + 16 * T + recorder + b_state,
                                   (1 + states + 1) * tensors + 2 + (5 if recorder else 0)
                                   + len(kinds) * (3 * (1 + states) + 1 + (5 if recorder else 0)), meta)
    rows = stats.vocab_rows if stats is not None and stats.vocab_rows else 0
    if probed:  # a resume checkpoint after each saved model of a trajectory: its index, no weights
        budget.add_checkpoints(evaluations if config.source.kind == "trajectory" else 0,
                               safetensors_bytes(PROBE_CHECKPOINT_TENSOR_BYTES, 1, meta))
    else:
        budget.add_checkpoints(saved, checkpoint)
        snapshots = len(set(t.snapshot_epochs) | ({t.epochs} if t.epochs > 0 else {0}))
        budget.add("snapshots", snapshots * safetensors_bytes(weight_bytes + 8 * rows, tensors + 1, 60))

    # tables: one part per evaluation, rewritten whole at each (the old copy is transient)
    if answer:
        table = PARQUET_BASE_BYTES + n * evaluations * (PREDICTION_ROW_BYTES + PREDICTION_BYTES_PER_TOP * t.top_k)
    else:
        table = PARQUET_BASE_BYTES + n * evaluations * SENTENCE_ROW_BYTES
    budget.add("tables", table)
    prediction = PREDICTION_ROW_BYTES + PREDICTION_BYTES_PER_TOP * t.top_k  # one predictions-like row
    if held:  # heldout_predictions: every held-out example at every record
        budget.add("tables", PARQUET_BASE_BYTES + n_held * evaluations * prediction)
    if kinds:  # baseline_predictions: a row per baseline, example and record
        budget.add("tables", PARQUET_BASE_BYTES + len(kinds) * n * evaluations * BASELINE_ROW_BYTES)
    if answer and t.eval_epochs and not probed:  # eval_predictions beside the authors' recording
        budget.add("tables", PARQUET_BASE_BYTES + n * len(t.eval_epochs) * prediction)
    if spectra_lines:
        spectra = PARQUET_BASE_BYTES + (evaluations if probed else t.epochs + 1) * PROJECTIONS * layers * d_model * SPECTRA_ROW_BYTES
        budget.add("tables", spectra)
        table = max(table, spectra)
    budget.transient = max(budget.transient, table)

    typed = answer and any(task in QUESTION_TASKS for task in tasks)
    budget.add("summary.json", SUMMARY_BYTES + SUMMARY_BYTES_PER_TASK * (T - 1) + (SUMMARY_TYPE_BYTES if typed else 0)
               + len(kinds) * evaluations * SUMMARY_BYTES_PER_BASELINE_RECORD + (HELDOUT_SUMMARY_BYTES_PER_TASK * T if held else 0))
    figures = ["loss"] + (["categories", "answer_rank"] if answer else []) + (["spectra"] if spectra_lines else [])
    points = {"loss": logged + evaluations, "categories": evaluations, "answer_rank": evaluations,
              "spectra": spectra_lines}
    for fig in figures:
        budget.add("figures", FIGURES[fig].bytes(1, points[fig]) + FIGURE_BYTES_PER_TASK.get(fig, 0) * (T - 1))
    return budget


def _line(names: list[str], digits: int) -> int:
    """Bytes of one stream line of ``names`` (one seed) at a step of ``digits`` digits."""
    return stream_bytes(names, 1, [10 ** (digits - 1)])
