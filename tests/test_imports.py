"""A house that is quick to enter: ``import stagewise`` and the listing commands (``--help``,
``--version``, ``labs``, ``config LAB``, ``claims LAB``) import no torch, no pandas and no
orchestration code. Each runs in a fresh process, which reports the modules it loaded. The
declared dependencies keep pyarrow above the floor of CVE-2023-47248."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("torch", "pandas", "pyarrow", "matplotlib", "transformers", "stagewise.orchestrate")
"""Modules the entry commands must not load (their import alone costs seconds)."""

PROBE = """
import json, sys
argv, out, heavy = json.loads(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
code = 0
if argv is None:
    import stagewise
    names = [stagewise.RunSpec, stagewise.get_lab, stagewise.Summary, stagewise.Claim, stagewise.Lab, stagewise.UserError,
             stagewise.config_hash, stagewise.spec_hash, stagewise.__version__]
else:
    sys.argv = ["stagewise", *argv]
    from stagewise.cli import main
    try:
        main()
    except SystemExit as exc:
        code = exc.code or 0
with open(out, "w") as f:
    json.dump({"code": code, "loaded": [m for m in heavy if m in sys.modules]}, f)
"""


def loaded_by(argv: list[str] | None, tmp_path) -> tuple[int, list[str]]:
    """(exit code, the HEAVY modules loaded) of ``stagewise ARGV`` (None: ``import stagewise``
    and a look at its light public names) in a fresh interpreter."""
    out = tmp_path / "probe.json"
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(argv), str(out), json.dumps(HEAVY)],
                          capture_output=True, text=True, timeout=120)
    assert out.is_file(), done.stderr
    report = json.loads(out.read_text())
    return report["code"], report["loaded"]


@pytest.mark.parametrize("argv", [None, ["--help"], ["--version"], ["labs"], ["config", "ntp"], ["config", "disentangled"],
                                  ["config", "lm"], ["claims", "ntp"], ["claims", "disentangled", "--json"], ["claims", "lm"]],
                         ids=lambda a: "import stagewise" if a is None else " ".join(a))
def test_entry_commands_import_nothing_heavy(argv, tmp_path):
    code, loaded = loaded_by(argv, tmp_path)
    assert code == 0
    assert loaded == [], f"{'import stagewise' if argv is None else 'stagewise ' + ' '.join(argv)} imported {loaded}"


def test_the_probe_sees_heavy_imports(tmp_path, run_cache):
    """The check is real: a command that runs code does load torch and the orchestration (here `run
    --resume` of a finished run, which reads it back and prints its summary: no training, no figures)."""
    from runcache import EXAMPLE1_SHORT

    run = run_cache.copy(EXAMPLE1_SHORT, tmp_path / "run")
    code, loaded = loaded_by(["run", "--resume", str(run)], tmp_path)
    assert code == 0 and {"torch", "pandas", "stagewise.orchestrate"} <= set(loaded)


def test_lazy_public_names_are_the_real_objects_and_listed():
    import stagewise
    from stagewise.labs.spec import RunSpec
    from stagewise.orchestrate import execute_spec
    from stagewise.report.claims import Summary

    assert stagewise.RunSpec is RunSpec and stagewise.execute_spec is execute_spec and stagewise.Summary is Summary
    assert set(stagewise.__all__) <= set(dir(stagewise))
    for name in stagewise.__all__:
        assert getattr(stagewise, name) is not None, name
    with pytest.raises(AttributeError, match="no_such_name"):
        stagewise.no_such_name  # noqa: B018
    for package in ("stagewise.engine", "stagewise.runs", "stagewise.labs.ntp", "stagewise.labs.lm", "stagewise.lmkit"):
        module = __import__(package, fromlist=["__all__"])
        assert set(module.__all__) <= set(dir(module)) and all(getattr(module, n) is not None for n in module.__all__)


def test_lmkit_and_its_model_config_import_nothing_heavy():
    """``stagewise.lmkit`` loads its names on first use: the package, its listing and the
    model section of a config (which ``config lm`` needs) import no torch or transformers."""
    probe = ("import json, sys; import stagewise.lmkit as k; k.ModelConfig(); k.TINY; dir(k); "
             f"print(json.dumps([m for m in {list(HEAVY)!r} if m in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_pyarrow_floor_excludes_cve_2023_47248():
    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert '"pyarrow>=15"' in text and '"pyarrow>=14"' not in text
