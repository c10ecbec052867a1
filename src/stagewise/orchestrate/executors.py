"""Where a sweep's runs execute: a local process pool, Ray tasks, or SLURM job arrays (submitit).

Every executor runs the same worker, :func:`run_task` ("run one spec into its run
directory", through :func:`~stagewise.orchestrate.runner.execute_spec`), and reports
``(key, status, error)`` per task as it ends. The options come from the sweep file's
``executor:`` section, ``--executor`` and ``--set executor.KEY=VALUE``::

    executor: {kind: ray, address: auto, cpus_per_run: 1, gpus_per_run: 0.25}
    executor: {kind: slurm, partition: gpu, time_min: 120, mem_gb: 16, gpus_per_run: 1,
               account: myproj, max_parallel: 50, max_requeues: 3}

Ray and submitit are optional extras (``pip install -e '.[ray]'``, ``'.[slurm]'``); a
missing one is a one-line error before any work.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..errors import UserError
from ..labs import RunSpec
from ..runs import Interrupted, RunLock, read_manifest
from .runner import execute_spec

HELD_POLL_S = 0.5       # how often a waiting sweep retries a lock another process holds
WORKER_DEATHS = 2       # a task whose worker dies this many times is marked failed (killed, out of memory)
RAY_POLL_S = 1.0        # ray.wait timeout, so a stop request is seen within a second
SLURM_POLL_S = 1.0      # how often submitit jobs are polled


class ExecutorOptions(BaseModel):
    """Executor settings (the sweep file's ``executor:`` section, ``--set executor.KEY=...``)."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["local", "ray", "slurm"] = Field("local", description="local process pool, Ray tasks, or SLURM via submitit")
    max_parallel: int | None = Field(None, ge=1, description="runs at once (local default: the cores; ray: the cluster's "
                                     "free resources; slurm: the job array's concurrency cap, default 64)")
    allow_large: bool = Field(False, description="every run: run even when a size estimate exceeds memory or disk")
    sinks: list[Literal["tensorboard", "wandb"]] = Field(default_factory=list, description="every run: also log to "
                                                         "these sinks (extras; the STAGEWISE_SINKS variable too)")
    wait_held: bool = Field(True, description="a run another sweep process holds is waited for, then skipped or resumed")
    address: str | None = Field(None, description="ray: an existing cluster ('auto', 'ray://host:10001', 'host:6379'); "
                                "none starts a local one")
    cpus_per_run: float = Field(1.0, gt=0, description="ray: CPUs per run; slurm: cpus_per_task (rounded up)")
    gpus_per_run: float = Field(0.0, ge=0, description="ray: GPUs per run, fractional allowed (0.25: four tiny runs per "
                                "GPU); slurm: gpus_per_node (a whole number)")
    mem_gb: float | None = Field(None, gt=0, description="memory per run (ray: a memory resource; slurm: --mem)")
    partition: str | None = Field(None, description="slurm: --partition")
    account: str | None = Field(None, description="slurm: --account")
    qos: str | None = Field(None, description="slurm: --qos")
    time_min: int = Field(60, ge=1, description="slurm: time limit per run in minutes (on timeout the run is requeued "
                          "and resumes from its checkpoint)")
    max_requeues: int = Field(3, ge=0, description="slurm: how often a preempted or timed-out run is requeued")
    cluster: Literal["auto", "slurm", "local"] = Field("auto", description="slurm: submitit's cluster; local runs the "
                                                       "jobs as processes on this machine (tests, laptops)")

    @model_validator(mode="after")
    def _whole_gpus_on_slurm(self):
        if self.kind == "slurm" and self.gpus_per_run != int(self.gpus_per_run):
            raise ValueError(f"gpus_per_run={self.gpus_per_run:g}: SLURM allocates whole GPUs; fractional GPUs need kind=ray")
        return self


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
        except UserError:
            if not block:
                return False
            time.sleep(HELD_POLL_S)


def run_task(spec_json: str, root: str, key: str, block: bool = False, catch_stop: bool = True,
             allow_large: bool = False, sinks: tuple[str, ...] = ()) -> tuple[str, str | None]:
    """(status, error) of one task: ``done`` (ran now), ``skipped`` (done before), ``failed``
    (failed or diverged; the error is in the run folder), ``held`` (another process holds it;
    with ``block`` this waits for it instead), ``interrupted`` (SIGINT/SIGTERM in a worker;
    resumable). In the sweep's own process (``catch_stop=False``) a stop request propagates."""
    spec = RunSpec.from_json(spec_json)
    run_dir = Path(root) / "runs" / key
    lock_dir = Path(root) / "locks" / key
    lock_dir.mkdir(parents=True, exist_ok=True)
    lock = RunLock(lock_dir)
    if not _acquire(lock, block):
        return "held", None
    try:
        if (run_dir / "manifest.json").is_file() and read_manifest(run_dir).get("status") == "done":
            return "skipped", None
        manifest = execute_spec(spec, run_dir, allow_large=allow_large, sinks=sinks)
        if manifest.get("status") == "done":
            return "done", None
        return "failed", f"{manifest.get('status')}: {manifest.get('error')}"
    except Interrupted as err:
        if not catch_stop:
            raise
        return "interrupted", f"stopped by {err}; run the sweep again to resume"
    except UserError as err:
        return "failed", "; ".join(err.messages)
    finally:
        lock.release()


Report = Callable[[str, str, "str | None"], None]  # (key, status, error) as each task ends


# ------------------------------------------------------------------------------ local
def run_local(tasks: list[Task], root: Path, opts: ExecutorOptions, report: Report, block: bool = False) -> None:
    """A spawned process pool of ``max_parallel`` workers (default: the cores; 1 runs inline).
    A worker that dies (SIGKILL, out of memory) breaks the pool: the unfinished tasks go to a
    fresh pool, and a task whose worker died ``WORKER_DEATHS`` times is marked failed."""
    workers = min(opts.max_parallel or os.cpu_count() or 1, len(tasks))
    if workers <= 1:
        for t in tasks:
            report(t.key, *run_task(t.spec_json, str(root), t.key, block, False, opts.allow_large,
                                          tuple(opts.sinks)))
        return
    deaths: dict[str, int] = {}
    todo = list(tasks)
    context = multiprocessing.get_context("spawn")  # no forked torch state in the workers
    while todo:
        broken: list[Task] = []
        with ProcessPoolExecutor(max_workers=min(workers, len(todo)), mp_context=context) as pool:
            futures = {pool.submit(run_task, t.spec_json, str(root), t.key, block, True, opts.allow_large,
                                   tuple(opts.sinks)): t for t in todo}
            pending = set(futures)
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    task = futures[future]
                    try:
                        report(task.key, *future.result())
                    except BrokenProcessPool:
                        broken.append(task)
                    except Exception as err:  # an error outside execute_spec's recording
                        report(task.key, "failed", f"{type(err).__name__}: {err}")
        todo = []
        for task in broken:
            started = (root / "runs" / task.key / "manifest.json").is_file()
            deaths[task.key] = deaths.get(task.key, 0) + started
            if deaths[task.key] >= WORKER_DEATHS:
                report(task.key, "failed", f"its worker process died {deaths[task.key]} times (killed or out of memory)")
            else:
                todo.append(task)


# -------------------------------------------------------------------------------- ray
def _import_ray():
    try:
        import ray
    except ImportError:
        raise UserError("--executor ray: Ray is not installed; pip install -e '.[ray]'") from None
    return ray


def run_ray(tasks: list[Task], root: Path, opts: ExecutorOptions, report: Report, block: bool = False) -> None:
    """Ray tasks on the cluster at ``opts.address`` (or a local one started here), each
    asking for ``cpus_per_run`` CPUs, ``gpus_per_run`` GPUs (fractional allowed) and
    ``mem_gb``; at most ``max_parallel`` in flight. Ray must import stagewise on every node."""
    ray = _import_ray()
    started_here = not ray.is_initialized()
    if started_here:
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
        if opts.address:
            kwargs["address"] = opts.address
        else:
            kwargs["num_cpus"] = os.cpu_count() or 1
        try:
            ray.init(**kwargs)
        except (ConnectionError, RuntimeError, ValueError) as err:
            raise UserError(f"executor.address={opts.address}: cannot connect to Ray ({str(err).splitlines()[0]})") from None
    resources: dict[str, Any] = {"num_cpus": opts.cpus_per_run, "num_gpus": opts.gpus_per_run,
                                 "max_retries": WORKER_DEATHS - 1}  # a worker that died: Ray reruns the task once
    if opts.mem_gb:
        resources["memory"] = int(opts.mem_gb * 2**30)
    remote = ray.remote(run_task).options(**resources)
    cap = opts.max_parallel or len(tasks)
    todo = list(reversed(tasks))
    inflight: dict[Any, Task] = {}
    try:
        while todo or inflight:
            while todo and len(inflight) < cap:
                task = todo.pop()
                inflight[remote.remote(task.spec_json, str(root), task.key, block, True, opts.allow_large,
                                               tuple(opts.sinks))] = task
            ready, _ = ray.wait(list(inflight), num_returns=1, timeout=RAY_POLL_S)
            for ref in ready:
                task = inflight.pop(ref)
                try:
                    report(task.key, *ray.get(ref))
                except Exception as err:  # a worker that died (ray.exceptions.WorkerCrashedError, OOM)
                    report(task.key, "failed", f"ray task died: {type(err).__name__}: {str(err).splitlines()[0]}")
    finally:
        if started_here:
            ray.shutdown()


# ------------------------------------------------------------------------------ slurm
def _import_submitit():
    try:
        import submitit
    except ImportError:
        raise UserError("--executor slurm: submitit is not installed; pip install -e '.[slurm]'") from None
    return submitit


def requeueable_job():
    """``run_task`` as a submitit Checkpointable (requeued on preemption or timeout)."""
    submitit = _import_submitit()

    class SweepJob(submitit.helpers.Checkpointable):
        """The worker as a submitit Checkpointable: on preemption or timeout submitit requeues
        the same call, which resumes the run from its last checkpoint."""

        def __call__(self, spec_json: str, root: str, key: str, block: bool = False,
                     allow_large: bool = False, sinks: tuple[str, ...] = ()) -> tuple[str, str | None]:
            return run_task(spec_json, root, key, block, True, allow_large, sinks)

    return SweepJob()


def slurm_executor(root: Path, opts: ExecutorOptions):
    """A submitit executor for ``opts`` (SLURM parameters; logs under ``ROOT/slurm``)."""
    submitit = _import_submitit()
    cluster = None if opts.cluster == "auto" else opts.cluster
    executor = submitit.AutoExecutor(folder=root / "slurm" / "%j", cluster=cluster,
                                     slurm_max_num_timeout=opts.max_requeues)
    params: dict[str, Any] = {"timeout_min": opts.time_min, "cpus_per_task": max(1, int(-(-opts.cpus_per_run // 1))),
                              "gpus_per_node": int(opts.gpus_per_run), "nodes": 1, "tasks_per_node": 1,
                              "name": f"stagewise-{root.name}"}
    if opts.mem_gb:
        params["mem_gb"] = opts.mem_gb
    for key in ("partition", "account", "qos"):
        if getattr(opts, key):
            params[f"slurm_{key}"] = getattr(opts, key)
    params["slurm_array_parallelism"] = opts.max_parallel or 64
    executor.update_parameters(**params)  # slurm_* apply on SLURM only; submitit's local cluster ignores them
    return executor


def run_slurm(tasks: list[Task], root: Path, opts: ExecutorOptions, report: Report, block: bool = False) -> None:
    """One SLURM job array (``%max_parallel`` concurrency cap) through submitit; on
    ``cluster: local`` submitit runs the jobs as local processes and the cap is kept here."""
    executor = slurm_executor(root, opts)
    job_fn = requeueable_job()
    n = len(tasks)
    args = [[t.spec_json for t in tasks], [str(root)] * n, [t.key for t in tasks], [block] * n, [opts.allow_large] * n,
            [tuple(opts.sinks)] * n]
    if executor.cluster == "slurm":
        jobs = dict(zip(executor.map_array(job_fn, *args), tasks))
        cap, todo = len(tasks), []
    else:  # submitit's local cluster starts every job at once: keep the cap here
        cap, todo, jobs = opts.max_parallel or os.cpu_count() or 1, list(reversed(tasks)), {}
    while todo or jobs:
        while todo and len(jobs) < cap:
            task = todo.pop()
            jobs[executor.submit(job_fn, task.spec_json, str(root), task.key, block, opts.allow_large,
                                         tuple(opts.sinks))] = task
        for job in [j for j in jobs if j.done()]:
            task = jobs.pop(job)
            try:
                report(task.key, *job.result())
            except Exception as err:  # the job failed outside run_task (killed, out of requeues)
                report(task.key, "failed", f"slurm job {job.job_id} failed: {str(err).strip().splitlines()[-1][:300]}")
        time.sleep(SLURM_POLL_S if jobs else 0)


RUNNERS = {"local": run_local, "ray": run_ray, "slurm": run_slurm}


def check_available(opts: ExecutorOptions) -> None:
    """One-line error, before any work, when the executor's or a sink's package is missing."""
    from ..runs.sinks import resolve_sinks

    resolve_sinks(opts.sinks)
    if opts.kind == "ray":
        _import_ray()
    elif opts.kind == "slurm":
        _import_submitit()
