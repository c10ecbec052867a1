"""What every run of a corpus shares, made once per corpus into ``OUT/corpora/NAME/`` (idempotent:
a folder finished with the same settings is reused; another settings' folder is refused).

=====================  =========================================================================
file                   what
=====================  =========================================================================
train.txt              the corpus less its last ``heldout_lines`` lines
train-shuffled.txt     the control: train.txt with the words shuffled within each sentence
heldout.txt            the held-out lines (the raw-text probes read them; never trained on)
tokenizer/             a byte-level BPE trained on train.txt (both arms use it: the same tokens)
lexicon.json           word -> word class (spaCy's majority UPOS over train.txt)
SUITE.jsonl            the suite's pairs whose words train.txt knows (>= min_count), at most
                       ``pairs_per_paradigm`` per paradigm, for paradigms with >= ``min_pairs``
SUITE-coverage.parquet per paradigm: pairs, covered pairs, covered share, known-word share
SUITE-ngram-ARM.parquet n-gram references (orders 1-4) fitted on that arm's training text, the
                       same tokens, scored on SUITE.jsonl: order, paradigm, accuracy
probes.yaml            the lm lab's probe config every run of the corpus is tracked with
done.json              the settings digest and the times
=====================  =========================================================================
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from stagewise.errors import UserError, read_json_object
from stagewise.lmkit.corpora import paradigm_coverage, pair_coverage, shuffle_words, train_bpe, word_counts, write_pairs_jsonl
from stagewise.lmkit.ngrams import paradigm_accuracy
from stagewise.lmkit.probesets import read_pairs
from stagewise.lmkit.scoring import encode_texts
from stagewise.lmkit.wordclasses import tag_lexicon, write_lexicon
from stagewise.runs.atomic import atomic_write_json, atomic_write_text
from studyconfig import Corpus, StudyConfig

ARMS = ("real", "shuffled")


def corpus_digest(cfg: StudyConfig, corpus: Corpus) -> dict[str, Any]:
    """The settings a corpus folder depends on (a folder made with others is refused)."""
    return {"corpus": corpus.model_dump(), "tokenizer": cfg.tokenizer.model_dump(), "probes": cfg.probes.model_dump(),
            "shuffle_seed": cfg.shuffle_seed, "ngram_orders": cfg.ngram_orders, "seq_len": cfg.train.seq_len}


def probe_config(cfg: StudyConfig, folder: Path) -> dict[str, Any]:
    """The lm lab's config for the study's probes (``task: none``: no lab task, only these sets)."""
    window = cfg.train.seq_len - 1  # + the prefix token = the model's context
    probes: list[dict[str, Any]] = []
    for suite in cfg.probes.suites:
        if (folder / f"{suite}.jsonl").stat().st_size > 0:
            probes.append({"name": suite, "kind": "pairs", "path": str(folder / f"{suite}.jsonl")})
    probes.append({"name": "words", "kind": "words", "path": str(folder / "heldout.txt"), "classes": str(folder / "lexicon.json"),
                   "limit": cfg.probes.heldout_tokens, "window": window})
    probes.append({"name": "heldout", "kind": "text", "path": str(folder / "heldout.txt"), "limit": cfg.probes.heldout_tokens,
                   "window": window, "frequency": str(folder / "train.txt")})
    return {"task": {"name": "none"}, "probes": probes}


def prepare_corpus(cfg: StudyConfig, corpus: Corpus, out: Path, log: Any = print) -> Path:
    """The corpus folder (module docstring), made now or reused."""
    folder = out / "corpora" / corpus.name
    digest = corpus_digest(cfg, corpus)
    done = folder / "done.json"
    if done.is_file():
        if read_json_object(done, "corpus record").get("settings") != digest:
            raise UserError(f"{folder}: made with other settings; give another --out or remove it")
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    source = cfg.root() / corpus.path
    if not source.is_file():
        raise UserError(f"corpora[{corpus.name}].path={corpus.path}: no such file under {cfg.root()}")
    lines = [line.strip() for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
    if len(lines) <= corpus.heldout_lines:
        raise UserError(f"corpora[{corpus.name}]: {len(lines)} lines; heldout_lines={corpus.heldout_lines} leaves none to train on")
    train, held = lines[:-corpus.heldout_lines], lines[-corpus.heldout_lines:]
    texts = {"real": "\n".join(train), "shuffled": shuffle_words("\n".join(train), cfg.shuffle_seed)}
    atomic_write_text(folder / "train.txt", texts["real"] + "\n")
    atomic_write_text(folder / "train-shuffled.txt", texts["shuffled"] + "\n")
    atomic_write_text(folder / "heldout.txt", "\n".join(held) + "\n")
    log(f"{corpus.name}: {len(train)} training lines, {len(held)} held out")
    tok = train_bpe(train, cfg.tokenizer.vocab_size)
    tok.save_pretrained(str(folder / "tokenizer"))
    times = {"bpe_s": time.perf_counter() - began}
    t0 = time.perf_counter()
    write_lexicon(tag_lexicon(train), folder / "lexicon.json")
    times["tagger_s"] = time.perf_counter() - t0
    counts = word_counts(train)
    sequences = {arm: encode_texts(tok, texts[arm].split("\n")) for arm in ARMS}  # both, whichever arms train
    for suite in cfg.probes.suites:
        t0 = time.perf_counter()
        pairs = pair_coverage(read_pairs(cfg.root() / suite), counts, cfg.probes.min_count)
        coverage = paradigm_coverage(pairs)
        testable = coverage.loc[coverage["covered_pairs"] >= cfg.probes.min_pairs, "paradigm"]
        kept = pairs[pairs["covered"] & pairs["paradigm"].isin(testable)].groupby("paradigm", sort=False).head(
            cfg.probes.pairs_per_paradigm).reset_index(drop=True)
        coverage.to_parquet(folder / f"{suite}-coverage.parquet")
        write_pairs_jsonl(kept, folder / f"{suite}.jsonl")
        log(f"{corpus.name}: {suite}: {len(testable)} of {len(coverage)} paradigms testable, {len(kept)} pairs")
        for arm in ARMS:
            table = paradigm_accuracy(kept, tok, sequences[arm], orders=tuple(cfg.ngram_orders)) if len(kept) else \
                pd.DataFrame(columns=["order", "paradigm", "field", "accuracy", "pairs"])
            table.to_parquet(folder / f"{suite}-ngram-{arm}.parquet")
        times[f"{suite}_s"] = time.perf_counter() - t0
    atomic_write_text(folder / "probes.yaml", yaml.safe_dump(probe_config(cfg, folder), sort_keys=False))
    atomic_write_json(done, {"settings": digest, "times": times, "lines": {"train": len(train), "heldout": len(held)}})
    return folder
