"""Run specs: plain data (no lab code), serializable, spec_hash == resolved config hash, and
execute_spec in another process gives the same run as `stagewise run`."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import pandas as pd
import pytest

from stagewise import RunSpec, config_hash, execute_spec, spec_config, spec_hash
from stagewise.errors import UserError

SPEC = RunSpec(lab="ntp", preset="example1", overrides={"train": {"steps_stage2": 60}}, name="x")


def test_spec_round_trips_with_the_same_hash():
    assert pickle.loads(pickle.dumps(SPEC)) == SPEC and spec_hash(pickle.loads(pickle.dumps(SPEC))) == spec_hash(SPEC)
    again = RunSpec.model_validate(json.loads(json.dumps(SPEC.model_dump())))
    assert again == SPEC and spec_hash(again) == spec_hash(SPEC) == config_hash(spec_config(SPEC))
    other = RunSpec(lab="ntp", preset="example1", overrides={"train": {"steps_stage2": 61}}, name="x")
    assert spec_hash(other) != spec_hash(SPEC)
    # the name does not enter the hash; the same config written two ways has one hash
    assert spec_hash(RunSpec(lab="ntp", overrides={"data": {"source": "example1"},
                                                   "train": {"steps_stage1": 200, "steps_stage2": 60}}, name="y")) == spec_hash(SPEC)


def test_a_spec_is_plain_data_and_imports_no_lab_code():
    """RunSpec holds names and values only: an unknown lab is fine until it is resolved, and
    labs/spec.py imports nothing from the labs (the contract -> spec -> registry circle is gone)."""
    import ast
    from pathlib import Path

    import stagewise.labs.spec as spec_module

    spec = RunSpec(lab="no-such-lab", overrides={"anything": [1, 2]}, name="z")
    assert RunSpec.from_json(spec.to_json()) == spec
    assert not hasattr(spec, "config") and not hasattr(spec, "lab_value") and not hasattr(spec, "hash")
    tree = ast.parse(Path(spec_module.__file__).read_text())
    imports = [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    imported = {f".{node.module or ''}" for node in imports if node.level == 1}  # from .x: stagewise.labs.x
    imported |= {node.module for node in imports if not node.level and (node.module or "").startswith("stagewise.labs")}
    assert not imported, f"labs/spec.py imports {imported}"


def test_bad_specs_are_user_errors():
    with pytest.raises(UserError, match="unknown lab"):
        spec_config(RunSpec(lab="nope", name="x"))
    with pytest.raises(UserError, match="unknown preset"):
        spec_config(RunSpec(lab="ntp", preset="nope", name="x"))
    with pytest.raises(UserError, match="no_such"):
        spec_config(RunSpec(lab="ntp", overrides={"train": {"no_such": 1}}, name="x"))


@pytest.mark.usefixtures("no_run_figures")  # metrics, tables and summaries are compared; figures cost most of each run
def test_execute_spec_in_a_fresh_process_equals_stagewise_run(tmp_path, cli):
    code = ("import sys; from stagewise import RunSpec, execute_spec; "
            "spec = RunSpec.from_json(sys.argv[1]); print(execute_spec(spec, sys.argv[2])['status'])")
    done = subprocess.run([sys.executable, "-c", code, SPEC.to_json(), str(tmp_path / "spec")], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr
    status, _, _ = cli("run", "ntp", "--preset", "example1", "--set", "train.steps_stage2=60", "--out", str(tmp_path / "cli"), "-q")
    assert status == 0
    a, b = (json.loads((tmp_path / d / "manifest.json").read_text()) for d in ("spec", "cli"))
    assert a["config_hash"] == b["config_hash"] == spec_hash(SPEC)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "spec" / "metrics.parquet"),
                                  pd.read_parquet(tmp_path / "cli" / "metrics.parquet"), check_exact=True)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "spec" / "tables" / "generalization.parquet"),
                                  pd.read_parquet(tmp_path / "cli" / "tables" / "generalization.parquet"), check_exact=True)
    assert json.loads((tmp_path / "spec" / "summary.json").read_text()) == json.loads((tmp_path / "cli" / "summary.json").read_text())


@pytest.mark.usefixtures("no_run_figures")  # the refusal is tested, not the run's figures
def test_execute_spec_refuses_a_folder_of_another_config(tmp_path):
    execute_spec(SPEC, tmp_path / "r")
    other = RunSpec(lab="ntp", preset="example1", overrides={"train": {"steps_stage2": 61}}, name="x")
    with pytest.raises(UserError, match="another config"):
        execute_spec(other, tmp_path / "r")
