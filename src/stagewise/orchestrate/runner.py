"""Run one lab config in a run directory: create or resume, lock, stream, finish, record.

:func:`execute_spec` is the one code path "run this spec into this directory" used by
``reproduce`` and sweeps (``stagewise run`` takes the same steps: :func:`start_run`, then
:func:`execute`); another process can import and call it::

    from stagewise import RunSpec, execute_spec
    manifest = execute_spec(RunSpec(lab="ntp", preset="example1", name="x"), "runs/x")

Every outcome is recorded in the manifest: ``done``, ``failed`` (error and error.log),
``diverged`` (step and seed), ``interrupted`` (SIGINT or SIGTERM; a checkpoint is written
at the next step when the lab is inside its training loop). What was logged so far is
kept and compacted to Parquet.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import tempfile
import threading
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import yaml

from ..config import config_hash, to_yaml, validate
from ..engine import Diverged
from ..errors import UserError
from ..labs import Lab, RunSpec, get_lab, spec_config, spec_lab
from ..progress import ProgressCallback, plain_every_s
from ..runs.stops import note_stop
from ..runs import Interrupted, RunDirContext, RunLock, RunPaths, read_manifest, update_manifest
from ..runs.names import rename_metrics
from ..runs.links import check_resumable, refuse_links
from ..runs.sinks import resolve_sinks
from ..runs.store import atomic_write_json, atomic_write_text, git_sha, now_iso, package_versions, write_parquet

if TYPE_CHECKING:
    import pandas as pd

SIZE_MARGIN = 0.9  # refuse runs estimated above this fraction of the available memory


# ------------------------------------------------------------------------ sizes
def available_memory() -> int:
    """MemAvailable from /proc/meminfo (bytes); a large number where unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 62


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**28 else f"{n / 2**20:.0f} MiB"


def check_size(lab: Lab, config: Any, out: Path | None, allow_large: bool = False) -> Any:
    """Refuse, before any work, a run whose estimated memory or disk cannot fit (disk only
    when ``out`` is given); returns the lab's estimate."""
    est = lab.estimate(config)
    if allow_large:
        return est
    avail = available_memory()
    if est.memory_bytes > SIZE_MARGIN * avail:
        raise UserError(f"estimated peak memory {_gib(est.memory_bytes)} ({est.detail}) exceeds the available "
                        f"memory {_gib(avail)}; make the run smaller or pass --allow-large to try anyway")
    if out is not None:
        check_disk(est.disk_bytes, est.detail, out)
    return est


def check_disk(disk_bytes: int, detail: str, out: Path, allow_large: bool = False) -> None:
    """Refuse ``disk_bytes`` (the estimated bytes a run, or all runs of a sweep, will write)
    above :data:`SIZE_MARGIN` of the free disk at ``out`` (or its nearest existing parent)."""
    if allow_large or not disk_bytes:
        return
    probe = next((p for p in [out, *out.parents] if p.exists()), Path("."))
    usage = shutil.disk_usage(probe)
    if usage.total > 0 and disk_bytes > SIZE_MARGIN * usage.free:  # total 0: a pseudo file system such as /proc
        raise UserError(f"estimated disk use {_gib(disk_bytes)} ({detail}) exceeds the free disk "
                        f"{_gib(usage.free)} at {probe}; make the runs smaller (fewer seeds or steps, train.log_every, "
                        "checkpoints or snapshots), free disk, or pass --allow-large")


# -------------------------------------------------------------------- directories
def check_dir(path: Path, flag: str) -> None:
    """Say in one line why ``path`` cannot be used as a directory, creating nothing: no part
    of it may be a file, and it (or its nearest existing parent) must be a writable folder."""
    for parent in [path, *path.parents]:
        if parent.exists() and not parent.is_dir():
            what = "is a file" if parent == path else f"is under {parent}, which is a file"
            raise UserError(f"{flag} {path}: {what}; give a directory path")
    existing = next((p for p in [path, *path.parents] if p.exists()), Path("."))
    if not os.access(existing, os.W_OK | os.X_OK):
        what = "directory is not writable" if existing == path else f"cannot create the directory ({existing} is not writable)"
        raise UserError(f"{flag} {path}: {what}")


def probe_writable(folder: Path, flag: str, path: Path, hint: str = "") -> None:
    """One-line UserError (``FLAG PATH: cannot write in FOLDER (...)[; hint]``) unless a file can
    be created in ``folder``; the probe file is removed at once. Permission bits alone miss root
    on a read-only mount and ACLs, so the outputs that are checked before long work probe."""
    try:
        handle, probe = tempfile.mkstemp(dir=folder, prefix=".stagewise-probe-")
        os.close(handle)
        os.unlink(probe)
    except OSError as err:
        raise UserError(f"{flag} {path}: cannot write in {folder} ({err.strerror or err})" + (f"; {hint}" if hint else "")) from None


def writable_dir(path: Path, flag: str) -> None:
    """Create ``path`` (a directory) or say in one line why it cannot be used."""
    check_dir(path, flag)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"{flag} {path}: cannot create the directory ({err.strerror})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise UserError(f"{flag} {path}: directory is not writable")


def unborn(paths: RunPaths, config_text: str) -> bool:
    """Whether ``paths.root`` is what a :func:`prepare` killed between its two writes left:
    this very config.yaml (and atomic-write temp files), no manifest. Nothing ran there, so
    a new run may take the folder (a sweep rerun after a SIGKILL at that moment)."""
    names = {p.name for p in paths.root.iterdir()}
    if paths.config.name not in names or any(n != paths.config.name and not (n.startswith(".") and n.endswith(".tmp"))
                                             for n in names):
        return False
    try:
        return paths.config.read_text() == config_text
    except (OSError, UnicodeDecodeError):
        return False


def prepare(lab: Lab, config: Any, out: str | Path) -> RunPaths:
    """Create a fresh run directory with config.yaml and a 'running' manifest."""
    paths = RunPaths(Path(out))
    text = to_yaml(config)
    refuse_links(paths.root)
    if paths.root.is_dir() and any(paths.root.iterdir()) and not unborn(paths, text):
        raise UserError(f"--out {out}: directory exists and is not empty; choose another or use --resume {out}")
    for stale in paths.root.glob(".*.tmp") if paths.root.is_dir() else ():  # an unborn folder's half-written files
        stale.unlink(missing_ok=True)
    writable_dir(paths.root, "--out")
    try:
        atomic_write_text(paths.config, text)
        atomic_write_json(paths.manifest, {
            "lab": lab.name, "status": "running", "config_hash": config_hash(config), "seeds": config.seed_list(),
            "versions": package_versions(), "git_sha": git_sha(), "host": socket.gethostname(),
            "started": now_iso(), "ended": None, "error": None, "tables": {},
        })
    except OSError as err:
        raise UserError(f"--out {out}: cannot write the run directory ({err.strerror})") from None
    return paths


def start_run(lab: Lab, config: Any, out: str | Path, allow_large: bool = False,
              sinks: Sequence[str] | None = None) -> RunPaths:
    """Every check before any work (the metric sinks, ``$STAGEWISE_PROGRESS_EVERY``, the size
    estimate, then the lab's input checks), then a fresh run directory: what `stagewise run`
    and :func:`execute_spec` do for a new run."""
    resolve_sinks(sinks)  # a bad sink name or a missing package: one line, nothing made
    plain_every_s()  # a bad progress interval: one line here, not once the run folder is made
    check_size(lab, config, Path(out), allow_large)
    lab.check(config)
    return prepare(lab, config, out)


def load_for_resume(run_dir: str | Path) -> tuple[Lab, Any]:
    """(lab, validated config) of an existing run directory; one-line errors otherwise."""
    paths = RunPaths(Path(run_dir))
    manifest = read_manifest(run_dir)
    lab = get_lab(str(manifest["lab"]))
    if not paths.config.is_file():
        raise UserError(f"--resume {run_dir}: config.yaml is missing; the run cannot be resumed")
    try:
        data = yaml.safe_load(paths.config.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise UserError(f"--resume {run_dir}: config.yaml is unreadable ({type(err).__name__})") from None
    if not isinstance(data, dict):
        raise UserError(f"--resume {run_dir}: config.yaml is not a mapping")
    config = validate(lab.Config, data)
    if config_hash(config) != manifest["config_hash"]:
        raise UserError(f"--resume {run_dir}: config.yaml does not match the manifest's config hash")
    if not os.access(paths.root, os.W_OK | os.X_OK):
        raise UserError(f"--resume {run_dir}: directory is not writable")
    return lab, config


# --------------------------------------------------------------------------- signals
@contextmanager
def _stop_requests(ctx: RunDirContext) -> Iterator[None]:
    """SIGINT and SIGTERM -> ctx.request_stop (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, lambda signum, frame: ctx.request_stop(signum))
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# --------------------------------------------------------------------------- execute
def _record(paths: RunPaths, **changes: Any) -> str | None:
    """Update the manifest; returns a note instead of raising when that is impossible."""
    try:
        update_manifest(paths.root, **changes)
        return None
    except OSError as err:
        return f"the manifest could not be updated ({err.strerror}); it still says 'running'"


def _annotate(err: BaseException, **notes: Any) -> None:
    """Attach ``stagewise_note`` / ``stagewise_error_log`` to an exception as plain attributes
    (the CLI and the executors read them back with ``getattr``; exceptions do not declare them)."""
    for name, value in notes.items():
        setattr(err, name, value)


def _metrics_frame(lab: Lab, ctx: RunDirContext) -> pd.DataFrame:
    """The run's stream as one long-form frame under the current metric names: a run resumed
    across a rename of the lab's metrics has old names before the checkpoint
    (``Lab.metric_aliases``)."""
    return rename_metrics(ctx.sink.to_frame(), lab.metric_aliases)


def _keep_metrics(lab: Lab, ctx: RunDirContext, paths: RunPaths) -> None:
    """Keep what was logged: compact the stream so far to Parquet (never masks the error)."""
    try:
        ctx.sink.close()
        write_parquet(_metrics_frame(lab, ctx), paths.metrics)
    except Exception:
        pass


def open_context(lab: Lab, config: Any, paths: RunPaths, *, resume: bool = False, progress: bool | ProgressCallback = True,
                 sinks: Sequence[str] | None = None) -> RunDirContext:
    """The run directory's context (the caller holds its lock): tables and notes recorded in
    the manifest as they come; on ``resume`` cut back to its last consistent checkpoint and
    marked running again."""
    refuse_links(paths.root)  # nothing below the run folder is followed: resume writes, truncates and deletes there
    if resume:
        check_resumable(paths.root)  # a layout the user damaged: one line, the run's status unchanged
    manifest_tables = dict(read_manifest(paths.root).get("tables") or {}) if resume else {}

    def on_table(name: str, entry: dict[str, Any]) -> None:
        manifest_tables[name] = entry
        update_manifest(paths.root, tables=manifest_tables)

    notes = dict(read_manifest(paths.root).get("notes") or {}) if resume else {}

    def on_note(key: str, value: Any) -> None:
        notes[key] = value
        update_manifest(paths.root, notes=notes)

    checkpoint_every = int(getattr(getattr(config, "train", None), "checkpoint_every", 0) or 0)
    ctx = RunDirContext(paths, config.seed_list(), checkpoint_every, progress, on_table, on_note, sinks=sinks)
    if resume:
        ctx.prepare_resume()
        kept = {k: v for k, v in manifest_tables.items() if k in ctx.tables.names()}
        manifest_tables.clear()
        manifest_tables.update(kept)
        update_manifest(paths.root, status="running", error=None, ended=None, resumed=now_iso(), tables=manifest_tables)
    return ctx


FIGURES_ENV = "STAGEWISE_FIGURES"
"""``STAGEWISE_FIGURES=0`` (or ``off``, ``no``, ``false``): runs skip their figures (the rest of
the run folder is the same). For large sweeps of small runs, whose figures take most of each
run's time; inherited by a sweep's workers (local processes, Ray, submitit)."""


def figures_wanted() -> bool:
    """False when :data:`FIGURES_ENV` turns the runs' figures off."""
    return os.environ.get(FIGURES_ENV, "1").strip().lower() not in ("0", "off", "no", "false")


def finish(lab: Lab, config: Any, paths: RunPaths, ctx: RunDirContext, result: Any) -> dict[str, Any]:
    """A finished run's outcome: the stream compacted to metrics.parquet, summary.json, the
    figures (unless :data:`FIGURES_ENV` turns them off), status done; returns the manifest."""
    ctx.sink.close()
    frame = _metrics_frame(lab, ctx)
    write_parquet(frame, paths.metrics)
    summary = lab.summary(config, frame, ctx.tables, result)
    atomic_write_json(paths.summary, summary.to_json())
    if figures_wanted():
        lab.make_figures(config, frame, ctx.tables, summary, paths.figures)
    ctx.finishing()
    return update_manifest(paths.root, status="done", ended=now_iso())


def record_failure(lab: Lab, paths: RunPaths, ctx: RunDirContext, err: BaseException,
                   resume_hint: str | None = None) -> BaseException:
    """Record how a run ended that did not finish (diverged, interrupted, stopped by
    SystemExit, failed with error.log), keeping what it logged; returns the exception to
    raise (a KeyboardInterrupt becomes :class:`Interrupted`) carrying ``stagewise_note``."""
    hint = resume_hint or f"stagewise run --resume {paths.root}"
    ctx.finishing()
    _keep_metrics(lab, ctx, paths)
    if isinstance(err, Diverged):
        _annotate(err, stagewise_note=_record(paths, status="diverged", ended=now_iso(), error=str(err),
                                              diverged={"step": err.step, "seed": err.seed, "what": err.what}))
        return err
    if isinstance(err, KeyboardInterrupt):
        signum = err.signum if isinstance(err, Interrupted) else signal.SIGINT
        note_stop(signum)
        name = signal.Signals(signum).name
        note = _record(paths, status="interrupted", ended=now_iso(), error=f"interrupted by {name}; resume with: {hint}")
        stop = err if isinstance(err, Interrupted) else Interrupted(signum)
        _annotate(stop, stagewise_note=note)
        return stop
    if isinstance(err, SystemExit):  # a scheduler's requeue (submitit exits on SLURM's timeout signal)
        _annotate(err, stagewise_note=_record(paths, status="interrupted", ended=now_iso(),
                                              error=f"stopped by SystemExit({err.code}) (a requeue or timeout); it resumes "
                                                    f"from its last checkpoint with: {hint}"))
        return err
    message = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
    log_note = None
    try:
        atomic_write_text(paths.error_log, "".join(traceback.format_exception(err)))
    except OSError:
        log_note = "no error.log (the directory could not be written)"
    note = _record(paths, status="failed", ended=now_iso(), error=message)
    _annotate(err, stagewise_note="; ".join(n for n in (log_note, note) if n) or None,
              stagewise_error_log=None if log_note else paths.error_log)
    return err


def execute(lab: Lab, config: Any, paths: RunPaths, *, resume: bool = False, progress: bool | ProgressCallback = True,
            sinks: Sequence[str] | None = None) -> dict[str, Any]:
    """Run (or resume) ``lab`` with ``config`` in ``paths``; returns the final manifest.

    Holds the directory's lock throughout (a second writer gets a one-line error). On
    failure the outcome is recorded and the exception propagates (``Interrupted`` for a
    stop request, ``Diverged``, or the original error); ``err.stagewise_note`` says what
    could not be recorded, if anything.

    ``progress``: True shows the training's progress (:mod:`stagewise.progress`: a bar on a
    terminal, a plain line every few seconds elsewhere), False shows nothing, a callable gets
    :class:`~stagewise.progress.ProgressEvent` values instead.
    """
    with RunLock(paths.root):
        ctx = open_context(lab, config, paths, resume=resume, progress=progress, sinks=sinks)
        with _stop_requests(ctx):  # around the recording too: a second signal never cuts it off (request_stop)
            try:
                result = lab.run(config, ctx)
                return finish(lab, config, paths, ctx, result)
            except BaseException as err:
                raised = record_failure(lab, paths, ctx, err)
                if raised is err:
                    raise
                raise raised from None


def execute_spec(spec: RunSpec, run_dir: str | Path, *, progress: bool | ProgressCallback = True, allow_large: bool = False,
                 raise_on_failure: bool = False, lab: Lab | None = None,
                 sinks: Sequence[str] | None = None) -> dict[str, Any]:
    """Run ``spec`` into ``run_dir`` and return its manifest: a fresh directory is created,
    a finished run with the same config hash is returned as it is, an unfinished one is
    resumed. A failed, diverged or interrupted run returns its manifest (or raises with
    ``raise_on_failure``); a stop request (KeyboardInterrupt) always propagates.

    ``lab`` replaces the registry's lab of ``spec.lab`` (same name and Config; e.g. a lab
    value with a different reproduction set). ``progress`` as for :func:`execute` (a sweep's
    workers pass False: the sweep shows its points)."""
    registered = spec_lab(spec)
    if lab is not None and (lab.name != registered.name or lab.Config is not registered.Config):
        raise ValueError(f"lab {lab.name!r} does not match the spec's lab {spec.lab!r}")
    lab = lab or registered
    resolve_sinks(sinks)
    config = spec_config(spec)
    paths = RunPaths(Path(run_dir))
    resume = (paths.manifest).is_file()
    if resume:
        manifest = read_manifest(paths.root)
        if manifest["config_hash"] != config_hash(config):
            raise UserError(f"{run_dir}: holds a run of another config (hash {manifest['config_hash']}, "
                            f"spec {spec.name or spec.lab} is {config_hash(config)})")
        if manifest["status"] == "done":
            return manifest
        _, config = load_for_resume(paths.root)
    else:
        paths = start_run(lab, config, paths.root, allow_large, sinks)
    try:
        return execute(lab, config, paths, resume=resume, progress=progress, sinks=sinks)
    except (KeyboardInterrupt, UserError):  # a stop request; bad input or a held lock: nothing was run
        raise
    except Exception:
        if raise_on_failure:
            raise
        return read_manifest(paths.root)
