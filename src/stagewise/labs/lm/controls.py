"""The controls of the type claims (issue 18, section 2; docs/lm.md "Controls").

A claim that a type phase precedes the facts must fail where types carry no information.
Two controls, each a config switch of the same run:

* ``task.shuffle_groups`` (in :mod:`.categories` and :mod:`.categories`): training is
  unchanged; the *judging* is broken: the closed rule's group labels and the open rule's
  group types are permuted (seeded), so "type-correct" no longer means "of the prompt's kind".
* ``task.replace_answers`` (here): the *data* is broken, frequencies kept. Every distinct
  answer string a is replaced everywhere by another answer pi(a) of the data, pi a seeded
  permutation of the distinct answers that pairs each answer with the nearest one in
  frequency rank whose type (:func:`.categories.group_type` of its first group; the
  overlapping location types city, country, continent and place count as one) differs.
  Each answer string keeps exactly one of the old counts, so the answers' frequency profile
  (the sorted counts) is unchanged, a frequency prior is as learnable as before, but the
  answers of a relation are no longer of the relation's type. The open rule still judges a
  prompt by its relation's declared type (and by the lexicons and the *original* answers).

:class:`Replacement` reports how close the pairing is: the mean absolute count difference
and how many answers had to keep their own type (no other-type answer was left).
"""

from __future__ import annotations

import difflib
import math
import random
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ...errors import UserError
from .categories import group_type
from .config import SPLIT_TASKS
from .tasks import Example


LOCATIONS = frozenset({"city", "country", "continent", "place"})
"""Types that overlap (a country is a place): one kind for the pairing, so a city is never replaced by a place."""


@dataclass(frozen=True)
class Replacement:
    """The frequency-matched replacement: ``mapping`` old answer -> new answer, ``same_type``
    answers mapped within their own type (none was left), ``mean_count_gap`` the mean of
    |count(a) - count(pi(a))| over the distinct answers."""

    mapping: dict[str, str]
    same_type: int
    mean_count_gap: float

    def as_dict(self) -> dict[str, float | int]:
        return {"answers": len(self.mapping), "same_type": self.same_type, "mean_count_gap": round(self.mean_count_gap, 4)}


def frequency_matched(examples: Sequence[Example], seed: int) -> tuple[list[Example], Replacement]:
    """The examples with their answers replaced by :func:`pairing`, each keeping its original
    answer in ``original_answer``."""
    plan = pairing(examples, seed)
    out = [replace(e, answer=plan.mapping[e.answer], original_answer=e.answer) for e in examples]
    return out, plan


def pairing(examples: Sequence[Example], seed: int) -> Replacement:
    """The seeded permutation pi of the distinct answers (see the module docstring).

    Answers are ranked by count (ties in a seeded random order); walking that ranking, each
    answer takes the nearest-ranked answer not yet taken whose type differs from its own,
    or, when none is left, the nearest not yet taken (counted in ``same_type``)."""
    counts = Counter(e.answer for e in examples)
    kind: dict[str, str] = {}
    for e in examples:
        coarse = group_type(e.task, e.group) or f"unclear:{e.group}"
        kind.setdefault(e.answer, "location" if coarse in LOCATIONS else coarse)
    rng = random.Random(seed)
    answers = list(counts)
    rng.shuffle(answers)
    ranked = sorted(answers, key=lambda a: -counts[a])  # stable: ties keep the seeded order
    free = list(range(len(ranked)))  # ranks not yet taken as a replacement
    mapping: dict[str, str] = {}
    same = 0
    gap = 0
    for i, a in enumerate(ranked):
        order = sorted(free, key=lambda j: (abs(j - i), j))  # nearest rank first
        other = [j for j in order if kind[ranked[j]] != kind[a]]
        j = other[0] if other else order[0]
        same += not other
        free.remove(j)
        mapping[a] = ranked[j]
        gap += abs(counts[a] - counts[ranked[j]])
    return Replacement(mapping, same, gap / max(len(ranked), 1))


# Held-out examples and the permuted-labels control of the two-task study (issue 27;
# docs/lm.md "The two-task study").
#
# A loaded task part (the examples of one task, after ``task.limit`` / ``task.sample``) is
# split into examples that are trained on and examples that are only evaluated; no training
# example is ever evaluated as held out (ids disjoint; BLiMP paradigms disjoint):
#
# * **BLiMP by whole paradigms.** The sentences of one paradigm come from one template with
#   other words filled in, so an example-level split leaks (a held-out sentence has a trained
#   near-duplicate). Held out: the paradigms listed in ``task.heldout_paradigms``, or
#   ``k = clip(floor(f P + 1/2), 1, P - 1)`` of the ``P`` loaded paradigms drawn by a seeded
#   permutation (``f = task.heldout``, seed ``task.heldout_seed``).
# * **SICK by pairs, stratified by label.** For each label ``c`` with ``n_c`` pairs,
#   ``k_c = min(floor(f n_c + 1/2), n_c - 1)`` pairs drawn by seeded random keys (one draw for
#   all pairs, ranked within each label: no loop over pairs), so the held-out label marginal is
#   the training one up to rounding and every label keeps a training pair.
#
# ``task.permute_labels`` (the control that removes the input-label relation): within each
# task and each part (training, held out) the answers are permuted by a seeded permutation
# (seed ``seed``; one stream per task and part), so each part keeps its label marginal
# exactly and no input predicts its label; ``original_answer`` keeps the data's label.
#
# Only the answer framing of blimp and sick is split (the config check says so in one line).

PARTS = ("train", "heldout")
"""The two parts of a split task; their names seed the permuted-labels streams."""


def split_part(cfg: Any, task: str, items: list[Any], *, heldout: bool = False) -> list[Any]:
    """The training part (``heldout=False``) or the held-out part of one task's loaded items,
    in file order, labels permuted under ``task.permute_labels``. Without ``task.heldout``
    every item is trained on (and the held-out part is empty)."""
    t = cfg.task
    if task not in SPLIT_TASKS or (t.heldout is None and not t.permute_labels):
        return [] if heldout else items
    held = heldout_mask(cfg, task, items) if t.heldout is not None else np.zeros(len(items), dtype=bool)
    part = [item for item, h in zip(items, held) if h == heldout]
    if t.permute_labels:
        part = permute_answers(part, label_stream(cfg.seed, task, PARTS[int(heldout)]))
    return part


def heldout_mask(cfg: Any, task: str, items: Sequence[Any]) -> np.ndarray:
    """(N,) bool: which of one task's loaded items are held out (module docstring)."""
    t = cfg.task
    if task == "blimp":
        paradigm = np.array([item.id.split("/")[1] for item in items], dtype=object)  # blimp/<paradigm>/<pairID>/<kind>
        names = list(dict.fromkeys(paradigm.tolist()))
        chosen = heldout_paradigms(names, t.heldout, t.heldout_seed, t.heldout_paradigms)
        return np.isin(paradigm, list(chosen))
    labels = np.array([item.answer for item in items], dtype=object)
    held = stratified_mask(labels, t.heldout, t.heldout_seed)
    if not held.any():
        raise UserError(f"task.heldout={t.heldout}: holds out none of the {len(items)} {task} pairs (raise it, or load "
                        "more pairs with task.limits)")
    return held


def heldout_paradigms(names: Sequence[str], fraction: float, seed: int, listed: Sequence[str] | None = None) -> tuple[str, ...]:
    """The held-out paradigms among the loaded ``names`` (in their order): ``listed``, checked
    against ``names``, or ``clip(floor(fraction P + 1/2), 1, P - 1)`` of them drawn by a seeded
    permutation."""
    if listed is not None:
        wanted = list(dict.fromkeys(listed))
        unknown = [p for p in wanted if p not in names]
        if unknown:
            close = difflib.get_close_matches(unknown[0], list(names), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise UserError(f"task.heldout_paradigms: {unknown[0]!r} is not a BLiMP paradigm of the data ({hint}"
                            f"{len(names)} loaded)")
        if len(wanted) >= len(names):
            raise UserError(f"task.heldout_paradigms: all {len(names)} loaded BLiMP paradigms are held out; none is left "
                            "to train on")
        return tuple(p for p in names if p in set(wanted))
    if len(names) < 2:
        raise UserError(f"task.heldout: BLiMP is held out by whole paradigms and only {len(names)} is loaded "
                        "(task.paradigms: load at least 2)")
    k = min(max(math.floor(fraction * len(names) + 0.5), 1), len(names) - 1)
    drawn = set(np.random.default_rng(seed).permutation(len(names))[:k].tolist())
    return tuple(p for i, p in enumerate(names) if i in drawn)


def stratified_mask(labels: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """(N,) bool: ``k_c = min(floor(fraction n_c + 1/2), n_c - 1)`` items of each label ``c``
    held out, chosen by seeded random keys ranked within the label."""
    labels = np.asarray(labels, dtype=object)
    n = len(labels)
    _, code, count = np.unique(labels, return_inverse=True, return_counts=True)  # (N,), (C,)
    keys = np.random.default_rng(seed).random(n)  # (N,) one draw for every item
    order = np.lexsort((keys, code))  # (N,) by label, then key
    start = np.cumsum(count) - count  # (C,) first position of each label in ``order``
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n) - start[code[order]]  # (N,) rank of each item within its label
    k = np.minimum(np.floor(fraction * count + 0.5), np.maximum(count - 1, 0)).astype(np.int64)  # (C,)
    return rank < k[code]


def label_stream(seed: int, task: str, part: str) -> np.random.Generator:
    """The seeded stream of the permuted labels of one task and part (stable across processes:
    crc32 of the names, not Python's salted hash)."""
    return np.random.default_rng([seed, zlib.crc32(f"{task}/{part}".encode())])


def permute_answers(items: list["Example"], rng: np.random.Generator) -> list["Example"]:
    """The examples with their answers permuted among them (the multiset of answers, i.e. the
    label marginal, is unchanged); each keeps the data's answer in ``original_answer``."""
    answers = [item.answer for item in items]
    order = rng.permutation(len(items))
    return [replace(item, answer=answers[j], original_answer=item.original_answer or item.answer)
            for item, j in zip(items, order.tolist())]


def split_note(train: Sequence[Any], held: Sequence[Any]) -> dict[str, Any]:
    """What the manifest notes about a split: per task the training and held-out counts and,
    for BLiMP, the held-out paradigms."""
    out: dict[str, Any] = {}
    for task in dict.fromkeys([i.task for i in train] + [i.task for i in held]):
        mine = [i for i in held if i.task == task]
        entry: dict[str, Any] = {"train": sum(i.task == task for i in train), "heldout": len(mine)}
        if task == "blimp":
            entry["heldout_paradigms"] = list(dict.fromkeys(i.id.split("/")[1] for i in mine))
        out[task] = entry
    return out
