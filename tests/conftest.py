"""Shared helpers: run the CLI in-process and capture exit code, stdout and stderr."""

from __future__ import annotations

import sys

import pytest


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
def lm_data_root(tmp_path_factory):
    """STAGEWISE_DATA -> tiny fixtures in the shared-data layout (the LM lab's default data
    root), so every preset and the conformance run work without ../shared/data."""
    import os

    from lm_fixtures import write_layout

    root = write_layout(tmp_path_factory.mktemp("lm_data"))
    old = os.environ.get("STAGEWISE_DATA")
    os.environ["STAGEWISE_DATA"] = str(root)
    yield root
    if old is None:
        os.environ.pop("STAGEWISE_DATA", None)
    else:
        os.environ["STAGEWISE_DATA"] = old
