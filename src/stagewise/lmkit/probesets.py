"""A researcher's own probe sets, measured on any Hugging Face causal LM (issue 39): plain
functions of (model, tokenizer, probe set) -> records, usable in a notebook with no run
folder; the lm lab's probe (``probes:`` in its config) logs them at every record.

Four kinds:

* **questions**: a JSON-lines file of ``{"prompt", "answer", "group"?, "kind"?}``. With the
  prompt's tokens ``p`` and the answer's ``a_1..a_m`` (the answer after the prompt, as the
  tokenizer splits ``prompt + answer``)::

      loss      = mean_n  -1/m_n sum_j log P(a_j | p, a_<j)          (nats per answer token)
      accuracy  = mean_n  [argmax P(. | p) == a_1]                    (top-1 is the answer's first token)

  and the shares of three categories of the top-1 token ``t``: ``semantic_correct``
  (``t == a_1``), ``type_correct`` (``t`` is the first token of another answer of the same
  group, ``kind`` standing for the group where given, or a word of ``kind_words[kind]``),
  ``type_wrong`` (neither); per group ``group.G.accuracy``; and with a categorize function
  ``categorize(questions, predictions) -> names`` the share of each declared name.
* **text**: plain text held out from training. Its tokens are cut into windows of ``window``
  tokens (each after the prefix token, BOS else EOS), and::

      loss            = mean over the text's tokens of -log P(t_i | window so far)
      loss.bucket_b   = the same mean over the tokens of frequency bucket b (1: the most frequent)

  Buckets split the token types ranked by their count in ``frequency`` (a reference text: the
  training corpus; default the probe text itself) so that each holds about 1/B of its
  occurrences; a token never seen there is in the last bucket.
* **pairs**: minimal pairs in the language-modelling framing (BLiMP's ``<paradigm>.jsonl`` or
  Zorro's ``<paradigm>.txt``, odd lines bad, even lines good, or one JSON-lines file of
  ``{"good", "bad", "group", "field"?}``, :func:`~stagewise.lmkit.corpora.read_neutral_pairs`):
  a pair is right when the good sentence's total log-probability is at least the bad one's
  (lm-eval's rule, :mod:`stagewise.lmkit.blimp`); ``accuracy``, ``field.F.accuracy``,
  ``paradigm.P.accuracy``.
* **words**: held-out text windowed as for ``text``, with a word-class lexicon (``classes``):
  at each position whose gold token is a whole word, the top-1 is the word (``exact``), another
  word of its class (``same_class``) or neither (``other``); :mod:`stagewise.lmkit.wordclasses`.

Every reader checks its file up front (one UserError line naming file, line and key). Every
forward pass is batched (length-sorted for pairs; equal windows for text); no Python loop runs
over tokens.

Example::

    sets = [read_probe_set("facts", "questions", Path("facts.jsonl"), tok),
            read_probe_set("heldout", "text", Path("heldout.txt"), tok),
            read_probe_set("blimp", "pairs", Path("blimp"), tok, limit=50),
            read_probe_set("words", "words", Path("heldout.txt"), tok, classes=Path("classes.json"))]
    records = measure(model, sets)    # {"facts.accuracy": 0.31, "heldout.loss.bucket_1": 2.9, "blimp.field.syntax.accuracy": ...}
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from stagewise.errors import UserError, short_repr
from stagewise.lmkit.blimp import FIELD_ALIASES, read_blimp_pairs, score_blimp
from stagewise.lmkit.corpora import read_neutral_pairs
from stagewise.lmkit.readers import check_folder, get_key, read_jsonl, read_text
from stagewise.lmkit.scoring import MIN_SOFTMAX_DTYPE, prefix_token_id
from stagewise.lmkit.wordclasses import WordPositions, read_lexicon, word_positions, word_records

KINDS = ("questions", "text", "pairs", "words")
NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""A probe set's, group's or category's name in a metric: letters, digits, '_' and '-'."""
CATEGORIES = ("semantic_correct", "type_correct", "type_wrong")
BATCH_TOKENS = 4096
"""Padded tokens per forward pass of questions and text windows (rows x longest row)."""
DEFAULT_WINDOW = 128
DEFAULT_BUCKETS = 4
DEFAULT_TEXT_TOKENS = 16384
"""A text set's tokens when no limit is given (the first ones of the file)."""


def _metric_name(value: str) -> str:
    """``value`` made a metric-name part: runs of other characters become '_' (``a b/c`` -> ``a_b_c``)."""
    return re.sub(r"[^A-Za-z0-9_-]+", "_", value).strip("_") or "_"


@dataclass(frozen=True)
class Question:
    """One row of a questions file."""

    prompt: str
    answer: str
    group: str | None = None
    kind: str | None = None
    where: str = ""


@dataclass(frozen=True, eq=False)
class ProbeSet:
    """One probe set, read and tokenized (:func:`read_probe_set`).

    Attributes:
        name: its name in the records (``{name}.accuracy``, ...).
        kind: questions, text, pairs or words.
        ids: (N, L) int64 token ids, right-padded with 0: questions ``[prefix, prompt, answer]``;
            text and words windows ``[prefix, window]``; unused for pairs.
        lengths: (N,) real tokens per row.
        answer_start: (N,) questions: the position of the answer's first token.
        frequency_bucket: text: (N, L) bucket index (0-based) of each token, -1 at the prefix and padding.
        questions: the question rows; ``pairs``: the minimal pairs (a frame of :mod:`.blimp`'s columns).
        type_keys: questions: (K,) sorted ``i * V' + r`` for every row r that is type-correct for question i.
        categorize: questions: ``(questions, predictions) -> names`` and its declared names.
        words: words: the scored positions and the rows' word classes.
    """

    name: str
    kind: str
    ids: torch.Tensor
    lengths: torch.Tensor
    answer_start: torch.Tensor | None = None
    frequency_bucket: torch.Tensor | None = None
    buckets: int = 0
    questions: list[Question] = field(default_factory=list)
    type_keys: torch.Tensor | None = None
    pairs: pd.DataFrame | None = None
    tokenizer: Any = None
    row_strings: list[str] = field(default_factory=list)
    categorize: Callable[[Sequence[Question], Sequence[str]], Sequence[str]] | None = None
    categories: tuple[str, ...] = ()
    words: WordPositions | None = None


# ------------------------------------------------------------------ readers
def read_questions(path: Path, limit: int | None = None) -> list[Question]:
    """The rows of a questions file (JSON lines of ``{"prompt", "answer", "group"?, "kind"?}``),
    the first ``limit``; one UserError line naming the file, line and key of the first bad row.

    Example::

        rows = read_questions(Path("facts.jsonl"), limit=100)   # [Question(prompt=..., answer=..., group=..., kind=...), ...]
    """
    rows = []
    for where, record in read_jsonl(Path(path), limit):
        prompt = get_key(record, "prompt", str, path, where)
        answer = get_key(record, "answer", str, path, where)
        if not answer.strip():
            raise UserError(f"{path}: {where}: key 'answer' is empty")
        optional = {}
        for key in ("group", "kind"):
            if isinstance(record, dict) and record.get(key) is not None:
                optional[key] = get_key(record, key, str, path, where)
        rows.append(Question(prompt, answer, optional.get("group"), optional.get("kind"), where))
    if not rows:
        raise UserError(f"{path}: no questions (JSON lines of {{\"prompt\": ..., \"answer\": ...}})")
    return rows


def read_zorro_pairs(folder: Path, paradigms: Sequence[str] | None = None, limit: int | None = None) -> pd.DataFrame:
    """Zorro's minimal pairs (``<paradigm>.txt``: odd lines ungrammatical, even lines grammatical)
    in :func:`~stagewise.lmkit.blimp.read_blimp_pairs`'s columns; the field is the paradigm's
    phenomenon (its name before the first '-').

    Example::

        pairs = read_zorro_pairs(Path("../shared/data/zorro"), limit=50)   # paradigm, pair_id, field, ..., sentence_bad
    """
    folder = Path(folder)
    check_folder(folder)
    available = sorted(p.stem for p in folder.glob("*.txt") if p.stem != "LICENSE")
    names = available if paradigms is None else list(dict.fromkeys(paradigms))
    unknown = [n for n in names if n not in available]
    if unknown:
        raise UserError(f"{folder}: no Zorro paradigm {unknown[0]!r} (available: {', '.join(available[:5])}, ...)")
    frames = []
    for name in names:
        lines = [line.strip() for line in read_text(folder / f"{name}.txt").split("\n") if line.strip()]
        if len(lines) % 2:
            raise UserError(f"{folder / (name + '.txt')}: {len(lines)} lines; Zorro's files pair an odd (bad) and an even "
                            "(good) line")
        n = len(lines) // 2 if limit is None else min(limit, len(lines) // 2)
        frames.append(pd.DataFrame({"paradigm": name, "pair_id": np.arange(n, dtype=np.int64),
                                    "field": name.split("-", 1)[0], "linguistics_term": name,
                                    "sentence_good": lines[1:2 * n:2], "sentence_bad": lines[0:2 * n:2]}))
    if not frames:
        raise UserError(f"{folder}: no Zorro paradigm files (<paradigm>.txt)")
    return pd.concat(frames, ignore_index=True)


def read_pairs(path: Path, paradigms: Sequence[str] | None = None, limit: int | None = None) -> pd.DataFrame:
    """Minimal pairs from a BLiMP folder (``*.jsonl``), a Zorro folder (``*.txt``) or one
    JSON-lines file of ``{"good", "bad", "group", "field"?}`` (:func:`read_neutral_pairs`).

    Example::

        pairs = read_pairs(Path("../shared/data/blimp"), ["anaphor_gender_agreement"], limit=20)
    """
    folder = Path(path)
    if folder.is_file():
        if folder.suffix != ".jsonl":
            raise UserError(f"{folder}: minimal pairs are a BLiMP or Zorro folder, or a .jsonl file of "
                            '{"good", "bad", "group", "field"?}')
        return read_neutral_pairs(folder, paradigms, limit)
    check_folder(folder)
    if any(folder.glob("*.jsonl")):
        return read_blimp_pairs(folder, paradigms, limit)
    return read_zorro_pairs(folder, paradigms, limit)


# ------------------------------------------------------------------ encoding
def _table(tokenizer: Any, vocab_ids: torch.Tensor | None) -> torch.Tensor | None:
    """(len(tokenizer),) the model row of each tokenizer id (-1: none), for a compact vocabulary."""
    if vocab_ids is None:
        return None
    table = torch.full((len(tokenizer),), -1, dtype=torch.long)
    table[vocab_ids] = torch.arange(len(vocab_ids))
    return table


def _rows(ids: torch.Tensor, table: torch.Tensor | None, what: str) -> torch.Tensor:
    """Tokenizer ids as model rows (unchanged without a compact vocabulary); one line when a
    token has no row."""
    if table is None:
        return ids
    rows = table[ids]
    if bool((rows < 0).any()):
        raise UserError(f"probe set {what}: uses tokens outside the model's compact vocabulary (give a model with the "
                        "tokenizer's full vocabulary)")
    return rows


def _padded(seqs: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, L) right-padded with 0 and (N,) lengths of token sequences."""
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
    ids = torch.zeros((len(seqs), int(lengths.max()) if len(seqs) else 0), dtype=torch.long)
    flat = torch.tensor([t for s in seqs for t in s], dtype=torch.long)
    rows = torch.repeat_interleave(torch.arange(len(seqs)), lengths)  # (sum L,)
    cols = torch.arange(len(flat)) - torch.repeat_interleave(torch.cumsum(lengths, 0) - lengths, lengths)  # (sum L,)
    ids[rows, cols] = flat
    return ids, lengths


def _encode(tokenizer: Any, texts: Sequence[str]) -> list[list[int]]:
    return [list(x) for x in tokenizer(list(texts), add_special_tokens=False)["input_ids"]]


def _encode_questions(name: str, questions: Sequence[Question], tokenizer: Any, vocab_ids: torch.Tensor | None = None,
                     kind_words: Mapping[str, frozenset[str]] | None = None, context: int | None = None) -> ProbeSet:
    """A questions set tokenized as ``[prefix, prompt, answer]`` rows, with the rows of the
    tokens that count as type-correct for each question (module docstring)."""
    prefix = prefix_token_id(tokenizer)
    prompts = _encode(tokenizer, [q.prompt for q in questions])
    wholes = _encode(tokenizer, [q.prompt + q.answer for q in questions])
    starts = []
    for q, p, w in zip(questions, prompts, wholes):
        start = len(p) if w[:len(p)] == p else next(i for i, (a, b) in enumerate(zip(p + [-1], w)) if a != b)
        if start >= len(w):
            raise UserError(f"probe set {name}: {q.where}: the answer {q.answer!r} adds no token after the prompt")
        starts.append(start + 1)  # after the prefix token
    seqs = [[prefix, *w] for w in wholes]
    longest = max(len(s) for s in seqs)
    if context is not None and longest > context:
        raise UserError(f"probe set {name}: a question of {longest} tokens; the model's context is {context}")
    ids, lengths = _padded(seqs)
    table = _table(tokenizer, vocab_ids)
    ids = torch.where(torch.arange(ids.shape[1])[None, :] < lengths[:, None], _rows(ids, table, name), 0)
    first = ids[torch.arange(len(seqs)), torch.tensor(starts)]  # (N,) the answer's first token row
    n_rows = len(vocab_ids) if vocab_ids is not None else len(tokenizer)
    strings = _row_strings(tokenizer, vocab_ids, n_rows)
    by_group: dict[str, set[int]] = {}
    for q, row in zip(questions, first.tolist()):
        by_group.setdefault(q.kind or q.group or "", set()).add(row)
    words = kind_words or {}
    normalized = [s.strip().lower() for s in strings]  # (V',) once per set
    lexicon_rows = {k: {i for i, s in enumerate(normalized) if s in words[k]}  # one pass over the rows per kind
                    for k in dict.fromkeys(q.kind for q in questions if q.kind) if k in words}
    keys: list[int] = []  # question i's type-correct rows r as i * V' + r: membership is one isin per record
    for i, (q, row) in enumerate(zip(questions, first.tolist())):
        rows = set(by_group[q.kind or q.group or ""]) if (q.kind or q.group) else set()
        rows |= lexicon_rows.get(q.kind or "", set())
        rows.discard(row)
        keys.extend(i * n_rows + r for r in rows)
    return ProbeSet(name, "questions", ids, lengths, answer_start=torch.tensor(starts), questions=list(questions),
                    type_keys=torch.tensor(sorted(keys), dtype=torch.long), tokenizer=tokenizer, row_strings=strings)


def _row_strings(tokenizer: Any, vocab_ids: torch.Tensor | None, n_rows: int) -> list[str]:
    ids = vocab_ids.tolist() if vocab_ids is not None else list(range(n_rows))
    return list(tokenizer.convert_tokens_to_string([t]) if t is not None else "" for t in tokenizer.convert_ids_to_tokens(ids))


def _encode_text(name: str, text: str, tokenizer: Any, *, window: int = DEFAULT_WINDOW, limit: int | None = None,
                frequency: str | None = None, buckets: int = DEFAULT_BUCKETS,
                vocab_ids: torch.Tensor | None = None) -> ProbeSet:
    """A text set: its first ``limit`` tokens cut into windows of ``window`` tokens after the
    prefix token, each token's frequency bucket counted in ``frequency`` (module docstring)."""
    tokens = torch.tensor(_encode(tokenizer, [text])[0], dtype=torch.long)
    tokens = tokens[: limit or DEFAULT_TEXT_TOKENS]
    if len(tokens) < 2:
        raise UserError(f"probe set {name}: the text has {len(tokens)} token(s); a held-out loss needs at least 2")
    source = tokens if frequency is None else torch.tensor(_encode(tokenizer, [frequency])[0], dtype=torch.long)
    if len(source) == 0:
        raise UserError(f"probe set {name}: the frequency reference text has no tokens; give the text whose counts rank them")
    bucket_of = frequency_buckets(source, len(tokenizer), buckets)  # (V,) 0 .. B-1
    n = -(-len(tokens) // window)
    padded = torch.zeros(n * window, dtype=torch.long)
    padded[: len(tokens)] = tokens
    body = padded.reshape(n, window)  # (n * window,) -> (n, window)
    lengths = torch.full((n,), window + 1, dtype=torch.long)
    lengths[-1] = len(tokens) - (n - 1) * window + 1
    ids = torch.cat([torch.full((n, 1), prefix_token_id(tokenizer), dtype=torch.long), body], dim=1)  # (n, window + 1)
    real = torch.arange(window + 1)[None, :] < lengths[:, None]  # (n, window + 1)
    bucket = torch.where(real, bucket_of[ids], -1)
    bucket[:, 0] = -1  # the prefix is context, not scored
    table = _table(tokenizer, vocab_ids)
    ids = torch.where(real, _rows(ids, table, name), 0)
    return ProbeSet(name, "text", ids, lengths, frequency_bucket=bucket, buckets=buckets)


def frequency_buckets(tokens: torch.Tensor, vocab: int, buckets: int) -> torch.Tensor:
    """(vocab,) the bucket (0 = the most frequent) of every token id: token types ranked by
    their count in ``tokens`` (ties by id), cut where the cumulative count passes b/B of all
    occurrences; an id that never occurs is in the last bucket.

    Example::

        frequency_buckets(torch.tensor([5, 5, 5, 2, 2, 7]), vocab=8, buckets=2)   # id 5 in bucket 0; 2, 7 and the unseen in 1
    """
    counts = torch.bincount(tokens, minlength=vocab)[:vocab]  # (V,) int64
    order = torch.argsort(-counts, stable=True)  # (V,) most frequent first
    before = torch.cumsum(counts[order], 0) - counts[order]  # (V,) occurrences of the more frequent types
    # integers: a type whose preceding mass is exactly b/B starts bucket b (float division put some in b - 1)
    ranked = torch.clamp(before * buckets // counts.sum().clamp(min=1), 0, buckets - 1)  # (V,)
    out = torch.empty(vocab, dtype=torch.long)
    out[order] = ranked
    out[counts == 0] = buckets - 1
    return out


# ------------------------------------------------------------------ scoring
def token_logprobs(model: Any, ids: torch.Tensor, lengths: torch.Tensor,
                   batch_tokens: int = BATCH_TOKENS) -> tuple[torch.Tensor, torch.Tensor]:
    """((N, L-1) log P(t_i | t_<i) at positions 1..L-1, 0 past each row's end; (N, L-1) the
    model's top-1 row at each position), in batches of at most ``batch_tokens`` padded tokens.

    Example::

        logp, top = token_logprobs(model, ids, lengths)   # (N, L-1) float64, (N, L-1) int64
    """
    device = next(model.parameters()).device
    n, width = ids.shape
    logp = torch.zeros((n, max(width - 1, 0)), dtype=torch.float64)
    top = torch.zeros((n, max(width - 1, 0)), dtype=torch.long)
    per = max(1, batch_tokens // max(width, 1))
    for start in range(0, n, per):  # batches of rows, not a loop over tokens
        rows = slice(start, min(n, start + per))
        batch, length = ids[rows].to(device), lengths[rows].to(device)
        wide = int(length.max())
        mask = torch.arange(wide, device=device)[None, :] < length[:, None]  # (B, wide)
        logits = model(input_ids=batch[:, : wide - 1], attention_mask=mask[:, : wide - 1].long()).logits  # (B, wide-1, V)
        lp = torch.log_softmax(logits.to(torch.promote_types(logits.dtype, MIN_SOFTMAX_DTYPE)), dim=-1)
        got = lp.gather(-1, batch[:, 1:wide].unsqueeze(-1)).squeeze(-1)  # (B, wide-1)
        logp[rows, : wide - 1] = torch.where(mask[:, 1:], got, 0.0).double().cpu()
        top[rows, : wide - 1] = lp.argmax(-1).cpu()
    return logp, top


def _measure_questions(model: Any, s: ProbeSet) -> dict[str, float]:
    """The records of a questions set (module docstring), names without the set's prefix."""
    assert s.answer_start is not None
    logp, top = token_logprobs(model, s.ids, s.lengths)
    n, width = logp.shape
    positions = torch.arange(1, width + 1)[None, :]  # (1, L-1) the position each column predicts
    answer = (positions >= s.answer_start[:, None]) & (positions < s.lengths[:, None])  # (N, L-1)
    nll = -(logp * answer).sum(1) / answer.sum(1)  # (N,)
    first = s.answer_start - 1  # (N,) column predicting the answer's first token
    predicted = top[torch.arange(n), first]  # (N,) top-1 rows
    target = s.ids[torch.arange(n), s.answer_start]  # (N,)
    semantic = predicted == target
    assert s.type_keys is not None
    typed = torch.isin(torch.arange(n) * len(s.row_strings) + predicted, s.type_keys)  # (N,) top-1 among its type's rows
    out = {"loss": float(nll.mean()), "accuracy": float(semantic.double().mean()),
           "share.semantic_correct": float(semantic.double().mean()),
           "share.type_correct": float((typed & ~semantic).double().mean()),
           "share.type_wrong": float((~typed & ~semantic).double().mean())}
    groups = [q.group for q in s.questions]
    if any(g is not None for g in groups):
        frame = pd.DataFrame({"group": [_metric_name(g) if g is not None else None for g in groups],
                              "right": semantic.numpy()}).dropna()
        out.update({f"group.{g}.accuracy": float(v) for g, v in frame.groupby("group")["right"].mean().items()})
    if s.categorize is not None:
        names = _user_categories(s, [s.row_strings[r] for r in predicted.tolist()])
        counts = Counter(names)
        out.update({f"share.{c}": counts.get(c, 0) / n for c in s.categories})
    return out


def _user_categories(s: ProbeSet, predictions: Sequence[str]) -> list[str]:
    """The researcher's ``categorize(questions, predictions)``, checked: one declared name per question."""
    assert s.categorize is not None
    got = s.categorize(s.questions, list(predictions))
    if got is None or isinstance(got, (str, bytes, Mapping)) or not hasattr(got, "__iter__"):
        raise UserError(f"probe set {s.name}: categorize returned {short_repr(got)}; give a list of category names, one "
                        "per question")
    names = list(got)
    if len(names) != len(s.questions):
        raise UserError(f"probe set {s.name}: categorize returned {len(names)} names for {len(s.questions)} questions")
    bad = next((i for i, c in enumerate(names) if c not in s.categories), None)
    if bad is not None:
        raise UserError(f"probe set {s.name}: categorize returned {short_repr(names[bad])} for {s.questions[bad].where}; "
                        f"its declared categories: {', '.join(s.categories)}")
    return names


def _measure_text(model: Any, s: ProbeSet) -> dict[str, float]:
    """The records of a text set (module docstring)."""
    assert s.frequency_bucket is not None
    logp, _ = token_logprobs(model, s.ids, s.lengths)
    bucket = s.frequency_bucket[:, 1:]  # (N, L-1) of the predicted tokens
    scored = bucket >= 0
    out = {"loss": float(-(logp[scored]).mean())}
    sums = torch.zeros(s.buckets, dtype=torch.float64).index_add_(0, bucket[scored], -logp[scored])  # (B,)
    counts = torch.bincount(bucket[scored], minlength=s.buckets)[: s.buckets]  # (B,)
    out.update({f"loss.bucket_{b + 1}": float(sums[b] / counts[b]) for b in range(s.buckets) if counts[b] > 0})
    return out


def _measure_words(model: Any, s: ProbeSet) -> dict[str, float]:
    """The records of a words set (:func:`~stagewise.lmkit.wordclasses.word_records`)."""
    assert s.words is not None
    logp, top = token_logprobs(model, s.ids, s.lengths)
    return word_records(logp, top, s.ids, s.words)


def _measure_pairs(model: Any, s: ProbeSet) -> dict[str, float]:
    """The records of a minimal-pair set: overall, per field and per paradigm accuracy."""
    assert s.pairs is not None
    scored = score_blimp(model, s.tokenizer, s.pairs)
    right = scored["correct"].astype(float)
    out = {"accuracy": float(right.mean())}
    out.update({f"field.{_metric_name(str(f))}.accuracy": float(v) for f, v in right.groupby(scored["field"]).mean().items()})
    out.update({f"paradigm.{_metric_name(str(p))}.accuracy": float(v)
                for p, v in right.groupby(scored["paradigm"]).mean().items()})
    return out


MEASURES = {"questions": _measure_questions, "text": _measure_text, "pairs": _measure_pairs, "words": _measure_words}


def measure(model: Any, sets: Sequence[ProbeSet]) -> dict[str, float]:
    """Every set's records, ``{set}.{record}``, in eval mode without gradients (the model's
    mode is put back).

    Example::

        records = measure(model, [read_probe_set("heldout", "text", Path("heldout.txt"), tok)])   # {"heldout.loss": ...}
    """
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            return {f"{s.name}.{k}": v for s in sets for k, v in MEASURES[s.kind](model, s).items()}
    finally:
        model.train(was_training)


# ------------------------------------------------------------------ one entry point
def read_probe_set(name: str, kind: str, path: Path | None, tokenizer: Any, *, limit: int | None = None,
                   paradigms: Sequence[str] | None = None, window: int = DEFAULT_WINDOW, buckets: int = DEFAULT_BUCKETS,
                   frequency: Path | None = None, vocab_ids: torch.Tensor | None = None,
                   kind_words: Mapping[str, frozenset[str]] | None = None, context: int | None = None,
                   categorize: Callable[[Sequence[Question], Sequence[str]], Sequence[str]] | None = None,
                   categories: Sequence[str] = (), classes: Path | None = None) -> ProbeSet:
    """A probe set read from ``path`` and tokenized for ``tokenizer`` (module docstring); one
    UserError line for a bad name, kind, file or row. ``limit``: questions, the first rows;
    text and words, the first tokens; pairs, the first pairs per paradigm. ``context``: the
    model's longest input (a longer question is one line; text windows must fit). ``classes``:
    words only (required), the word-class lexicon file (:func:`~.wordclasses.read_lexicon`).

    Example::

        facts = read_probe_set("facts", "questions", Path("facts.jsonl"), tok, context=1024)
    """
    if not isinstance(name, str) or not NAME.match(name):
        raise UserError(f"probe set name {short_repr(name)}: letters, digits, '_' and '-' (1 to 64 characters)")
    if kind not in KINDS:
        raise UserError(f"probe set {name}: kind={short_repr(kind)}; allowed: {', '.join(KINDS)}")
    if path is None:
        raise UserError(f"probe set {name}: give its path (a {'folder or .jsonl file' if kind == 'pairs' else 'file'})")
    if (classes is None) == (kind == "words"):
        raise UserError(f"probe set {name}: " + ("give classes=, the word-class lexicon file (a JSON object {word: CLASS})"
                                                 if kind == "words" else f"classes= is for kind=words only (this is {kind})"))
    if kind == "words" and (frequency is not None or buckets != DEFAULT_BUCKETS):
        raise UserError(f"probe set {name}: frequency/buckets are for kind=text; a words set has no frequency buckets")
    if kind == "questions":
        s = _encode_questions(name, read_questions(Path(path), limit), tokenizer, vocab_ids, kind_words, context)
        if categorize is not None:
            if not callable(categorize):
                raise UserError(f"probe set {name}: categorize={short_repr(categorize)}; give a function (questions, "
                                "predictions) -> category names")
            bad = next((c for c in categories if not NAME.match(c)), None)
            if not categories or bad is not None:
                raise UserError(f"probe set {name}: categories={list(categories)}: declare the names categorize returns "
                                "(letters, digits, '_' and '-')")
            s = replace(s, categorize=categorize, categories=tuple(categories))
            _user_categories(s, [""] * len(s.questions))  # its shape checked once, before any record
        return s
    if kind in ("text", "words"):
        if context is not None and window + 1 > context:
            raise UserError(f"probe set {name}: window={window} (+ the prefix token) is longer than the model's context "
                            f"{context}")
        lexicon = read_lexicon(Path(classes)) if classes is not None else None
        reference = read_text(Path(frequency)) if frequency is not None else None
        s = _encode_text(name, read_text(Path(path)), tokenizer, window=window, limit=limit, frequency=reference,
                         buckets=buckets, vocab_ids=vocab_ids)
        if lexicon is None:
            return s
        strings = _row_strings(tokenizer, vocab_ids, len(vocab_ids) if vocab_ids is not None else len(tokenizer))
        return replace(s, kind="words", frequency_bucket=None, buckets=0,
                       words=word_positions(name, s.ids, s.lengths, strings, lexicon))
    if vocab_ids is not None:
        raise UserError(f"probe set {name}: minimal pairs are scored over the tokenizer's whole vocabulary; give a model "
                        "with the tokenizer's full vocabulary")
    pairs = read_pairs(Path(path), paradigms, limit)
    return ProbeSet(name, "pairs", torch.zeros((0, 0), dtype=torch.long), torch.zeros(0, dtype=torch.long),
                    pairs=pairs, tokenizer=tokenizer)


__all__ = ["CATEGORIES", "FIELD_ALIASES", "KINDS", "ProbeSet", "Question", "frequency_buckets", "measure",
           "read_neutral_pairs", "read_pairs", "read_probe_set", "read_questions", "read_zorro_pairs", "token_logprobs"]
