"""Capped error messages (stagewise.errors): a UserError with thousands of problems shows the
first few and one summary line counting the rest by kind, in Python and on the CLI's stderr."""

from __future__ import annotations

import json

from costbudget import cpu_seconds  # this process and its reaped children: CPU, not moved by load
from stagewise.errors import MAX_LINES, UserError, cap_lines, problem_kind


def _lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


def test_user_error_caps_lines_with_a_summary():
    messages = [f"data.file=x.json: unknown token 'z{i}' in sample \"a z{i}\" -> b" for i in range(200_000)]
    messages += ["data.file=x.json: Assumption 3 fails in sample \"a b b c\" -> d"] * 5
    err = UserError(*messages)
    assert len(err.messages) == 200_005 and len(err.lines) == MAX_LINES + 1
    assert err.lines[:MAX_LINES] == tuple(messages[:MAX_LINES])
    assert err.lines[-1] == ("... and 199985 more problems (2 kinds: unknown token x199980, Assumption 3 fails x5)")
    assert str(err).count(";") == MAX_LINES
    assert cap_lines(("a", "b")) == ("a", "b")
    assert problem_kind("token 'b' is confused under query 'd'") == "token"
    assert cap_lines(tuple(f"x=1: bad value {i}" for i in range(30)))[-1] == "... and 10 more problems of the same kinds (1 kind: bad value x10)"


def test_ntp_file_with_200k_violations_prints_few_lines(cli, tmp_path):
    base = [{"input": ["a"], "next": "b"}, {"input": ["b"], "next": "c"}, {"input": ["c"], "next": "a"}]
    samples = base + [{"input": ["a", f"z{i}"], "next": "b"} for i in range(200_000)]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"tokens": ["a", "b", "c"], "samples": samples}))
    start = cpu_seconds()
    code, _, stderr = cli("run", "ntp", "--set", f"data.file={path}", "--out", str(tmp_path / "r"))
    elapsed = cpu_seconds() - start
    lines = _lines(stderr)
    assert code == 2 and len(lines) == MAX_LINES + 1 and all(line.startswith("error: ") for line in lines)
    assert lines[-1] == "error: ... and 199980 more problems of the same kinds (1 kind: unknown token x199980)"
    assert elapsed < 60 and not (tmp_path / "r").exists()
