"""In what order does a language model learn grammar and meaning while it is pretrained?
Paper 1's question (syntax before semantics) asked of pretraining from raw text (issue 44).

Small GPT-2s are trained from scratch on each corpus (and on its word-shuffled control) with
several seeds, probed at log-spaced steps through the public probe-set API (minimal pairs per
paradigm, the paper's categories on held-out raw text, held-out loss), and the study's declared
claims are judged by the verdict engine against n-gram references and the shuffled-word control.

Usage (from the repository root; ``--data`` or ``$STAGEWISE_DATA`` is the folder holding
``text/``, ``zorro/`` and ``blimp/``)::

    python examples/pretraining_stages/study.py all --out runs/pretraining            # prepare, train, judge
    python examples/pretraining_stages/study.py train --out runs/pretraining --executor ray
    python examples/pretraining_stages/study.py judge --out runs/pretraining --results results/lm --figures docs/figures

Each step is resumable: run the same command again after a kill and it goes on (finished corpus
folders and runs are kept; an unfinished run resumes from its last Trainer checkpoint and its
last record). ``--set a.b=v`` changes a setting of study.yaml (a study folder made with other
settings is refused).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # the study's modules, also for the executors' spawned workers
    sys.path.insert(0, str(HERE))

from stagewise.errors import UserError  # noqa: E402
from stagewise.orchestrate.executors import RUNNERS, ExecutorOptions, check_available  # noqa: E402
from stagewise.orchestrate.tasks import Task  # noqa: E402
from stagewise.runs.atomic import atomic_write_json  # noqa: E402
from studyconfig import StudyConfig, load_config  # noqa: E402
from training import run_job, run_key  # noqa: E402

CONFIG = HERE / "study.yaml"


def check_folder(cfg: StudyConfig, out: Path) -> None:
    """A study folder keeps its settings: another study's folder is one line."""
    record = out / "study.json"
    if record.is_file():
        kept = json.loads(record.read_text())
        if kept.get("digest") != cfg.digest():
            raise UserError(f"{out}: a study with other settings (digest {kept.get('digest')}, these {cfg.digest()}); "
                            "give another --out")
    else:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_json(record, {"digest": cfg.digest(), "settings": cfg.model_dump(mode="json")})


def prepare_all(cfg: StudyConfig, out: Path) -> dict[str, Path]:
    from prepare import prepare_corpus

    return {c.name: prepare_corpus(cfg, c, out) for c in cfg.corpora}


def tasks_of(cfg: StudyConfig, folders: dict[str, Path], keep_checkpoints: bool = False) -> list[Task]:
    """One task per corpus x arm x seed, seeds innermost (every arm's first seeds finish first)."""
    out = []
    for seed in cfg.seeds:
        for corpus in cfg.corpora:
            for arm in cfg.arms:
                spec = {"study": cfg.model_dump(mode="json"), "folder": str(folders[corpus.name].resolve()), "arm": arm,
                        "seed": seed, "keep_checkpoints": keep_checkpoints}
                out.append(Task(run_key(corpus.name, arm, seed), json.dumps(spec)))
    return out


def train_all(cfg: StudyConfig, out: Path, folders: dict[str, Path], keep_checkpoints: bool = False) -> dict[str, str]:
    """Every run on the configured executor; {key: status}. A failed run is reported, the rest go on."""
    opts = ExecutorOptions(kind=cfg.executor.kind, max_parallel=cfg.executor.max_parallel, cluster=cfg.executor.cluster)
    check_available(opts)
    # Ray's and submitit's processes import the worker (training.run_job) by name: they inherit the
    # environment (SLURM's sbatch exports it), so the study's folder goes on PYTHONPATH
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)
    tasks = tasks_of(cfg, folders, keep_checkpoints)
    statuses: dict[str, str] = {}
    began = time.perf_counter()

    def report(key: str, status: str, error: str | None) -> None:
        statuses[key] = status
        print(f"[{time.perf_counter() - began:7.0f} s] {key}: {status}" + (f" ({error})" if error else ""), flush=True)

    RUNNERS[opts.kind](tasks, out, opts, report, worker=run_job)
    return statuses


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=["prepare", "train", "judge", "all"])
    parser.add_argument("--config", type=Path, default=CONFIG)
    parser.add_argument("--out", type=Path, required=True, help="the study folder (corpora/, runs/, trainer/, locks/)")
    parser.add_argument("--data", default=None, help="the data root (text/, zorro/, blimp/); default $STAGEWISE_DATA")
    parser.add_argument("--executor", choices=["local", "ray", "slurm"], default=None)
    parser.add_argument("--max-parallel", type=int, default=None)
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="A.B=V")
    parser.add_argument("--results", type=Path, default=None, help="judge: where the claims files go (e.g. results/lm)")
    parser.add_argument("--figures", type=Path, default=None, help="judge: where the figures go (e.g. docs/figures)")
    parser.add_argument("--keep-checkpoints", action="store_true",
                        help="train: keep every Trainer checkpoint (for `stagewise lm trajectory`), not only the last")
    parser.add_argument("--label", default="pretraining-stages", help="judge: the claims files' label prefix")
    args = parser.parse_args(argv)
    sets = list(args.sets)
    if args.data:
        sets.append(f"data_root={args.data}")
    if args.executor:
        sets.append(f"executor.kind={args.executor}")
    if args.max_parallel:
        sets.append(f"executor.max_parallel={args.max_parallel}")
    try:
        cfg = load_config(args.config, sets)
        check_folder(cfg, args.out)
        folders = prepare_all(cfg, args.out)
        if args.step in ("train", "all"):
            statuses = train_all(cfg, args.out, folders, args.keep_checkpoints)
            bad = {k: s for k, s in statuses.items() if s not in ("done", "skipped")}
            if bad:
                print(f"{len(bad)} run(s) did not finish: {', '.join(sorted(bad))}; run the same command again", file=sys.stderr)
                return 1
        if args.step in ("judge", "all"):
            from judge import judge_all

            judge_all(cfg, args.out, folders, results=args.results, figures=args.figures, label=args.label,
                      command=_command(args))
    except UserError as err:
        print(f"error: {err.messages[0]}", file=sys.stderr)
        return 2
    return 0


def _command(args: Any) -> str:
    parts = ["python examples/pretraining_stages/study.py all", f"--out {args.out}"]
    if args.config != CONFIG:
        parts.append(f"--config {args.config}")
    parts += [f"--set {s}" for s in args.sets]
    return " ".join(parts)


if __name__ == "__main__":
    sys.exit(main())
