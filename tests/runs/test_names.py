"""Old metric names read as current ones (runs/names.py): plain and ``{variant}/{name}`` forms,
a frame renamed into the order the stream's compaction gives, summary keys, and the note an old
name a user gives raises."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from stagewise.errors import RenamedMetric
from stagewise.runs import MetricSink
from stagewise.runs.names import current_name, current_names, rename_keys, rename_metrics

ALIASES = {"loss": "train.loss", "cos_wkq": "W_kq.cos_target"}
OLD_TO_NEW = [("loss", "train.loss"), ("two_stage/loss", "two_stage/train.loss"), ("a/b/cos_wkq", "a/b/W_kq.cos_target"),
              ("train.loss", "train.loss"), ("stage", "stage"), ("adam/stage", "adam/stage"), ("lossy", "lossy"),
              ("loss/x", "loss/x")]


@pytest.mark.parametrize("old, new", OLD_TO_NEW)
def test_current_name_plain_and_with_a_variant(old, new):
    assert current_name(old, ALIASES) == new


def test_current_names_warn_once_per_old_name_and_keep_the_others_silent():
    with pytest.warns(RenamedMetric) as notes:
        got = current_names(["loss", "stage", "adam/cos_wkq"], ALIASES)
    assert got == ["train.loss", "stage", "adam/W_kq.cos_target"]
    assert [str(n.message).split(" (")[0] for n in notes] == ["loss is now train.loss", "adam/cos_wkq is now adam/W_kq.cos_target"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert current_names(["train.loss", "stage"], ALIASES) == ["train.loss", "stage"]


def test_rename_keys_keeps_order_and_values():
    final = {"loss": 1.0, "stage": 2.0, "cos_wkq": 3.0}
    assert list(rename_keys(final, ALIASES).items()) == [("train.loss", 1.0), ("stage", 2.0), ("W_kq.cos_target", 3.0)]


def _stream_frame(tmp_path, name: str, names_per_step: list[list[str]], variant: str = "") -> pd.DataFrame:
    """The compacted frame of a stream that logs, at step t, the names ``names_per_step[t]``
    with values 10 t + (metric index) + seed / 10 (two seeds)."""
    sink = MetricSink(tmp_path / f"{name}.jsonl", [0, 1])
    for step, names in enumerate(names_per_step):
        values = np.array([[10 * step + k + s / 10 for s in (0, 1)] for k in range(len(names))])  # (K, S)
        sink.log_array(step, names, values, variant)
    sink.close()
    return sink.to_frame()


@pytest.mark.parametrize("variant", ["", "two_stage"])
def test_a_stream_renamed_halfway_reads_as_one_written_with_current_names(tmp_path, variant):
    """A run resumed across a rename: old names before step 2, current ones after. The renamed
    frame equals the frame of a stream that used the current names throughout: values, dtypes
    and row order (metric, step, seed) alike."""
    old, new = ["loss", "cos_wkq", "stage"], ["train.loss", "W_kq.cos_target", "stage"]
    mixed = _stream_frame(tmp_path, "mixed", [old, old, new, new], variant)
    current = _stream_frame(tmp_path, "current", [new] * 4, variant)
    assert set(mixed["metric"]) != set(current["metric"])  # the case this test is about
    pd.testing.assert_frame_equal(rename_metrics(mixed, ALIASES), current, check_exact=True)


def test_rename_metrics_returns_the_frame_itself_when_nothing_is_old(tmp_path):
    frame = _stream_frame(tmp_path, "s", [["train.loss", "stage"]] * 2)
    assert rename_metrics(frame, ALIASES) is frame
    assert rename_metrics(frame, {}) is frame


def test_rename_metrics_of_a_frame_without_the_order_columns():
    """Only ``metric`` is needed (e.g. a file with other columns): renamed in place of rows."""
    frame = pd.DataFrame({"metric": ["cos_wkq", "loss"], "value": [0.5, 1.5]})
    got = rename_metrics(frame, ALIASES)
    assert got["metric"].tolist() == ["W_kq.cos_target", "train.loss"] and got["value"].tolist() == [0.5, 1.5]
    assert frame["metric"].tolist() == ["cos_wkq", "loss"]  # the argument is left as it was
