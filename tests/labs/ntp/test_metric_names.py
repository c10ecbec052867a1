"""The NTP lab's metric names follow the run store's grammar (docs/run-store.md, "Metric
names"), and run folders written with the old names (``Lab.metric_aliases``) still read: an old
folder through ``stages`` and ``show`` gives what a new one gives, an old name in a criterion is
translated with a note, and a run resumed across the rename (old names in its stream before the
checkpoint) ends as an uninterrupted run of today's code ends."""

from __future__ import annotations

import dataclasses
import json
import re

import pandas as pd
import pytest

from runcache import EXAMPLE1_SHORT
from stagewise.config import deep_merge, resolve
from stagewise.labs import RunSpec, get_lab
from stagewise.labs.ntp.lab import METRIC_ALIASES
from stagewise.labs.ntp.resources import LOGGED_METRICS, SUITE_METRICS
from stagewise.orchestrate import execute, prepare
from stagewise.runs import MetricSink
from stagewise.testing.checks import kill_after

LAB = get_lab("ntp")
FAST = dataclasses.replace(LAB, make_figures=lambda *a: [])  # figures are not what is tested here
OLD = {new: old for old, new in METRIC_ALIASES.items()}  # today's name -> the name runs logged before
MEMBER_STATES = ("stage", "frozen", "tiny_grad")  # states of an ensemble member, no split: kept as they were
GRAMMAR = re.compile(r"(train|test|W_ov|W_kq)(\.[a-z0-9_]+)+")  # {split or weight}.{quantity}[.{qualifier}...]
SMALL = {"seed": 5, "n_seeds": 3, "data": {"vocab_size": 6, "max_len": 5},
         "model": {"init": "random"}, "train": {"steps_stage1": 20, "steps_stage2": 40, "checkpoint_every": 7}}
CRASH_STEP = 45  # stage 2; checkpoints at steps 35 and 42 are kept when the run is killed here


def test_logged_names_follow_the_grammar_and_the_aliases_cover_every_renamed_one():
    logged = set(LOGGED_METRICS) | set(SUITE_METRICS)
    assert LAB.metric_aliases == METRIC_ALIASES
    assert all(GRAMMAR.fullmatch(name) for name in logged - set(MEMBER_STATES)), sorted(logged)
    assert set(METRIC_ALIASES.values()) == logged - set(MEMBER_STATES)  # each renamed name has its old one
    assert not set(METRIC_ALIASES) & logged and len(OLD) == len(METRIC_ALIASES)  # old names are logged no more
    assert set(LAB.key_metrics) <= logged


def test_a_run_logs_the_names_the_estimate_counts(run_cache):
    frame = pd.read_parquet(run_cache.path(EXAMPLE1_SHORT) / "metrics.parquet")
    assert set(frame["metric"]) == set(LOGGED_METRICS) | set(SUITE_METRICS)
    summary = json.loads((run_cache.path(EXAMPLE1_SHORT) / "summary.json").read_text())
    assert not set(summary["final"]) & set(METRIC_ALIASES) and set(summary["final"]) <= set(OLD)


# ------------------------------------------------------------------ an old run folder
def as_old_run(folder) -> None:
    """Rewrite a finished run folder as the lab wrote it before the rename: old names in
    metrics.parquet (sorted as the compaction sorted them) and in summary.json's ``final`` and
    ``per_seed`` keys."""
    path = folder / "metrics.parquet"
    frame = pd.read_parquet(path)
    frame["metric"] = frame["metric"].map(lambda m: OLD.get(m, m)).astype(frame["metric"].dtype)
    frame.sort_values(["metric", "step", "seed"], kind="stable").reset_index(drop=True).to_parquet(path)
    summary = json.loads((folder / "summary.json").read_text())
    summary["final"] = {OLD.get(k, k): v for k, v in summary["final"].items()}
    summary["per_seed"] = {s: {OLD.get(k, k): v for k, v in row.items()} for s, row in summary["per_seed"].items()}
    (folder / "summary.json").write_text(json.dumps(summary))


@pytest.fixture
def new_and_old(run_cache, tmp_path):
    """(a finished run, the same run rewritten with the old names): paths of equal length, so
    that what the CLI prints of them differs only in the folder's name."""
    new, old = run_cache.copy(EXAMPLE1_SHORT, tmp_path / "new"), run_cache.copy(EXAMPLE1_SHORT, tmp_path / "old")
    as_old_run(old)
    assert set(pd.read_parquet(old / "metrics.parquet")["metric"]) & set(METRIC_ALIASES)  # the case these tests are about
    return new, old


def criteria(folder, names: dict[str, str]) -> list[str]:
    """A criterion per metric, ``NAME=METRIC>=THRESHOLD``, at the metric's value at the last step
    of the first seed (so each is reached); ``names`` maps today's name to the one to write."""
    frame = pd.read_parquet(folder / "metrics.parquet")
    last = frame[(frame["step"] == frame["step"].max()) & (frame["seed"] == frame["seed"].min())].set_index("metric")["value"]
    return [f"{stage}={names.get(metric, metric)}>={float(last[metric])!r}"
            for stage, metric in (("attn", "train.opt_attn.min"), ("aligned", "W_kq.cos_target"), ("s2", "stage"))]


def test_stages_reads_an_old_run_with_the_current_names(cli, new_and_old):
    new, old = new_and_old
    asked = criteria(new, {})
    code, expected, _ = cli("stages", str(new), *asked)
    assert code == 0 and all(f"{stage} " in expected for stage in ("attn", "aligned", "s2"))
    code, stdout, stderr = cli("stages", str(old), *asked)
    assert code == 0 and stdout == expected and stderr == ""


@pytest.mark.parametrize("folder", ["new", "old"])
def test_stages_translates_an_old_name_in_a_criterion_with_a_note(cli, new_and_old, folder):
    new, old = new_and_old
    code, expected, _ = cli("stages", str(new), *criteria(new, {}))
    code, stdout, stderr = cli("stages", str(new if folder == "new" else old), *criteria(new, OLD))
    assert code == 0 and stdout == expected
    notes = stderr.splitlines()
    assert [n.split(" (")[0] for n in notes] == ["note: opt_attn_min is now train.opt_attn.min",
                                                 "note: cos_wkq is now W_kq.cos_target"], notes


def test_show_prints_an_old_runs_final_values_under_the_current_names(cli, new_and_old):
    new, old = new_and_old
    code, expected, _ = cli("show", str(new))
    assert code == 0 and "W_kq.cos_target" in expected
    code, stdout, stderr = cli("show", str(old))
    assert code == 0 and stdout.replace(str(old), str(new)) == expected and stderr == ""



def test_show_names_the_learning_rates_as_the_config_does(cli, run_cache):
    """Issue 26: the learning rates `show` prints are the config's lr_stage1 / lr_stage2 (one
    vocabulary), with the values the run used (``Config.step_sizes``), not the paper's eta0 / eta."""
    from stagewise.labs import spec_config

    folder = run_cache.path(EXAMPLE1_SHORT)
    config = spec_config(EXAMPLE1_SHORT)
    dim = json.loads((folder / "summary.json").read_text())["details"]["dim"]
    lr_stage1, lr_stage2 = config.step_sizes(dim)
    code, stdout, _ = cli("show", str(folder))
    tokens = dict(t.split("=", 1) for line in stdout.splitlines() for t in line.split() if re.fullmatch(r"[\w.]+=\S+", t))
    assert code == 0 and float(tokens["lr_stage1"]) == pytest.approx(lr_stage1, rel=1e-5)
    assert float(tokens["lr_stage2"]) == pytest.approx(lr_stage2, rel=1e-5)
    assert not {"eta0", "eta"} & set(tokens), tokens

# --------------------------------------------------------------- resumed across the rename
def stream_names(folder) -> list[set[str]]:
    """The metric names of each line of a run's metrics.jsonl."""
    return [set(json.loads(line)["names"]) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def test_a_run_resumed_across_the_rename_ends_with_the_current_names_and_the_same_values(run_cache, tmp_path, monkeypatch):
    """Killed while its stream had the old names (as an old version wrote them), resumed by
    today's code: metrics.parquet holds only current names and equals the uninterrupted run's,
    and so do the summary's final and per-seed values and its claims."""
    reference = run_cache.path(RunSpec(lab="ntp", overrides=SMALL))
    config = resolve(LAB.Config, deep_merge({}, SMALL))
    paths = prepare(FAST, config, tmp_path / "crash")
    log_array = MetricSink.log_array

    def as_before(self, step, names, values, variant=""):  # what the old version wrote
        log_array(self, step, [OLD.get(n, n) for n in names], values, variant)

    with monkeypatch.context() as patch, kill_after(step=CRASH_STEP), pytest.raises(KeyboardInterrupt):
        patch.setattr(MetricSink, "log_array", as_before)
        execute(FAST, config, paths, progress=False)
    kept = pd.read_parquet(paths.metrics)  # the interrupted run's compaction already reads current names
    assert not set(kept["metric"]) & set(METRIC_ALIASES) and set(kept["metric"]) <= set(OLD) | set(MEMBER_STATES)
    execute(FAST, config, paths, resume=True, progress=False)
    lines = stream_names(paths.root)
    assert lines[0] & set(METRIC_ALIASES) and lines[-1] & set(OLD)  # old names before the checkpoint, current after
    frame = pd.read_parquet(paths.metrics)
    assert not set(frame["metric"]) & set(METRIC_ALIASES)
    pd.testing.assert_frame_equal(frame, pd.read_parquet(reference / "metrics.parquet"), check_exact=True)
    got, want = (json.loads((folder / "summary.json").read_text()) for folder in (paths.root, reference))
    assert (got["final"], got["per_seed"], got["claims"]) == (want["final"], want["per_seed"], want["claims"])

