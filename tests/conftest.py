"""The test session: its environment, the per-test cost budget (tests/costbudget.py), the session cache of
finished runs (tests/runcache.py) and shared helpers (the in-process CLI, the LM data root).

Environment, set before anything imports torch or matplotlib: one torch/BLAS thread per
process (pytest-xdist runs one worker per core), ``HF_HUB_OFFLINE=1`` (no test reaches the
hub; the hub probe's tests unset it themselves), ``MPLBACKEND=Agg``.

Budget: the default tier's per-test cost rule is tests/costbudget.py (a plugin loaded here):
a test not marked ``slow`` whose call costs more than 30 CPU seconds (its setup more than 90),
counting its own process and the processes it started, fails with a message that says it is
the project's own rule and how to turn it off (``STAGEWISE_TEST_BUDGET_S=0``). CPU time, not
wall time: a busy machine does not move it. The wall clock is a hang guard only
(pytest-timeout).
"""

from __future__ import annotations

import os
import sys

for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_name] = "1"  # inherited by the sweep workers the tests spawn
if os.environ.get("PYTEST_XDIST_WORKER"):  # execnet gives its workers COLUMNS=80, LINES=24: rich would freeze
    os.environ.pop("COLUMNS", None)          # its consoles at 80 columns, whatever a test sets later
    os.environ.pop("LINES", None)
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["MPLBACKEND"] = "Agg"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402

import runcache  # noqa: E402
from runcache import RunCache  # noqa: E402

pytest_plugins = ["costbudget", "pytester"]  # the per-test CPU budget of the default tier; pytester tests it

SLOW_HANG_GUARD_S = 1800  # pytest-timeout for `slow` tests (the default tier's hang guard is pyproject's `timeout`)


def pytest_configure(config):
    import torch

    torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("slow") is not None and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SLOW_HANG_GUARD_S))


def _shared_root(tmp_path_factory, worker_id: str):
    """A folder every xdist worker of this session sees (the base temp of the main process)."""
    base = tmp_path_factory.getbasetemp()
    return base if worker_id == "master" else base.parent


@pytest.fixture(scope="session")
def run_cache(tmp_path_factory, worker_id):
    """The session cache of finished runs (tests/runcache.py). At the end of the session,
    every cached folder this worker used must still have the digest it had when made."""
    cache = RunCache(_shared_root(tmp_path_factory, worker_id) / "run-cache")
    yield cache
    changed = cache.changed()
    assert not changed, f"tests wrote into cached runs (copy them with run_cache.copy instead): {', '.join(changed)}"


@pytest.fixture(scope="session")
def made_once(tmp_path_factory, worker_id):
    """made_once(name, make) -> folder: runcache.made_once in this session's shared folder, for
    expensive read-only inputs that are not a single run (e.g. a whole reference sweep; ``make``
    creates the folder and returns its marker text); tests read it and never write into it."""
    root = _shared_root(tmp_path_factory, worker_id) / "made-once"
    root.mkdir(exist_ok=True)
    return lambda name, make: runcache.made_once(root, name, make)


@pytest.fixture
def no_run_figures(monkeypatch):
    """The test's runs skip their figures: in this process (runcache.without_run_figures) and
    in the processes it starts (STAGEWISE_FIGURES=0: sweep workers, Ray, submitit jobs)."""
    monkeypatch.setenv("STAGEWISE_FIGURES", "0")
    with runcache.without_run_figures():
        yield


@pytest.fixture
def cli(capsys, monkeypatch):
    """cli(*args) -> (exit_code, stdout, stderr) of `stagewise args...`."""
    from stagewise.cli import main

    def run(*args: str):
        monkeypatch.setattr(sys, "argv", ["stagewise", *args])
        code = 0
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


@pytest.fixture(scope="session", autouse=True)
def lm_data_root(made_once):
    """STAGEWISE_DATA -> tiny fixtures in the shared-data layout (the LM lab's default data
    root), so every preset and the conformance run work without ../shared/data. One folder
    for all workers, written once, so cached LM runs are shared between them."""
    from lm_fixtures import write_layout

    def layout(folder):
        write_layout(folder)
        return ""

    root = made_once("lm_data", layout)
    old = os.environ.get("STAGEWISE_DATA")
    os.environ["STAGEWISE_DATA"] = str(root)
    yield root
    if old is None:
        os.environ.pop("STAGEWISE_DATA", None)
    else:
        os.environ["STAGEWISE_DATA"] = old
