"""Value types of the NTP lab: samples, the validated dataset and its per-query structure.

A dataset is a set of *distinct* samples (input sentence, next token) over a vocabulary of
``|V|`` named tokens, with sample weights ``pi`` (Eq. 1 of Huang, Liang, Yang 2024) and a
collocation ``n`` (a permutation of the vocabulary). Token types (optimal, non-optimal,
non-comparable under each query) are computed from the samples (Definition 1), never taken
from a generator's intent; see :mod:`stagewise.labs.ntp.data` for the validator.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Sample:
    """One training sample: ``input`` token indices (query last) and the ``next`` token index."""

    input: tuple[int, ...]
    next: int

    @property
    def query(self) -> int:
        return self.input[-1]


@dataclass(frozen=True)
class QueryStructure:
    """The partial order under one query token ``q`` (Definition 1).

    ``relations`` holds pairs (greater, lesser): ``x >_q x'``. ``optimal`` are tokens with
    nothing above them and something below, ``non_optimal`` tokens with something above and
    nothing below; every other vocabulary token is ``non_comparable`` under ``q``.
    """

    query: int
    relations: frozenset[tuple[int, int]]
    optimal: frozenset[int]
    non_optimal: frozenset[int]
    non_comparable: frozenset[int]


@dataclass(frozen=True)
class NTPDataset:
    """A validated NTP dataset (realizable unless ``violations`` lists allowed breaches).

    Attributes:
        tokens: ``|V|`` token names; index i is token i (one-hot e_i).
        samples: distinct samples, including the ``|V|`` length-1 collocation samples.
        weights: ``pi`` per sample, same order as ``samples``, positive, summing to 1.
        collocation: ``n[x]`` = index of the collocated next token of x (a permutation).
        structure: query index -> its :class:`QueryStructure`, for every query that ends
            some sample of length >= 2.
        optimal_token: per sample, the index of its optimal token ``x*`` (the token whose
            collocation is the sample's next token; the single token for length-1 samples).
        optimal_sets: per sample, :meth:`optimal_set` (empty tuple: ``{optimal_token}``).
        violations: (kind, message) of every assumption breach the dataset was allowed to
            keep (``data.out_of_assumption``); empty for realizable data.
    """

    tokens: tuple[str, ...]
    samples: tuple[Sample, ...]
    weights: tuple[float, ...]
    collocation: tuple[int, ...]
    structure: dict[int, QueryStructure] = field(hash=False, compare=False)
    optimal_token: tuple[int, ...] = ()
    optimal_sets: tuple[frozenset[int], ...] = ()
    violations: tuple[tuple[str, str], ...] = ()

    def optimal_set(self, i: int) -> frozenset[int]:
        """The optimal tokens of sample i: those x of its input with n(x) a next token of
        that input ({x*} for realizable data; several with a non-injective n or several
        next tokens per input)."""
        return self.optimal_sets[i] if self.optimal_sets else frozenset({self.optimal_token[i]})

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    @property
    def max_len(self) -> int:
        return max(len(s.input) for s in self.samples)

    def index(self, name: str) -> int:
        return self.tokens.index(name)

    def render(self, sample: Sample | tuple[int, ...]) -> str:
        """Human-readable sentence, e.g. ``"S V O"``."""
        ids = sample.input if isinstance(sample, Sample) else sample
        return " ".join(self.tokens[i] for i in ids)
