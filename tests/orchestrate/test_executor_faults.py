"""Issue 15, the sweep executors under faults: a full disk fails only its runs and the sweep
reports every point; workers die with a SIGKILLed sweep and their runs resume; executor
numbers are finite and bounded; a lock that is a directory is one line; SLURM without
sbatch is refused unless executor.cluster=local."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import yaml

from stagewise.orchestrate.executor_options import BOUNDS, ExecutorOptions
from stagewise.orchestrate.sweep import counts, run_local
from stagewise.orchestrate.sweepplan import SweepSpec, plan
from stagewise.runs import RunDirContext, RunLock, read_manifest

TINY = {"lab": "ntp", "preset": "example1", "set": {"train.steps_stage1": 10, "train.steps_stage2": 20}}
DISK_KB = 256           # a tmpfs this small holds the sweep index and locks, not three run folders
WORKERS_GONE_S = 10     # every worker of a SIGKILLed sweep is gone within this
START_S = 120           # a sweep subprocess that has no running worker after this has hung


def write_spec(path: Path, **over) -> Path:
    path.write_text(yaml.safe_dump({**TINY, **over}))
    return path


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


def flat(text: str) -> str:
    """``text`` without whitespace: rich wraps long lines, also inside paths."""
    return "".join(text.split())


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


# -------------------------------------------------------------------- 1. a full disk
@pytest.fixture
def small_disk(tmp_path):
    """A real DISK_KB tmpfs at tmp_path/disk (root only), always unmounted."""
    if os.geteuid() != 0:
        pytest.skip("a real full disk needs root (mount -t tmpfs)")
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_KB}k", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"mount -t tmpfs failed: {made.stderr.strip()[:200]}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.parametrize("workers", ["1", pytest.param("2", marks=pytest.mark.slow)])  # 2: a spawned pool, ~15 s
def test_a_full_disk_fails_its_runs_and_the_sweep_reports_every_point(cli, tmp_path, small_disk, workers):
    spec = write_spec(tmp_path / "s.yaml", axes={"seed": [0, 1, 2]})
    out = small_disk / "o"
    # the sweep's disk estimate (all points together) refuses it up front, creating nothing ...
    code, stdout, stderr = cli("sweep", str(spec), "--out", str(out), "--max-parallel", workers)
    assert code == 2 and len(error_lines(stderr)) == 1 and "exceeds the free disk" in stderr, (stdout, stderr)
    assert not out.exists()
    # ... so the disk fills during the runs only past that check (or when something else fills it)
    code, stdout, stderr = cli("sweep", str(spec), "--out", str(out), "--max-parallel", workers,
                               "--set", "executor.allow_large=true")
    assert code == 1, (stdout, stderr)
    assert "Traceback" not in stdout + stderr
    first = stdout.splitlines()[0]
    n = {status: int(first.split(f" {status}")[0].split()[-1]) for status in ("done", "failed")}
    assert "(3 points" in first and n["done"] + n["failed"] == 3 and n["failed"] >= 1, stdout
    reported = flat(stderr)
    assert flat("no space left on device") in reported, stderr
    failed = [seed for seed in range(3) if flat(f"failed seed={seed}: ") in reported]
    assert len(failed) == n["failed"], stderr  # every failed point is named with its reason
    for run in (out / "runs").iterdir():  # a run whose manifest could be written says why it failed
        status = read_manifest(run)["status"] if (run / "manifest.json").is_file() else None
        assert status in (None, "failed", "running"), status


class _FullDiskAt:
    """``os`` for runs/lock.py whose ``write`` fails with ENOSPC on the lock of ``key``."""

    def __init__(self, key: str):
        self.key = key

    def __getattr__(self, name):
        return getattr(os, name)

    def write(self, fd, data):
        if os.readlink(f"/proc/self/fd/{fd}").endswith(f"{self.key}/.lock"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return os.write(fd, data)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc/self/fd to name a written file")
@pytest.mark.usefixtures("no_run_figures")  # in-process runs; their figures are not tested here
def test_enospc_at_the_lock_and_mid_run_is_that_runs_failure(cli, tmp_path, monkeypatch):
    import stagewise.runs.lock as lock_module

    spec = write_spec(tmp_path / "s.yaml", axes={"seed": [0, 1, 2]})
    pts = plan(SweepSpec.model_validate(yaml.safe_load(spec.read_text())))
    at_lock, mid_run = pts[0].hash, pts[1].hash
    monkeypatch.setattr(lock_module, "os", _FullDiskAt(at_lock))
    original = RunDirContext.log
    calls = {"n": 0}

    def filling(self, step, values, **kw):
        if self.paths.root.name == mid_run:
            calls["n"] += 1
            if calls["n"] == 5:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return original(self, step, values, **kw)

    monkeypatch.setattr(RunDirContext, "log", filling)
    out = tmp_path / "o"
    code, stdout, stderr = cli("sweep", str(spec), "--out", str(out), "--max-parallel", "1", "--no-collect")
    assert code == 1 and "Traceback" not in stderr, stderr
    assert stdout.startswith("1 done, 0 skipped, 2 failed, 0 held (3 points"), stdout
    reported = flat(stderr)
    assert flat(f"no space left on device: taking the lock {out / 'locks' / at_lock / '.lock'}") in reported, stderr
    assert flat(f"no space left on device: running into {out / 'runs' / mid_run}") in reported, stderr
    assert not (out / "runs" / at_lock).exists()  # refused at its lock: nothing was run
    manifest = read_manifest(out / "runs" / mid_run)  # the manifest could be written: it records the failure
    assert manifest["status"] == "failed" and "No space left on device" in manifest["error"], manifest
    assert read_manifest(out / "runs" / pts[2].hash)["status"] == "done"
    monkeypatch.setattr(lock_module, "os", os)
    with RunLock(out / "locks" / at_lock):  # the failed acquire let go of its flock
        pass


# ---------------------------------------------------------- 2. workers die with the sweep
def _children(pid: int) -> list[int]:
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                kids.append(int(entry))
    return kids + [g for k in kids for g in _children(k)]


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _running(out: Path) -> list[Path]:
    return [m.parent for m in out.glob("runs/*/manifest.json")
            if any((m.parent / "checkpoints").glob("*.safetensors")) and read_manifest(m.parent)["status"] == "running"]


KILL_SWEEP = {"set": {"train.steps_stage1": 1500, "train.steps_stage2": 3000, "train.checkpoint_every": 100},
              "axes": {"seed": [0, 1]}}


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="finds the workers through /proc")
@pytest.mark.parametrize("extra", [
    pytest.param([], id="local", marks=pytest.mark.slow),  # a real SIGKILL of a sweep process and its spawned pool: ~13 s
    pytest.param(["--executor", "slurm", "--set", "executor.cluster=local"], id="submitit-local",
                 marks=pytest.mark.slow),
])
def test_workers_die_with_a_killed_sweep_and_its_runs_resume(cli, tmp_path, extra, monkeypatch):
    if extra:
        pytest.importorskip("submitit", reason="submitit not installed (pip install -e '.[slurm]')")
    spec = write_spec(tmp_path / "s.yaml", **KILL_SWEEP)
    out = tmp_path / "o"
    cmd = [sys.executable, "-m", "stagewise.cli", "sweep", str(spec), "--out", str(out), "--no-collect",
           "--max-parallel", "2", *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    workers: list[int] = []
    try:
        deadline = time.time() + START_S
        while len(_running(out)) < 2:  # both points training: two workers hold runs
            assert proc.poll() is None and time.time() < deadline, "the sweep ended or hung before the kill"
            time.sleep(0.1)
        workers = _children(proc.pid)
        assert len(workers) >= 2, workers
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=WORKERS_GONE_S)  # EOF on stdout: no worker keeps the pipe open
        deadline = time.time() + WORKERS_GONE_S
        while any(_alive(w) for w in workers) and time.time() < deadline:
            time.sleep(0.1)
        assert not [w for w in workers if _alive(w)], "workers outlived the SIGKILLed sweep"
    finally:
        for pid in [proc.pid, *_children(proc.pid), *workers]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert all(read_manifest(r)["status"] == "running" for r in (out / "runs").iterdir())
    from stagewise.labs.registry import REGISTRY

    # the metrics are compared; the figures of the resumed and the reference runs cost seconds
    monkeypatch.setitem(REGISTRY._labs, "ntp", replace(REGISTRY["ntp"], make_figures=lambda *a, **k: []))
    pts = plan(SweepSpec.model_validate({**TINY, **KILL_SWEEP}))
    again = run_local(pts, out, "ntp", max_parallel=1)
    assert counts(again)["done"] == 2 and all(read_manifest(out / "runs" / p.hash).get("resumed") for p in pts)
    reference = run_local(pts, tmp_path / "ref", "ntp", max_parallel=1)
    assert counts(reference)["done"] == 2
    for p in pts:
        got = pd.read_parquet(out / "runs" / p.hash / "metrics.parquet")
        assert not got.duplicated(["step", "seed", "variant", "metric"]).any()
        pd.testing.assert_frame_equal(got, pd.read_parquet(tmp_path / "ref" / "runs" / p.hash / "metrics.parquet"),
                                      check_exact=True)


# ------------------------------------------------------------- 3. finite, bounded numbers
BAD_NUMBERS = {".inf": "inf", ".nan": "nan", "-1": "-1", "1.0e+30": "1e+30"}


@pytest.mark.parametrize("field", sorted(BOUNDS))
def test_executor_numbers_are_finite_and_bounded(cli, tmp_path, field):
    for raw, shown in BAD_NUMBERS.items():
        out = tmp_path / "o"
        spec = tmp_path / "s.yaml"
        spec.write_text(yaml.safe_dump({**TINY, "axes": {"seed": [0]}}) + f"executor: {{kind: ray, {field}: {raw}}}\n")
        code, _, stderr = cli("sweep", str(spec), "--out", str(out))
        lines = error_lines(stderr)
        assert code == 2 and len(lines) == 1, (field, raw, stderr)
        assert f"executor.{field}" in lines[0] and f"got {shown}" in lines[0] and "in [" in lines[0], lines
        assert not out.exists()
        write_spec(spec, axes={"seed": [0]})
        code, _, stderr = cli("sweep", str(spec), "--out", str(out), "--set", f"executor.{field}={raw}")
        lines = error_lines(stderr)
        assert code == 2 and len(lines) == 1 and f"executor.{field}=" in lines[0] and "must be" in lines[0], lines
        assert not out.exists()
    bound = BOUNDS[field]
    ExecutorOptions.model_validate({field: bound.high})  # the caps themselves are allowed
    with pytest.raises(ValueError, match=field):
        ExecutorOptions.model_validate({field: bound.high * 2})


def test_issue_example_ray_mem_gb_inf(cli, tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({**TINY, "axes": {"seed": [0]}}) + "executor: {kind: ray, mem_gb: .inf}\n")
    code, _, stderr = cli("sweep", str(spec), "--out", str(tmp_path / "o"))
    assert code == 2 and error_lines(stderr) == [
        f"error: sweep {spec}: executor.mem_gb: must be a finite number in [0.001, 65536] (GB of memory per run) "
        "or null; got inf"], stderr
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------- 4. a lock that is a directory
def test_resume_with_a_lock_that_is_a_directory(cli, tmp_path):
    from stagewise.labs import get_lab
    from stagewise.orchestrate import start_run

    lab = get_lab("ntp")
    config = lab.Config.model_validate(lab.preset_overrides("example1"))
    run = start_run(lab, config, tmp_path / "r").root
    (run / ".lock").mkdir()
    before = tree(run)
    code, _, stderr = cli("run", "--resume", str(run))
    lines = error_lines(stderr)
    assert code == 2 and len(lines) == 1, stderr
    assert f"{run / '.lock'}: is a directory, not a lock file; remove it" in lines[0], lines
    assert tree(run) == before and read_manifest(run)["status"] == "running"


def test_a_sweep_lock_that_is_a_directory_fails_that_run(cli, tmp_path):
    from stagewise.labs import spec_config, spec_lab
    from stagewise.orchestrate import start_run

    spec = write_spec(tmp_path / "s.yaml", axes={"seed": [0, 1]})
    pts = plan(SweepSpec.model_validate(yaml.safe_load(spec.read_text())))
    out = tmp_path / "o"
    out.mkdir()  # a sweep folder (its index as a first sweep wrote it) ...
    (out / "sweep.json").write_text(json.dumps({"lab": "ntp", "axes": ["seed"], "fold": "none", "report": {}, "points": [
        {"label": p.label, "values": p.values, "hash": p.hash, "run_dir": f"runs/{p.hash}", "seeds": [i]}
        for i, p in enumerate(pts)]}))
    (out / "locks" / pts[0].hash / ".lock").mkdir(parents=True)  # ... where the sweep's lock of point 0 is a folder
    started = start_run(spec_lab(pts[1].spec), spec_config(pts[1].spec), out / "runs" / pts[1].hash).root
    (started / ".lock").mkdir()  # the run directory's own lock of point 1 (an unfinished run, resumed)
    code, stdout, stderr = cli("sweep", str(spec), "--out", str(out), "--max-parallel", "1", "--no-collect")
    assert code == 1 and "Traceback" not in stderr, stderr
    assert stdout.startswith("0 done, 0 skipped, 2 failed, 0 held (2 points"), stdout
    reported = flat(stderr)
    for path in (out / "locks" / pts[0].hash / ".lock", started / ".lock"):
        assert flat(f"{path}: is a directory, not a lock file") in reported, stderr
    assert not (out / "runs" / pts[0].hash).exists()


# ---------------------------------------------------------------- 5. SLURM without sbatch
def test_slurm_without_sbatch_is_refused_unless_cluster_local(cli, tmp_path, monkeypatch):
    pytest.importorskip("submitit", reason="submitit not installed (pip install -e '.[slurm]')")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))  # no sbatch here
    spec = write_spec(tmp_path / "s.yaml", axes={"seed": [0]})
    out = tmp_path / "o"
    for extra in ([], ["--set", "executor.cluster=slurm"]):
        code, _, stderr = cli("sweep", str(spec), "--out", str(out), "--executor", "slurm", *extra)
        lines = error_lines(stderr)
        assert code == 2 and len(lines) == 1, stderr
        assert "no SLURM here (sbatch not found" in lines[0] and "--set executor.cluster=local" in lines[0], lines
        assert not out.exists()
    sbatch = bin_dir / "sbatch"  # a SLURM login node: the check passes (a dry run makes nothing)
    sbatch.write_text("#!/bin/sh\nexit 0\n")
    sbatch.chmod(0o755)
    code, stdout, _ = cli("sweep", str(spec), "--out", str(out), "--executor", "slurm", "--dry-run")
    assert code == 0 and "executor slurm" in stdout and not out.exists()
    sbatch.unlink()
    code, stdout, _ = cli("sweep", str(spec), "--out", str(out), "--executor", "slurm", "--dry-run",
                          "--set", "executor.cluster=local")
    assert code == 0 and not out.exists()


@pytest.mark.slow  # a submitit-local job: a fresh interpreter importing torch, ~15 s
def test_slurm_with_cluster_local_runs_without_sbatch(cli, tmp_path, monkeypatch):
    pytest.importorskip("submitit", reason="submitit not installed (pip install -e '.[slurm]')")
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))  # python, no sbatch
    spec = write_spec(tmp_path / "s.yaml", axes={"seed": [0]})
    out = tmp_path / "o"
    code, stdout, stderr = cli("sweep", str(spec), "--out", str(out), "--executor", "slurm",
                               "--set", "executor.cluster=local", "--no-collect")
    assert code == 0 and stdout.startswith("1 done"), (stdout, stderr)
    assert read_manifest(out / "runs" / json.loads((out / "sweep.json").read_text())["points"][0]["hash"])[
        "status"] == "done"


@pytest.mark.usefixtures("no_run_figures")  # in-process runs; their figures are not tested here
def test_a_run_lock_left_by_an_exiting_worker_is_waited_for(tmp_path):
    """A killed worker releases the sweep's lock and the run folder's lock one after the other:
    the next sweep, holding the first, waits for the second instead of failing the run."""
    import threading

    from stagewise.orchestrate.sweep import counts, run_local
    from stagewise.orchestrate.sweepplan import SweepSpec, plan
    from stagewise.runs import RunLock

    (point,) = plan(SweepSpec.model_validate({"lab": "ntp", "preset": "example1", "set": {"train.steps_stage2": 20},
                                              "axes": {"seed": [0]}}))
    from stagewise.orchestrate.sweep import new_index
    from stagewise.orchestrate.sweepplan import fold_points

    (tmp_path / "sweep.json").write_text(json.dumps(new_index(fold_points([point]), "ntp")))  # the killed sweep's
    from stagewise.labs import get_lab
    from stagewise.orchestrate import prepare

    run_dir = tmp_path / "runs" / point.hash
    prepare(get_lab("ntp"), point.config(), run_dir)  # the killed run had started: manifest 'running'
    exiting = RunLock(run_dir).acquire()
    threading.Timer(1.5, exiting.release).start()
    results = run_local([point], tmp_path, "ntp", max_parallel=1)
    assert counts(results)["done"] == 1, results
