"""Bounded YAML reading (stagewise.yamlio): a hostile, oversized, binary or directory --config,
or a hostile --set value, is one line on stderr and exit 2, quickly, before any run directory
exists; a few hundred bytes of aliases cannot eat the machine."""

from __future__ import annotations

import os

import pytest

from costbudget import cpu_seconds  # CPU seconds of this process and its reaped children: not moved by load

from cli_errors import one_error as _one_error
from stagewise.errors import UserError
from stagewise.yamlio import MAX_YAML_BYTES, load_yaml

BILLION_LAUGHS = "\n".join(
    ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    + [f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]" for a, b in zip("abcdefgh", "bcdefghi")]
) + "\n"

FLOW_LAUGHS = "[&a [1, 1, 1, 1, 1, 1, 1, 1, 1], " + ", ".join(
    f"&{b} [{', '.join([f'*{a}'] * 9)}]" for a, b in zip("abcde", "bcdef")) + "]"


# ------------------------------------------------------------------ billion laughs
def test_billion_laughs_config_exits_2_quickly(cli, tmp_path):
    path = tmp_path / "lol.yaml"
    path.write_text(BILLION_LAUGHS)
    assert len(BILLION_LAUGHS.encode()) < 500
    start = cpu_seconds()
    line = _one_error(cli, "run", "ntp", "--config", str(path), "--out", str(tmp_path / "r"))
    assert cpu_seconds() - start < 5
    assert "lol.yaml" in line and "aliases" in line
    start = cpu_seconds()
    line = _one_error(cli, "run", "ntp", "--set", f"seed={FLOW_LAUGHS}", "--out", str(tmp_path / "r"))
    assert cpu_seconds() - start < 5 and line.startswith("error: --set seed: ") and "aliases" in line


def test_doubling_aliases_are_caught(tmp_path):
    """40 levels of [*prev, *prev]: 2^40 values from 1 KiB."""
    text = "l0: &l0 [1, 2]\n" + "".join(f"l{i}: &l{i} [*l{i - 1}, *l{i - 1}]\n" for i in range(1, 41))
    path = tmp_path / "doubling.yaml"
    path.write_text(text)
    with pytest.raises(UserError, match="aliases are expanded"):
        load_yaml(path)


@pytest.mark.parametrize("text,needle", [
    ("seed: &a [1, *a]\n", "recursive alias"),
    ("seed: " + "[" * 3000 + "]" * 3000 + "\n", "nested deeper than"),
    ("seed: " + "1" * 5000 + "\n", "digits"),
])
def test_hostile_yaml_is_one_line(cli, tmp_path, text, needle):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    line = _one_error(cli, "run", "ntp", "--config", str(path), "--out", str(tmp_path / "r"))
    assert needle in line and "c.yaml" in line


def test_oversized_config_file(cli, tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("# " + "x" * MAX_YAML_BYTES + "\n")
    line = _one_error(cli, "run", "ntp", "--config", str(path), "--out", str(tmp_path / "r"))
    assert "file too large" in line and "big.yaml" in line


# ------------------------------------------------------------------ binary, directory
@pytest.mark.parametrize("content", [os.urandom(256), b"\x89PNG\r\n\x1a\n" + bytes(range(256)), b"train:\n  eta: 0.1\x00\n"],
                         ids=["random", "png", "nul"])
def test_binary_config_is_one_line(cli, tmp_path, content):
    path = tmp_path / "c.yaml"
    path.write_bytes(content)
    line = _one_error(cli, "run", "ntp", "--config", str(path), "--out", str(tmp_path / "r"))
    assert line.startswith(f"error: --config {path}: not a text YAML file (")


def test_config_directory_says_so(cli, tmp_path):
    line = _one_error(cli, "run", "ntp", "--config", str(tmp_path), "--out", str(tmp_path / "r"))
    assert "is a directory" in line and "not found" not in line
