"""No link inside a run or sweep folder is followed: `run --resume`, a sweep rerun and `report` refuse one
with one line (exit 2) before touching anything, so the link's target outside is left exactly as it was."""

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
