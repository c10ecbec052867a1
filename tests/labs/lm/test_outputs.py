"""Issue 26, section 5 (outputs): a read-only or full disk under `eval blimp --out`, `lm
rank-curve --out` and `lm reduce --out` is one line naming the folder, found before the
expensive work where it can be (a read-only place) and turned from an OSError where it cannot
(a full disk mid-write), with no partial output left looking complete; Ctrl-C during `eval
blimp` is one line `interrupted`, exit 130, and no output folder."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

import pytest

from runcache import smoke_spec
from cli_errors import one_error_line

ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.fixture
def smoke_run(run_cache, capsys) -> Path:
    folder = run_cache.path(smoke_spec("lm"))
    capsys.readouterr()  # what making the cached run printed is not the command's output
    return folder


def commands(out: Path, lm_data_root: Path, run: Path | None = None) -> dict[str, list[str]]:
    return {
        "eval blimp": ["eval", "blimp", "tiny-gpt2", "--data", str(lm_data_root / "blimp"), "--out", str(out / "b")],
        "lm rank-curve": ["lm", "rank-curve", str(run) if run else "tiny-gpt2", "--p", "1.0", "--out", str(out / "rc")],
        "lm reduce": ["lm", "reduce", "tiny-gpt2", "--select", "blocks.0.attn.q", "--p", "0.5", "--out", str(out / "red")],
    }


@pytest.fixture
def no_model_load(monkeypatch):
    """The model must not be loaded: the output place is checked first."""
    from stagewise.labs.lm import refs

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the output place was checked")

    monkeypatch.setattr(refs, "load_ref", refuse)


# ------------------------------------------------------------------ read-only: up front
@pytest.mark.skipif(os.geteuid() == 0, reason="running as root: chmod does not stop root from writing")
def test_a_read_only_folder_is_refused_before_the_work(cli, tmp_path, lm_data_root, no_model_load):
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o500)
    try:
        for name, args in commands(parent, lm_data_root).items():
            line = one_error_line(*cli(*args)[::2])
            assert str(parent) in line and "not writable" in line, (name, line)
        assert list(parent.iterdir()) == []
    finally:
        parent.chmod(0o700)


def test_a_place_where_no_file_can_be_made_is_refused_before_the_work(cli, tmp_path, lm_data_root, monkeypatch, no_model_load):
    """What permission bits do not tell (root on a read-only mount, ACLs): a probe file that
    cannot be created is one line naming the folder, before the model loads."""
    made = tempfile.mkstemp

    def read_only(*args, **kwargs):
        if str(kwargs.get("prefix", "")).startswith(".stagewise-probe-"):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        return made(*args, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    for name, args in commands(tmp_path, lm_data_root).items():
        line = one_error_line(*cli(*args)[::2])
        assert f"cannot write in {tmp_path} (Read-only file system)" in line, (name, line)
    assert list(tmp_path.iterdir()) == []


def test_the_probe_leaves_nothing(cli, tmp_path, lm_data_root):
    code, _, err = cli("eval", "blimp", "tiny-gpt2", "--data", str(lm_data_root / "blimp"), "--out", str(tmp_path / "b"))
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["b", "blimp.parquet", "blimp_fields.csv", "blimp_summary.json",
                                                         "blimp_summary.parquet"]


# ------------------------------------------------------------------ a full disk: while writing
@pytest.mark.parametrize("existing", [False, True], ids=["new-folder", "existing-folder"])
def test_a_full_disk_under_eval_blimp_is_one_line_and_leaves_no_partial_output(cli, tmp_path, lm_data_root, monkeypatch,
                                                                                 existing):
    from stagewise.lmkit import blimp

    def full(path, obj):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(blimp, "atomic_write_json", full)  # the last of its four files
    out = tmp_path / "deep" / "b"
    if existing:
        out.mkdir(parents=True)
        (out / "notes.txt").write_text("mine")
    code, _, err = cli("eval", "blimp", "tiny-gpt2", "--data", str(lm_data_root / "blimp"), "--out", str(out))
    line = one_error_line(code, err)
    assert f"--out {out}: cannot write the output (No space left on device); nothing was written" in line
    if existing:
        assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    else:
        assert list(tmp_path.iterdir()) == []  # the folders it made are gone too


def test_a_full_disk_under_rank_curve_is_one_line(cli, tmp_path, smoke_run, monkeypatch):
    from stagewise.labs.lm import rankcurve

    def full(path, obj):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(rankcurve, "atomic_write_json", full)
    out = tmp_path / "rc"
    line = one_error_line(*cli("lm", "rank-curve", str(smoke_run), "--p", "1.0", "--out", str(out))[::2])
    assert f"--out {out}: cannot write the output (No space left on device)" in line
    assert not out.exists()


@pytest.mark.parametrize("how", ["OSError", "SafetensorError"])
def test_a_full_disk_under_lm_reduce_is_one_line(cli, tmp_path, monkeypatch, how):
    """safetensors reports a full disk as its own SafetensorError (a traceback before)."""
    import transformers
    from safetensors import SafetensorError

    def full(self, folder, *args, **kwargs):
        Path(folder, "model.safetensors").write_bytes(b"half")  # a partial file in the staging folder
        if how == "OSError":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(transformers.PreTrainedModel, "save_pretrained", full)
    out = tmp_path / "red"
    line = one_error_line(*cli("lm", "reduce", "tiny-gpt2", "--select", "blocks.0.attn.q", "--p", "0.5", "--out", str(out))[::2])
    assert f"--out {out}: cannot write the model (" in line and "No space left on device" in line and "nothing was written" in line
    assert list(tmp_path.iterdir()) == []


def test_reduce_writes_its_table_inside_the_model_folder(cli, tmp_path):
    out = tmp_path / "red"
    code, _, err = cli("lm", "reduce", "tiny-gpt2", "--select", "blocks.0.attn.q", "--p", "0.5", "--out", str(out))
    assert code == 0, err
    assert (out / "reduction.csv").read_text().splitlines()[1].startswith('"blocks.0.attn.q",')
    assert [p.name for p in tmp_path.iterdir()] == ["red"]  # no staging folder left beside it


# ------------------------------------------------------------------ Ctrl-C
@pytest.mark.parametrize("when", ["scoring", "writing"])
def test_ctrl_c_during_eval_blimp_is_one_line_exit_130_and_no_output(cli, tmp_path, lm_data_root, monkeypatch, when):
    from stagewise.lmkit import blimp

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(blimp, "score_blimp" if when == "scoring" else "atomic_write_json", stop)
    out = tmp_path / "b"
    code, _, err = cli("eval", "blimp", "tiny-gpt2", "--data", str(lm_data_root / "blimp"), "--out", str(out))
    lines = err.strip().splitlines()
    assert code == 130 and lines == ["interrupted (SIGINT)"], err
    assert list(tmp_path.iterdir()) == []
