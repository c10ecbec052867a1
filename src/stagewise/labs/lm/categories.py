"""Prediction categories (spec section 3), per example and epoch, computed on tensors.

With ``norm(s) = s.strip().lower()`` (the authors' "case- and space-insensitive" match):

* ``semantic-correct``: norm(decode(top-1)) == norm(answer);
* ``type-correct``: otherwise, norm(decode(top-1)) is the normalized answer of *another*
  example of the same group (CounterFact: the same relation_id; classification tasks: one of
  the label words; HotpotQA: the same answer kind);
* ``type-wrong``: anything else ("the", "of", punctuation, an answer of another group).

Everything is precomputed once per run as an :class:`AnswerSpace`: every model row gets the
index of the normalized answer string it decodes to (or -1), and a (G, A) membership
matrix says which answers belong to which group; categorizing N predictions is then two
gathers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import torch

from .answertypes import normalize

if TYPE_CHECKING:
    from .answertypes import TypeSpace

CATEGORIES: tuple[str, ...] = ("semantic-correct", "type-correct", "type-wrong")
SEMANTIC, TYPE_CORRECT, TYPE_WRONG = 0, 1, 2
EXCLUDED = 3
"""Open-world rule only: a wrong prediction for an example whose type is unclear (not counted in type claims)."""
OPEN_CATEGORIES: tuple[str, ...] = (*CATEGORIES, "excluded")
RULES: tuple[str, ...] = ("closed", "open")


@dataclass(frozen=True, eq=False)
class AnswerSpace:
    """Answers and groups of a dataset in model-row space.

    Attributes:
        row_answer: (V',) int64, index into ``answers`` of the normalized string that model row
            v decodes to, or -1.
        example_answer: (N,) int64, each example's answer index.
        example_group: (N,) int64, each example's group index.
        member: (G, A) bool, answer a is the answer of some example of group g.
        answers: the A distinct normalized answer strings.
        groups: the G group names.
        types: the open-world rule (:class:`~.answertypes.TypeSpace`), or None (closed rule only).
    """

    row_answer: torch.Tensor
    example_answer: torch.Tensor
    example_group: torch.Tensor
    member: torch.Tensor
    answers: tuple[str, ...]
    groups: tuple[str, ...]
    types: "TypeSpace | None" = None


def answer_space(answers: Sequence[str], groups: Sequence[str], row_strings: Sequence[str],
                 shuffle_seed: int | None = None) -> AnswerSpace:
    """Build the space from the examples' answers and groups and the decoded string of
    every model row (``row_strings[v]`` = the text of row v's token).

    ``shuffle_seed`` builds the control: every distinct answer gets the group label of a
    seeded random other answer (a permutation of the answers' group labels), so a group's
    answer set is a random set of answers of the same size distribution, unrelated to the
    relation of the prompts in the group."""
    names = tuple(dict.fromkeys(normalize(a) for a in answers))
    index = {a: i for i, a in enumerate(names)}
    group_names = tuple(dict.fromkeys(groups))
    group_index = {g: i for i, g in enumerate(group_names)}
    example_answer = torch.tensor([index[normalize(a)] for a in answers], dtype=torch.long)  # (N,)
    example_group = torch.tensor([group_index[g] for g in groups], dtype=torch.long)  # (N,)
    member = torch.zeros(len(group_names), len(names), dtype=torch.bool)  # (G, A)
    if shuffle_seed is None:
        member[example_group, example_answer] = True
    else:
        pairs = torch.unique(torch.stack([example_group, example_answer]), dim=1)  # (2, P) distinct (group, answer)
        gen = torch.Generator().manual_seed(shuffle_seed)
        member[pairs[0][torch.randperm(pairs.shape[1], generator=gen)], pairs[1]] = True
    row_answer = torch.tensor([index.get(normalize(s), -1) for s in row_strings], dtype=torch.long)  # (V',)
    return AnswerSpace(row_answer, example_answer, example_group, member, names, group_names)


def row_strings(tokenizer: Any, vocab_ids: torch.Tensor | None, n_rows: int) -> list[str]:
    """The decoded text of each model row's token (rows beyond the tokenizer: empty)."""
    ids = vocab_ids.tolist() if vocab_ids is not None else list(range(n_rows))
    known = len(tokenizer)
    tokens = tokenizer.convert_ids_to_tokens([i if i < known else 0 for i in ids])
    return [tokenizer.convert_tokens_to_string([t]) if i < known else "" for i, t in zip(ids, tokens)]


def categorize(space: AnswerSpace, top1_rows: torch.Tensor, examples: torch.Tensor | None = None) -> torch.Tensor:
    """Category codes (N,) int64 in {SEMANTIC, TYPE_CORRECT, TYPE_WRONG} of top-1 model rows
    ``top1_rows`` (N,) for examples ``examples`` (N,) (default: all, in order)."""
    idx = torch.arange(len(space.example_answer)) if examples is None else examples
    predicted = space.row_answer[top1_rows]  # (N,) answer index or -1
    own = space.example_answer[idx]
    semantic = predicted == own
    in_group = space.member[space.example_group[idx], predicted.clamp(min=0)] & (predicted >= 0)
    codes = torch.full_like(predicted, TYPE_WRONG)
    codes[in_group] = TYPE_CORRECT
    codes[semantic] = SEMANTIC
    return codes


def categorize_open(space: AnswerSpace, top1_rows: torch.Tensor, examples: torch.Tensor | None = None) -> torch.Tensor:
    """Open-world category codes (N,) int64 in {SEMANTIC, TYPE_CORRECT, TYPE_WRONG, EXCLUDED}:
    semantic as :func:`categorize`; otherwise type-correct when row ``top1_rows[i]`` is a valid
    answer of the example's type (:mod:`.answertypes`), EXCLUDED when that type is unclear."""
    if space.types is None:
        raise ValueError("this answer space has no open-world types")
    idx = torch.arange(len(space.example_answer)) if examples is None else examples
    semantic = space.row_answer[top1_rows] == space.example_answer[idx]  # (N,)
    kind = space.types.example_type[idx]  # (N,) type index or -1
    in_type = space.types.row_type[top1_rows, kind.clamp(min=0)] & (kind >= 0)  # (N,)
    codes = torch.where(kind >= 0, torch.full_like(kind, TYPE_WRONG), torch.full_like(kind, EXCLUDED))
    codes[in_type] = TYPE_CORRECT
    codes[semantic] = SEMANTIC
    return codes


def category_names(codes: torch.Tensor) -> np.ndarray:
    """Codes -> the category strings (an object array of the same length)."""
    return np.asarray(OPEN_CATEGORIES, dtype=object)[codes.cpu().numpy()]
