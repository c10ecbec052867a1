"""What an attack on the CLI found: each case is one line and exit 2 (nothing made), a
refusal before any work, or a run that continues where it stopped."""

from __future__ import annotations

import json
import stat
import time

import pandas as pd
import pytest

EXAMPLE = ["run", "ntp", "--preset", "example1", "--set", "train.steps_stage2=20", "-q"]


def one_line(code, stderr, needle):
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and needle in lines[0], (code, lines)


@pytest.mark.parametrize("command", ["run", "reproduce"])
def test_out_that_is_a_file_or_under_a_file_or_unwritable(cli, tmp_path, command):
    (tmp_path / "f").write_text("x")
    args = EXAMPLE[:-1] if command == "run" else ["reproduce", "ntp", "--quick"]
    code, _, err = cli(*args, "--out", str(tmp_path / "f"))
    one_line(code, err, "is a file")
    code, _, err = cli(*args, "--out", str(tmp_path / "f" / "sub"))
    one_line(code, err, "which is a file")
    code, _, err = cli(*args, "--out", "/proc/stagewise-cannot-be-here")
    one_line(code, err, "cannot create the directory")
    assert (tmp_path / "f").read_text() == "x"


@pytest.fixture(scope="module")
def done_run(tmp_path_factory):
    from stagewise import RunSpec, execute_spec

    root = tmp_path_factory.mktemp("done") / "r"
    execute_spec(RunSpec(lab="ntp", preset="example1", overrides={"train": {"steps_stage2": 20}}, name="r"), root)
    return root


@pytest.mark.parametrize("damage,needle", [
    (lambda p: p.write_text(p.read_text()[:40]), "unreadable manifest"),
    (lambda p: p.write_text("[1, 2]"), "expected an object"),
    (lambda p: p.write_text("{}"), "missing lab, status"),
    (lambda p: p.write_bytes(b"\xff\xfe\x00garbage"), "unreadable manifest"),
])
def test_show_and_resume_on_a_damaged_manifest(cli, tmp_path, done_run, damage, needle):
    import shutil

    run = tmp_path / "r"
    shutil.copytree(done_run, run)
    damage(run / "manifest.json")
    for args in (("show", str(run)), ("run", "--resume", str(run))):
        code, _, err = cli(*args)
        one_line(code, err, needle)


def test_show_on_a_truncated_summary(cli, tmp_path, done_run):
    import shutil

    run = tmp_path / "r"
    shutil.copytree(done_run, run)
    (run / "summary.json").write_text((run / "summary.json").read_text()[:100])
    code, out, err = cli("show", str(run))
    one_line(code, err, "unreadable summary")
    (run / "summary.json").write_text('{"lab": "ntp"}')
    code, _, err = cli("show", str(run))
    one_line(code, err, "not a stagewise summary")


def test_resume_without_config_yaml(cli, tmp_path, done_run):
    import shutil

    run = tmp_path / "r"
    shutil.copytree(done_run, run)
    (run / "config.yaml").unlink()
    code, _, err = cli("run", "--resume", str(run))
    one_line(code, err, "config.yaml is missing")


@pytest.mark.parametrize("args,needle", [
    (["run", "ntp", "--set", "data.dim=100000"], "estimated peak memory"),
    (["run", "ntp", "--set", "data.vocab_size=2000", "--seeds", "4096"], "estimated peak memory"),
    (["run", "ntp", "--set", "data.vocab_size=1000000"], "estimated peak memory"),
    (["run", "ntp", "--set", "data.sentences_per_query=10000000"], "estimated peak memory"),
    (["run", "disentangled", "--set", "data.n_test=100000000"], "estimated peak memory"),
    (["run", "disentangled", "--set", "data.d=100000"], "estimated peak memory"),
    (["run", "disentangled", "--set", "data.prompt_len=10000000"], "estimated peak memory"),
    (["run", "ntp", "--set", "train.steps_stage1=900000000", "--set", "train.log_every=1", "--seeds", "4096"],
     "estimated disk use"),
])
def test_sizes_that_cannot_fit_are_refused_up_front(cli, tmp_path, args, needle):
    start = time.perf_counter()
    code, _, err = cli(*args, "--out", str(tmp_path / "r"))
    one_line(code, err, needle)
    assert "--allow-large" in err and time.perf_counter() - start < 10  # refused before any data is built
    assert not (tmp_path / "r").exists()


def test_allow_large_skips_the_refusal():
    from stagewise import RunSpec, spec_config, spec_lab
    from stagewise.errors import UserError
    from stagewise.orchestrate import check_size

    spec = RunSpec(lab="ntp", overrides={"data": {"dim": 100000}}, name="x")
    with pytest.raises(UserError):
        check_size(spec_lab(spec), spec_config(spec), None)
    check_size(spec_lab(spec), spec_config(spec), None, allow_large=True)


def test_a_20k_token_data_file_is_refused(cli, tmp_path):
    tokens = [f"t{i}" for i in range(20000)]
    samples = [{"input": [t], "next": tokens[(i + 1) % len(tokens)]} for i, t in enumerate(tokens)]
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"tokens": tokens, "samples": samples}))
    code, _, err = cli("run", "ntp", "--set", f"data.file={path}", "--out", str(tmp_path / "r"))
    one_line(code, err, "estimated peak memory")


def test_checkpoints_have_the_same_mode_as_other_files(done_run):
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in done_run.rglob("*") if p.is_file() and p.name != ".lock"}
    assert len(set(modes.values())) == 1, modes
    assert any(name.endswith(".safetensors") for name in modes)


def test_generalization_csv_quotes_token_names(cli, tmp_path):
    data = {"tokens": ["=1+1", "b", "@c"], "samples": [{"input": ["=1+1"], "next": "b"}, {"input": ["b"], "next": "@c"},
                                                      {"input": ["@c"], "next": "=1+1"},
                                                      {"input": ["b", "=1+1"], "next": "b"}]}
    path = tmp_path / "d.json"
    path.write_text(json.dumps(data))
    code, _, err = cli("run", "ntp", "--set", f"data.file={path}", "--set", "train.steps_stage1=20",
                       "--set", "train.steps_stage2=20", "--out", str(tmp_path / "r"), "-q")
    assert code == 0, err
    text = (tmp_path / "r" / "tables" / "generalization.csv").read_text()
    assert "\"'=1+1" in text and ",=1+1" not in text and '"=1+1' not in text
    table = pd.read_parquet(tmp_path / "r" / "tables" / "generalization.parquet")
    assert "=1+1" in set(table["predicted"]) | set(table["expected"]) | set(" ".join(table["input"]).split())


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


def test_a_folder_left_by_a_prepare_killed_between_its_writes_is_taken(tmp_path):
    """A SIGKILL after config.yaml and before manifest.json (a sweep's worker) leaves a folder
    with this config.yaml only: the rerun takes it (nothing ran there); a folder with another
    config.yaml, or with any other file, is still refused."""
    from stagewise import RunSpec, execute_spec
    from stagewise.config import to_yaml
    from stagewise.errors import UserError
    from stagewise.labs.resolve import spec_config

    spec = RunSpec(lab="ntp", preset="example1", overrides={"train": {"steps_stage2": 20}}, name="r")
    root = tmp_path / "run"
    root.mkdir()
    (root / "config.yaml").write_text(to_yaml(spec_config(spec)))
    (root / ".manifest.json.abc.tmp").write_text("{")  # the half-written manifest's temp file
    assert execute_spec(spec, root)["status"] == "done"
    assert not list(root.glob(".*.tmp"))
    for extra in ("other.txt", None):
        other = tmp_path / f"other-{extra}"
        other.mkdir()
        (other / "config.yaml").write_text(to_yaml(spec_config(spec)) + ("" if extra else "# edited\n"))
        if extra:
            (other / extra).write_text("x")
        with pytest.raises(UserError, match="is not empty"):
            execute_spec(spec, other)
