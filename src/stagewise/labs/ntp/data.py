"""Datasets of the NTP lab: build and validate, Example 1, the random generator, JSON (tensors: .tensors).

Every dataset passes through :func:`build_dataset`, which merges duplicate samples, sets the
weights ``pi``, resolves the collocation ``n`` (given or inferred), computes the per-query
partial orders from the samples (Definition 1) and rejects non-realizable data (unless a
breach is allowed: ``allow``, data.out_of_assumption) with one
message per violation (see :mod:`stagewise.labs.ntp.validate`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, cast

import numpy as np

from stagewise.errors import UserError
from stagewise.labs.ntp.breaches import add_breaches
from stagewise.labs.ntp.dataset import NTPDataset, Sample
from stagewise.labs.ntp.tensors import to_tensors  # noqa: F401  (re-exported: the padded tensors of a dataset)
from stagewise.labs.ntp.validate import (
    IncrementalChecker,
    Pair,
    next_conflicts,
    order_checks,
    render_sample,
    resolve_collocation,
    sentence_checks,
)

Weights = Literal["empirical", "uniform"]
# assumption breaches a dataset may be built with (data.out_of_assumption); see breaches.py
OUT_OF_ASSUMPTION = ("stochastic-next", "non-injective", "confused", "conflicting-orders", "sparse-optimal")
_WEIGHTS = ("empirical", "uniform")


def _as_index(item: object) -> int | None:
    """``item`` as a token index when it is an integer (not a bool), else None."""
    return int(item) if isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_)) else None


def _is_index(item: object) -> bool:
    return _as_index(item) is not None


def _is_token_json(item: object) -> bool:
    return isinstance(item, (str, int)) and not isinstance(item, bool)


def _raw(inp: object, nxt: object) -> str:
    """Render a sample as given (before resolution), e.g. ``"S X" -> P``."""
    words: list[object]
    if isinstance(inp, str):
        words = list(inp.split())
    else:
        words = list(inp) if isinstance(inp, Sequence) else [inp]
    return '"' + " ".join(str(t) for t in words) + f'" -> {nxt}'


def _check_tokens(tokens: Sequence[str]) -> tuple[list[str], list[str]]:
    """Token names and the errors about them (empty list, non-strings, duplicates)."""
    if isinstance(tokens, str) or not isinstance(tokens, Sequence):
        return [], [f'"tokens" must be a list of token names, got {type(tokens).__name__}']
    if not tokens:
        return [], ['the token list is empty: "tokens" needs at least one token name']
    errors: list[str] = []
    seen: dict[str, int] = {}
    for pos, name in enumerate(tokens):
        if not isinstance(name, str) or not name or name != name.strip() or " " in name:
            errors.append(f"tokens[{pos}]={name!r} is not a valid token name (a non-empty string without spaces)")
        elif name in seen:
            errors.append(
                f"duplicate token name '{name}' in \"tokens\" (positions {seen[name]} and {pos}); "
                "token names must be unique"
            )
        else:
            seen[name] = pos
    return [str(t) for t in tokens], errors


def _resolve(item: object, lookup: Mapping[str, int], where: str, names: Sequence[str],
             errors: list[str]) -> int | None:
    """Index of a token given by name or index; appends an error and returns None if unknown."""
    if isinstance(item, str) and item in lookup:
        return lookup[item]
    index = _as_index(item)
    if index is not None and 0 <= index < len(names):
        return index
    if index is not None:
        errors.append(f"unknown token index {item} {where}; allowed indices are 0..{len(names) - 1} "
                      '(positions in "tokens")')
    else:
        allowed = ", ".join(names) if len(names) <= 12 else f"{len(names)} names"
        errors.append(f"unknown token {item!r} {where}; allowed tokens are those in \"tokens\" ({allowed})")
    return None


def _parse_sample(pos: int, sample: object, names: Sequence[str], lookup: Mapping[str, int],
                  max_len: int | None, errors: list[str]) -> Pair | None:
    if not isinstance(sample, Sequence) or isinstance(sample, str) or len(sample) != 2:
        errors.append(f"sample #{pos} is not an (input, next) pair: {sample!r}")
        return None
    inp, nxt = sample
    words = inp.split() if isinstance(inp, str) else inp
    words = words.tolist() if isinstance(words, np.ndarray) else words
    if not isinstance(words, Sequence):
        errors.append(f"sample #{pos}: the input must be a list of tokens, got {inp!r}")
        return None
    shown = _raw(words, nxt)
    if len(words) == 0:
        errors.append(f"sample #{pos} {shown} has an empty input; every input needs at least one token")
        return None
    if max_len is not None and len(words) > max_len:
        errors.append(f"sample {shown} has {len(words)} input tokens, more than max_len={max_len}")
    before = len(errors)
    ids = [_resolve(t, lookup, f"in sample {shown}", names, errors) for t in words]
    y = _resolve(nxt, lookup, f"as next token of sample {shown}", names, errors)
    if len(errors) > before or y is None:
        return None
    return tuple(cast(list[int], ids)), y  # every unknown token (a None id) appended an error above


def build_dataset(
    tokens: Sequence[str],
    samples: Sequence[tuple[Sequence[str | int], str | int]],
    *,
    collocation: Mapping[str, str] | None = None,
    weights: Weights = "empirical",
    max_len: int | None = None,
    allow: Collection[str] = (),
) -> NTPDataset:
    """Validate samples and build the dataset.

    Args:
        tokens: ``|V|`` distinct token names.
        samples: ``(input, next)`` pairs, tokens by name or index (an input may also be one
            space-separated string). Duplicates are merged.
        collocation: optional ``{x: n(x)}`` entries; the rest of ``n`` comes from length-1
            samples or is inferred. Missing length-1 samples ``([x], n(x))`` are added.
        weights: ``pi`` = frequency of each distinct sample ("empirical", added collocation
            samples count once) or ``1/N`` ("uniform").
        max_len: optional cap on the input length.
        allow: out-of-assumption kinds (``OUT_OF_ASSUMPTION``) whose violations become
            warnings (kept in ``NTPDataset.violations``) instead of errors.

    Returns:
        An :class:`NTPDataset` with samples sorted by ``(len(input), input, next)``.

    Raises:
        UserError: with one message per violation found.
    """
    if weights not in _WEIGHTS:
        raise UserError(f"weights={weights!r} is not supported; allowed: empirical, uniform")
    if max_len is not None and (not _is_index(max_len) or max_len < 1):
        raise UserError(f"max_len={max_len!r} is invalid; it must be a positive integer")
    names, errors = _check_tokens(tokens)
    if not samples:
        errors.append("the dataset is empty (no samples)")
    if errors:  # bad token names make every later check noise
        raise UserError(*errors)
    lookup = {name: i for i, name in reversed(list(enumerate(names)))}
    counts: Counter[Pair] = Counter()
    for pos, sample in enumerate(samples):
        pair = _parse_sample(pos, sample, names, lookup, max_len, errors)
        if pair is not None:
            counts[pair] += 1
    given: dict[int, int] = {}
    for key, value in (collocation or {}).items():
        where = f"in collocation entry {key!r}: {value!r}"
        x, y = (_resolve(t, lookup, where, names, errors) for t in (key, value))
        if x is not None and y is not None:
            given[x] = y
    if not counts:
        raise UserError(*errors)
    pairs = sorted(counts, key=lambda s: (len(s[0]), s))
    unknown = set(allow) - set(OUT_OF_ASSUMPTION)
    if unknown:
        raise UserError(f"out-of-assumption kind {sorted(unknown)[0]!r} is unknown; allowed: {', '.join(OUT_OF_ASSUMPTION)}")
    warnings: list[tuple[str, str]] = []

    def route(kind: str, messages: list[str]) -> None:
        if kind in allow:
            warnings.extend((kind, m) for m in messages)
        else:
            errors.extend(messages)

    route("stochastic-next", next_conflicts(names, pairs))
    n, collocation_errors, non_injective = resolve_collocation(names, pairs, given, "non-injective" in allow)
    errors += collocation_errors
    warnings.extend(("non-injective", m) for m in non_injective)
    if n is None:
        raise UserError(*errors)
    has_length_one = {inp[0] for inp, _ in pairs if len(inp) == 1}
    for x in range(len(names)):
        if x not in has_length_one:
            counts[((x,), n[x])] += 1
    ordered = sorted(counts, key=lambda s: (len(s[0]), s[0], s[1]))
    # an input with several next tokens is reported (or allowed); its relations would only add noise
    nexts: dict[tuple[int, ...], set[int]] = {}
    for inp, nxt in ordered:
        nexts.setdefault(inp, set()).add(nxt)
    conflicted = {inp for inp, ys in nexts.items() if len(ys) > 1}
    clean = [s for s in ordered if s[0] not in conflicted]
    best, relations, sentence_errors, breaches = sentence_checks(names, clean, n)
    optimal_of = dict(zip(clean, best))
    for inp, nxt in ordered:  # inputs with several next tokens: the most frequent token x with n(x) = next
        if inp in conflicted:
            top = [x for x in inp if n[x] == nxt]
            optimal_of[(inp, nxt)] = max(top, key=lambda x: (inp.count(x), -x)) if top else -1
            if not top:
                errors.append(f"inconsistent next token in sample {render_sample(names, (inp, nxt))}: "
                              f"no token of the input has collocation '{names[nxt]}'")
    structure, cycles, confused = order_checks(names, relations)
    errors += sentence_errors
    route("sparse-optimal", breaches)
    route("conflicting-orders", cycles)
    route("confused", confused)
    if errors:
        raise UserError(*errors)
    total = sum(counts.values())
    pi = [counts[s] / total if weights == "empirical" else 1.0 / len(ordered) for s in ordered]
    return NTPDataset(
        tokens=tuple(names),
        samples=tuple(Sample(input=inp, next=nxt) for inp, nxt in ordered),
        weights=tuple(pi),
        collocation=tuple(n),
        structure=structure,
        optimal_token=tuple(optimal_of[s] for s in ordered),
        optimal_sets=tuple(frozenset(x for x in inp if n[x] in nexts[inp]) if len(inp) > 1 else frozenset(inp)
                           for inp, _ in ordered),
        violations=tuple(warnings),
    )


def example1() -> NTPDataset:
    """The paper's Example 1: sentences SVOP, VOP, OPP, PSV with all proper prefixes.

    9 distinct samples, uniform weights, collocation S->V->O->P->S.
    """
    samples = []
    for sentence in ("S V O P", "V O P", "O P P", "P S V"):
        words = sentence.split()
        samples += [(words[:k], words[k]) for k in range(1, len(words))]
    return build_dataset(("S", "V", "O", "P"), samples, weights="uniform")


def _check_range(name: str, value: object, low: int) -> tuple[int, int]:
    if not (isinstance(value, Sequence) and len(value) == 2 and all(_is_index(v) for v in value)
            and low <= value[0] <= value[1]):
        raise UserError(f"data.{name}={value!r} is invalid; it must be [low, high] with {low} <= low <= high")
    return int(value[0]), int(value[1])


def random_dataset(
    vocab_size: int,
    *,
    seed: int,
    optimal_per_query: tuple[int, int] = (1, 3),
    non_optimal_per_query: tuple[int, int] = (2, 6),
    sentences_per_query: int = 4,
    complete: bool = False,
    prefix_closed: bool = False,
    max_len: int = 8,
    weights: Weights = "empirical",
    out_of_assumption: Sequence[str] = (),
) -> NTPDataset:
    """A random realizable dataset over tokens ``t0..t{V-1}``, deterministic in ``seed``.

    ``n`` is a random permutation. Each query q gets disjoint optimal (``O_q``) and
    non-optimal (``N_q``, containing q) sets, sizes drawn from the inclusive ranges and
    clipped to the vocabulary. Each of the ``sentences_per_query`` sentences is one optimal
    token plus a random subset of ``N_q \\ {q}`` in random order, then q; next = n(optimal).
    ``complete`` adds ``[o, q]`` and ``[o, x, q]`` (random order of o, x) for every pair.
    ``prefix_closed`` adds each sentence's prefixes of length >= 2 (next = the following
    token) and drops any sentence whose samples would break realizability or Assumption 3
    (so complete coverage is not guaranteed then).
    ``out_of_assumption`` then adds the breaches of :func:`.breaches.add_breaches` (drawn
    from their own stream, so the realizable part is the same dataset).
    """
    if not _is_index(vocab_size) or vocab_size < 3:
        raise UserError(f"data.vocab_size={vocab_size} is too small: the generator needs at least 3 tokens")
    opt_low, opt_high = _check_range("optimal_per_query", optimal_per_query, 1)
    non_low, non_high = _check_range("non_optimal_per_query", non_optimal_per_query, 1)
    if not _is_index(sentences_per_query) or sentences_per_query < 0:
        raise UserError(f"data.sentences_per_query={sentences_per_query!r} is invalid; it must be >= 0")
    if not _is_index(max_len) or max_len < 2:
        raise UserError(f"data.max_len={max_len!r} is too small: a sentence needs an optimal token "
                        "and the query (max_len >= 2)")
    vocab = int(vocab_size)
    rng = np.random.default_rng(seed)
    n = rng.permutation(vocab).tolist()
    samples: list[Pair] = [((x,), n[x]) for x in range(vocab)]
    checker = IncrementalChecker(n) if prefix_closed else None
    if checker is not None:
        checker.try_add(samples)

    plan: list[QueryPlan] = []

    def emit(sentence: list[int], optimal: int) -> None:
        batch = [(tuple(sentence), n[optimal])]
        if checker is not None:  # prefix_closed
            batch += [(tuple(sentence[:j]), sentence[j]) for j in range(2, len(sentence))]
            if not checker.try_add(batch):
                return
        samples.extend(batch)
        plan[-1].sentences.append((tuple(sentence), optimal))

    for q in range(vocab):
        shifted = rng.permutation(vocab - 1)
        others = (shifted + (shifted >= q)).tolist()  # every token but q, shuffled
        k = int(rng.integers(opt_low, opt_high + 1))
        k = max(1, min(k, vocab - min(non_low, vocab - 1)))
        m = max(1, min(int(rng.integers(non_low, non_high + 1)), vocab - k))
        optimal, extra = others[:k], others[k:k + m - 1]  # N_q = extra + [q]
        plan.append(QueryPlan(q, tuple(optimal), tuple(extra), []))
        for _ in range(sentences_per_query):
            o = optimal[int(rng.integers(k))]
            size = int(rng.integers(0, min(len(extra), max_len - 2) + 1))
            chosen = rng.choice(len(extra), size=size, replace=False).tolist()
            body = [o] + [extra[i] for i in chosen]
            emit([body[i] for i in rng.permutation(len(body)).tolist()] + [q], o)
        if complete:
            for o in optimal:
                emit([o, q], o)
                for x in extra if max_len >= 3 else ():
                    emit(([o, x] if rng.random() < 0.5 else [x, o]) + [q], o)
    names = [f"t{i}" for i in range(vocab)]
    if out_of_assumption:
        def valid(candidate: list[Pair]) -> bool:
            try:
                build_dataset(names, candidate, max_len=max_len, allow=out_of_assumption)
            except UserError:
                return False
            return True

        samples = add_breaches(samples, n, plan, tuple(out_of_assumption), seed=seed, max_len=max_len, valid=valid)
    return build_dataset(names, samples, weights=weights, max_len=max_len, allow=out_of_assumption)


@dataclass(frozen=True)
class QueryPlan:
    """What the generator drew for one query: its optimal and non-optimal (``extra``, the
    query excluded) tokens and the emitted sentences (input, optimal token)."""

    query: int
    optimal: tuple[int, ...]
    extra: tuple[int, ...]
    sentences: list[tuple[tuple[int, ...], int]]


def _schema_errors(obj: object) -> list[str]:
    """Schema problems of a parsed JSON dataset, one message each (empty if fine)."""
    if not isinstance(obj, dict):
        return [f'the top level must be an object with "tokens" and "samples", got {type(obj).__name__}']
    errors = [f'unknown key "{key}" at the top level; allowed: tokens, samples, collocation'
              for key in obj if key not in ("tokens", "samples", "collocation")]
    wanted = (("tokens", "a list of token names"), ("samples", "a list of {input, next} objects"))
    for key, what in wanted:
        if key not in obj:
            errors.append(f'missing "{key}" ({what})')
        elif not isinstance(obj[key], list):
            errors.append(f'"{key}" must be {what}, got {type(obj[key]).__name__}')
    if isinstance(obj.get("tokens"), list):
        errors += [f'tokens[{i}]={t!r} is not a string' for i, t in enumerate(obj["tokens"])
                   if not isinstance(t, str)]
    samples = obj.get("samples")
    for i, sample in enumerate(samples if isinstance(samples, list) else []):
        if not isinstance(sample, dict):
            errors.append(f'samples[{i}] must be an object {{"input": [...], "next": ...}}, got {sample!r}')
            continue
        for key in ("input", "next"):
            if key not in sample:
                errors.append(f'samples[{i}] is missing "{key}"')
        errors += [f'samples[{i}] has unknown key "{key}"; allowed: input, next'
                   for key in sample if key not in ("input", "next")]
        inp, nxt = sample.get("input", []), sample.get("next", "")
        if not isinstance(inp, list) or not all(_is_token_json(t) for t in inp):
            errors.append(f'samples[{i}].input must be a list of token names, got {inp!r}')
        if not _is_token_json(nxt):
            errors.append(f'samples[{i}].next must be a token name, got {nxt!r}')
    colloc = obj.get("collocation", {})
    if not isinstance(colloc, dict) or not all(isinstance(v, str) for v in colloc.values()):
        errors.append(f'"collocation" must be an object mapping token names to token names, got {colloc!r}')
    return errors


def load_json_dataset(path: str | Path, *, weights: Weights = "empirical",
                      max_len: int | None = None, allow: Collection[str] = ()) -> NTPDataset:
    """Load ``{"tokens": [...], "samples": [{"input": [...], "next": ...}], "collocation": {...}}``.

    Raises:
        UserError: one line per problem, each prefixed with ``data.file=<path>``.
    """
    label = f"data.file={path}"
    file = Path(path)
    if not file.is_file():
        raise UserError(f"{label} not found" + (" (it is a directory)" if file.is_dir() else ""))
    try:
        obj = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise UserError(f"{label} is not valid JSON: {err.msg} at line {err.lineno}, column {err.colno}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"{label} cannot be read: {err}") from None
    errors = _schema_errors(obj)
    if errors:
        raise UserError(*(f"{label}: {m}" for m in errors))
    if not obj["samples"]:
        raise UserError(f"{label}: the dataset is empty (no samples)")
    samples = [(s["input"], s["next"]) for s in obj["samples"]]
    try:
        return build_dataset(obj["tokens"], samples, collocation=obj.get("collocation"),
                             weights=weights, max_len=max_len, allow=allow)
    except UserError as err:
        raise UserError(*(f"{label}: {m}" for m in err.messages)) from None
