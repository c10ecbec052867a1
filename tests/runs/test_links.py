"""No link inside a run or sweep folder is followed: `run --resume`, a sweep rerun, `report` and `show` refuse
one with one line (exit 2) before touching or reading anything, so the link's target outside is left exactly as it
was (and is not printed)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from stagewise.errors import UserError
from stagewise.runs.links import refuse_links
from stagewise.runs.lock import RunLock

SMALL = ["--set", "train.steps_stage1=4", "--set", "train.steps_stage2=6", "--set", "train.checkpoint_every=3",
         "--set", "data.vocab_size=6"]


def _digest(path: Path) -> str:
    """Every file below ``path`` (or the file itself) with its bytes, as one digest."""
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")) if path.is_dir() else [path]:
        h.update(str(p.relative_to(path) if path.is_dir() else p.name).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A small finished NTP run (made once for the module)."""
    import sys

    from stagewise.cli import main

    root = tmp_path_factory.mktemp("links") / "run"
    argv = sys.argv
    sys.argv = ["stagewise", "run", "ntp", "--preset", "example1", *SMALL, "--out", str(root), "-q"]
    try:
        main()
    except SystemExit as exit_:
        assert not exit_.code
    finally:
        sys.argv = argv
    return root


def _unfinished_copy(finished: Path, where: Path) -> Path:
    run = where / "run"
    shutil.copytree(finished, run)
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**manifest, "status": "interrupted"}))
    return run


@pytest.mark.parametrize("entry", [".lock", "tables", "figures", "checkpoints", "metrics.jsonl", "summary.json",
                                   "tables/generalization.parquet"])
def test_resume_refuses_a_link_and_leaves_its_target_untouched(cli, finished, tmp_path, entry):
    run = _unfinished_copy(finished, tmp_path)
    target = tmp_path / "outside" / Path(entry).name
    target.parent.mkdir()
    if (run / entry).exists():
        shutil.move(str(run / entry), str(target))
    else:  # .lock: an outside file that would be truncated to a pid
        target.write_text("precious\n")
    (run / entry).symlink_to(target, target_is_directory=target.is_dir())
    before = _digest(target)
    code, _, err = cli("run", "--resume", str(run))
    assert code == 2 and "symbolic link" in err and err.count("\n") == 1, err
    assert _digest(target) == before


def test_show_refuses_a_summary_linked_out_of_the_run(cli, finished, tmp_path):
    """Round 4 (issue 39): `show` read a summary.json that is a link to a file outside the run folder
    (report and load_run refused it); it now refuses it the same way (the store's refuse_links)."""
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    outside = tmp_path / "outside" / "summary.json"
    outside.parent.mkdir()
    shutil.move(str(run / "summary.json"), str(outside))
    (run / "summary.json").symlink_to(outside)
    before = _digest(outside)
    code, out, err = cli("show", str(run))
    assert code == 2 and out == "", (out, err)
    assert err.count("\n") == 1 and f"{run / 'summary.json'}: is a symbolic link" in err, err
    assert _digest(outside) == before
    (run / "summary.json").unlink()
    shutil.move(str(outside), str(run / "summary.json"))  # the file itself in its place: shown
    code, out, err = cli("show", str(run))
    assert code == 0 and "status=done" in out, err


@pytest.mark.usefixtures("no_run_figures")  # the folder's links are what is tested, not the runs' figures
def test_a_sweep_rerun_refuses_a_link_in_its_folder(cli, tmp_path):
    import yaml

    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({"lab": "ntp", "preset": "example1", "axes": {"seed": [0]},
                                    "set": {"train.steps_stage1": 4, "train.steps_stage2": 6}}))
    out = tmp_path / "sweep"
    code, _, err = cli("sweep", str(spec), "--out", str(out), "--max-parallel", "1", "--no-collect")
    assert code == 0, err
    outside = tmp_path / "index.json"
    (out / "sweep.json").rename(outside)
    (out / "sweep.json").symlink_to(outside)
    before = outside.read_bytes()
    code, _, err = cli("sweep", str(spec), "--out", str(out), "--max-parallel", "1")
    assert code == 2 and "sweep.json: is a symbolic link" in err
    assert outside.read_bytes() == before


def test_the_lock_is_opened_without_following_a_link(tmp_path):
    target = tmp_path / "victim.txt"
    target.write_text("precious\n")
    (tmp_path / ".lock").symlink_to(target)
    with pytest.raises(UserError, match="is a symbolic link"):
        RunLock(tmp_path).acquire()
    assert target.read_text() == "precious\n"


def test_refuse_links_walks_without_following(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    refuse_links(tmp_path)  # none
    refuse_links(tmp_path / "missing")  # a folder that does not exist: nothing to check
    (tmp_path / "a" / "b" / "loop").symlink_to(tmp_path)  # a link to an ancestor: found, not followed
    with pytest.raises(UserError, match="loop: is a symbolic link"):
        refuse_links(tmp_path)


@pytest.mark.parametrize("damage", ["checkpoints-file", "tables-file", "foreign-parquet", "torn-parquet", "manifest-dir"])
def test_resume_of_a_damaged_folder_is_one_line_and_keeps_the_run_status(cli, finished, tmp_path, damage):
    """Before: `checkpoints/` replaced by a file -> 'run failed: FileExistsError' and status failed; a foreign
    Parquet in tables/ -> KeyError '_part'. Now: one line naming the entry, exit 2, the manifest unchanged."""
    import pandas as pd

    run = _unfinished_copy(finished, tmp_path)
    if damage in ("checkpoints-file", "tables-file"):
        name = damage.split("-")[0]
        shutil.rmtree(run / name)
        (run / name).write_text("not a folder\n")
    elif damage == "foreign-parquet":
        pd.DataFrame({"x": [1, 2]}).to_parquet(run / "tables" / "mine.parquet")
    elif damage == "torn-parquet":
        data = (run / "tables" / "generalization.parquet").read_bytes()
        (run / "tables" / "generalization.parquet").write_bytes(data[: len(data) // 2])
    if damage == "manifest-dir":
        (run / "summary.json").unlink()
        (run / "summary.json").mkdir()
    before = (run / "manifest.json").read_text()
    code, _, err = cli("run", "--resume", str(run))
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "then resume again" in err or "move it out" in err, err
    assert (run / "manifest.json").read_text() == before  # not marked failed, not 'running'
