"""The LM lab's commands: ``stagewise eval blimp``, ``stagewise lm reduce``,
``stagewise lm rank-curve``, ``stagewise lm sample`` (MODEL references: see :mod:`stagewise.labs.lm.refs`),
``stagewise lm trajectory`` (saved checkpoints of one training: :mod:`stagewise.orchestrate.trajectory`)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator, List, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .config import MAX_SEED
from .errors import UserError
from .lmkit.extra import require_lm_extra

eval_app = typer.Typer(no_args_is_help=True, help="Evaluate a model on a benchmark (blimp).")
lm_app = typer.Typer(no_args_is_help=True, help="LM-lab tools: attention surgery, rank curves, samples for hand checks, "
                                                "trajectories of saved checkpoints.")
out_console = Console()
err_console = Console(stderr=True)


def _torch_threads(threads: int | None) -> None:
    import torch

    if threads:
        torch.set_num_threads(threads)


def _blimp_folder(data: Path | None) -> Path:
    if data is not None:
        return data
    root = os.environ.get("STAGEWISE_DATA")
    if root:
        folder = Path(root) / "blimp"
        if not folder.is_dir():
            raise UserError(f"{folder}: not found; $STAGEWISE_DATA={root} lacks blimp/ (the shared-data layout); "
                            "give --data DIR or export STAGEWISE_DATA=<folder that has blimp/>")
        return folder
    raise UserError("--data: give the folder of BLiMP's <paradigm>.jsonl files (or set STAGEWISE_DATA to a data root)")


def _check_out(out: Path, flag: str = "--out") -> None:
    """``--out``'s checks, before the expensive work and leaving nothing behind: no part of
    it is a file, and a file can be created (and is removed at once) in it or in its nearest
    existing parent, which permission bits alone do not tell (root on a read-only mount, ACLs).
    Nothing is made on disk until every input has passed (then :func:`_staged_out`)."""
    from .orchestrate.runner import check_dir, probe_writable

    check_dir(out, flag)
    probe_writable(next((p for p in [out, *out.parents] if p.exists()), Path(".")), flag, out)


@contextlib.contextmanager
def _staged_out(out: Path, flag: str = "--out") -> Iterator[Path]:
    """Create ``out`` (after every check has passed) and yield a hidden folder inside it; the
    files written there move into ``out`` when the block ends. A failure or a stop (Ctrl-C)
    inside the block removes them and the folders this made, so no partial output is left
    looking complete; an OSError (a full disk, a read-only folder) is one line naming ``out``."""
    from .orchestrate import writable_dir

    made = [p for p in [out, *out.parents] if not p.exists()]  # the deepest first
    staging = None
    try:
        writable_dir(out, flag)
        staging = Path(tempfile.mkdtemp(dir=out, prefix=".partial-"))
        yield staging
        for path in sorted(staging.iterdir()):
            os.replace(path, out / path.name)
        staging.rmdir()
    except BaseException as err:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        for folder in made:
            try:
                folder.rmdir()
            except OSError:
                break
        if isinstance(err, OSError):
            raise UserError(f"{flag} {out}: cannot write the output ({err.strerror or err}); nothing was written") from None
        raise


@eval_app.command("blimp")
def eval_blimp_cmd(
    model: str = typer.Argument(..., help="hub id, local HF folder, .gguf file, tiny-gpt2, or a run directory (RUN@EPOCH)"),
    paradigms: Optional[str] = typer.Option(None, "--paradigms", help="comma-separated paradigms (default: all)"),
    data: Optional[Path] = typer.Option(None, "--data", help="folder of BLiMP <paradigm>.jsonl files (default $STAGEWISE_DATA/blimp)"),
    out: Optional[Path] = typer.Option(None, "--out", help="write blimp.parquet and summary tables here"),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="first N pairs per paradigm"),
    batch_tokens: int = typer.Option(4096, "--batch-tokens", min=16, help="padded tokens per forward pass"),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="torch CPU threads"),
) -> None:
    """BLiMP minimal-pair accuracy per paradigm and field (log P(good) >= log P(bad), after BOS/EOS: a tie
    counts as right, as in lm-evaluation-harness), with the ties beside it and a warning when many pairs tie."""
    require_lm_extra("eval blimp")
    from .lmkit.blimp import blimp_accuracy, read_blimp_pairs, score_blimp, write_blimp
    from .labs.lm.refs import load_ref

    names = [p.strip() for p in paradigms.split(",") if p.strip()] if paradigms else None
    pairs = read_blimp_pairs(_blimp_folder(data), names, limit)
    if out is not None:
        _check_out(out)
    ref = load_ref(model)
    if ref.loaded.vocab_ids is not None:
        raise UserError(f"{model}: a compact-vocabulary model cannot score arbitrary sentences (its rows are only the run's token ids)")
    _torch_threads(threads)
    scored = score_blimp(ref.loaded.model, ref.loaded.tokenizer, pairs, batch_tokens=batch_tokens)
    result = blimp_accuracy(scored)
    table = Table(title=escape(f"BLiMP: {ref.label} ({result.n_pairs} pairs, {result.n_paradigms} paradigms)"))
    for col in ("field", "paradigms", "pairs", "accuracy", "ties"):
        table.add_column(col)
    ties = (scored["ll_good"] == scored["ll_bad"]).groupby(scored["field"]).sum()  # per field; counted right (lm_eval's rule)
    for row in result.fields.itertuples():
        table.add_row(escape(str(row.field)), str(row.n_paradigms), str(row.n_pairs), f"{row.accuracy:.4f}", str(int(ties.get(row.field, 0))))
    table.add_row("all", str(result.n_paradigms), str(result.n_pairs), f"{result.accuracy:.4f}", str(result.n_ties))
    out_console.print(table)
    out_console.print("a tie (equal log-probabilities) counts as right, as in lm-evaluation-harness", highlight=False,
                      markup=False)
    warning = result.tie_warning()
    if warning is not None:
        err_console.print(f"warning: {warning}", highlight=False, markup=False, soft_wrap=True)
    if out is not None:
        with _staged_out(out) as staging:  # all four files or none (a full disk, Ctrl-C)
            paths = write_blimp(scored, result, staging)
        out_console.print(f"wrote {out / paths['pairs'].name}", highlight=False, markup=False)


@lm_app.command("reduce")
def reduce_cmd(
    model: str = typer.Argument(..., help="hub id, local HF folder, .gguf file, or a run directory (RUN@EPOCH)"),
    select: str = typer.Option(..., "--select", help="selector, e.g. 'blocks.1-6.attn.{qkv,o}' or 'blocks.0.attn.q.head.1'"),
    keep: str = typer.Option("largest", "--keep", help="largest | smallest | random singular directions (random: k of them drawn with --seed)"),
    p: float = typer.Option(..., "--p", help="rank preservation in (0, 1]: keep floor(p r) directions"),
    out: Path = typer.Option(..., "--out", help="write the edited model here as a Hugging Face folder"),
    method: str = typer.Option("exact", "--method", help="exact | randomized (seeded; largest only)"),
    seed: int = typer.Option(0, "--seed", min=0, max=MAX_SEED - 1, help="seed of the randomized SVD and of --keep random"),
) -> None:
    """Rank-reduce selected attention matrices and save the edited model (safetensors + tokenizer).

    A GGUF model is written dequantised; a compact-vocabulary run as the full vocabulary (the
    other ids never win: see docs/lmkit.md)."""
    require_lm_extra("lm reduce")
    from .lmkit.export import check_exportable, export_hf
    from .labs.lm.refs import load_ref
    from .lmkit.surgery import check_reduce_args, reduce_rank
    from .runs import safe_csv

    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"--out {out}: exists and is not an empty directory")
    _check_out(out)
    check_reduce_args(keep, p, method)
    ref = load_ref(model)
    check_exportable(ref.loaded)  # before any work
    reduction = reduce_rank(ref.loaded.model, select, keep=keep, p=p, method=method, seed=seed)
    table = reduction.table()
    written = export_hf(ref.loaded, out, {"reduction.csv": safe_csv(table)})  # complete or nothing
    line = f"reduced {len(table)} matrices of {ref.label} (keep {keep}, p = {p:g}); wrote {out}"
    note = written.describe()
    out_console.print(f"{line}; {note}" if note else line, markup=False, highlight=False, soft_wrap=True)


@lm_app.command("rank-curve")
def rank_curve_cmd(
    models: List[str] = typer.Argument(..., help="run directories (RUN@EPOCH), or models with --task/--data; with --claim "
                                      "an early and a late checkpoint of each run: RUN@5 RUN@30 RUN2@5 RUN2@30 ..."),
    p: str = typer.Option("0.1:1.0:0.1", "--p", help="START:STOP:STEP or a comma list"),
    select: Optional[str] = typer.Option(None, "--select", help="default: the authors' blocks.1-6.attn.{qkv,o} (GPT-2 >= 7 blocks)"),
    keep: str = typer.Option("largest", "--keep", help="largest | smallest | random (--draws seeded draws per p)"),
    task: Optional[str] = typer.Option(None, "--task", help="data for models that are not runs: counterfact, hotpotqa, ..."),
    data: Optional[Path] = typer.Option(None, "--data", help="the task's file or folder"),
    out: Path = typer.Option(Path("rank-curve"), "--out", help="output folder (table, CSV, figure; with --claim the claim JSON)"),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="torch CPU threads"),
    rule: str = typer.Option("open", "--rule", help="type rule of the counts: open (declared answer types; the lab's "
                             "thresholds.type_rule default) | closed (answers of the same group in the sample)"),
    draws: int = typer.Option(5, "--draws", help="random-direction draws per checkpoint and p (keep random, --claim)"),
    seed: int = typer.Option(0, "--seed", min=0, max=MAX_SEED - 1, help="base seed of the random-direction draws"),
    claim: bool = typer.Option(False, "--claim", help="judge the spectral claim (spectral_small_directions_early) over "
                               "the runs: keep-largest, random and keep-smallest on the examples correct at both checkpoints"),
) -> None:
    """Category counts under rank reduction, per checkpoint and p (the paper's rank-preservation plot);
    with --claim, the spectral claim against the random-direction baseline over runs (seeds)."""
    require_lm_extra("lm rank-curve")
    from .config import resolve
    from .labs.lm.config import Config
    from .labs.lm.rankcurve import check_curve_args, curve_configs, parse_p_range, rank_curve, write_rank_curve
    from .labs.lm.refs import load_ref
    from .lmkit.surgery import check_reduce_args

    ps = parse_p_range(p)  # bounded (MAX_P_POINTS) before any list is built
    check_reduce_args(keep, ps[0])
    check_curve_args(rule, draws)
    if claim and (task is not None or data is not None):
        raise UserError("--claim compares checkpoints of runs of this lab, on each run's own data; drop --task/--data")
    if claim and len(models) < 2:
        raise UserError(f"--claim needs an early and a late checkpoint of each run (RUN@5 RUN@30 ...); got {len(models)} model")
    _check_out(out)
    config = None
    if task is not None or data is not None:
        overrides = {"task": {"name": task or "counterfact"}}
        if data is not None:
            overrides["data"] = {"path": str(data)}
        config = resolve(Config, overrides)
    _torch_threads(threads)
    refs = [load_ref(m) for m in models]  # each model checked (offline: one line at once), then loaded
    curve_configs(refs, config)
    if claim:
        _spectral_claim(refs, ps, select, draws, seed, rule, out)
        return
    curve = rank_curve(refs, ps, config=config, selector=select, keep=keep, rule=rule, draws=draws, seed=seed)
    with _staged_out(out) as staging:  # every file or none (a full disk, Ctrl-C)
        paths = [out / path.name for path in write_rank_curve(curve, staging)]
    shown = curve.table.groupby(["model", "p"], sort=False)[["semantic-correct", "type-correct", "type-wrong", "excluded"]].mean()
    how = f"random, mean of {draws} draws" if keep == "random" else keep
    table = Table(title=escape(f"rank curve (keep {how}; {rule} type rule)"))
    for col in ("model", "p", "semantic-correct", "type-correct", "type-wrong", "excluded"):
        table.add_column(col)
    for (label, at), row in shown.iterrows():
        table.add_row(escape(str(label)), f"{at:.2f}", *(f"{row[c]:g}" for c in ("semantic-correct", "type-correct", "type-wrong", "excluded")))
    out_console.print(table)
    out_console.print(f"wrote {paths[0]}", highlight=False, markup=False)


def _spectral_claim(refs, ps, select, draws, seed, rule, out) -> None:
    """``lm rank-curve --claim``: the curves over E, the per-seed values, the claim, the files, the verdict line."""
    from .labs.lm.claims import spectral_claim
    from .labs.lm.rankcurve import at_p, pair_checkpoints, per_seed_values, spectral_curves, write_spectral
    from .labs.lm.claimspecs import CLAIM_P

    pairs = pair_checkpoints(refs)
    curves = spectral_curves(pairs, ps, selector=select, draws=draws, seed=seed, rule=rule)
    values = per_seed_values(curves.table)
    result = spectral_claim(values)
    with _staged_out(out) as staging:  # every file or none (a full disk, Ctrl-C)
        paths = [out / path.name for path in write_spectral(curves, result, staging)]
    stats = at_p(curves.table)
    table = Table(title=escape(f"retained fraction of E at p = {CLAIM_P:g} ({curves.selector}; random: mean +- sd of "
                               f"{draws} draws; {rule} type rule)"))
    for col in ("seed", "E", "stage", "keep largest", "random", "keep smallest", "rho"):
        table.add_column(col)
    for row in values.itertuples():
        for stage in ("early", "late"):
            cell = {k: stats.loc[(row.seed, stage, k)] for k in ("largest", "random", "smallest")}
            rho = getattr(row, f"rho_{stage}")
            table.add_row(str(row.seed), str(row.n), stage, f"{cell['largest']['mean']:.3f}",
                          f"{cell['random']['mean']:.3f} +- {cell['random']['std']:.3f}", f"{cell['smallest']['mean']:.3f}",
                          "n/a" if rho != rho else f"{rho:.3f}")
    out_console.print(table)
    per_seed = ", ".join(f"seed {r.seed}: {r.value:.3g} (did {r.did:.3g})" for r in values.itertuples())
    out_console.print(f"rho_early - rho_late per seed: {per_seed}", highlight=False, markup=False, soft_wrap=True)
    out_console.print(result.line(), highlight=False, markup=False, soft_wrap=True)
    out_console.print(f"wrote {paths[0]}", highlight=False, markup=False)


@lm_app.command("sample")
def sample_cmd(
    run: Path = typer.Argument(..., help="a finished lm run directory (answer framing)"),
    category: str = typer.Option("type-correct", "--category", help="semantic-correct | type-correct | type-wrong | excluded"),
    n: int = typer.Option(20, "--n", help="how many to draw (without replacement)"),
    rule: str = typer.Option("open", "--rule", help="open (declared answer types) | closed (answers of the same group in the sample)"),
    epoch: str = typer.Option("peak", "--epoch", help="a recorded epoch, or peak (most type-correct under the rule), first, last"),
    seed: int = typer.Option(0, "--seed", min=0, max=MAX_SEED - 1, help="seed of the draw"),
) -> None:
    """Print a seeded random sample of a run's predictions of one category, for a hand check."""
    require_lm_extra("lm sample")
    from .labs.lm.refs import check_sample_args, sample_predictions

    check_sample_args(category, n, rule, epoch, seed)
    sample, at, total = sample_predictions(run, category, n, rule=rule, epoch=epoch, seed=seed)
    table = Table(title=escape(f"{len(sample)} of {total} {category} predictions ({rule} rule) at epoch {at:g}, seed {seed}"))
    columns = ("example_id", "group", "prompt", "answer", "prediction", "closed", "open")
    for col in columns:
        table.add_column(col, overflow="fold")
    for _, row in sample.iterrows():
        cells = {k: (repr(row[k]) if k == "answer" else row[k]) if isinstance(row[k], str) else "(none)" for k in columns}
        if isinstance(row["prediction"], str):
            cells["prediction"] = repr(row["prediction"])  # quoted: a leading space is part of the token
        else:
            cells["prediction"] = f"({row['prediction_note']})"  # no top id, or one the tokenizer does not have
        table.add_row(*(escape(cells[k]) for k in columns))  # data text, never markup
    out_console.print(table)


@lm_app.command("trajectory")
def trajectory_cmd(
    checkpoints: List[str] = typer.Argument(..., metavar="CKPT", help="model folders of one training (save_pretrained), "
                                            "in training order"),
    out: Path = typer.Option(..., "--out", "-o", help="the trajectory's run directory; rerun the command to continue it"),
    preset: Optional[str] = typer.Option(None, "--preset", "-p", help="an lm preset for the probe sets (task, data, "
                                         "thresholds), see `stagewise labs`"),
    config_file: Optional[Path] = typer.Option(None, "--config", "-c", help="YAML file of config values"),
    sets: List[str] = typer.Option([], "--set", "-s", help="a config value a.b=value, or executor.KEY=VALUE with "
                                   "--executor (as for `sweep`); repeatable"),
    steps: Optional[str] = typer.Option(None, "--steps", help="each checkpoint's training step, comma-separated "
                                        "(default: trainer_state.json's global_step, else the position)"),
    executor: Optional[str] = typer.Option(None, "--executor", help="local, ray or slurm: each checkpoint runs as a task "
                                           "of its own first (default: every checkpoint in this process)"),
    max_parallel: Optional[int] = typer.Option(None, "--max-parallel", help="with --executor: at most this many at once"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress"),
) -> None:
    """Evaluate saved checkpoints of one training, in order, into one lm run: the lab's records,
    stages and claims of a model it did not train."""
    require_lm_extra("lm trajectory")
    from .cli_sweep import _check_flags, _executor_options, _split_sets
    from .orchestrate.trajectory import run_trajectory_dir, trajectory_config

    _check_flags(executor, max_parallel)
    executor_sets, config_sets = _split_sets(sets)
    if executor is None and (executor_sets or max_parallel is not None):
        raise UserError("--set executor.* / --max-parallel: only with --executor local|ray|slurm")
    opts = _executor_options({}, executor_sets, executor, max_parallel) if executor is not None else None
    lab, config = trajectory_config("lm", checkpoints, preset=preset, config=config_file, sets=config_sets,
                                    steps=_steps(steps))
    _check_out(out)
    _run_trajectory(lambda on_part: run_trajectory_dir(lab, config, out, executor=opts, progress=not quiet, on_part=on_part),
                    out, quiet)
    for line in _trajectory_lines(out, len(config.source.checkpoints)):
        out_console.print(line, highlight=False, markup=False, soft_wrap=True)


def _steps(text: Optional[str]) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UserError(f"--steps {text}: give whole numbers separated by commas, e.g. 100,200,400") from None


def _run_trajectory(run, out: Path, quiet: bool) -> None:
    """``run(on_part)``, its outcomes as the CLI says them: failed checkpoint runs (a line each,
    exit 1), a stop (128 + signum), a diverged (3) or failed (1) run, bad input (UserError)."""
    import signal

    from .engine import Diverged
    from .orchestrate.trajectory import FAILED, PartsFailed
    from .runs import Interrupted
    from .runs.stops import signum_of

    def on_part(result) -> None:
        if result.status in FAILED:  # a line each as they end (PartsFailed then says how many)
            err_console.print(result.line(out), highlight=False, markup=False, soft_wrap=True)
        elif not quiet:
            err_console.print(f"{result.status} {result.label}", highlight=False, markup=False, soft_wrap=True)

    again = f"continue with the same command (or in this process: stagewise run --resume {out})"
    try:
        run(on_part)
    except PartsFailed as err:
        err_console.print(f"{len(err.failed)} of {err.total} checkpoint runs did not finish; the trajectory in {out} is "
                          f"kept (finished checkpoints too): {again}", highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(1) from None
    except (Interrupted, KeyboardInterrupt) as err:
        signum = signum_of(err)
        err_console.print(f"interrupted ({signal.Signals(signum).name}); {again}", highlight=False, markup=False,
                          soft_wrap=True)
        raise typer.Exit(128 + int(signum)) from None
    except UserError:
        raise
    except Diverged as err:
        err_console.print(f"trajectory diverged: {err} (metrics so far kept in {out})", highlight=False, markup=False)
        raise typer.Exit(3) from None
    except Exception as err:
        log = getattr(err, "stagewise_error_log", None)
        where = f"traceback in {log}; " if log else ""
        err_console.print(f"trajectory failed: {type(err).__name__}: {err} ({where}{again})", highlight=False,
                          markup=False, soft_wrap=True)
        raise typer.Exit(1) from None


def _trajectory_lines(out: Path, checkpoints: int) -> list[str]:
    """Where the run is, its claims' verdicts and its stages, one line each."""
    from .report.claims import read_summary
    from .runs import read_manifest

    manifest = read_manifest(out)
    summary = read_summary(out / "summary.json")
    lines = [f"trajectory: {out} (status {manifest['status']}, {checkpoints} checkpoints, config {manifest['config_hash']})"]
    if summary.claims:
        lines.append("claims: " + "; ".join(f"{c.id} {c.verdict}" for c in summary.claims))
    stages = (summary.details.get("stage_detection") or {}).get("stages") or {}
    if stages:
        shown = [f"{name} {entry.get('mean'):g}" if entry.get("mean") is not None else f"{name} not reached"
                 for name, entry in stages.items()]
        lines.append("stages (step): " + ", ".join(shown))
    lines.append(f"details: stagewise show {out}; report: stagewise report {out}")
    return lines
