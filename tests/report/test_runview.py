"""``stagewise.load_run`` (issue 26, section 4): a run folder as Python values, equal to what
its files hold: the config, the manifest, the summary (version 1 too), the claims as a frame
(verdicts as in summary.json), the long metrics (metrics.parquet; metrics.jsonl for an
unfinished run, as the runner compacts it), the wide pivot consistent with the long form, the
tables without ``_part``; old metric names read as current ones; one line for a folder that is
not a run or holds a symbolic link."""

from __future__ import annotations

import base64
import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

import stagewise
from runcache import EXAMPLE1_SHORT
from stagewise import RunView, UserError, load_run
from stagewise.errors import RenamedMetric
from stagewise.labs.ntp.lab import METRIC_ALIASES
from stagewise.report.claims import read_summary
from stagewise.report.runview import CLAIM_COLUMNS, claims_frame, read_run
from stagewise.runs.stream import MetricSink


@pytest.fixture(scope="module")
def done(run_cache):
    return run_cache.path(EXAMPLE1_SHORT)


@pytest.fixture
def copy(run_cache, tmp_path):
    return run_cache.copy(EXAMPLE1_SHORT, tmp_path / "run")


def test_a_finished_run_reads_as_its_files(done):
    run = load_run(done)
    assert isinstance(run, RunView) and stagewise.load_run is load_run and run.path == done
    manifest = json.loads((done / "manifest.json").read_text())
    assert run.manifest == manifest and run.status == manifest["status"] == "done"
    assert run.lab == "ntp" and run.seeds == manifest["seeds"]
    assert run.config == yaml.safe_load((done / "config.yaml").read_text())
    assert run.config["train"]["steps_stage2"] == EXAMPLE1_SHORT.overrides["train"]["steps_stage2"]
    assert run.summary == read_summary(done / "summary.json") and run.summary.schema_version == 2
    pd.testing.assert_frame_equal(run.metrics, pd.read_parquet(done / "metrics.parquet"))
    assert list(run.tables) == sorted(manifest["tables"]) == ["generalization"]
    table = pd.read_parquet(done / "tables" / "generalization.parquet")
    pd.testing.assert_frame_equal(run.tables["generalization"], table.drop(columns="_part"))
    assert run.tables["generalization"] is run.tables["generalization"]  # read once
    with pytest.raises(KeyError):
        run.tables["nope"]
    assert repr(run).startswith(f"RunView({str(done)!r}, lab='ntp', status='done', seeds=[0], claims: ")


def test_claims_frame_holds_the_verdicts_of_summary_json(done):
    claims = load_run(done).claims
    written = json.loads((done / "summary.json").read_text())["claims"]
    assert list(claims.columns) == list(CLAIM_COLUMNS) and len(claims) == len(written) > 0
    assert str(claims["holds"].dtype) == "boolean" and str(claims["verdict"].dtype) == "string"
    for row, claim in zip(claims.to_dict("records"), written):
        assert (row["id"], row["statement"], row["verdict"], row["relation"]) == \
            (claim["id"], claim["statement"], claim["verdict"], claim["relation"])
        assert row["holds"] == claim["holds"]  # to_dict gives <NA> as None
        for key in ("value", "threshold", "pass_fraction"):
            assert math.isnan(row[key]) if claim[key] is None else row[key] == claim[key]
        assert row["reason"] == claim["reason"] and row["quantity"] == claim["quantity"]
        assert row["source"].endswith(claim["source"]["where"])
    assert claims["holds"].isna().tolist() == [c["holds"] is None for c in written]
    assert set(claims["verdict"]) <= {"holds", "fails", "not testable"}


def test_the_wide_pivot_and_series_agree_with_the_long_metrics(done):
    run = load_run(done)
    long, wide = run.metrics, run.wide
    assert wide.index.name == "step" and list(wide.columns.names) == ["metric", "seed"]
    assert int(wide.notna().sum().sum()) == len(long)
    for row in long.sample(200, random_state=0).itertuples():
        assert wide.loc[row.step, (row.metric, row.seed)] == row.value
    loss = run.series("train.loss")
    expected = long[long.metric == "train.loss"].pivot(index="step", columns="seed", values="value")
    pd.testing.assert_frame_equal(loss, expected, check_names=False)
    with pytest.raises(UserError, match=r"metric 'train\.los' was not logged \(close: train\.loss"):
        run.series("train.los")


def test_an_unfinished_run_reads_its_metrics_from_the_stream(copy):
    """A killed run (status running, no metrics.parquet, no summary): the steps logged so far,
    a torn last line skipped; a running run with a stale metrics.parquet reads the stream too."""
    full = pd.read_parquet(copy / "metrics.parquet")
    lines = (copy / "metrics.jsonl").read_bytes().splitlines(keepends=True)
    kept = lines[: len(lines) // 2]
    (copy / "metrics.jsonl").write_bytes(b"".join(kept) + lines[len(kept)][:40])  # a torn line from the kill
    manifest = json.loads((copy / "manifest.json").read_text())
    (copy / "manifest.json").write_text(json.dumps({**manifest, "status": "running", "ended": None}))
    (copy / "summary.json").unlink()

    stale = load_run(copy)  # metrics.parquet still there: the stream is newer
    last = max(json.loads(line)["step"] for line in kept)
    expected = full[full.step <= last].reset_index(drop=True)
    pd.testing.assert_frame_equal(stale.metrics, expected)
    (copy / "metrics.parquet").unlink()
    run = load_run(copy)
    assert run.status == "running" and run.summary is None
    pd.testing.assert_frame_equal(run.metrics, expected)
    pd.testing.assert_frame_equal(run.metrics, MetricSink(copy / "metrics.jsonl", run.seeds).to_frame())
    assert run.claims.empty and list(run.claims.columns) == list(CLAIM_COLUMNS)
    assert repr(run).endswith("claims: none)")
    (copy / "metrics.jsonl").unlink()  # nothing logged yet: an empty frame with the five columns
    empty = load_run(copy)
    assert empty.metrics.empty and list(empty.metrics.columns) == list(full.columns) and empty.wide.empty


def test_old_metric_names_read_as_the_current_ones(copy):
    """A run written before the NTP lab's metric names followed the grammar (cos_wkq, loss, ...)."""
    old_of = {new: old for old, new in METRIC_ALIASES.items()}
    current = pd.read_parquet(copy / "metrics.parquet")
    old = current.assign(metric=current["metric"].map(lambda m: old_of.get(m, m)).astype("string"))
    old.to_parquet(copy / "metrics.parquet", index=False)
    summary = json.loads((copy / "summary.json").read_text())
    summary["final"] = {old_of.get(k, k): v for k, v in summary["final"].items()}
    (copy / "summary.json").write_text(json.dumps(summary))
    assert "cos_wkq" in set(old["metric"]) and "cos_wkq" in summary["final"]

    run = load_run(copy)
    pd.testing.assert_frame_equal(run.metrics, current)
    assert "W_kq.cos_target" in run.summary.final and "cos_wkq" not in run.summary.final
    with pytest.warns(RenamedMetric, match="cos_wkq is now W_kq.cos_target"):
        by_old_name = run.series("cos_wkq")
    pd.testing.assert_frame_equal(by_old_name, run.series("W_kq.cos_target"))
    assert "cos_wkq" in set(read_run(copy).metrics["metric"])  # the reader itself knows no lab


def test_a_version1_summary_still_reads(copy):
    old = {"lab": "ntp", "seeds": [0], "final": {}, "per_seed": {}, "details": {},
           "claims": [{"id": "norms_linear", "statement": "norms grow linearly", "holds": True, "evidence": "R^2 1"},
                      {"id": "late_rate_margin", "statement": "late rates", "holds": None, "evidence": "not testable: short"}]}
    (copy / "summary.json").write_text(json.dumps(old))
    run = load_run(copy)
    assert run.summary.schema_version == 1
    claims = run.claims
    assert claims["verdict"].tolist() == ["holds", "not testable"] and claims["holds"].tolist() == [True, pd.NA]
    assert claims["source"].isna().all() and claims["relation"].isna().all() and claims["threshold"].isna().all()
    assert claims["evidence"].tolist() == ["R^2 1", "not testable: short"]
    assert claims_frame(None).empty


def test_a_folder_that_is_not_a_run_is_one_line_naming_it(tmp_path):
    with pytest.raises(UserError, match=rf"^{tmp_path / 'nope'}: not a run directory \(no such directory\)$"):
        load_run(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match=rf"^{tmp_path / 'empty'}: not a run directory \(no manifest\.json\)$"):
        load_run(tmp_path / "empty")
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "sweep.json").write_text("{}")
    with pytest.raises(UserError, match=r"no manifest\.json; it is a sweep folder: stagewise\.load_sweep\("):
        load_run(tmp_path / "sweep")


def test_damaged_files_are_one_line(copy):
    (copy / "metrics.parquet").write_bytes(b"not parquet")
    run = load_run(copy)  # the frames are read on first use
    with pytest.raises(UserError, match=r"metrics\.parquet: not a readable metrics file"):
        run.metrics  # noqa: B018
    (copy / "summary.json").write_text("{")
    with pytest.raises(UserError, match=r"summary\.json: unreadable summary"):
        load_run(copy)


def _one_line(caught: pytest.ExceptionInfo[UserError], path: Path) -> str:
    """The one line of a UserError, checked to start with the file it names."""
    (line,) = caught.value.lines
    assert line.startswith(f"{path}: "), line
    return line


WRONG_PARQUET = {  # round 4 (issue 39): a raw KeyError or TypeError later (pivot, rename, series)
    "no step": (lambda f: f.drop(columns="step"),
                r"no column\(s\) step; a metrics file has columns step, seed, variant, metric, value$"),
    "no value": (lambda f: f.drop(columns="value"), r"no column\(s\) value; "),
    "text values": (lambda f: f.assign(value=f["value"].astype(str)), r"column value holds \w+ values; it must hold numbers$"),
    "float steps": (lambda f: f.assign(step=f["step"] + 0.5), r"column step holds float64 values; it must hold integers$"),
    "boolean seeds": (lambda f: f.assign(seed=True), r"column seed holds bool values; it must hold integers$"),
    "numbers as names": (lambda f: f.assign(metric=range(len(f))), r"column metric holds int64 values; it must hold text$"),
}


@pytest.mark.parametrize("case", list(WRONG_PARQUET))
def test_a_wrong_schema_metrics_parquet_is_one_line_naming_the_file(copy, case):
    change, message = WRONG_PARQUET[case]
    path = copy / "metrics.parquet"
    change(pd.read_parquet(path)).to_parquet(path, index=False)
    run = load_run(copy)
    for frame in ("metrics", "wide"):
        with pytest.raises(UserError) as caught:
            getattr(run, frame)
        assert re.search(message, _one_line(caught, path)), caught.value.lines


def _line(**record) -> str:
    return json.dumps(record)


F8_ONE = base64.b64encode(np.zeros(1).tobytes()).decode()  # one float64: one metric of the run's one seed
WRONG_LINES = {  # round 4 (issue 39): a raw TypeError, KeyError, binascii.Error or ValueError from the stream's reader
    "a list": ("[1, 2]", "a JSON list, expected an object with step, variant, names, f8"),
    "a string": ('"loss"', "a JSON str, expected an object with step, variant, names, f8"),
    "a record of other keys": (_line(step=1, seed=0, metric="loss", value="x"), "names None is not a list of metric names"),
    "a text step": (_line(step="x", names=["loss"], f8=F8_ONE), "step 'x' is not a 64-bit integer"),
    "a step beyond 64 bits": (_line(step=2**70, names=["loss"], f8=F8_ONE), f"step {2**70} is not a 64-bit integer"),
    "a boolean step": (_line(step=True, names=["loss"], f8=F8_ONE), "step True is not a 64-bit integer"),
    "a number as variant": (_line(step=1, variant=3, names=["loss"], f8=F8_ONE), "variant 3 is not text"),
    "numbers as names": (_line(step=1, names=[1], f8=F8_ONE), "names [1] is not a list of metric names"),
    "values not base64": (_line(step=1, names=["loss"], f8="not base64!"), "f8 'not base64!' is not base64 of float64"),
    "a number as values": (_line(step=1, names=["loss"], f8=0.5), "f8 0.5 is not base64 of float64"),
    "values not float64": (_line(step=1, names=["loss"], f8=base64.b64encode(b"abc").decode()), "is not base64 of float64"),
    "too few values": (_line(step=1, names=["loss", "acc"], f8=F8_ONE), "f8 holds 1 values, expected 2 metrics x 1 seeds"),
}


@pytest.mark.parametrize("case", list(WRONG_LINES))
def test_a_wrong_typed_metrics_jsonl_line_is_one_line_naming_the_file_and_the_line(copy, case):
    """An unfinished run's metrics come from metrics.jsonl: a line the stream never writes is one line."""
    bad, message = WRONG_LINES[case]
    (copy / "metrics.parquet").unlink()
    assert load_run(copy).seeds == [0]
    first = (copy / "metrics.jsonl").read_bytes().splitlines(keepends=True)[0]
    (copy / "metrics.jsonl").write_bytes(first + bad.encode() + b"\n")
    with pytest.raises(UserError) as caught:
        load_run(copy).metrics  # noqa: B018
    assert message in _one_line(caught, copy / "metrics.jsonl").removeprefix(f"{copy / 'metrics.jsonl'}: line 2: ")
    assert caught.value.lines[0].startswith(f"{copy / 'metrics.jsonl'}: line 2: ")


def test_a_metrics_jsonl_line_nested_too_deeply_ends_the_stream_as_a_torn_line_does(copy):
    (copy / "metrics.parquet").unlink()
    first = (copy / "metrics.jsonl").read_bytes().splitlines(keepends=True)[0]
    (copy / "metrics.jsonl").write_bytes(first + b"[" * 100_000 + b"\n")
    metrics = load_run(copy).metrics
    assert metrics["step"].nunique() == 1 and metrics["step"].iloc[0] == json.loads(first)["step"]


@pytest.mark.parametrize("name,what", [("manifest.json", "manifest"), ("summary.json", "summary")])
def test_a_deeply_nested_manifest_or_summary_is_one_line(copy, cli, name, what):
    """Round 4 (issue 39): ``"[" * 100000`` raised a raw RecursionError."""
    (copy / name).write_text("[" * 100_000)
    with pytest.raises(UserError) as caught:
        load_run(copy)
    assert _one_line(caught, copy / name).endswith(f": unreadable {what} (not valid JSON: nested too deeply)")
    code, out, err = cli("show", str(copy))  # a summary's run: its status line first
    assert code == 2 and err.count("\n") == 1 and "nested too deeply" in err, err
    assert (out == "") == (name == "manifest.json"), out


@pytest.mark.parametrize("seeds", ["abc", [0, "1"], [True], [2**70], {"0": 0}])
def test_a_manifest_whose_seeds_are_not_integers_is_one_line(copy, seeds):
    manifest = json.loads((copy / "manifest.json").read_text())
    (copy / "manifest.json").write_text(json.dumps({**manifest, "seeds": seeds}))
    with pytest.raises(UserError) as caught:
        load_run(copy)
    assert "is not a list of 64-bit integer seeds" in _one_line(caught, copy / "manifest.json")


@pytest.mark.parametrize("entry", ["config.yaml", "tables", "summary.json"])
def test_a_symbolic_link_inside_the_run_is_refused(copy, tmp_path, entry):
    outside = tmp_path / "outside"
    shutil.move(copy / entry, outside)
    (copy / entry).symlink_to(outside)
    with pytest.raises(UserError, match=rf"{copy / entry}: is a symbolic link; stagewise never follows a link"):
        load_run(copy)


def test_the_run_folder_itself_may_be_a_link(done, tmp_path):
    (tmp_path / "link").symlink_to(done)
    assert load_run(tmp_path / "link").status == "done"
