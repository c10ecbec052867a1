"""Benchmark the n-gram references of stagewise.lmkit.ngrams (not a test).

Usage: python benchmarks/bench_ngrams.py [--data /work/shared/data] [--orders 1 2 3 4] [--limit 200]
       [--vocab 4096] [--smoothings witten_bell kneser_ney ...] [--out benchmarks/results/ngrams.json]

Two measurements, on this machine, in this process:

* held-out perplexity per smoothing and order: a ByteLevel BPE (``--vocab`` ids, trained on the
  first 9,000 lines of text/tinystories_10k.txt), each order fitted on those lines and scored on
  the last 1,000 (``exp(-sum ln P / tokens)``, every token after the prefix token; every value is
  checked finite). Also the fit and score seconds of each.
* the study's use: a BPE trained on all 10,000 lines, each order of the default smoothing fitted
  on all of them (fit seconds), and the 23 Zorro paradigms x ``--limit`` pairs scored with each
  order (score seconds), plus the best order's accuracy per paradigm.

Prints markdown tables and writes ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from pathlib import Path

import numpy as np
import pandas as pd
from tokenizers import ByteLevelBPETokenizer
from transformers import PreTrainedTokenizerFast

from stagewise.lmkit.ngrams import DEFAULT_SMOOTHING, SMOOTHINGS, best, fit_ngram, score_pairs, sequence_logprob
from stagewise.lmkit.probesets import read_pairs
from stagewise.lmkit.scoring import encode_texts, prefix_token_id

SPECIAL = "<|endoftext|>"
TRAIN_LINES = 9000
CORPUS = Path("text") / "tinystories_10k.txt"


def bpe(lines: list[str], vocab: int) -> PreTrainedTokenizerFast:
    """A ByteLevel BPE trained on ``lines`` (its BOS = EOS = <|endoftext|>, id 0: the prefix token)."""
    model = ByteLevelBPETokenizer()
    model.train_from_iterator(lines, vocab_size=vocab, min_frequency=2, special_tokens=[SPECIAL], show_progress=False)
    return PreTrainedTokenizerFast(tokenizer_object=model._tokenizer, bos_token=SPECIAL, eos_token=SPECIAL)


def encode(tok: PreTrainedTokenizerFast, lines: list[str]) -> list[list[int]]:
    return encode_texts(tok, [line for line in lines if line.strip()])


def perplexities(lines: list[str], args: argparse.Namespace) -> list[dict]:
    tok = bpe(lines[:TRAIN_LINES], args.vocab)
    train, held = encode(tok, lines[:TRAIN_LINES]), encode(tok, lines[TRAIN_LINES:])
    n_held = sum(len(s) for s in held)
    print(f"\nheld-out perplexity: BPE {len(tok)} ids; train {len(train)} lines, {sum(map(len, train))} tokens; "
          f"held-out {len(held)} lines, {n_held} tokens\n")
    print("| smoothing | " + " | ".join(f"order {o}" for o in args.orders) + " | fit s | score s |")
    print("|---|" + "---|" * (len(args.orders) + 2))
    rows = []
    for smoothing in args.smoothings:
        cells, fit_s, score_s = [], 0.0, 0.0
        for order in args.orders:
            t0 = time.perf_counter()
            ref = fit_ngram(train, order, start=prefix_token_id(tok), smoothing=smoothing)
            t1 = time.perf_counter()
            ll = sequence_logprob(ref, held)
            t2 = time.perf_counter()
            ppl = math.exp(-float(ll.sum()) / n_held)
            if not (np.all(np.isfinite(ll)) and math.isfinite(ppl)):
                raise SystemExit(f"{smoothing} order {order}: a non-finite log-probability")
            rows.append({"smoothing": smoothing, "order": order, "perplexity": ppl, "fit_s": t1 - t0, "score_s": t2 - t1})
            cells.append(f"{ppl:.2f}")
            fit_s, score_s = fit_s + t1 - t0, score_s + t2 - t1
        print(f"| {smoothing} | " + " | ".join(cells) + f" | {fit_s:.1f} | {score_s:.1f} |")
    return rows


def study(lines: list[str], data: Path, args: argparse.Namespace) -> tuple[list[dict], list[dict]]:
    tok = bpe(lines, args.vocab)
    t0 = time.perf_counter()
    corpus = encode(tok, lines)
    encode_s = time.perf_counter() - t0
    pairs = read_pairs(data / "zorro", limit=args.limit)
    print(f"\nstudy use ({DEFAULT_SMOOTHING}): BPE {len(tok)} ids on all {len(corpus)} lines ({sum(map(len, corpus))} tokens, "
          f"encoded in {encode_s:.1f} s); {pairs['paradigm'].nunique()} Zorro paradigms, {len(pairs)} pairs\n")
    print("| order | fit s | score s | accuracy (micro) | ties |")
    print("|---|---|---|---|---|")
    rows, tables = [], []
    for order in args.orders:
        t0 = time.perf_counter()
        ref = fit_ngram(corpus, order, start=prefix_token_id(tok))
        t1 = time.perf_counter()
        scored = score_pairs(ref, tok, pairs)
        t2 = time.perf_counter()
        ties = int((scored["ll_good"] == scored["ll_bad"]).sum())
        rows.append({"order": order, "fit_s": t1 - t0, "score_s": t2 - t1, "accuracy": float(scored["correct"].mean()),
                     "ties": ties, "vocab_size": ref.vocab_size, "n_tokens": ref.n_tokens})
        print(f"| {order} | {t1 - t0:.2f} | {t2 - t1:.2f} | {scored['correct'].mean():.3f} | {ties} |")
        table = (scored.assign(tie=scored["ll_good"] == scored["ll_bad"]).groupby("paradigm")
                 .agg(field=("field", "first"), accuracy=("correct", "mean"), pairs=("correct", "size"), ties=("tie", "sum"))
                 .reset_index().assign(order=order))
        tables.append(table)
    top = best(pd.concat(tables, ignore_index=True))
    print(f"\ntotal: fit {sum(r['fit_s'] for r in rows):.1f} s, score {sum(r['score_s'] for r in rows):.1f} s\n")
    print("| paradigm | best accuracy | ties | order |")
    print("|---|---|---|---|")
    for row in top.itertuples():
        print(f"| {row.paradigm} | {row.accuracy:.3f} | {row.ties} | {row.order} |")
    return rows, top.to_dict(orient="records")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=Path("/work/shared/data"), help="the shared data folder (../shared/data)")
    parser.add_argument("--orders", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--limit", type=int, default=200, help="Zorro pairs per paradigm")
    parser.add_argument("--vocab", type=int, default=4096, help="BPE vocabulary size")
    parser.add_argument("--smoothings", nargs="+", default=list(SMOOTHINGS), choices=SMOOTHINGS)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "ngrams.json")
    args = parser.parse_args()
    lines = (args.data / CORPUS).read_text(encoding="utf-8").split("\n")[:10000]
    started = time.perf_counter()
    held_out = perplexities(lines, args)
    timings, best_rows = study(lines, args.data, args)
    result = {"machine": f"{platform.processor() or platform.machine()}, {platform.python_version()}",
              "default_smoothing": DEFAULT_SMOOTHING, "vocab": args.vocab, "limit": args.limit,
              "perplexity": held_out, "study": timings, "best": best_rows, "total_s": time.perf_counter() - started}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"\nwrote {args.out} (total {result['total_s']:.0f} s)")


if __name__ == "__main__":
    main()
