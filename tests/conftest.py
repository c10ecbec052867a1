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
