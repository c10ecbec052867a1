"""`reproduce` (orchestrate.reproduction): a reproduce killed inside a run continues where it
stopped (finished runs kept, the interrupted one resumed), a folder holding another plan is
refused, and a failing run is recorded while the rest goes on."""

from __future__ import annotations

import json

import pytest


@pytest.mark.slow  # a reproduce killed mid-way and run again: ~20 s
@pytest.mark.usefixtures("no_run_figures")  # the in-process runs' figures are not what is tested
def test_killed_reproduce_continues_where_it_stopped(tmp_path, monkeypatch):
    from dataclasses import replace

    from stagewise.labs import Reproduction, RunSpec, get_lab
    from stagewise.orchestrate import reproduce
    from stagewise.orchestrate.executors import ExecutorOptions
    from stagewise.runs import RunDirContext

    specs = (RunSpec(lab="ntp", preset="example1", overrides={"train": {"steps_stage2": 30}}, name="a"),
             RunSpec(lab="ntp", preset="example1", overrides={"train": {"steps_stage2": 60, "checkpoint_every": 10}},
                     name="b"))
    lab = replace(get_lab("ntp"), reproduce=Reproduction(full=specs, quick=specs))
    original = RunDirContext.log

    def killed_in_b(self, step, values, **kw):
        original(self, step, values, **kw)
        if self.paths.root.name == "b" and step == 250:
            raise KeyboardInterrupt("simulated Ctrl-C")

    monkeypatch.setattr(RunDirContext, "log", killed_in_b)
    inline = ExecutorOptions(max_parallel=1)  # the simulated Ctrl-C is patched into this process, not into workers
    with pytest.raises(KeyboardInterrupt):
        reproduce(lab, tmp_path / "rep", quick=True, opts=inline)
    assert json.loads((tmp_path / "rep" / "runs" / "b" / "manifest.json").read_text())["status"] == "interrupted"
    a_mtime = (tmp_path / "rep" / "runs" / "a" / "metrics.parquet").stat().st_mtime_ns
    monkeypatch.setattr(RunDirContext, "log", original)
    report = reproduce(lab, tmp_path / "rep", quick=True)  # the rest in worker processes
    assert [r["status"] for r in report["runs"]] == ["done", "done"]
    assert (tmp_path / "rep" / "runs" / "a" / "metrics.parquet").stat().st_mtime_ns == a_mtime  # kept, not rerun
    assert json.loads((tmp_path / "rep" / "runs" / "b" / "manifest.json").read_text()).get("resumed")
    assert (tmp_path / "rep" / "report.html").exists()
    # the same folder with another plan is refused
    other = replace(lab, reproduce=Reproduction(full=specs[:1], quick=specs[:1]))
    from stagewise.errors import UserError

    with pytest.raises(UserError, match="another plan"):
        reproduce(other, tmp_path / "rep", quick=True)


def test_failing_run_inside_reproduce_is_recorded_and_the_rest_goes_on(tmp_path):
    from dataclasses import replace

    from stagewise.labs import Reproduction, RunSpec, get_lab
    from stagewise.orchestrate import reproduce

    base = get_lab("ntp")

    def boom(config, ctx):
        if config.train.steps_stage2 == 31:
            raise RuntimeError("solver exploded")
        return base.run(config, ctx)

    specs = (RunSpec(lab="ntp", preset="example1", overrides={"train": {"steps_stage2": 31}}, name="bad"),
             RunSpec(lab="ntp", preset="example1", overrides={"train": {"steps_stage2": 30}}, name="good"))
    lab = replace(base, run=boom, reproduce=Reproduction(full=specs, quick=specs))
    report = reproduce(lab, tmp_path / "rep", quick=True)
    assert [r["status"] for r in report["runs"]] == ["failed", "done"]
    assert "solver exploded" in report["runs"][0]["error"]
