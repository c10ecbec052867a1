"""Shared by the tests of one-line errors: run the CLI and check that it exits 2 with exactly
one ``error:`` line on stderr and no traceback."""

from __future__ import annotations


def stderr_lines(stderr: str) -> list[str]:
    """The non-blank lines of ``stderr``."""
    return [line for line in stderr.splitlines() if line.strip()]


def one_error(cli, *args: str) -> str:
    """Run the CLI, check exit 2 with exactly one `error:` line, return that line."""
    code, _, stderr = cli(*args)
    lines = stderr_lines(stderr)
    assert code == 2, (code, stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert "Traceback" not in stderr
    return lines[0]


def one_error_line(code: int, err: str) -> str:
    """Check an exit code and stderr already captured: exit 2, exactly one `error:` line, no
    traceback; return that line."""
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


def raised_one_line(err) -> str:
    """A ``pytest.raises(UserError)`` result: exactly one line; return it."""
    from stagewise import UserError

    assert isinstance(err.value, UserError)
    text = str(err.value)
    assert "\n" not in text and len(err.value.lines) == 1, text
    return text
