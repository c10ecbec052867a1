"""The command line: bad input exits 2 with one line per problem; commands print what they say;
`stages` on odd or damaged metrics files and usage errors (an option given twice) are one line;
`run --resume` of a finished run says so and touches nothing; the commands and summary tables
a lab declares (Lab.commands, Lab.summary_tables) reach the CLI and `show` with no change to it."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pandas as pd
import pytest

from cli_errors import one_error as _one_error

BASE = '{"input":["a"],"next":"b"},{"input":["b"],"next":"c"},{"input":["c"],"next":"a"}'
BASE4 = '{"input":["a"],"next":"b"},{"input":["b"],"next":"c"},{"input":["c"],"next":"d"},{"input":["d"],"next":"a"}'
BAD_DATASETS = {
    "cycle": ('{"tokens":["a","b","c"],"samples":[' + BASE + ',{"input":["a","b","c"],"next":"b"},{"input":["b","a","c"],"next":"c"}]}',
              ["cycle under query 'c'", '"a b c" -> b', '"b a c" -> c']),
    "confused": ('{"tokens":["a","b","c","d"],"samples":[' + BASE4 + ',{"input":["a","b","d"],"next":"b"},{"input":["b","c","d"],"next":"c"}]}',
                 ["token 'b' is confused under query 'd'", '"b c d" -> c', '"a b d" -> b']),
    "non_injective": ('{"tokens":["a","b","c"],"samples":[{"input":["a"],"next":"b"},{"input":["c"],"next":"b"}]}',
                      ["non-injective collocation", "'a' and 'c'"]),
    "assumption3": ('{"tokens":["a","b","c"],"samples":[' + BASE + ',{"input":["b","b","a","c"],"next":"b"}]}',
                    ["Assumption 3", '"b b a c" -> b']),
    "unknown_token": ('{"tokens":["a","b","c"],"samples":[' + BASE + ',{"input":["a","z"],"next":"b"}]}',
                      ["unknown token 'z'", '"a z" -> b']),
    "same_input_two_nexts": ('{"tokens":["a","b","c"],"samples":[' + BASE + ',{"input":["a","c"],"next":"b"},{"input":["a","c"],"next":"a"}]}',
                             ["inconsistent next token", '"a c" -> a', '"a c" -> b']),
    "next_not_collocated": ('{"tokens":["a","b","c","d"],"samples":[' + BASE4 + ',{"input":["a","c"],"next":"c"}]}',
                            ["inconsistent next token", '"a c" -> c']),
    "empty": ('{"tokens":["a","b","c"],"samples":[]}', ["empty"]),
    "malformed": ('{"tokens": ["a","b"],\n "samples": [ {"input": ["a"] "next": "b"}]}', ["not valid JSON", "line 2, column"]),
}


@pytest.mark.parametrize("name", sorted(BAD_DATASETS))
def test_bad_dataset_one_line_exit_2(cli, tmp_path, name):
    text, needles = BAD_DATASETS[name]
    path = tmp_path / f"{name}.json"
    path.write_text(text)
    out = tmp_path / "run"
    code, stdout, stderr = cli("run", "ntp", "--set", f"data.file={path}", "--out", str(out))
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ") and str(path.name) in lines[0]
    for needle in needles:
        assert needle in lines[0]
    assert "Traceback" not in stderr and not out.exists()


@pytest.mark.parametrize("args,needle", [
    (["--set", "train.lr_stage1=-0.1"], "train.lr_stage1=-0.1: must be greater than 0"),
    (["--set", "train.lr_stage2=.nan"], "train.lr_stage2"),
    (["--set", "train.etaa=1"], "did you mean 'train.lr_stage2'"),  # a typo of an old name suggests the new one
    (["--set", "data.vocab_size=2"], "data.vocab_size=2"),
    (["--set", "data.dim=5"], "data.dim=5: must be >= |V| = 20"),
    (["--seeds", "0"], "--seeds 0"),
    (["--preset", "exmple1"], "did you mean 'example1'"),
    (["--set", "data.file=/nonexistent/x.json"], "not found"),
])
def test_bad_options_exit_2(cli, tmp_path, args, needle):
    code, _, stderr = cli("run", "ntp", *args, "--out", str(tmp_path / "r"))
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and needle in lines[0], lines
    assert not (tmp_path / "r").exists()


def test_unknown_lab(cli):
    code, _, stderr = cli("run", "ntpp")
    assert code == 2 and "did you mean 'ntp'" in stderr


def test_labs_and_config(cli):
    code, out, _ = cli("labs")
    assert code == 0 and "ntp" in out and "example1" in out and "paper" in out
    code, out, _ = cli("config", "ntp", "--preset", "example1")
    lines = out.splitlines()
    assert code == 0 and "  source: example1" in lines
    # each field's description is the comment line right above it
    at = lines.index("n_seeds: 1")
    assert lines[at - 1] == "# ensemble size, computed in one batched pass (--seeds K)"


def test_run_show_and_resume_guard(cli, tmp_path):
    out = tmp_path / "r"
    code, stdout, _ = cli("run", "ntp", "--preset", "example1", "--set", "train.steps_stage2=50", "--out", str(out), "-q")
    assert code == 0 and "status=done" in stdout
    code, stdout, _ = cli("show", str(out))
    assert code == 0 and "stage1_exact" in stdout
    code, _, stderr = cli("run", "ntp", "--resume", str(out))
    assert code == 2 and "--resume DIR takes no lab" in stderr
    code, _, stderr = cli("show", str(tmp_path / "nothing"))
    assert code == 2 and "not a run directory" in stderr


def test_failed_run_exit_1_and_recorded(cli, tmp_path, monkeypatch):
    from dataclasses import replace

    from stagewise.labs import REGISTRY

    def boom(*a, **k):
        raise RuntimeError("solver exploded")

    monkeypatch.setitem(REGISTRY._labs, "ntp", replace(REGISTRY["ntp"], summarize=boom))
    out = tmp_path / "r"
    code, _, stderr = cli("run", "ntp", "--preset", "example1", "--set", "train.steps_stage2=20", "--out", str(out), "-q")
    assert code == 1 and "solver exploded" in stderr and "--resume" in stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "solver exploded" in manifest["error"]
    assert (out / "metrics.parquet").exists() and (out / "error.log").exists()


def test_stages_command_any_lab(cli, tmp_path):
    out = tmp_path / "r"
    code, _, _ = cli("run", "ntp", "--preset", "example1", "--set", "train.steps_stage2=300", "--out", str(out), "-q")
    assert code == 0
    code, stdout, _ = cli("stages", str(out), "attn=train.opt_attn.min>=0.9", "s2=stage>=2", "--sustain", "2")
    assert code == 0 and "1/1" in stdout and "order (by median step): s2 -> attn" in stdout and "201" in stdout
    code, _, stderr = cli("stages", str(out), "x=no_such_metric>=1")
    assert code == 2 and "no_such_metric" in stderr
    code, _, stderr = cli("stages", str(out), "bad-criterion")
    assert code == 2 and "expected NAME=METRIC>=THRESHOLD" in stderr


# --------------------------------------------------------------------------- version, claims, show verdicts
def test_version_prints_the_package_metadata_version(cli):
    from importlib.metadata import version

    code, out, err = cli("--version")
    assert code == 0 and err == "" and out.strip() == f"stagewise {version('stagewise')}"


def test_sink_help_keeps_the_extras_brackets(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")  # one line per option: the extras are not wrapped apart
    code, out, _ = cli("run", "--help")
    assert code == 0 and "'.[tensorboard]'" in out and "'.[wandb]'" in out, out


FAKE_SOURCES = {"paper2": "paper 2: Second Author, 2002 (two)", "paper1": "paper 1: First Author, 2001 (one)"}
"""The papers the fake lab declares (out of report order)."""


def _fake_lab(monkeypatch, claims, **more):
    """A registered lab 'fake' (ntp's functions) that declares ``claims``, the papers they
    cite (:data:`FAKE_SOURCES`) and any other Lab field in ``more``."""
    from dataclasses import replace

    from stagewise.labs import REGISTRY, get_lab

    monkeypatch.setitem(REGISTRY._modules, "fake", "stagewise.labs.ntp.lab")
    monkeypatch.setitem(REGISTRY._labs, "fake", replace(get_lab("ntp"), name="fake", claims=tuple(claims), sources=FAKE_SOURCES,
                                                         **more))


def _specs():
    from stagewise.report.claims import ClaimSpec, own, paper, reviewer

    base = dict(quantity="min cos", relation=">=", threshold=0.9, control="shuffled labels")
    return [ClaimSpec(id="own_a", statement="ours", source=own("Section 9"), **base),  # declared first, listed last
            ClaimSpec(id="p2_thm3", statement="converges in direction", source=paper("paper2", "Theorem 3"), floor="0 at the optimum",
                      **base),
            ClaimSpec(id="rev_q1", statement="reviewer asks", source=reviewer("review: Q1"), **base),
            ClaimSpec(id="p1_fig2", statement="two stages", source=paper("paper1", "Figure 2"), **base)]


def test_claims_lists_declared_specs_grouped_by_source_in_report_order(cli, monkeypatch):
    from stagewise.report.claims import source_groups

    specs = _specs()
    _fake_lab(monkeypatch, specs)
    monkeypatch.setenv("COLUMNS", "300")
    code, out, err = cli("claims", "fake")
    assert code == 0 and err == "", err
    groups = source_groups(FAKE_SOURCES)
    assert list(groups.values()) == [FAKE_SOURCES["paper1"], FAKE_SOURCES["paper2"], "reviewers", "own checks"]
    headings = [out.index(heading) for heading in groups.values()]
    assert headings == sorted(headings)  # paper 1, paper 2, reviewers, own checks
    for spec in specs:  # each row after its group's heading, with its source label, condition and control
        at = out.index(spec.id)
        assert out.index(groups[spec.source.group]) < at
        row = out[at:].splitlines()[0]
        assert spec.source.label(FAKE_SOURCES) in row and spec.condition() in row and spec.control in row
    assert "paper 2, Theorem 3" in out and "paper 1, Figure 2" in out  # a paper's short name: its heading before ': '
    assert "0 at the optimum" in out


def test_claims_json_round_trips_the_specs(cli, monkeypatch):
    from stagewise.report.claims import ClaimSpec

    specs = _specs()
    _fake_lab(monkeypatch, specs)
    code, out, _ = cli("claims", "fake", "--json")
    assert code == 0 and [ClaimSpec.model_validate(item) for item in json.loads(out)] == specs


def test_claims_of_the_real_labs_and_unknown_lab(cli, monkeypatch):
    from stagewise.labs import get_lab

    monkeypatch.setenv("COLUMNS", "300")  # ids are not wrapped
    for name in ("ntp", "disentangled", "lm"):
        code, out, _ = cli("claims", name, "--json")
        assert code == 0 and [item["id"] for item in json.loads(out)] == [c.id for c in get_lab(name).claims]
        code, out, _ = cli("claims", name)
        assert code == 0 and (all(c.id in out for c in get_lab(name).claims) if get_lab(name).claims else "declares no claims" in out)
    code, out, err = cli("claims", "ntpp")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "did you mean 'ntp'" in err


def test_show_prints_verdicts_with_value_and_reason_undeclared_last(cli, tmp_path, monkeypatch):
    """One line per claim (id, verdict, the worst seed's value, k/n seeds passing), grouped by
    source, undeclared last; --long adds each claim's statement, condition, control, reason,
    evidence, per-seed values, the interval over seeds and the controls' verdicts (issue 39)."""
    from stagewise.report import verdicts
    from stagewise.report.claims import Claim, ClaimSpec, Summary, own

    holds, fails, untested, _ = _specs()
    claims = [Claim(id="old_v1", statement="a version-1 claim", holds=True, evidence="ok"),  # no source: the undeclared group, at the end
              holds.result([0.95, 0.97], "cos high", seeds=[0, 1]),
              fails.result([0.95, 0.5], "one seed low", seeds=[0, 1]),
              untested.not_testable("needs T1 >= 8000")]
    over = ClaimSpec(id="over_seeds", statement="median high", source=own("x"), quantity="q", relation=">=", threshold=0.5,
                     control="shuffled labels", aggregation="paired-median")
    values = {str(seed): value for seed, value in enumerate([0.6, 0.7, 0.8, 0.9, 0.65, 0.75, 0.55])}
    over = over.judged(verdicts.decide(values, over.rule(), {"shuffled": dict.fromkeys(values, 0.1)}), "seven seeds")
    claims.append(over.model_copy(update={"interval": [0.6, None], "coverage": 0.984}))  # judged over seeds, its interval
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"lab": "ntp", "status": "done", "config_hash": "abc", "seeds": [0, 1]}))
    (run / "summary.json").write_text(json.dumps(Summary(lab="ntp", seeds=[0, 1], claims=claims).to_json()))
    monkeypatch.setenv("COLUMNS", "300")
    code, out, err = cli("show", str(run))
    assert code == 0 and err == "", err
    rows = {c.id: next(line.split() for line in out.splitlines() if line.split()[:1] == [c.id]) for c in claims}
    assert rows["own_a"] == ["own_a", "holds", "0.95", "2/2", "seeds", "pass"]  # the worst seed's value
    assert rows["p2_thm3"] == ["p2_thm3", "fails", "0.5", "1/2", "seeds", "pass"]
    assert rows["rev_q1"] == ["rev_q1", "not", "testable", "-"] and "needs T1" not in out  # the reason: --long
    assert rows["old_v1"] == ["old_v1", "holds", "-"]
    assert rows["over_seeds"] == ["over_seeds", "holds", "0.55", "7/7", "seeds", "pass"]
    assert "claims: 5 (3 holds, 1 fails, 1 not testable)" in out.splitlines()
    assert not any(word in out.split() for word in ("yes", "no", "untestable"))
    assert out.index("undeclared") > max(out.index(f"  {c.id} ") for c in claims[1:])
    assert out.index("undeclared") < out.index("  old_v1 ")
    code, out, err = cli("show", str(run), "--long")
    assert code == 0 and err == "", err
    lines = out.splitlines()
    below = lines[lines.index(next(line for line in lines if line.split()[:1] == ["rev_q1"])) + 1:]
    assert below[:4] == ["      reviewer asks", "      condition: min cos >= 0.9", "      control: shuffled labels",
                         "      reason: needs T1 >= 8000"]
    below = lines[lines.index(next(line for line in lines if line.split()[:1] == ["p2_thm3"])) + 1:]
    assert "      evidence: one seed low" in below and "      per seed: 0: 0.95, 1: 0.5" in below
    words = " ".join(out.split())
    assert "per seed: 0: 0.6, 1: 0.7, 2: 0.8, 3: 0.9, 4: 0.65, 5: 0.75, 6: 0.55" in words
    assert "median's interval: [0.6, inf], coverage 0.984; sign test p = 0.00781" in words
    assert "controls judged: shuffled: fails" in words and "control shuffled: fails" in words  # the engine's evidence too


def _numbers_in(text):
    """The numbers of a text, as written (a sign, digits, a point, an exponent)."""
    return re.findall(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?", text)


@pytest.fixture(scope="module")
def finished_runs(run_cache):
    """The session cache's finished NTP run (example 1, 20 + 20 steps), the disentangled and
    the lm lab's smoke runs (two seeds and a control; the lm lab's tables): read, never written."""
    from runcache import EXAMPLE1_SHORT, smoke_spec

    return [run_cache.path(spec) for spec in (EXAMPLE1_SHORT, smoke_spec("disentangled"), smoke_spec("lm"))]


@pytest.mark.parametrize("columns", ["80", "60", "120"])
def test_show_is_one_line_per_claim_within_the_width(cli, monkeypatch, finished_runs, columns):
    """Issue 39: `show` at 80 columns (a pipe, a notebook; and a narrow or wide terminal): every
    line within the width, the lab's tables and the final values as tables that fit (no "..."
    cut), one line per claim with its id, verdict, value and k/n seeds; every number on a
    claim's line is its value (4 significant digits) or its seed counts, whole."""
    from stagewise.cli_show import LONG_HINT
    from stagewise.report.claims import read_summary

    monkeypatch.setenv("COLUMNS", columns)
    for run in finished_runs:
        code, out, err = cli("show", str(run))
        assert code == 0 and err == "", err
        lines = out.splitlines()
        assert all(len(line) <= int(columns) or line == str(run) for line in lines), lines  # a path is never cut
        assert "\u2026" not in out and not any(line != line.rstrip() for line in lines)
        claims = read_summary(run / "summary.json").claims
        assert claims
        lines = lines[next(i for i, line in enumerate(lines) if line.startswith(f"claims: {len(claims)} (")):]
        for claim in claims:
            mine = [i for i, line in enumerate(lines) if line.split()[:1] == [claim.id]]
            assert len(mine) == 1, claim.id
            line = lines[mine[0]].split(None, 1)[1:]  # narrower than id and the rest: the rest on the next line
            assert line or int(columns) < 80, claim.id
            line = line[0] if line else lines[mine[0] + 1].strip()
            assert line.startswith(str(claim.verdict) + " "), line
            value = "-" if claim.value is None else f"{claim.value:.4g}"
            rest = line[len(str(claim.verdict)):].split()
            assert rest[0] == value, (claim.id, line)
            n = len(claim.per_seed)
            seeds = [] if n < 2 else [f"{round(claim.pass_fraction * n)}/{n}", "seeds", "pass"] \
                if claim.pass_fraction is not None else [str(n), "seeds"]
            assert rest[1:] == seeds, (claim.id, line)
            if claim.value is not None:
                assert float(value) == pytest.approx(claim.value, rel=1e-3, abs=1e-300)
                assert _numbers_in(value) == _numbers_in(line)[:len(_numbers_in(value))]
        assert " ".join(out.split()).endswith(LONG_HINT)  # the way to the evidence, last


def test_show_in_a_pipe_is_80_columns(finished_runs):
    """Piped, with no COLUMNS (a notebook's `!stagewise show`, `| less`): 80 columns, each claim on one line."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    done = subprocess.run([sys.executable, "-m", "stagewise.cli", "show", str(finished_runs[1])], capture_output=True,
                          text=True, env=env, stdin=subprocess.DEVNULL, timeout=120)
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert max(len(line) for line in lines if line != str(finished_runs[1])) <= 80 and "\u2026" not in done.stdout
    assert max(len(line) for line in lines if line != str(finished_runs[1])) > 60  # the width used, not a narrower one
    assert sum(line.startswith("  ") and len(line.split()) > 2 and line.split()[1] in ("holds", "fails", "not", "inconclusive")
               for line in lines) == len(json.loads((finished_runs[1] / "summary.json").read_text())["claims"])


def test_show_long_holds_each_claims_evidence_whole(cli, monkeypatch, finished_runs):
    """`show --long` at 80 columns: every line within 80 columns and, under each claim's line, its
    statement, reason and evidence, wrapped at spaces only (every word of them, numbers included,
    is printed whole, in order), the per-seed values of a run with seeds and the lab tables' texts
    whole."""
    from stagewise.report.claims import read_summary

    monkeypatch.setenv("COLUMNS", "80")
    for run in finished_runs:
        code, out, err = cli("show", str(run), "--long")
        assert code == 0 and err == "", err
        lines = out.splitlines()
        assert all(len(line) <= 80 or line == str(run) for line in lines) and "\u2026" not in out
        words = " ".join(out.split())
        for claim in read_summary(run / "summary.json").claims:
            for text in (claim.statement, claim.reason, claim.evidence):
                assert " ".join(text.split()) in words, (claim.id, text)
            if len(claim.per_seed) > 1:
                assert "per seed: " + ", ".join(f"{s}: {'-' if v is None else f'{v:.4g}'}"
                                                for s, v in claim.per_seed.items()) in words
        assert not lines[-1].startswith("(stagewise show --long")
    monkeypatch.setenv("COLUMNS", "400")  # the lm lab's baselines table on one line a row: a long text's gist, whole with --long
    compared = json.loads((finished_runs[2] / "summary.json").read_text())["details"]["baseline_comparison"]
    clocks = [compared.get("model_clock") or {}, *((b.get("clock") or {}) for b in compared["baselines"].values())]
    reasons = [" ".join(clock["reason"].split()) for clock in clocks if len(clock.get("reason") or "") > 80]
    assert reasons
    _, short, _ = cli("show", str(finished_runs[2]))
    _, whole, _ = cli("show", str(finished_runs[2]), "--long")
    for reason in reasons:
        assert reason in whole and reason not in short and reason.split(" ", 1)[0] in short


def test_show_tables_fit_the_width_transposed_or_as_lines(cli, monkeypatch, tmp_path):
    """A lab's table wider than the output is printed transposed where that fits, else as lines
    (its rows' items packed), never with a number cut; numbers and words stay whole."""
    from stagewise.cli_show import fitted_table
    from stagewise.labs.contract import SummaryTable
    from stagewise.report.claims import Summary

    heads = ("floors", *(f"column {i}" for i in range(12)))
    rows = [["(run)", *(f"{0.123456789 * i:.4g}" for i in range(12))], ["control", *(f"{-1.5e-12 * i:.4g}" for i in range(12))]]
    transposed = fitted_table(heads, rows, 80)
    assert not isinstance(transposed, list) and [c.header for c in transposed.columns] == ["floors", "(run)", "control"]
    many = [[f"row {r}", *(f"{r * 1000.5 + i:.6g}" for i in range(12))] for r in range(12)]
    lines = fitted_table(heads, many, 80)
    assert isinstance(lines, list) and all(len(line) <= 80 for line in lines)
    assert lines[:3] == ["floors", "  row 0", "    column 0: 0  column 1: 1  column 2: 2  column 3: 3  column 4: 4  column 5: 5"]
    assert {n for r in many for n in r[1:]} <= set(_numbers_in(" ".join(lines)))

    _fake_lab(monkeypatch, _specs(), summary_tables={"wide": lambda s: SummaryTable(heads, tuple(map(tuple, rows)))})
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"lab": "fake", "status": "done", "config_hash": "abc", "seeds": [0]}))
    (run / "summary.json").write_text(json.dumps(Summary(lab="fake", seeds=[0]).to_json()))
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = cli("show", str(run))
    assert code == 0 and err == "" and all(len(line) <= 80 for line in out.splitlines())
    assert {n for r in rows for n in r[1:]} <= set(_numbers_in(out)) and "\u2026" not in out


class _Numbers:
    """What the fake lab's command computes: lines to print and rows for --json."""

    def __init__(self, config, memory_limit):
        self.rows = [{"seed": seed, "doubled": 2 * seed} for seed in config.seed_list()]
        self.memory_limit = memory_limit

    def text(self):
        return ["fake numbers, without training"] + [f"seed {r['seed']}: {r['doubled']}" for r in self.rows]


def _numbers_table(summary):
    from stagewise.labs.contract import SummaryTable

    numbers = summary.details.get("numbers")
    return SummaryTable(("fake numbers", "x", "y"), tuple((k, v["x"], v["y"]) for k, v in numbers.items())) if numbers else None


def _fake_lab_with_a_command_and_a_table(monkeypatch):
    from stagewise.labs.contract import LabCommand

    numbers = LabCommand(help="Print the fake numbers of a config, without training.", what="fake numbers", run=_Numbers)
    _fake_lab(monkeypatch, _specs(), commands={"numbers": numbers}, summary_tables={"numbers": _numbers_table})


def test_a_command_a_lab_declares_is_a_command_of_the_cli(cli, monkeypatch, tmp_path):
    _fake_lab_with_a_command_and_a_table(monkeypatch)
    monkeypatch.setenv("COLUMNS", "300")
    code, out, _ = cli("--help")
    assert code == 0 and "numbers" in out and "Print the fake numbers of a config" in out
    listed = [line.split()[1] for line in out.splitlines() if line.startswith("│ ") and len(line.split()) > 2]
    assert listed[listed.index("claims") + 1:][:2] == ["floors", "numbers"]  # after `claims`, in registry order
    code, out, _ = cli("numbers", "--help")
    assert code == 0 and all(option in out for option in ("--preset", "--config", "--set", "--seeds", "--json"))
    rows = tmp_path / "rows.json"
    code, out, err = cli("numbers", "fake", "--seeds", "3", "--set", "seed=5", "--json", str(rows))
    assert code == 0 and err == "", err
    assert out.splitlines() == ["fake numbers, without training", "seed 5: 10", "seed 6: 12", "seed 7: 14"]
    assert json.loads(rows.read_text()) == {"lab": "fake", "preset": None, "rows": [{"seed": s, "doubled": 2 * s} for s in (5, 6, 7)]}
    for args, needle in ((["ntp"], "lab 'ntp' declares no fake numbers; labs with numbers: fake"),
                         (["fake", "--seeds", "0"], "--seeds 0: must be >= 1"), (["fake", "--set", "no_such_key=1"], "no_such_key"),
                         (["nolab"], "unknown lab 'nolab'")):
        assert needle in _one_error(cli, "numbers", *args)
    assert "No such command 'numbrs'. Did you mean 'numbers'?" in _one_error(cli, "numbrs", "fake")


def test_show_prints_the_tables_a_lab_declares(cli, monkeypatch, tmp_path):
    from stagewise.report.claims import Summary

    _fake_lab_with_a_command_and_a_table(monkeypatch)
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"lab": "fake", "status": "done", "config_hash": "abc", "seeds": [0]}))
    details = {"numbers": {"first": {"x": 0.123456, "y": None}, "second": {"x": 2, "y": "2/2"}}}
    (run / "summary.json").write_text(json.dumps(Summary(lab="fake", seeds=[0], details=details).to_json()))
    monkeypatch.setenv("COLUMNS", "300")
    code, out, err = cli("show", str(run))
    assert code == 0 and err == "", err
    rows = {line.split()[1]: line.split() for line in out.splitlines() if line.startswith("│")}
    assert "fake numbers" in out and rows["first"][3:6] == ["0.1235", "│", "-"] and rows["second"][3:6] == ["2", "│", "2/2"]
    (run / "manifest.json").write_text(json.dumps({"lab": "ntp", "status": "done", "config_hash": "abc", "seeds": [0]}))
    code, out, _ = cli("show", str(run))
    assert code == 0 and "fake numbers" not in out  # another lab's summary: its tables only


# ------------------------------------------------------------------ stages
@pytest.fixture
def metrics_dir(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    frame = pd.DataFrame({"step": [0, 1, 2, 3] * 2, "seed": [0] * 4 + [1] * 4, "metric": ["loss"] * 8,
                          "value": [1.0, 0.6, 0.4, 0.2, 1.0, 0.9, 0.45, 0.1], "variant": ["base"] * 8})
    frame.to_parquet(run / "metrics.parquet")
    return run


def test_stages_ignores_extra_columns(cli, metrics_dir):
    code, stdout, stderr = cli("stages", str(metrics_dir), "P=loss<=0.5")
    assert code == 0 and "2/2" in stdout and "order (by median step): P" in stdout, stderr


def _order_line(stdout: str) -> list[str] | None:
    """The stages of the `order (by median step): a -> b` line; None without one."""
    lines = [line for line in stdout.splitlines() if line.startswith("order (by median step):")]
    return lines[0].split(":", 1)[1].strip().split(" -> ") if lines else None


def test_stages_orders_only_stages_some_seed_reached(cli, metrics_dir):
    """Issue 26: a stage no seed reaches is listed as such, never placed in the order."""
    frame = pd.read_parquet(metrics_dir / "metrics.parquet")
    lowest = frame.groupby("seed")["value"].min()
    never = f"N=loss<={lowest.min() / 2:g}"  # below every seed's lowest loss
    code, stdout, stderr = cli("stages", str(metrics_dir), never, "P=loss<=0.5")
    assert code == 0, stderr
    assert _order_line(stdout) == ["P"]
    assert "no seed reached: N" in stdout
    code, stdout, _ = cli("stages", str(metrics_dir), never, "M=loss<=-1")
    assert code == 0 and _order_line(stdout) is None and "no seed reached: N, M" in stdout


@pytest.mark.parametrize("status", ["interrupted", "running", "failed", "diverged", "done"])
def test_stages_on_an_unfinished_run_says_so(cli, metrics_dir, status):
    """The partial table still prints (exit 0); an unfinished run adds one `note:` line on stderr."""
    (metrics_dir / "manifest.json").write_text(json.dumps({"lab": "not-installed", "status": status, "config_hash": "abc",
                                                           "seeds": [0, 1]}))
    code, stdout, stderr = cli("stages", str(metrics_dir), "P=loss<=0.5")
    assert code == 0 and "2/2" in stdout
    notes = [line for line in stderr.splitlines() if line.startswith("note:")]
    if status == "done":
        assert notes == []
    else:
        assert len(notes) == 1 and "unfinished" in notes[0] and f"status {status}" in notes[0]
        last = int(pd.read_parquet(metrics_dir / "metrics.parquet")["step"].max())
        assert f"steps up to {last} only" in notes[0]
        assert ("--resume" in notes[0]) == (status in ("interrupted", "running"))


@pytest.mark.parametrize("args,needle", [
    (["P=loss<=0.5", "--sustain", "0"], "--sustain 0: must be >= 1"),
    (["P=loss<=0.5", "--sustain", "-1"], "--sustain -1: must be >= 1"),
    (["=loss<=0.5"], "empty NAME"),
    (["P=<=0.5"], "empty METRIC"),
    (["P=loss<=nan"], "not finite"),
    (["P=loss>=inf"], "not finite"),
    (["P=loss<=-inf"], "not finite"),
    (["P=loss<=0.5", "P=loss<=0.3"], "stage name 'P' is given twice"),
])
def test_stages_bad_criteria_one_line(cli, metrics_dir, args, needle):
    assert needle in _one_error(cli, "stages", str(metrics_dir), *args)


def test_stages_corrupt_or_wrong_metrics(cli, tmp_path):
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "metrics.parquet").write_bytes(os.urandom(600))
    assert "not a readable metrics file" in _one_error(cli, "stages", str(corrupt), "P=loss<=0.5")
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    pd.DataFrame({"step": [1], "seed": [0], "value": [0.1]}).to_parquet(wrong / "metrics.parquet")
    line = _one_error(cli, "stages", str(wrong), "P=loss<=0.5")
    assert "no column(s) metric" in line and "step, seed, metric, value" in line
    typed = tmp_path / "typed"
    typed.mkdir()
    pd.DataFrame({"step": ["a"], "seed": [0], "metric": ["loss"], "value": [0.1]}).to_parquet(typed / "metrics.parquet")
    assert "column step" in _one_error(cli, "stages", str(typed), "P=loss<=0.5")


# ------------------------------------------------------------------ usage errors
@pytest.mark.parametrize("args,needle", [
    (["stages"], "Missing argument"),
    (["config"], "Missing argument"),
    (["run", "ntp", "--bogus"], "No such option: --bogus"),
    (["run", "ntp", "--seeds", "abc"], "--seeds"),
    (["run", "ntp", "--out"], "requires an argument"),
    (["nope"], "No such command"),
    (["run", "ntp", "--preset", "example1", "--preset", "small"], "--preset given more than once"),
    (["run", "ntp", "-p", "example1", "--preset=small"], "--preset given more than once"),
    (["run", "ntp", "-qpexample1", "-p", "x"], "--preset given more than once"),
    (["run", "ntp", "--config", "a.yaml", "-c", "b.yaml"], "--config given more than once"),
    (["run", "ntp", "--out", "a", "-o", "b"], "--out given more than once"),
    (["run", "ntp", "--seeds", "2", "--seeds", "3"], "--seeds given more than once"),
    (["run", "--resume", "a", "--resume", "b"], "--resume given more than once"),
])
def test_usage_errors_are_one_line(cli, tmp_path, monkeypatch, args, needle):
    monkeypatch.chdir(tmp_path)
    assert needle in _one_error(cli, *args)
    assert not (tmp_path / "runs").exists()


def test_option_values_are_not_scanned_and_help_works(cli, tmp_path):
    code, stdout, _ = cli("run", "--help")
    assert code == 0 and "--preset" in stdout
    code, stdout, _ = cli("--help")
    assert code == 0 and "stages" in stdout
    line = _one_error(cli, "run", "ntp", "--set", "train.etaa=--preset", "--preset", "example1", "--out", str(tmp_path / "r"))
    assert "did you mean 'train.lr_stage2'" in line


# ------------------------------------------------------------------ resume of a finished run
SHORT = ["--set", "train.steps_stage1=10", "--set", "train.steps_stage2=10"]  # NTP example1, short


def _snapshot(folder: Path) -> dict[str, tuple[str, int]]:
    """Every file under ``folder``: (sha256, mtime in ns)."""
    return {p.relative_to(folder).as_posix(): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_resume_of_a_done_run_says_already_done_and_touches_nothing(cli, tmp_path, monkeypatch):
    monkeypatch.setattr("stagewise.labs.ntp.lab.make_figures", lambda *args: [])  # figures are not the point: fast
    run = tmp_path / "run"
    code, _, err = cli("run", "ntp", "--preset", "example1", *SHORT, "--out", str(run), "-q")
    assert code == 0, err
    before = _snapshot(run)
    assert {"manifest.json", "metrics.parquet", "metrics.jsonl", "summary.json"} <= before.keys()
    code, out, err = cli("run", "--resume", str(run), "-q")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].startswith("already done:") and str(run) in lines[0]
    _, shown, _ = cli("show", str(run))
    assert out.split("\n", 1)[1] == shown  # then the summary, as `show` prints it
    assert _snapshot(run) == before  # no file written, rewritten or added (manifest and metrics byte-identical)


@pytest.mark.parametrize("lab", ["ntp", "disentangled", "lm"])
def test_claims_table_never_cuts_an_id(cli, monkeypatch, lab):
    """`stagewise claims LAB` on a narrow terminal: every declared id appears whole on one line
    (users copy ids into sweep files), and nothing is cut with an ellipsis."""
    from stagewise.labs import get_lab

    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = cli("claims", lab)
    assert code == 0 and "\u2026" not in out
    lines = out.splitlines()
    for spec in get_lab(lab).claims:
        assert any(f" {spec.id} " in line for line in lines), spec.id


def test_a_bare_key_value_suggests_set(cli, tmp_path):
    """A Hydra-style positional `key=value` is one line that names `--set KEY=VALUE`, exit 2, nothing made."""
    code, _, err = cli("run", "ntp", "train.steps_stage2=5", "--out", str(tmp_path / "r"))
    assert code == 2 and err.count("\n") == 1 and "--set train.steps_stage2=5" in err
    assert not (tmp_path / "r").exists()
    code, _, err = cli("run", "ntp", "extra", "--out", str(tmp_path / "r"))  # not key=value: no suggestion
    assert code == 2 and "--set" not in err


def _command_paths():
    """Every command path of the `stagewise` app ([] is the app itself)."""
    import typer

    from stagewise.cli import app

    def walk(command, path):
        yield path
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            yield from walk(sub, [*path, name])

    return list(walk(typer.main.get_command(app), []))


def test_help_texts_show_no_docstring_markup(cli, monkeypatch):
    """Every --help is plain for a reader: no reST roles or double backquotes leak from docstrings."""
    import re

    monkeypatch.setenv("COLUMNS", "200")
    leaked = re.compile(r":(mod|func|class|meth|attr|data):`|``")
    paths = _command_paths()
    assert len(paths) > 10
    for path in paths:
        code, out, _ = cli(*path, "--help")
        assert code == 0, path
        assert not [line for line in out.splitlines() if leaked.search(line)], path
        assert "<bool>" not in out and "<list[" not in out, path  # a flag takes no value; a repeatable option its element


def test_labs_table_keeps_bracketed_text(cli, monkeypatch):
    """`stagewise labs` prints every preset's text whole: "[...]" in a description is text, not markup."""
    from stagewise.labs import REGISTRY

    monkeypatch.setenv("COLUMNS", "2000")
    code, out, _ = cli("labs", "--long")
    assert code == 0
    texts = [text for lab in REGISTRY.values() for text, _ in lab.presets.values()]
    bracketed = [m for text in texts for m in re.findall(r"\[[^\]]*\]", text)]
    assert bracketed  # the reviewer presets name their out-of-assumption data this way
    for item in bracketed:
        assert item in out, item


def test_markup_in_a_folder_name_or_stage_name_is_printed_as_text(cli, tmp_path, monkeypatch):
    """A run folder named like rich markup trains, shows and reports stages with the name as typed
    (it used to crash after training); a stage name like a closing tag is text too."""
    monkeypatch.setenv("COLUMNS", "400")  # the temporary path is long: no wrapping inside the name
    out = tmp_path / "[bold]x[/]"
    code, stdout, err = cli("run", "ntp", "--preset", "example1", "--set", "train.steps_stage1=4",
                            "--set", "train.steps_stage2=6", "--out", str(out), "-q")
    assert code == 0, err
    code, stdout, err = cli("show", str(out))
    assert code == 0 and "[bold]x[/]" in stdout, err
    code, stdout, err = cli("stages", str(out), "[/x]=train.loss<=10")
    assert code == 0 and "[/x]" in stdout, err


def test_labs_is_one_line_per_lab_and_preset_at_80_columns(cli, monkeypatch):
    """Piped or in a notebook (80 columns): a line per lab and per preset, each within 80 columns
    (a preset name longer than the column aside), each text the start of the preset's own text cut
    at a clause or word boundary, never inside a word or a list of values (issue 39)."""
    from stagewise.cli import gist
    from stagewise.labs import REGISTRY

    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = cli("labs")
    lines = out.rstrip("\n").splitlines()
    presets = [(p, " ".join(text.split())) for lab in REGISTRY.values() for p, (text, _) in lab.presets.items()]
    assert code == 0 and len(lines) == len(REGISTRY) + len(presets) + 1
    for line in lines:
        assert len(line) <= 80 or line.split()[0] in {p for p, _ in presets}, line
    for (preset, text), line in zip(presets, [ln for ln in lines if ln.startswith("  ")]):
        shown = line.split(None, 1)[1] if len(line.split(None, 1)) > 1 else ""
        assert line.split()[0] == preset
        assert shown == "(see --long)" or text.startswith(shown.removesuffix("..."))
    # the cut: whole clauses outside brackets, never before a digit (a list of values), else whole words
    assert gist("the run (a, b), then more words here", 20) == "the run (a, b)"
    assert gist("d = 20, 30, 50 x seeds and more", 16) == "d = 20, 30,..."
    assert gist("one two three four", 12) == "one two..."
    assert gist("x" * 30, 12) == "(see --long)"
