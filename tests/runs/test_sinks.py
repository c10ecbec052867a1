"""Optional sinks (TensorBoard event files, W&B offline runs) fed from the metric records:
selection, event files read back by tensorboard's reader, equality with metrics.parquet, resume,
config hashes, and a failing sink that does not fail the run."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import struct
import warnings
import zlib

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from stagewise.config import config_hash, deep_merge, resolve
from stagewise.errors import UserError
from stagewise.labs import get_lab
from stagewise.orchestrate import execute, prepare
from stagewise.runs import MetricSink, RunDirContext, RunPaths
from stagewise.runs import sinks
from stagewise.runs.sinks import (
    ENV_VAR, SinkFanout, TB_FOLDER, TensorBoardSink, open_sinks, resolve_sinks, scalar_tag,
)

HAS_TB = importlib.util.find_spec("tensorboard") is not None
HAS_WANDB = importlib.util.find_spec("wandb") is not None
needs_tb = pytest.mark.skipif(not HAS_TB, reason="tensorboard is not installed (pip install -e '.[tensorboard]')")
needs_wandb = pytest.mark.skipif(not HAS_WANDB, reason="wandb is not installed (pip install -e '.[wandb]')")

TB_DTYPE = np.float32  # TensorBoard keeps scalars as float32 (rounded to nearest)
FLOAT32_RTOL = 2.0 ** -24  # relative error of rounding a normal float64 to float32

LAB = dataclasses.replace(get_lab("ntp"), make_figures=lambda *args: [])  # figures: not what is tested here
SMALL = {"seed": 5, "n_seeds": 3, "data": {"vocab_size": 6, "max_len": 5},
         "model": {"init": "random"}, "train": {"steps_stage1": 20, "steps_stage2": 40, "checkpoint_every": 7}}


@pytest.fixture(autouse=True)
def _no_sinks_from_outside(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)


def small_run(tmp_path, name, monkeypatch=None, sinks_env=""):
    config = resolve(LAB.Config, deep_merge(SMALL, {}))
    paths = prepare(LAB, config, tmp_path / name)
    if monkeypatch is not None:
        monkeypatch.setenv(ENV_VAR, sinks_env)
    execute(LAB, config, paths, progress=False)
    if monkeypatch is not None:
        monkeypatch.delenv(ENV_VAR)
    return config, paths


def split_tag(tag: str) -> tuple[str, int]:
    metric, seed = tag.rsplit("/seed", 1)
    return metric, int(seed)


def tb_frame(folder) -> pd.DataFrame:
    """Every scalar of the event files in ``folder``: step, seed, metric, value, file (index in name order)."""
    from tensorboard.backend.event_processing import event_accumulator as ea

    rows = []
    for index, path in enumerate(sorted(folder.glob("events.out.tfevents.*"))):
        acc = ea.EventAccumulator(str(path), size_guidance={ea.SCALARS: 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            metric, seed = split_tag(tag)
            rows += [(e.step, seed, metric, e.value, index) for e in acc.Scalars(tag)]
    return pd.DataFrame(rows, columns=["step", "seed", "metric", "value", "file"])


def assert_same_scalars(found: pd.DataFrame, metrics: pd.DataFrame) -> None:
    """Every (step, seed, metric) of ``metrics`` once in ``found``, with its value as float32."""
    keys = ["step", "seed", "metric"]
    merged = metrics[keys + ["value"]].astype({"metric": str}).merge(
        found[keys + ["value"]], on=keys, how="outer", suffixes=("", "_tb"), indicator=True)
    assert (merged["_merge"] == "both").all() and len(merged) == len(metrics) == len(found)
    np.testing.assert_array_equal(merged["value_tb"].to_numpy(TB_DTYPE), merged["value"].to_numpy().astype(TB_DTYPE))
    np.testing.assert_allclose(merged["value_tb"], merged["value"], rtol=FLOAT32_RTOL, atol=0)


# ------------------------------------------------------------------------- selection
def test_selection_from_parameter_and_environment():
    assert resolve_sinks(None, {}) == ()
    assert resolve_sinks(None, {ENV_VAR: " ,  "}) == ()
    assert resolve_sinks(("wandb",), {ENV_VAR: "TensorBoard, wandb"}) == ("tensorboard", "wandb")  # union, canonical order
    assert resolve_sinks("wandb,tensorboard", {}) == ("tensorboard", "wandb")
    with pytest.raises(UserError) as err:
        resolve_sinks(None, {ENV_VAR: "tensorboard,mlflow"})
    (line,) = err.value.lines
    assert "'mlflow'" in line and ENV_VAR in line and "tensorboard, wandb" in line
    with pytest.raises(UserError, match="unknown sink"):
        resolve_sinks(("csv",), {})


@needs_tb
def test_tensorboard_works_without_a_checksum_package(tmp_path, monkeypatch):
    """Framing and checksums are the writer's: with crc32c unimportable the sink is selectable and writes."""
    import sys

    real = importlib.util.find_spec
    monkeypatch.setattr(sinks, "find_spec", lambda name: None if name == "crc32c" else real(name))
    monkeypatch.setitem(sys.modules, "crc32c", None)  # `import crc32c` raises ImportError
    assert resolve_sinks(("tensorboard",), {}) == ("tensorboard",)
    sink = TensorBoardSink(tmp_path, [0])
    sink.write(3, "", ["loss"], np.array([[0.5]]))
    sink.close()
    assert tb_frame(tmp_path / TB_FOLDER)[["step", "seed", "metric", "value"]].values.tolist() == [[3, 0, "loss", 0.5]]


@pytest.mark.parametrize("sink, missing", [("wandb", "wandb"), ("tensorboard", "tensorboard")])
def test_missing_package_is_one_line_with_the_install_command(monkeypatch, sink, missing):
    real = importlib.util.find_spec
    monkeypatch.setattr(sinks, "find_spec", lambda name: None if name == missing else real(name))
    with pytest.raises(UserError) as err:
        resolve_sinks((sink,), {})
    (line,) = err.value.lines
    assert f"the {missing} package" in line and f"pip install -e '.[{sink}]'" in line


def test_sinks_off_make_no_folders_and_sinks_on_keep_the_config_hash(tmp_path, monkeypatch):
    config, off = small_run(tmp_path, "off")
    assert not (off.root / TB_FOLDER).exists() and not (off.root / "wandb").exists()
    if not HAS_TB:
        pytest.skip("tensorboard is not installed (pip install -e '.[tensorboard]')")
    _, on = small_run(tmp_path, "on", monkeypatch, "tensorboard")
    hashes = {json.loads(p.manifest.read_text())["config_hash"] for p in (off, on)}
    assert hashes == {config_hash(config)}
    assert on.config.read_text() == off.config.read_text()
    pd.testing.assert_frame_equal(pd.read_parquet(on.metrics), pd.read_parquet(off.metrics), check_exact=True)


# --------------------------------------------------------------------------- encoding
@needs_tb
def test_event_file_reads_back_exactly_with_tensorboards_record_reader(tmp_path):
    """tensorboard's own reader checks both masked CRCs of every record (DataLossError otherwise)."""
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.proto import event_pb2

    seeds = [3, -1]
    sink = TensorBoardSink(tmp_path, seeds)
    long_name = "blocks.0.attn." + "x" * 140  # a tag longer than 127 bytes: two-byte length varint
    records = [(-2, np.array([[1.5, np.nan], [np.inf, -1e300], [1e-3, 7.0]])),  # (M, S), beyond float32 too
               (5, np.arange(6.0).reshape(3, 2) / 7)]  # a second record of the same shape refills its values
    for step, values in records:
        sink.write(step, "d=16", ["loss", long_name, "ü"], values)
    sink.close()
    (path,) = (tmp_path / TB_FOLDER).glob("events.out.tfevents.*")
    events = [event_pb2.Event.FromString(record) for record in RawEventFileLoader(str(path)).Load()]
    assert len(events) == 2 + len(records)  # file version, the records, the layout
    assert events[0].file_version == "brain.Event:2"
    for event, (step, values) in zip(events[1:], records):
        assert event.step == step
        tags = [v.tag for v in event.summary.value]
        assert tags == [scalar_tag(f"d=16/{n}", s) for n in ["loss", long_name, "ü"] for s in seeds]
        got = np.array([v.simple_value for v in event.summary.value], dtype=TB_DTYPE)
        with np.errstate(over="ignore"):
            np.testing.assert_array_equal(got, values.reshape(-1).astype(TB_DTYPE))
    assert events[-1].summary.value[0].tag == "custom_scalars__config__"


@needs_tb
def test_variants_name_the_metric_as_the_parquet_column(tmp_path):
    seeds = [0, 1]
    stream = MetricSink(tmp_path / "metrics.jsonl", seeds, extra=open_sinks(("tensorboard",), tmp_path, seeds))
    rng = np.random.default_rng(1)
    for step in range(5):
        for variant in ("", "no-anneal", "d=16"):
            stream.log_array(step, ["train.K1", "test.acc.q_only"], rng.normal(size=(2, 2)), variant)
    stream.close()
    assert_same_scalars(tb_frame(tmp_path / TB_FOLDER), stream.to_frame())


@needs_tb
def test_context_parameter_selects_a_sink(tmp_path):
    paths = RunPaths(tmp_path)
    ctx = RunDirContext(paths, [0], 0, False, sinks=("tensorboard",))
    ctx.log(4, {"loss": torch.tensor([0.25])})
    ctx.sink.close()
    frame = tb_frame(paths.root / TB_FOLDER)
    assert frame[["step", "seed", "metric", "value"]].values.tolist() == [[4, 0, "loss", 0.25]]


# ------------------------------------------------------------------------ TensorBoard
@needs_tb
def test_tensorboard_scalars_equal_metrics_parquet(tmp_path, monkeypatch):
    from tensorboard.backend.event_processing import event_accumulator as ea

    _, paths = small_run(tmp_path, "tb", monkeypatch, "tensorboard")
    metrics = pd.read_parquet(paths.metrics)
    assert len(list((paths.root / TB_FOLDER).glob("events.out.tfevents.*"))) == 1
    assert_same_scalars(tb_frame(paths.root / TB_FOLDER), metrics)
    from tensorboard.plugins.custom_scalar import layout_pb2

    acc = ea.EventAccumulator(str(paths.root / TB_FOLDER), size_guidance={ea.TENSORS: 0})
    acc.Reload()
    (event,) = acc.Tensors("custom_scalars__config__")
    layout = layout_pb2.Layout.FromString(event.tensor_proto.string_val[0])
    charts = {c.title: list(c.multiline.tag) for cat in layout.category for c in cat.chart}
    assert set(charts) == set(metrics["metric"])
    for metric, (pattern,) in charts.items():
        assert [s for s in map(int, metrics["seed"].unique()) if re.match(pattern, scalar_tag(metric, s))] == [5, 6, 7]


@needs_tb
def test_tensorboard_after_resume_new_file_holds_the_replayed_steps(tmp_path, monkeypatch):
    config = resolve(LAB.Config, deep_merge(SMALL, {}))
    paths = prepare(LAB, config, tmp_path / "crash")
    original = RunDirContext.log

    def crashing_log(self, step, values, **kw):
        original(self, step, values, **kw)
        if step == 25:
            raise KeyboardInterrupt("simulated kill")

    monkeypatch.setenv(ENV_VAR, "tensorboard")
    monkeypatch.setattr(RunDirContext, "log", crashing_log)
    with pytest.raises(KeyboardInterrupt):
        execute(LAB, config, paths, progress=False)
    monkeypatch.setattr(RunDirContext, "log", original)
    execute(LAB, config, paths, resume=True, progress=False)
    metrics = pd.read_parquet(paths.metrics)
    found = tb_frame(paths.root / TB_FOLDER)
    assert sorted(found["file"].unique()) == [0, 1]
    checkpoint = 21  # the last multiple of checkpoint_every (7) before the kill
    assert sorted(found.loc[found["file"] == 0, "step"].unique()) == list(range(0, 26))
    assert sorted(found.loc[found["file"] == 1, "step"].unique()) == list(range(checkpoint + 1, 61))
    latest = found.sort_values("file", kind="stable").drop_duplicates(["step", "seed", "metric"], keep="last")
    assert_same_scalars(latest, metrics)


# -------------------------------------------------------------------------------- W&B
def read_wandb_records(path):
    """The records of a ``.wandb`` file: a 7-byte header (``:W&B``, magic, version), then
    32 KiB blocks of chunks ``crc32 (of type + data), length (uint16), type`` (1 full,
    2 first, 3 middle, 4 last); a block tail under 7 bytes is padding."""
    from wandb.proto import wandb_internal_pb2

    blob, block, header = path.read_bytes(), 32768, 7
    assert blob[:4] == b":W&B"
    pos, pending, records = header, b"", []
    while pos + header <= len(blob):
        if block - pos % block < header:
            pos += block - pos % block
            continue
        crc, n, kind = struct.unpack("<IHB", blob[pos:pos + header])
        data = blob[pos + header:pos + header + n]
        pos += header + n
        if kind == 0 and n == 0:
            continue
        assert crc == zlib.crc32(bytes([kind]) + data)
        pending = data if kind in (1, 2) else pending + data
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


@needs_wandb
def test_wandb_offline_run_holds_every_record(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "false")
    _, paths = small_run(tmp_path, "wb", monkeypatch, "wandb")
    assert "WANDB_MODE" not in os.environ and os.environ["WANDB_SILENT"] == "false"  # set only while initializing
    (run_dir,) = (paths.root / "wandb").glob("offline-run-*")
    (file,) = run_dir.glob("*.wandb")
    records = read_wandb_records(file)
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert run.project == "stagewise" and run.display_name == paths.root.name
    config = {u.key: json.loads(u.value_json) for u in run.config.update if u.key != "_wandb"}
    assert config == yaml.safe_load(paths.config.read_text())
    rows = []
    for record in records:
        if record.WhichOneof("record_type") == "history":
            items = {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in record.history.item}
            rows += [(items["step"], *split_tag(k)[::-1], v) for k, v in items.items() if "/seed" in k]
    found = pd.DataFrame(rows, columns=["step", "seed", "metric", "value"])
    metrics = pd.read_parquet(paths.metrics)
    keys = ["step", "seed", "metric"]
    merged = metrics.astype({"metric": str}).merge(found, on=keys, how="outer", suffixes=("", "_wb"), indicator=True)
    assert (merged["_merge"] == "both").all() and len(found) == len(metrics)
    np.testing.assert_array_equal(merged["value_wb"], merged["value"])  # JSON keeps float64 exactly
    last = metrics.sort_values("step").groupby(["metric", "seed"]).tail(1)
    summary = {u.key or "/".join(u.nested_key): json.loads(u.value_json)
               for r in records if r.WhichOneof("record_type") == "summary" for u in r.summary.update}
    for row in last.itertuples():
        assert summary[scalar_tag(row.metric, row.seed)] == row.value


# ----------------------------------------------------------------------------- failures
class _Broken:
    name = "broken"

    def __init__(self):
        self.calls = 0

    def write(self, *args):
        self.calls += 1
        raise OSError(28, "No space left on device")

    def flush(self):
        pass

    def close(self):
        pass


def test_a_failing_sink_warns_once_and_the_stream_goes_on(tmp_path):
    broken = _Broken()
    stream = MetricSink(tmp_path / "metrics.jsonl", [0], extra=SinkFanout([broken]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(3):
            stream.log_array(step, ["loss"], np.array([[float(step)]]))
        stream.close()
    assert broken.calls == 1 and len(caught) == 1 and "broken sink: OSError" in str(caught[0].message)
    assert stream.to_frame()["value"].tolist() == [0.0, 1.0, 2.0]


@needs_tb
def test_a_tensorboard_writer_that_cannot_open_warns_once_and_the_stream_goes_on(tmp_path):
    (tmp_path / TB_FOLDER).write_text("a file where the event folder should be")
    stream = MetricSink(tmp_path / "metrics.jsonl", [0], extra=open_sinks(("tensorboard",), tmp_path, [0]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(3):
            stream.log_array(step, ["loss"], np.array([[float(step)]]))
        stream.close()
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1 and messages[0].startswith("tensorboard sink: ")
    assert stream.to_frame()["value"].tolist() == [0.0, 1.0, 2.0]


@needs_tb
def test_a_flush_puts_every_record_so_far_on_disk(tmp_path):
    """What a checkpoint does (the writer writes on its own thread): after flush, a reader sees every record."""
    sink = TensorBoardSink(tmp_path, [0, 1])
    for step in range(50):
        sink.write(step, "", ["loss"], np.array([[step, -step]], dtype=float))
    sink.flush()
    found = tb_frame(tmp_path / TB_FOLDER)
    assert len(found) == 100 and sorted(found.loc[found["seed"] == 1, "value"]) == sorted(-np.arange(50.0))
    sink.close()
