"""Corpus tools of the pretraining study: sentences, the shuffled-words control corpus, a
byte-level BPE trained on the corpus, word counts and the coverage of minimal pairs by them,
and the neutral minimal-pair format (JSON lines) read by the ``pairs`` probe kind.

* :func:`sentences`: a text's non-empty lines cut after ``.``, ``!`` or ``?`` (possibly
  followed by closing quotes) where whitespace or the line's end follows; the mark stays with
  its sentence.
* :func:`shuffle_words`: the control "syntax destroyed, word statistics kept": within each
  sentence the whitespace-separated words are permuted (one seeded ``numpy`` Generator over
  the whole text, sentence after sentence); the sentence-final mark is split off its word and
  put back at the sentence's end. Lines stay lines; whitespace inside a line becomes single
  spaces.
* :func:`train_bpe`: GPT-2's tokenizer recipe trained on the given texts (byte-level BPE,
  ``<|endoftext|>`` as BOS, EOS, UNK and padding); the same texts give the same vocabulary and
  merges.
* :func:`word_counts` / :func:`pair_coverage` / :func:`paradigm_coverage`: lower-cased words
  ``[a-z]+('[a-z]+)?`` counted in the training corpus, and per pair::

      covered     = all(count[w] >= min_count for w in words(good) + words(bad))
      known_share = |{w in words(good) + words(bad): count[w] >= min_count}| / |words(good) + words(bad)|

  (word tokens, with repetition; a pair without words is not covered, its share 0).
* :func:`write_pairs_jsonl` / :func:`read_neutral_pairs`: ``{"good", "bad", "group",
  "field"?}`` per line; read into :func:`~stagewise.lmkit.blimp.read_blimp_pairs`'s columns
  (group -> paradigm, field given or the group's name before its first '-', as Zorro's).

Example::

    control = shuffle_words(read_text(Path("tinystories_10k.txt")), seed=0)
    tok = train_bpe([text], vocab_size=8192)
    coverage = paradigm_coverage(pair_coverage(read_pairs(Path("zorro")), word_counts([text])))
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from stagewise.errors import UserError, short_repr
from stagewise.lmkit.readers import get_key, read_jsonl
from stagewise.runs.atomic import atomic_write_text

END_OF_TEXT = "<|endoftext|>"
"""The BPE's one special token: BOS, EOS, UNK and padding (GPT-2's)."""
BYTE_ALPHABET = 256
MAX_VOCAB = 1_000_000
"""A trained BPE's vocabulary: at least the 256 bytes + ``<|endoftext|>``, at most this."""
DEFAULT_MIN_FREQUENCY = 2
DEFAULT_MIN_COUNT = 2
"""A word is known to a corpus when it occurs there at least this often."""
WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")
"""A lower-cased word (on ``line.lower()``): letters, optionally an apostrophe and letters (``don't``, ``king's``)."""
SENTENCE = re.compile(r""".*?(?:[.!?]+["'”’]*(?=\s|$)|$)""")
"""A sentence: the shortest run of characters ending in a mark (``.!?``, closing quotes after
it) followed by whitespace or the end, or the line's end."""
FINAL_MARK = re.compile(r"""[.!?]+["'”’]*$""")
"""A sentence-final mark at the end of its last word."""
PAIR_COLUMNS = ("paradigm", "pair_id", "field", "linguistics_term", "sentence_good", "sentence_bad")


# ------------------------------------------------------------------ sentences and the control corpus
def sentences(text: str) -> list[str]:
    """The sentences of ``text``'s non-empty lines, in order (module docstring).

    Example::

        sentences('He said "Hi." Then he left!\\nOk')   # ['He said "Hi."', 'Then he left!', 'Ok']
    """
    return [s for line in text.split("\n") for s in _line_sentences(line)]


def _line_sentences(line: str) -> list[str]:
    return [m.group().strip() for m in SENTENCE.finditer(line) if m.group().strip()]


def shuffle_words(text: str, seed: int) -> str:
    """``text`` with the words of each sentence permuted by ``numpy.random.default_rng(seed)``
    (module docstring): same lines, same words per sentence, the final mark still last.

    Example::

        shuffle_words("The cat sat on the mat.\\nHi!", seed=0)   # e.g. "the on mat cat The sat.\\nHi!"
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise UserError(f"shuffle_words: seed={short_repr(seed)}; give a whole number >= 0")
    rng = np.random.default_rng(int(seed))
    out = []
    for line in text.split("\n"):
        shuffled = []
        for sentence in _line_sentences(line):
            words, mark = split_final_mark(sentence.split())
            shuffled.append(" ".join(words[i] for i in rng.permutation(len(words))) + mark)
        out.append(" ".join(shuffled))
    return "\n".join(out)


def split_final_mark(words: Sequence[str]) -> tuple[list[str], str]:
    """(the words with the last one's final mark cut off, the mark); a word that is only a mark
    is dropped from the words.

    Example::

        split_final_mark(["Hi", 'there."'])   # (['Hi', 'there'], '."')
    """
    words = list(words)
    found = FINAL_MARK.search(words[-1]) if words else None
    if found is None:
        return words, ""
    stem = words[-1][: found.start()]
    return (words[:-1] + [stem] if stem else words[:-1]), found.group()


# ------------------------------------------------------------------ tokenizer
def train_bpe(texts: Iterable[str], vocab_size: int, *, min_frequency: int = DEFAULT_MIN_FREQUENCY) -> Any:
    """A byte-level BPE (GPT-2's recipe: ``tokenizers``' BPE model, ByteLevel pre-tokenizer
    without a prefix space, its 256-byte initial alphabet, ByteLevel decoder) trained on
    ``texts`` to ``vocab_size`` tokens (merges of pairs seen at least ``min_frequency`` times),
    ``<|endoftext|>`` its BOS, EOS, UNK and padding; a ``transformers.PreTrainedTokenizerFast``.

    Example::

        tok = train_bpe([read_text(Path("tinystories_10k.txt"))], vocab_size=4096)
        tok.save_pretrained("bpe-4096")   # AutoTokenizer.from_pretrained("bpe-4096") gives the same ids
    """
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)) or \
            not BYTE_ALPHABET + 1 <= vocab_size <= MAX_VOCAB:
        raise UserError(f"train_bpe: vocab_size={short_repr(vocab_size)}; give a whole number from {BYTE_ALPHABET + 1} "
                        f"(the bytes + {END_OF_TEXT}) to {MAX_VOCAB:,}")
    if isinstance(min_frequency, bool) or not isinstance(min_frequency, (int, np.integer)) or min_frequency < 1:
        raise UserError(f"train_bpe: min_frequency={short_repr(min_frequency)}; give a whole number >= 1")
    if isinstance(texts, str):
        raise UserError("train_bpe: texts is one string; give a list of texts (e.g. [text])")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=int(vocab_size), min_frequency=int(min_frequency), show_progress=False,
                                  special_tokens=[END_OF_TEXT], initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token=END_OF_TEXT, eos_token=END_OF_TEXT,
                                   unk_token=END_OF_TEXT, pad_token=END_OF_TEXT)


# ------------------------------------------------------------------ word counts and pair coverage
def word_counts(texts: Iterable[str]) -> Counter[str]:
    """Occurrences of each lower-cased word (:data:`WORD`) in ``texts``.

    Example::

        word_counts(["The cat's hat.", "the CAT"])   # Counter({'the': 2, "cat's": 1, 'hat': 1, 'cat': 1})
    """
    if isinstance(texts, str):
        raise UserError("word_counts: texts is one string; give a list of texts (e.g. [text])")
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(WORD.findall(text.lower()))
    return counts


def pair_coverage(pairs: pd.DataFrame, counts: Counter[str] | dict[str, int],
                  min_count: int = DEFAULT_MIN_COUNT) -> pd.DataFrame:
    """``pairs`` (:func:`~stagewise.lmkit.probesets.read_pairs`' frame) with ``covered`` (bool)
    and ``known_share`` (float) per pair: the pair's word tokens seen at least ``min_count``
    times in ``counts`` (module docstring).

    Example::

        pair_coverage(read_pairs(Path("zorro")), word_counts([corpus]))   # + columns covered, known_share
    """
    missing = [c for c in ("paradigm", "sentence_good", "sentence_bad") if c not in pairs.columns]
    if missing:
        raise UserError(f"pair_coverage: the pairs lack column(s) {', '.join(missing)} (give read_pairs' frame)")
    if isinstance(min_count, bool) or not isinstance(min_count, (int, np.integer)) or min_count < 1:
        raise UserError(f"pair_coverage: min_count={short_repr(min_count)}; give a whole number >= 1")
    both = (pairs["sentence_good"].astype(str) + "\n" + pairs["sentence_bad"].astype(str)).str.lower()
    words = both.map(WORD.findall).explode()  # (sum words,) one row per word token, indexed by its pair
    known = words.map(lambda w: isinstance(w, str) and counts.get(w, 0) >= min_count)  # (sum words,) False for no word
    real = words.map(lambda w: isinstance(w, str))  # a pair without words explodes to one NaN row
    per_pair = pd.DataFrame({"known": known.astype(int), "real": real.astype(int)}).groupby(level=0).sum()  # (P, 2)
    out = pairs.copy()
    out["covered"] = ((per_pair["known"] == per_pair["real"]) & (per_pair["real"] > 0)).to_numpy()
    out["known_share"] = (per_pair["known"] / per_pair["real"].clip(lower=1)).to_numpy(dtype=float)
    return out


def paradigm_coverage(covered: pd.DataFrame) -> pd.DataFrame:
    """Per paradigm of :func:`pair_coverage`'s frame: ``field``, ``pairs``, ``covered_pairs``,
    ``covered_share`` (covered_pairs / pairs) and ``known_share`` (the mean of its pairs').

    Example::

        paradigm_coverage(pair_coverage(pairs, counts))   # one row per paradigm
    """
    missing = [c for c in ("paradigm", "field", "covered", "known_share") if c not in covered.columns]
    if missing:
        raise UserError(f"paradigm_coverage: the frame lacks column(s) {', '.join(missing)} (give pair_coverage's frame)")
    grouped = covered.groupby("paradigm", sort=False)
    out = pd.DataFrame({"field": grouped["field"].first(), "pairs": grouped.size(),
                        "covered_pairs": grouped["covered"].sum().astype(np.int64),
                        "known_share": grouped["known_share"].mean()})
    out.insert(3, "covered_share", out["covered_pairs"] / out["pairs"])
    return out.reset_index()


# ------------------------------------------------------------------ the neutral minimal-pair format
def write_pairs_jsonl(pairs: pd.DataFrame, path: Path) -> Path:
    """``pairs`` (:func:`~stagewise.lmkit.probesets.read_pairs`' frame) as JSON lines of
    ``{"good", "bad", "group", "field"}`` (group = paradigm), written atomically; the path.

    Example::

        write_pairs_jsonl(read_pairs(Path("../shared/data/zorro")), Path("zorro.jsonl"))
    """
    missing = [c for c in ("paradigm", "field", "sentence_good", "sentence_bad") if c not in pairs.columns]
    if missing:
        raise UserError(f"write_pairs_jsonl: the pairs lack column(s) {', '.join(missing)} (give read_pairs' frame)")
    rows = pd.DataFrame({"good": pairs["sentence_good"].astype(str), "bad": pairs["sentence_bad"].astype(str),
                         "group": pairs["paradigm"].astype(str), "field": pairs["field"].astype(str)})
    text = rows.to_json(orient="records", lines=True, force_ascii=False) if len(rows) else ""
    atomic_write_text(path, text if text.endswith("\n") or not text else text + "\n")
    return Path(path)


def read_neutral_pairs(path: Path, paradigms: Sequence[str] | None = None, limit: int | None = None) -> pd.DataFrame:
    """Minimal pairs of a JSON-lines file of ``{"good", "bad", "group", "field"?}`` in
    :data:`PAIR_COLUMNS` (module docstring): groups in the order first seen (or as
    ``paradigms`` lists them), ``pair_id`` a row's index within its group, the first ``limit``
    per group; one UserError line naming the file, line and key of a bad row.

    Example::

        pairs = read_neutral_pairs(Path("zorro.jsonl"), limit=50)   # paradigm, pair_id, field, ..., sentence_bad
    """
    path = Path(path)
    rows: dict[str, list[tuple[str, str, str]]] = {}
    for where, record in read_jsonl(path):
        good, bad = get_key(record, "good", str, path, where), get_key(record, "bad", str, path, where)
        group = get_key(record, "group", str, path, where)
        if not group.strip():
            raise UserError(f"{path}: {where}: key 'group' is empty; name the pair's paradigm")
        field = get_key(record, "field", str, path, where) if "field" in record else group.split("-", 1)[0]
        rows.setdefault(group, []).append((field, good, bad))
    if not rows:
        raise UserError(f'{path}: no minimal pairs (JSON lines of {{"good": ..., "bad": ..., "group": ...}})')
    names = list(rows) if paradigms is None else list(dict.fromkeys(paradigms))
    unknown = [n for n in names if n not in rows]
    if unknown:
        raise UserError(f"{path}: no group {unknown[0]!r} (groups: {', '.join(list(rows)[:5])}{', ...' if len(rows) > 5 else ''})")
    frames = []
    for name in names:
        kept = rows[name][:limit]
        frames.append(pd.DataFrame({"paradigm": name, "pair_id": np.arange(len(kept), dtype=np.int64),
                                    "field": [f for f, _, _ in kept], "linguistics_term": name,
                                    "sentence_good": [g for _, g, _ in kept], "sentence_bad": [b for _, _, b in kept]}))
    return pd.concat(frames, ignore_index=True)


__all__ = ["END_OF_TEXT", "WORD", "pair_coverage", "paradigm_coverage", "read_neutral_pairs", "sentences",
           "shuffle_words", "split_final_mark", "train_bpe", "word_counts", "write_pairs_jsonl"]
