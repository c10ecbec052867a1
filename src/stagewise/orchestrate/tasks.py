"""The worker side of every executor: :func:`run_task` runs one spec into its run folder
(``ROOT/runs/KEY``, locked at ``ROOT/locks/KEY``) through
:func:`~stagewise.orchestrate.runner.execute_spec` and says how it ended, never raising for
one run's problem; a local pool's worker process starts with :func:`start_pool_worker`.
The executors that hand out the tasks are in :mod:`.executors`.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..engine import Diverged
from ..errors import UserError
from ..labs import RunSpec
from ..runs import Interrupted, RunLock, read_manifest
from ..runs.lock import LockHeld
from ..runs.stops import STOP_SIGNALS
from . import lifeline
from .runner import execute_spec

HELD_POLL_S = 0.5       # how often a waiting sweep retries a lock another process holds
RUN_LOCK_GRACE_S = 30.0  # a run folder lock still held under the sweep lock: its exiting holder gets this long
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)  # a full disk or quota: "no space left on device"


@dataclass(frozen=True)
class Task:
    """One run of a sweep: its spec and its folder ``ROOT/runs/KEY`` (locked at ``ROOT/locks/KEY``)."""

    key: str
    spec_json: str


def _acquire(lock: RunLock, block: bool) -> bool:
    while True:
        try:
            lock.acquire()
            return True
        except LockHeld:
            if not block:
                return False
            time.sleep(HELD_POLL_S)


def os_failure(err: OSError, doing: str) -> str:
    """``no space left on device: DOING (FILE)``: an OSError of one run as its failure,
    with what could not be recorded (``err.stagewise_note``) after a ``;``."""
    reason = "no space left on device" if err.errno in NO_SPACE else (os.strerror(err.errno) if err.errno else str(err))
    where = f" ({err.filename})" if err.filename else ""
    note = getattr(err, "stagewise_note", None)
    return f"{reason[:1].lower()}{reason[1:]}: {doing}{where}" + (f"; {note}" if note else "")


def _when_free(call: Callable[[], Any]) -> Any:
    """``call()``, retried while the run folder's own lock is held (LockHeld) for up to
    :data:`RUN_LOCK_GRACE_S`: with the sweep's lock taken, its holder is a process that is
    exiting (a killed worker releases its two locks one after the other), not a writer."""
    deadline = time.monotonic() + RUN_LOCK_GRACE_S
    while True:
        try:
            return call()
        except LockHeld:
            if time.monotonic() >= deadline:
                raise
            time.sleep(HELD_POLL_S)


def run_task(spec_json: str, root: str, key: str, block: bool = False, catch_stop: bool = True,
             allow_large: bool = False, sinks: tuple[str, ...] = ()) -> tuple[str, str | None]:
    """(status, error) of one task: ``done`` (ran now), ``skipped`` (done before), ``failed``
    (failed or diverged; the error is in the run folder when it can be written), ``held``
    (another process holds it; with ``block`` this waits for it instead), ``interrupted``
    (SIGINT/SIGTERM in a worker; resumable). In the sweep's own process (``catch_stop=False``)
    a stop request propagates.

    Never raises for one run's problem, so every executor reports every point: an OSError
    anywhere (a full disk at the lock, the run folder, the manifest) is ``("failed", "no space
    left on device: <what>")``, a bad ``.lock`` or input the UserError's line, anything else
    the error as the manifest records it. SystemExit (a scheduler's requeue) propagates."""
    if _SWEEP_STOPPED is not None and _SWEEP_STOPPED.is_set():
        return "interrupted", "the sweep was stopped before this run started; run the sweep again to run it"
    run_dir = Path(root) / "runs" / key
    lock = RunLock(Path(root) / "locks" / key)
    doing = f"creating the lock folder {lock.path.parent}"
    try:
        spec = RunSpec.from_json(spec_json)
        lock.path.parent.mkdir(parents=True, exist_ok=True)
        doing = f"taking the lock {lock.path}"
        if not _acquire(lock, block):
            return "held", None
        try:
            doing = f"reading {run_dir / 'manifest.json'}"
            if (run_dir / "manifest.json").is_file() and read_manifest(run_dir).get("status") == "done":
                return "skipped", None
            doing = f"running into {run_dir}"
            manifest = _when_free(lambda: execute_spec(spec, run_dir, progress=False, allow_large=allow_large, sinks=sinks,
                                                       raise_on_failure=True))
        finally:
            lock.release()
        if manifest.get("status") == "done":
            return "done", None
        return "failed", f"{manifest.get('status')}: {manifest.get('error')}"
    except Interrupted as err:
        if not catch_stop:
            raise
        return "interrupted", f"stopped by {err}; run the sweep again to resume"
    except UserError as err:
        cause = err.__context__  # a disk that filled while the run folder was made: said as such
        if isinstance(cause, OSError) and cause.errno in NO_SPACE:
            return "failed", os_failure(cause, doing)
        return "failed", "; ".join(err.messages)
    except OSError as err:
        return "failed", os_failure(err, doing)
    except Exception as err:  # recorded in the manifest by execute (when it can be written)
        status = "diverged" if isinstance(err, Diverged) else "failed"
        message = str(err) if isinstance(err, Diverged) else f"{type(err).__name__}: {err}"
        note = getattr(err, "stagewise_note", None)
        return "failed", f"{status}: {message}" + (f" ({note})" if note else "")


Report = Callable[[str, str, "str | None"], None]  # (key, status, error) as each task ends


_SWEEP_STOPPED: Any = None  # in a pool worker: the sweep's stop Event (:func:`start_pool_worker`)


def stop_requested() -> bool:
    """In a pool worker: whether the sweep was stopped (a worker of one's own checks it before it
    starts a task, as :func:`run_task` does); False elsewhere."""
    return _SWEEP_STOPPED is not None and bool(_SWEEP_STOPPED.is_set())


def start_pool_worker(parent_pid: int, stopped: Any) -> None:
    """A pool worker: dies with the sweep (:func:`.lifeline.pool_worker_init`), keeps the sweep's
    stop Event (a task queued before a stop does not start a run after it) and, while idle,
    ignores SIGINT/SIGTERM (the sweep passes a stop on to its busy workers only in effect)."""
    global _SWEEP_STOPPED
    _SWEEP_STOPPED = stopped
    for sig in STOP_SIGNALS:  # an idle worker ignores a stop (no KeyboardInterrupt traceback); a run's own handlers
        signal.signal(sig, signal.SIG_IGN)  # replace this while it runs (execute: checkpoint, record, return)
    lifeline.pool_worker_init(parent_pid)
