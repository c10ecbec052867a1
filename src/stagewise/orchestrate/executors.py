"""Where a sweep's runs execute: a local process pool, Ray tasks, or SLURM job arrays (submitit).

Every executor runs the same worker, :func:`.tasks.run_task` ("run one spec into its run
directory", through :func:`~stagewise.orchestrate.runner.execute_spec`), and reports
``(key, status, error)`` per task as it ends. A study whose tasks are not lab runs (a
training the researcher writes: examples/pretraining_stages) passes its own ``worker``, a
module-level function with run_task's signature and contract (never raises for one task's
problem; ``spec_json`` is whatever JSON its tasks carry). The options come from the sweep file's
``executor:`` section, ``--executor`` and ``--set executor.KEY=VALUE``::

    executor: {kind: ray, address: auto, cpus_per_run: 1, gpus_per_run: 0.25}
    executor: {kind: slurm, partition: gpu, time_min: 120, mem_gb: 16, gpus_per_run: 1,
               account: myproj, max_parallel: 50, max_requeues: 3}

(:class:`~stagewise.orchestrate.executor_options.ExecutorOptions`: every number finite and
bounded). Ray and submitit are optional extras (``pip install -e '.[ray]'``, ``'.[slurm]'``);
a missing one, or ``kind: slurm`` where there is no ``sbatch`` (unless ``cluster: local``),
is a one-line error before any work.

Faults: :func:`.tasks.run_task` never raises for one run's problem (a full disk, a ``.lock`` that
is a directory), so every executor reports every point and the sweep prints its counts;
local workers (the pool's, submitit-local's jobs) die with a SIGKILLed sweep
(:mod:`.lifeline`) and their runs resume on the next sweep.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, Callable

from ..errors import UserError
from ..runs.stops import STOP_SIGNALS, signum_of
from . import lifeline
from .executor_options import ExecutorOptions  # noqa: F401 (re-exported: the options live in executor_options.py)
from .tasks import Report, Task, start_pool_worker, os_failure, run_task

WORKER_DEATHS = 2       # a task whose worker dies this many times is marked failed (killed, out of memory)
STARTUP_DEATHS = 2      # pools broken this many times in a row with no run started stop the sweep (one line)
STOP_GRACE_S = 120.0    # after a stop, how long the sweep waits for its workers to checkpoint and record it
RAY_POLL_S = 1.0        # ray.wait timeout, so a stop request is seen within a second
SLURM_POLL_S = 1.0      # how often submitit jobs are polled

Worker = Callable[..., tuple[str, "str | None"]]
"""run_task's signature: (spec_json, root, key, block, catch_stop, allow_large, sinks) -> (status, error)."""


# ------------------------------------------------------------------------------ local
def run_local(tasks: list[Task], root: Path, opts: ExecutorOptions, report: Report, block: bool = False,
              worker: Worker = run_task) -> None:
    """A spawned process pool of ``max_parallel`` workers (default: the cores; 1 runs inline).
    A worker that dies (SIGKILL, out of memory) breaks the pool: the unfinished tasks go to a
    fresh pool, and a task whose worker died ``WORKER_DEATHS`` times is marked failed. Pools
    that break :data:`STARTUP_DEATHS` times in a row before any run started stop the sweep with
    one line (a script without the ``__main__`` guard: each spawned worker imports it again).
    The workers die with this process (:mod:`.lifeline`): a SIGKILLed sweep leaves none behind.

    A stop (SIGINT/SIGTERM here: :class:`~stagewise.runs.Interrupted`, or KeyboardInterrupt)
    starts no further run: the queued tasks are cancelled, the signal is passed on to the
    workers (each checkpoints its run and records it interrupted; a second signal stops them at
    once), their outcomes are reported, then the stop propagates."""
    workers = min(opts.max_parallel or os.cpu_count() or 1, len(tasks))
    if workers <= 1:
        for t in tasks:
            report(t.key, *worker(t.spec_json, str(root), t.key, block, False, opts.allow_large,
                                          tuple(opts.sinks)))
        return
    deaths: dict[str, int] = {}
    startup_deaths = 0
    todo = list(tasks)
    context = multiprocessing.get_context("spawn")  # no forked torch state in the workers
    while todo:
        broken: list[Task] = []
        began = time.time()
        progressed = False
        stopped = context.Event()  # set on a stop: a worker starts no further run
        with ProcessPoolExecutor(max_workers=min(workers, len(todo)), mp_context=context,
                                 initializer=start_pool_worker, initargs=(os.getpid(), stopped)) as pool:
            futures = {pool.submit(worker, t.spec_json, str(root), t.key, block, True, opts.allow_large,
                                   tuple(opts.sinks)): t for t in todo}
            pending = set(futures)
            try:
                while pending:
                    finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                    progressed |= _report_finished(finished, futures, report, broken)
            except KeyboardInterrupt as stop:
                stopped.set()
                _stop_pool(pool, pending, futures, report, signum_of(stop))
                raise
        todo = []
        progressed = progressed or any(_started_since(root, t.key, began) for t in broken)
        startup_deaths = 0 if progressed else startup_deaths + 1
        if broken and startup_deaths >= STARTUP_DEATHS:
            raise UserError(f"the sweep's worker processes died {startup_deaths} times before any run started "
                            f"({len(broken)} runs left); in a Python script, start the sweep under "
                            "`if __name__ == \"__main__\":` (each spawned worker imports the script again), and check "
                            "that the script imports without error")
        for task in broken:
            started = (root / "runs" / task.key / "manifest.json").is_file()
            deaths[task.key] = deaths.get(task.key, 0) + started
            if deaths[task.key] >= WORKER_DEATHS:
                report(task.key, "failed", f"its worker process died {deaths[task.key]} times (killed or out of memory)")
            else:
                todo.append(task)


def _report_finished(finished: set[Any], futures: dict[Any, Task], report: Report, broken: list[Task]) -> bool:
    """Report the finished futures (a broken pool's go to ``broken``); True when one ran."""
    ran = False
    for future in finished:
        task = futures[future]
        try:
            result = future.result()
        except BrokenProcessPool:
            broken.append(task)
            continue
        except Exception as err:  # an error outside execute_spec's recording
            result = ("failed", f"{type(err).__name__}: {err}")
        ran = True
        report(task.key, *result)
    return ran


def _started_since(root: Path, key: str, since: float) -> bool:
    """Whether the run ``key`` wrote its manifest since ``since`` (a worker that got that far)."""
    try:
        return (root / "runs" / key / "manifest.json").stat().st_mtime >= since
    except OSError:
        return False


def _stop_pool(pool: ProcessPoolExecutor, pending: set[Any], futures: dict[Any, Task], report: Report,
               signum: int) -> None:
    """A stop in the sweep: cancel the queued tasks, pass ``signum`` on to the workers (in their
    own process group, a terminal's Ctrl-C reaches this process only) and report what the
    running ones record, waiting up to :data:`STOP_GRACE_S`; a further signal is passed on too
    (the workers then stop at once)."""
    for future in list(pending):
        if future.cancel():
            pending.discard(future)
    workers = [p.pid for p in getattr(pool, "_processes", {}).values() if p.pid]  # noqa: SLF001 (no public list)

    def forward(sig: int, frame: Any = None) -> None:
        for pid in workers:
            try:
                os.kill(pid, sig)
            except OSError:
                pass

    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS} if threading.current_thread() is threading.main_thread() else {}
    for sig in previous:
        signal.signal(sig, forward)
    try:
        forward(signum)
        finished, still = wait(pending, timeout=STOP_GRACE_S)
        for future in finished:
            try:
                result = future.result()
            except Exception as err:  # a worker that died on the signal: resumable all the same
                result = ("interrupted", f"stopped ({type(err).__name__}); run the sweep again to resume")
            report(futures[future].key, *result)
        if still:
            forward(signal.SIGKILL)  # past the grace: their runs resume from their last checkpoint
        for future in still:
            report(futures[future].key, "interrupted", f"killed after {STOP_GRACE_S:.0f} s of stopping; run the sweep again "
                                                       "to resume from its last checkpoint")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        pool.shutdown(wait=False, cancel_futures=True)


# -------------------------------------------------------------------------------- ray
def _import_ray():
    try:
        import ray
    except ImportError:
        raise UserError("--executor ray: Ray is not installed; pip install -e '.[ray]'") from None
    return ray


def run_ray(tasks: list[Task], root: Path, opts: ExecutorOptions, report: Report, block: bool = False,
            worker: Worker = run_task) -> None:
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
    remote = ray.remote(worker).options(**resources)
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
    except KeyboardInterrupt:  # a stop: no further task; the running ones get KeyboardInterrupt and record it
        for ref, task in inflight.items():
            ray.cancel(ref)
            report(task.key, "interrupted", "the sweep was stopped; run the sweep again to resume")
        raise
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


def requeueable_job(worker=run_task):  # untyped: submitit's classes are not (mypy would check the body)
    """``worker`` (``run_task``) as a submitit Checkpointable (requeued on preemption or timeout)."""
    submitit = _import_submitit()

    class SweepJob(submitit.helpers.Checkpointable):
        """The worker as a submitit Checkpointable: on preemption or timeout submitit requeues
        the same call, which resumes the run from its last checkpoint."""

        def __call__(self, spec_json: str, root: str, key: str, block: bool = False,
                     allow_large: bool = False, sinks: tuple[str, ...] = (),
                     sweep: tuple[int, str | None] | None = None) -> tuple[str, str | None]:
            if sweep is not None:  # submitit's local cluster: die with the sweep process (pid, start time)
                lifeline.watch(*sweep)
            return worker(spec_json, root, key, block, True, allow_large, sinks)

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


def run_slurm(tasks: list[Task], root: Path, opts: ExecutorOptions, report: Report, block: bool = False,
              worker: Worker = run_task) -> None:
    """One SLURM job array (``%max_parallel`` concurrency cap) through submitit; on
    ``cluster: local`` submitit runs the jobs as local processes, the cap is kept here and
    each job dies with this process (:mod:`.lifeline`), as local pool workers do. A job that
    cannot be submitted (a full disk under ``ROOT/slurm``) is that run's failure."""
    executor = slurm_executor(root, opts)
    job_fn = requeueable_job(worker)
    n = len(tasks)
    args = [[t.spec_json for t in tasks], [str(root)] * n, [t.key for t in tasks], [block] * n, [opts.allow_large] * n,
            [tuple(opts.sinks)] * n]
    if executor.cluster == "slurm":
        try:
            jobs = dict(zip(executor.map_array(job_fn, *args), tasks))
        except OSError as err:
            for task in tasks:
                report(task.key, "failed", os_failure(err, f"submitting the job array in {root / 'slurm'}"))
            return
        cap, todo = len(tasks), []
    else:  # submitit's local cluster starts every job at once: keep the cap here
        cap, todo, jobs = opts.max_parallel or os.cpu_count() or 1, list(reversed(tasks)), {}
    sweep = (os.getpid(), lifeline.process_start(os.getpid()))
    try:
        _poll_slurm(executor, job_fn, jobs, todo, cap, root, opts, report, block, sweep)
    except KeyboardInterrupt:  # a stop: no further job; the running ones are cancelled (SLURM sends them SIGTERM)
        for job, task in jobs.items():
            try:
                job.cancel(check=False)
            except Exception:  # noqa: BLE001 (a job that ended meanwhile)
                pass
            report(task.key, "interrupted", f"slurm job {job.job_id} cancelled by the sweep's stop; run the sweep again to resume")
        raise


def _poll_slurm(executor: Any, job_fn: Any, jobs: dict[Any, Task], todo: list[Task], cap: int, root: Path,
                opts: ExecutorOptions, report: Report, block: bool, sweep: tuple[int, str | None]) -> None:
    """Submit (up to ``cap`` at once) and poll the jobs until every task is reported."""
    while todo or jobs:
        while todo and len(jobs) < cap:
            task = todo.pop()
            try:
                jobs[executor.submit(job_fn, task.spec_json, str(root), task.key, block, opts.allow_large,
                                     tuple(opts.sinks), sweep)] = task
            except OSError as err:
                report(task.key, "failed", os_failure(err, f"submitting its job in {root / 'slurm'}"))
        for job in [j for j in jobs if j.done()]:
            task = jobs.pop(job)
            try:
                report(task.key, *job.result())
            except Exception as err:  # the job failed outside run_task (killed, out of requeues)
                report(task.key, "failed", f"slurm job {job.job_id} failed: {str(err).strip().splitlines()[-1][:300]}")
        time.sleep(SLURM_POLL_S if jobs else 0)


RUNNERS = {"local": run_local, "ray": run_ray, "slurm": run_slurm}


def check_available(opts: ExecutorOptions) -> None:
    """One-line error, before any work, when the executor's or a sink's package is missing,
    or when ``kind: slurm`` (cluster ``auto`` or ``slurm``) finds no SLURM here: submitit's
    auto cluster would otherwise run the jobs locally without a word."""
    from ..runs.sinks import resolve_sinks

    resolve_sinks(opts.sinks)
    if opts.kind == "ray":
        _import_ray()
    elif opts.kind == "slurm":
        _import_submitit()
        if opts.cluster != "local" and shutil.which("sbatch") is None:
            raise UserError(f"--executor slurm (executor.cluster={opts.cluster}): no SLURM here (sbatch not found on "
                            "PATH); pass --set executor.cluster=local to run the jobs as local processes")
