"""The controls of the type claims (issue 18, section 2; docs/lm.md "Controls").

A claim that a type phase precedes the facts must fail where types carry no information.
Two controls, each a config switch of the same run:

* ``task.shuffle_groups`` (in :mod:`.categories` and :mod:`.answertypes`): training is
  unchanged; the *judging* is broken: the closed rule's group labels and the open rule's
  group types are permuted (seeded), so "type-correct" no longer means "of the prompt's kind".
* ``task.replace_answers`` (here): the *data* is broken, frequencies kept. Every distinct
  answer string a is replaced everywhere by another answer pi(a) of the data, pi a seeded
  permutation of the distinct answers that pairs each answer with the nearest one in
  frequency rank whose type (:func:`.answertypes.group_type` of its first group; the
  overlapping location types city, country, continent and place count as one) differs.
  Each answer string keeps exactly one of the old counts, so the answers' frequency profile
  (the sorted counts) is unchanged, a frequency prior is as learnable as before, but the
  answers of a relation are no longer of the relation's type. The open rule still judges a
  prompt by its relation's declared type (and by the lexicons and the *original* answers).

:class:`Replacement` reports how close the pairing is: the mean absolute count difference
and how many answers had to keep their own type (no other-type answer was left).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, replace
from typing import Sequence

from .answertypes import group_type
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
