"""`stagewise floors` on inputs it cannot solve (issue 26, section 5): each is one line, exit 2,
before any prompt is drawn and before the solve, and nothing is made; a solve that runs out of
time ends with its reason; the floors of a run never raise for such a member (a row with the
reason instead). The bounds (theory.floor_range_reason, floors.size_reason, floors.regime_reason)
are documented in docs/disentangled.md section 4.0b."""

from __future__ import annotations

import errno
import json
import math
import os

import pytest
from cli_errors import one_error
from costbudget import cpu_seconds  # this process and its reaped children: CPU, not moved by load
from stagewise.config import MAX_SEED, resolve
from stagewise.labs.disentangled import floor_tables, floors, theory
from stagewise.labs.disentangled.config import Config
from stagewise.labs.disentangled.floor_tables import floor_rows
from stagewise.labs.disentangled.floors import MAX_WEIGHTS
from stagewise.labs.disentangled.train import Member, members_from_config

TINY = ("--seeds", "1", "--set", "data.d=6", "--set", "data.prompt_len=6", "--set", "data.n_train=40", "--set", "data.n_test=60")
TINY_DATA = {"d": 6, "prompt_len": 6, "n_train": 40, "n_test": 60}
UP_FRONT_S = 10.0  # a refusal takes no solve and draws no prompt (the gate-noise preset's prompts alone take ~40 s)


def _no_solve(monkeypatch):
    """Make any solve fail the test: the refusals must come before it."""
    def solve(*args, **kwargs):
        raise AssertionError("the solve started")
    monkeypatch.setattr(floors, "solve", solve)


def _refused(cli, monkeypatch, *args: str) -> str:
    _no_solve(monkeypatch)
    start = cpu_seconds()
    line = one_error(cli, "floors", "disentangled", *args)
    assert cpu_seconds() - start < UP_FRONT_S, line
    return line


@pytest.mark.parametrize("value, words", [("1e-300", ("train.l2=1e-300", "below 1e-10", "no finite optimum")),
                                          ("1e300", ("train.l2=1e+300", "above 1000", "log 2 = 0.6931"))])
def test_lambda_outside_the_solvable_range_is_one_line(cli, monkeypatch, value, words):
    line = _refused(cli, monkeypatch, *TINY, "--set", f"train.l2={value}")
    assert all(w in line for w in words) and "lambda in [" in line, line


@pytest.mark.parametrize("sets, words", [
    (("data.zeta=1e300",), ("data.zeta=1e+300", "s^2 = inf", "norm 1e-3..1e3")),
    (("data.gamma0=1e-300", "data.p_noise=0", "data.zeta=1e-300", "data.q_noise=0"), ("data.gamma0=1e-300", "s^2 = 0")),
])
def test_features_outside_the_solvable_scale_are_one_line(cli, monkeypatch, sets, words):
    line = _refused(cli, monkeypatch, *TINY, *(a for s in sets for a in ("--set", s)))
    assert all(w in line for w in words), line


def test_a_dimension_too_large_is_refused_with_the_limit_and_why(cli, monkeypatch):
    line = _refused(cli, monkeypatch, "--set", "data.d=3000")
    assert "data.d=3000" in line and "18,000,000 weights" in line and f"{MAX_WEIGHTS:,}" in line and "data.d <= 316" in line
    assert "least-squares" in line  # why: the certificate's cost
    line = _refused(cli, monkeypatch, "--set", "data.d=300", "--set", "model.weights=full")
    assert "(2d)^2, full" in line and "data.d <= 223" in line


@pytest.mark.parametrize("p0, q0, words", [("0", "1", ("data.q0=1", "Q-only", "no query bears P", "K1*")),
                                           ("1", "0", ("data.p0=1", "P-only", "no query bears Q", "K2*"))])
def test_a_mixture_without_one_feature_is_one_line(cli, monkeypatch, p0, q0, words):
    line = _refused(cli, monkeypatch, *TINY, "--set", f"data.p0={p0}", "--set", f"data.q0={q0}")
    assert all(w in line for w in words) and "data.p0 < 1 and data.q0 < 1" in line, line


def test_the_gate_noise_preset_is_refused_with_the_reason_and_what_to_use(cli, monkeypatch):
    line = _refused(cli, monkeypatch, "--preset", "gate-noise")
    assert "data.q_noise_radius=4" in line and "--preset gate-noise" in line and "does not converge" in line, line
    assert "two-stage preset" in line


@pytest.mark.parametrize("seed", [MAX_SEED, 10**30])
def test_a_seed_out_of_range_is_one_line(cli, monkeypatch, seed):
    line = _refused(cli, monkeypatch, *TINY, "--set", f"seed={seed}")
    assert f"seed={seed}" in line, line


# --- --json -------------------------------------------------------------------------------------------------------
def _unwritable(tmp_path):
    """A folder no file can be created in, for this user (root writes anywhere but /sys)."""
    if os.geteuid() == 0:
        return "/sys"
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    return str(folder)


def test_a_json_path_that_cannot_be_written_is_refused_before_the_solve(cli, monkeypatch, tmp_path):
    (tmp_path / "file").write_text("x")
    cases = {"": "empty path", str(tmp_path): "is a folder", str(tmp_path / "file" / "rows.json"): "which is a file",
             os.path.join(_unwritable(tmp_path), "rows.json"): "cannot write in"}
    before = sorted(os.listdir(tmp_path))
    for path, why in cases.items():
        line = _refused(cli, monkeypatch, *TINY, "--json", path)
        assert "--json" in line and why in line, (path, line)
    assert sorted(os.listdir(tmp_path)) == before  # nothing made (the probe file is removed)


def test_a_full_disk_while_writing_the_json_is_one_line_and_leaves_no_file(cli, monkeypatch, tmp_path):
    out = tmp_path / "rows.json"
    out.write_text("old")

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("stagewise.runs.atomic.os.fsync", full)
    line = one_error(cli, "floors", "disentangled", *TINY, "--json", str(out))
    assert str(out) in line and "No space left on device" in line, line
    assert out.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["rows.json"]  # no partial or temp file


def test_json_is_written_into_new_folders(cli, tmp_path):
    out = tmp_path / "new" / "rows.json"
    code, _, stderr = cli("floors", "disentangled", *TINY, "--json", str(out))
    assert code == 0, stderr
    assert [r["seed"] for r in json.loads(out.read_text())["rows"]] == [0]


# --- bounded solves and the rows of a run -------------------------------------------------------------------------
def test_a_solve_stops_at_its_time_limit_with_the_reason(cli, monkeypatch):
    monkeypatch.setattr(floors, "TIME_LIMIT_S", 0.0)
    cfg = resolve(Config, {"n_seeds": 1, "data": TINY_DATA})
    row = floor_rows(cfg, members_from_config(cfg))[0]
    assert not row["converged"] and row["iterations"] == 0 and "stopped at the time limit of 0 s" in row["reason"]
    code, stdout, stderr = cli("floors", "disentangled", *TINY)
    assert code == 0 and "note: not converged" in stdout and "time limit" in stdout, stderr


def test_a_runs_floor_rows_give_the_reason_instead_of_failing():
    """experiment.floors after training: members outside the range (a grid's l2, a config's
    mixture) get NaN rows with the reason; the analytic floor says why it does not apply."""
    cfg = resolve(Config, {"data": {**TINY_DATA, "p0": 0.0, "q0": 1.0}})
    base = dict(noise=0.05, lr_stage1=1.0, lr_stage2=0.1, t1=300)
    rows = floor_rows(cfg, [Member(seed=0, l2=1e-300, p0=0.0, q0=1.0, **base), Member(seed=0, l2=0.01, p0=0.0, q0=1.0, **base)])
    assert math.isnan(rows[0]["K2"]) and "train.l2=1e-300" in rows[0]["reason"]
    assert rows[1]["converged"] and math.isnan(rows[1]["K1"]) and math.isfinite(rows[1]["K2"])  # no P-bearing query
    assert "no P-bearing tokens" in rows[1]["analytic.reason"] and math.isnan(rows[1]["analytic.K1"])


def test_the_fixed_point_solves_any_positive_lambda():
    """lambda = 1e-300 used to exhaust brentq (bracket [0, 1e299]): m = a D(m) with D <= s(-m)
    has its root below 1 + log(1 + a), where the margin ~ log a."""
    point = theory.fixed_point(0.5, 0.05, 0.2, 0.2, 1e-300)
    a_p = 0.5 ** 2 / 1e-300
    assert point.residual <= theory.RESIDUAL_TOL * point.m_p and 0 < point.m_p < 1 + math.log1p(a_p)
    assert theory.fixed_point(0.5, 0.05, 0.2, 0.2, 1e300).k1 == pytest.approx(math.log(2))


def test_the_floor_problem_is_scale_covariant():
    """The basis of the range in lambda / s^4: features times c (and the init divided by c^2) with
    lambda times c^4 is the same problem (W -> W / c^2), so the same floors."""
    c = 10.0
    unit = {"d": 6, "prompt_len": 6, "n_train": 40, "n_test": 60, "gamma0": 1.0, "p_noise": 0.3, "zeta": 0.7, "q_noise": 0.05}
    scaled = {**unit, **{k: unit[k] * c for k in ("gamma0", "p_noise", "zeta", "q_noise")}}
    one = floor_rows(cfg := resolve(Config, {"n_seeds": 2, "data": unit, "train": {"l2": 1e-3}}), members_from_config(cfg))
    big = floor_rows(cfg := resolve(Config, {"n_seeds": 2, "data": scaled, "train": {"l2": 1e-3 * c ** 4},
                                             "model": {"init_scale": 0.01 / c ** 2}}), members_from_config(cfg))
    for a, b in zip(one, big):
        assert a["converged"] and b["converged"]
        for key in ("K1", "K2", "J"):
            assert b[key] == pytest.approx(a[key], abs=1e-8), key


def test_json_is_strict_a_value_without_a_number_is_null(cli, tmp_path, monkeypatch):
    """Before: NaN was written as a bare `NaN`, which JSON readers other than Python's refuse."""
    real = floor_tables.floor_rows

    def with_a_gap(config, members):
        rows = real(config, members)
        rows[0]["analytic.K1"] = math.nan
        return rows

    monkeypatch.setattr(floor_tables, "floor_rows", with_a_gap)
    out = tmp_path / "rows.json"
    code, _, stderr = cli("floors", "disentangled", *TINY, "--json", str(out))
    assert code == 0, stderr

    def refuse(constant):
        raise AssertionError(f"non-standard JSON constant {constant}")

    rows = json.loads(out.read_text(), parse_constant=refuse)["rows"]
    assert rows[0]["analytic.K1"] is None and isinstance(rows[0]["K1"], float)


def test_floors_without_a_terminal_prints_progress_lines(tmp_path):
    """`stagewise floors` printed nothing for minutes with stdout not a terminal (round-3 report)."""
    import subprocess
    import sys

    env = {**os.environ, "STAGEWISE_PROGRESS_EVERY": "0.1"}
    proc = subprocess.run([sys.executable, "-m", "stagewise.cli", "floors", "disentangled", "--seeds", "2", "--set", "data.d=12",
                           "--set", "data.n_train=200"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("floors: ")]
    assert lines and all(" problems (" in line for line in lines), proc.stderr
