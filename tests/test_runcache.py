"""The session cache of finished runs (tests/runcache.py) on its own folder: one run per
resolved config, copies independent of the cached folder, a write into a cached folder
detected by its digest, a folder left without its digest made again."""

from __future__ import annotations

from unittest import mock

import pytest

import runcache
from runcache import RunCache, folder_digest
from stagewise import RunSpec

TINY_NTP = {"data": {"vocab_size": 4}, "train": {"steps_stage1": 3, "steps_stage2": 3}}


@pytest.fixture
def counted(monkeypatch):
    """Counts the runs the cache makes (execute_spec calls)."""
    calls = []
    real = runcache.execute_spec

    def counting(spec, folder, **kw):
        calls.append(spec)
        return real(spec, folder, **kw)

    monkeypatch.setattr(runcache, "execute_spec", counting)
    return calls


@pytest.mark.usefixtures("no_run_figures")  # the cache's bookkeeping is tested, not the runs' figures
def test_one_run_per_config_and_copies_are_private(tmp_path, counted):
    cache = RunCache(tmp_path / "cache")
    spec = RunSpec(lab="ntp", overrides=TINY_NTP, name="a")
    same = RunSpec(lab="ntp", overrides={"train": {"steps_stage2": 3, "steps_stage1": 3}, "data": {"vocab_size": 4}}, name="b")
    folder = cache.path(spec)
    assert cache.path(same) == folder and len(counted) == 1  # another name, the same config: the same run
    copy = cache.copy(same, tmp_path / "mine")
    assert folder_digest(copy) == folder_digest(folder)
    (copy / "summary.json").write_text("{}")
    assert cache.changed() == []


@pytest.mark.usefixtures("no_run_figures")  # the cache's bookkeeping is tested, not the runs' figures
def test_a_write_into_a_cached_run_is_found(tmp_path, counted):
    cache = RunCache(tmp_path / "cache")
    folder = cache.path(RunSpec(lab="ntp", overrides=TINY_NTP))
    assert cache.changed() == []
    (folder / "tables" / "extra.parquet").write_bytes(b"x")
    assert cache.changed() == [folder.name]


@pytest.mark.usefixtures("no_run_figures")  # the cache's bookkeeping is tested, not the runs' figures
def test_a_folder_without_its_digest_is_made_again(tmp_path, counted):
    cache = RunCache(tmp_path / "cache")
    spec = RunSpec(lab="ntp", overrides=TINY_NTP)
    folder = cache.path(spec)
    (cache.root / f"{folder.name}.{runcache.DONE}").unlink()  # a worker died after the run, before the marker
    (folder / "stale").write_text("left over")
    assert cache.path(spec) == folder and len(counted) == 2 and not (folder / "stale").exists()


def test_a_failed_run_is_an_error_not_a_cached_folder(tmp_path):
    cache = RunCache(tmp_path / "cache")
    with mock.patch.object(runcache, "execute_spec", return_value={"status": "failed", "error": "boom"}):
        with pytest.raises(RuntimeError, match="ended failed: boom"):
            cache.path(RunSpec(lab="ntp", overrides=TINY_NTP))
    assert not list(cache.root.glob(f"*.{runcache.DONE}"))
