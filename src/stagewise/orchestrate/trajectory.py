"""Trajectories: one model's saved checkpoints evaluated in order into one run directory (issues 29, 39).

Any lab whose probe declares a checkpoint series (``Lab.probe.series``, a
:class:`~stagewise.labs.contract.Series`: the lm lab's reads ``save_pretrained`` folders) can
make one. The run directory ``OUT`` is a run of that lab with ``source.kind=trajectory``
(:func:`trajectory_config`), so ``stagewise show``, ``stages``, ``report`` and the claims read
it as they read a training run of the lab::

    OUT/                       the trajectory's run (config.yaml, manifest, metrics, tables, summary)
    OUT/parts/runs/ckpt-NNNN/  with an executor: checkpoint NNNN's own run (source.kind=checkpoint)
    OUT/parts/locks/, slurm/   the executor's locks and job files, as in a sweep folder

:func:`run_trajectory_dir` makes it (every check first: each checkpoint a model folder of one
architecture, the data, probe sets with usable rows; nothing is made otherwise), or resumes an
unfinished one of the same config, or returns a finished one as it is. Without an executor
the run evaluates the checkpoints in this process, one at a time, with a resume checkpoint
after each (a killed trajectory evaluates only the checkpoints after its last one). With one
(``ExecutorOptions``: local pool, Ray, SLURM/submitit) every checkpoint not yet recorded runs
first as a task of its own under ``OUT/parts``, then the trajectory's run folds their records
in, values unchanged (the lab's ``run`` with ``source.kind=trajectory``).

Example::

    lab, config = trajectory_config("lm", ["ckpt/checkpoint-100", "ckpt/checkpoint-200"], sets=["task.limit=20"])
    manifest = run_trajectory_dir(lab, config, "runs/traj", executor=ExecutorOptions(kind="ray"))
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from ..config import config_hash, resolve
from ..errors import UserError
from ..labs import Lab, RunSpec
from ..labs.contract import part_key
from ..labs.resolve import spec_hash
from ..progress import ProgressCallback
from ..runs import RunLock, RunPaths, read_manifest, update_manifest
from ..runs.manifest import finished_with
from ..runs.store import Checkpoints, now_iso
from .executor_options import ExecutorOptions
from .runner import check_size, execute, load_for_resume, prepare

TRAJECTORY = "trajectory"
FAILED = ("failed", "interrupted", "held")  # part statuses that leave a checkpoint unrecorded


@dataclass(frozen=True)
class PartResult:
    """How checkpoint ``index``'s own run (``OUT/parts/runs/KEY``) ended in this dispatch:
    ``done``, ``skipped`` (done before), ``failed``, ``held`` (another process has it) or
    ``interrupted``."""

    index: int
    checkpoint: str
    key: str
    status: str
    error: str | None = None

    @property
    def label(self) -> str:
        return f"checkpoint {self.index} ({self.checkpoint})"

    def line(self, out: Path) -> str:
        return f"{self.status} {self.label}: {self.error} ({out / 'parts' / 'runs' / self.key})"


class PartsFailed(Exception):
    """Some checkpoints' own runs did not finish: the trajectory's run is recorded failed and
    resumes on the next call (finished parts are kept). ``lines``: one per failed checkpoint."""

    def __init__(self, failed: Sequence[PartResult], out: Path, total: int):
        self.failed, self.out, self.total = list(failed), out, total
        self.lines = [r.line(out) for r in self.failed]
        super().__init__(f"{len(self.failed)} of {total} checkpoint runs did not finish; " + "; ".join(self.lines))


# ---------------------------------------------------------------------------- config
def series_lab(lab: str | Lab) -> tuple[Lab, Any]:
    """(the lab, its :class:`~stagewise.labs.contract.Series`): one line when the lab reads no
    checkpoint series."""
    from .trackinputs import probing_lab

    value = probing_lab(lab)
    if value.probe.series is None:
        raise UserError(f"lab '{value.name}' reads no checkpoint series (its probe measures a training while it runs: "
                        "stagewise.Tracker)")
    return value, value.probe.series


def trajectory_config(lab: str | Lab, checkpoints: Sequence[str], *, preset: str | None = None,
                      config: str | Path | None = None, sets: Sequence[str] = (),
                      steps: Sequence[int] | None = None) -> tuple[Lab, Any]:
    """(the lab, the validated config of a trajectory): the lab's defaults < ``preset`` < the
    YAML file ``config`` < ``sets`` (``a.b=value``) < what the lab's series forces
    (``Series.config``: ``source.kind=trajectory``, the checkpoints as the folders they resolve
    to, ``steps`` when given, what the model is)."""
    value, series = series_lab(lab)
    forced = series.config(list(checkpoints), None if steps is None else list(steps))
    return value, resolve(value.Config, value.preset_overrides(preset), config, list(sets), forced)


# ---------------------------------------------------------------------------- checks
def _checked(lab: Lab, config: Any, out: Path, allow_large: bool) -> None:
    """Every check of a trajectory (size, the lab's, its series': checkpoints, probe sets)."""
    check_size(lab, config, out, allow_large)
    lab.check(config)
    series_lab(lab)[1].check(config)


# ---------------------------------------------------------------------------- run
def run_trajectory_dir(lab: Lab, config: Any, out: str | Path, *, executor: ExecutorOptions | None = None,
                       progress: bool | ProgressCallback = True, on_part: Callable[[PartResult], None] | None = None,
                       allow_large: bool = False) -> dict[str, Any]:
    """Make, resume or return the trajectory's run directory ``out`` (module docstring);
    returns its manifest.

    A new ``out``: every check, then the run directory. An existing one: of another config,
    one UserError line; done, returned as it is; else resumed from its last checkpoint. With
    ``executor`` the checkpoints not yet recorded run first as tasks (``on_part`` is called as
    each ends); :class:`PartsFailed` when some did not finish (the run is recorded failed,
    resumable). Then the run itself, in this process (``progress`` as for
    :func:`~stagewise.orchestrate.runner.execute`); its errors propagate as ``execute``'s do."""
    from .executors import check_available

    if not isinstance(config, lab.Config) or getattr(getattr(config, "source", None), "kind", None) != TRAJECTORY:
        raise ValueError(f"run_trajectory_dir takes a {lab.name} config with source.kind=trajectory (trajectory_config)")
    paths = RunPaths(Path(out))
    if executor is not None:
        check_available(executor)
    resume = paths.manifest.is_file()
    if resume:
        manifest = read_manifest(paths.root)
        if manifest.get("lab") != lab.name or manifest.get("config_hash") != config_hash(config):
            raise UserError(f"--out {out}: holds another run ({manifest.get('lab')}, config {manifest.get('config_hash')}; "
                            f"this trajectory is {config_hash(config)}); choose another folder")
        if manifest["status"] == "done":
            return manifest
        _, config = load_for_resume(paths.root)
        _checked(lab, config, paths.root, allow_large)
    else:
        _checked(lab, config, paths.root, allow_large)
        paths = prepare(lab, config, paths.root)
    if executor is not None:
        dispatch_parts(lab, config, paths, executor, on_part)
    return execute(lab, config, paths, resume=resume, progress=progress)


def dispatch_parts(lab: Lab, config: Any, paths: RunPaths, opts: ExecutorOptions,
                   on_part: Callable[[PartResult], None] | None = None) -> list[PartResult]:
    """Run every checkpoint the trajectory has not recorded and whose own run is not done as
    a task of ``opts.kind`` into ``paths.parts`` (a run another process holds is waited for
    with ``opts.wait_held``); the results in checkpoint order. Holds the trajectory's lock
    meanwhile. :class:`PartsFailed` (the run recorded failed) when some did not finish; a stop
    is recorded (interrupted) and propagates."""
    from .executors import RUNNERS, Task

    series = series_lab(lab)[1]
    points = series.points(config)
    recorded = _recorded_index(paths)
    todo: dict[str, tuple[int, Task]] = {}
    for index in range(recorded + 1, len(points)):
        spec = RunSpec(lab=lab.name, overrides=series.part(config, index, points[index]), name=part_key(index))
        if not finished_with(paths.parts / "runs" / part_key(index), spec_hash(spec)):
            todo[part_key(index)] = (index, Task(part_key(index), spec.to_json()))
    results: dict[str, PartResult] = {}

    def report(key: str, status: str, error: str | None) -> None:
        index = todo[key][0]
        results[key] = PartResult(index, config.source.checkpoints[index], key, status, error)
        if on_part is not None and not (status == "held" and opts.wait_held):
            on_part(results[key])

    if not todo:
        return []
    runner = RUNNERS[opts.kind]
    with RunLock(paths.root):
        try:
            runner([task for _, task in todo.values()], paths.parts, opts, report)
            held = [task for key, (_, task) in todo.items() if results[key].status == "held"]
            if held and opts.wait_held:
                runner(held, paths.parts, opts, report, block=True)
        except KeyboardInterrupt:
            update_manifest(paths.root, status="interrupted", ended=now_iso(),
                            error="interrupted while its checkpoints ran as tasks; run the trajectory again to continue")
            raise
        ordered = [results[key] for key in sorted(results)]
        failed = [r for r in ordered if r.status in FAILED]
        if failed:
            err = PartsFailed(failed, paths.root, len(points))
            update_manifest(paths.root, status="failed", ended=now_iso(), error=str(err))
            raise err
    return ordered


def _recorded_index(paths: RunPaths) -> int:
    """The last checkpoint index the trajectory's newest resume checkpoint covers (-1: none)."""
    latest = Checkpoints(paths.checkpoints).latest()
    index = latest[3].get("index") if latest is not None else None
    return int(index) if isinstance(index, int) else -1
