"""CLI polish: `run --resume` on a finished run, 'did you mean' across config sections, and
NTP summaries and figures without numpy RuntimeWarnings on runs where a metric has no value."""

from __future__ import annotations

import hashlib
import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from stagewise.config import resolve
from stagewise.errors import UserError
from stagewise.labs import RunSpec, get_lab
from stagewise.overrides import config_paths, parse_overrides

SHORT = ["--set", "train.steps_stage1=10", "--set", "train.steps_stage2=10"]  # NTP example1, short


def _snapshot(folder: Path) -> dict[str, tuple[str, int]]:
    """Every file under ``folder``: (sha256, mtime in ns)."""
    return {p.relative_to(folder).as_posix(): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------- item 3
def test_resume_of_a_done_run_says_already_done_and_touches_nothing(cli, tmp_path, monkeypatch):
    monkeypatch.setattr("stagewise.labs.ntp.lab.make_figures", lambda *args: [])  # figures are not the point: fast
    run = tmp_path / "run"
    code, _, err = cli("run", "ntp", "--preset", "example1", *SHORT, "--out", str(run), "-q")
    assert code == 0, err
    before = _snapshot(run)
    assert {"manifest.json", "metrics.parquet", "metrics.jsonl", "summary.json"} <= before.keys()
    code, out, err = cli("run", "--resume", str(run), "-q")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].startswith("already done:") and str(run) in lines[0]
    _, shown, _ = cli("show", str(run))
    assert out.split("\n", 1)[1] == shown  # then the summary, as `show` prints it
    assert _snapshot(run) == before  # no file written, rewritten or added (manifest and metrics byte-identical)


# --------------------------------------------------------------------------- item 4
def _hint(lab: str, key: str) -> str:
    with pytest.raises(UserError) as err:
        parse_overrides(get_lab(lab).Config, [f"{key}=1"])
    (message,) = err.value.messages
    return message


def _suggested(message: str) -> list[str]:
    hint = message.split("(did you mean ", 1)[1].split("?)", 1)[0]
    return [part.strip("'") for part in hint.replace(" or ", ", ").split(", ")]


@pytest.mark.parametrize("lab,key,best", [
    ("ntp", "eta", "train.lr_stage2"),  # an old leaf name given without its section: the field's new path
    ("ntp", "vocab", "data.vocab_size"),  # one word of a leaf's name
    ("ntp", "train.etta", "train.lr_stage2"),  # a typo of an old name inside a section
    ("ntp", "trian.lr_stage1", "train.lr_stage1"),  # a typo in the section name
    ("ntp", "sede", "seed"),  # a top-level typo
    ("ntp", "model.dim", "data.dim"),  # a leaf in the wrong section
    ("disentangled", "steps", "train.steps"),
    ("lm", "lr", "train.lr"),
    ("lm", "modle", "model"),
])
def test_unknown_key_suggests_the_closest_full_dotted_paths(lab, key, best):
    message = _hint(lab, key)
    suggested = _suggested(message)
    assert suggested[0] == best, message
    assert set(suggested) <= set(config_paths(get_lab(lab).Config))  # only real paths are suggested
    # and the suggestion is accepted as it stands
    resolve(get_lab(lab).Config, sets=[f"{best}={_value_of(lab, best)}"])


def _value_of(lab: str, path: str) -> str:
    """The default value of ``path`` as --set text (so setting it is valid)."""
    import json

    value = resolve(get_lab(lab).Config).model_dump(mode="json")
    for part in path.split("."):
        value = value[part]
    return json.dumps(value) if not isinstance(value, dict) else "{}"


def test_cli_unknown_key_is_one_line_with_the_full_path_and_nothing_is_made(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli("run", "ntp", "--set", "eta=0.1")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith("error: --set eta: ") and "did you mean 'train.lr_stage2'" in err
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- item 5
def test_fmt_and_row_spread_of_values_no_seed_has():
    from stagewise.labs.ntp.summary import NO_VALUE, _fmt
    from stagewise.report.plots import row_spread

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert _fmt([math.nan, math.nan]) == NO_VALUE  # e.g. compare's joint/loss_linear slope
        assert _fmt(np.array([1.0, math.nan, 3.0])) == "min 1, mean 2, max 3 (1 of 3 seeds nan)"
        assert _fmt([]) == NO_VALUE
        values = np.array([[1.0, 3.0], [math.nan, math.nan], [math.nan, 5.0]])  # (T, S)
        low, mean, high = row_spread(values)
    np.testing.assert_array_equal(low, [1.0, math.nan, 5.0])
    np.testing.assert_array_equal(mean, [2.0, math.nan, 5.0])
    np.testing.assert_array_equal(high, [3.0, math.nan, 5.0])


def test_ntp_preset_with_undefined_cos_wkq_runs_without_runtime_warnings(tmp_path):
    """q3-conflicting-orders has no max-margin W_kq*: cos(W_kq, W_kq*) is NaN at every step of
    stage 2.
    Its summary (2 seeds), Figure 2, the rate-fit and attention figures used to warn 'All-NaN
    slice' / 'Mean of empty slice' (reproduce ntp's output); a warning is an error here, so
    the run would be recorded failed."""
    from stagewise.orchestrate.runner import execute_spec

    spec = RunSpec(lab="ntp", preset="q3-conflicting-orders",
                   overrides={"n_seeds": 2, "train": {"steps_stage1": 10, "steps_stage2": 20}})
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        manifest = execute_spec(spec, tmp_path / "run", raise_on_failure=True)
    assert manifest["status"] == "done"
    frame = pd.read_parquet(tmp_path / "run" / "metrics.parquet")
    cos = frame[(frame["metric"] == "cos_wkq") & (frame["step"] > 10)]["value"]
    assert len(cos) and cos.isna().all()  # the case this test is about: no value in stage 2
    assert {p.stem for p in (tmp_path / "run" / "figures").glob("*.png")} >= {"figure2", "rate_fits", "attention"}
