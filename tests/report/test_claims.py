"""Claims as data: every lab's declared ClaimSpecs and the papers they cite, ClaimSpec.result's
verdicts, version-1 summaries and summaries written before papers were keys, smoke runs whose
claims instantiate the declarations (and fail under the declared control), and a truncated or
foreign summary.json that `show` reports in one line."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from runcache import EXAMPLE1_SHORT
from stagewise import RunSpec
from stagewise.config import deep_merge
from stagewise.labs import REGISTRY, get_lab, spec_config
from stagewise.report.claims import KINDS, SCHEMA_VERSION, Claim, ClaimSpec, Source, Summary, paper, read_summary, own, source_groups

LABS = sorted(REGISTRY)
THEORY_LABS = ("ntp", "disentangled")


def _spec(relation: str = ">=", threshold: float = 0.5, over: str = "every") -> ClaimSpec:
    return ClaimSpec(id="probe", statement="a probe", source=own("test"), quantity="x", relation=relation,
                     threshold=threshold, control="none", over=over)


# ------------------------------------------------------------------ the declarations

@pytest.mark.parametrize("name", LABS)
def test_declared_claims_are_complete(name):
    claims = get_lab(name).claims
    assert claims, f"lab {name} declares no claims"
    ids = [c.id for c in claims]
    assert len(set(ids)) == len(ids), f"duplicate ids in {name}: {ids}"
    for c in claims:
        assert (c.source.kind in KINDS or c.source.paper in get_lab(name).sources) and c.source.where.strip()
        assert c.control.strip() and c.quantity.strip() and c.statement.strip()
        assert math.isfinite(c.threshold)


@pytest.mark.parametrize("name", LABS)
def test_claimspecs_module_imports_only_the_claims_model(name):
    """claimspecs.py is read without torch: it imports nothing but stagewise.report.claims."""
    import ast
    from pathlib import Path

    import stagewise

    path = Path(stagewise.__file__).parent / "labs" / name / "claimspecs.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | \
              {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert modules <= {"__future__", "report.claims"}, modules


# ------------------------------------------------------------------ ClaimSpec.result

@pytest.mark.parametrize("relation, values, worst, holds", [
    (">=", [0.7, 0.5, 0.9], 0.5, True),
    (">", [0.7, 0.5, 0.9], 0.5, False),  # the worst seed sits on the threshold
    ("<=", [0.1, 0.5, 0.3], 0.5, True),
    ("<", [0.1, 0.6, 0.3], 0.6, False),
])
def test_result_value_is_the_worst_seed_per_relation(relation, values, worst, holds):
    c = _spec(relation).result(values, seeds=[3, 4, 5])
    assert c.value == worst and c.holds is holds and c.verdict == ("holds" if holds else "fails")
    ok = [v >= 0.5 if relation == ">=" else v > 0.5 if relation == ">" else v <= 0.5 if relation == "<=" else v < 0.5
          for v in values]
    assert c.pass_fraction == pytest.approx(np.mean(ok))
    assert c.per_seed == {str(s): v for s, v in zip([3, 4, 5], values)}
    assert (c.spec_id, c.relation, c.threshold) == ("probe", relation, 0.5)


def test_nan_or_inf_never_holds_or_fails():
    """A value that cannot carry a verdict makes the claim not testable, naming the seed (the verdict engine)."""
    c = _spec().result([0.9, float("nan")], seeds=[0, 1])
    assert c.holds is None and c.verdict == "not testable" and c.value is None and c.per_seed == {"0": 0.9, "1": None}
    assert "seed 1: nan" in c.reason and c.judged_by == "stagewise.verdicts/1"
    assert _spec("<").result([float("inf")]).verdict == "not testable"
    assert _spec().result({0: 0.9, 1: None}).verdict == "fails"  # None: the event never happened


def test_mapping_and_sequence_inputs_agree():
    as_map = _spec().result({7: 0.6, 9: 0.4})
    as_seq = _spec().result([0.6, 0.4], seeds=[7, 9])
    assert as_map.per_seed == as_seq.per_seed == {"7": 0.6, "9": 0.4}
    assert as_map.value == as_seq.value == 0.4 and as_map.holds is as_seq.holds is False


def test_run_claims_take_one_value_and_not_testable_keeps_values():
    run = _spec(over="run")
    assert run.result(0.7).holds is True and run.result(0.7).per_seed == {}
    with pytest.raises(ValueError):
        run.result([0.7, 0.8])
    c = _spec().not_testable("outside the theory", "numbers", values=[0.9, 0.8])
    assert c.holds is None and c.verdict == "not testable" and c.reason == "outside the theory"
    assert c.value == 0.8 and "would hold" in c.evidence
    made = _spec().result([0.1]).with_not_testable("breach")
    assert made.verdict == "not testable" and made.reason == "breach" and "would fail" in made.evidence


def test_required_fraction_relaxes_every_seed():
    c = _spec().result([0.9, 0.9, 0.1])
    assert c.holds is False
    assert c.with_required_fraction(0.6).holds is True and c.with_required_fraction(0.7).holds is False
    assert c.with_required_fraction(1.0) == c


def test_family_ids_and_statement_override():
    c = _spec().result([1.0], case="S_P", statement="'S P' predicts V")
    assert c.id == "probe_S_P" and c.spec_id == "probe" and c.statement == "'S P' predicts V"


def test_version1_summary_still_reads(tmp_path):
    old = {"lab": "ntp", "seeds": [0], "final": {}, "per_seed": {}, "details": {},
           "claims": [{"id": "norms_linear", "statement": "norms grow linearly", "holds": True, "evidence": "R^2 1"},
                      {"id": "late_rate_margin", "statement": "late rates", "holds": None, "evidence": "not testable: short"}]}
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(old))
    summary = read_summary(path)
    assert summary.schema_version == 1
    assert [c.verdict for c in summary.claims] == ["holds", "not testable"]
    assert all(c.source is None and c.spec_id is None and c.condition() == "" for c in summary.claims)
    assert summary.counts() == {"holds": 1, "fails": 0, "inconclusive": 0, "not testable": 1, "not applicable": 0}


OLD_SOURCES_SUMMARY = {
    "schema_version": 2, "lab": "ntp", "seeds": [0], "final": {}, "per_seed": {}, "details": {},
    "claims": [{"id": "p2_claim", "statement": "direction converges", "holds": True, "evidence": "cos 1",
                "source": {"kind": "paper2", "where": "Theorem 3"}, "quantity": "cos", "relation": ">=", "threshold": 0.9},
               {"id": "p1_claim", "statement": "stage one", "holds": False, "evidence": "no",
                "source": {"kind": "paper1", "where": "Figure 2"}, "quantity": "acc", "relation": ">=", "threshold": 0.9},
               {"id": "own_claim", "statement": "ours", "holds": True, "evidence": "yes",
                "source": {"kind": "own", "where": "Example 1"}, "quantity": "x", "relation": "<", "threshold": 1.0}]}
"""A version-2 summary written before papers were keys: source kinds paper1 / paper2, no sources."""

HEADINGS = {"paper1": "paper 1: First Author, 2001 (one)", "paper2": "paper 2: Second Author, 2002 (two)"}
"""Paper headings as a lab declares them (Lab.sources)."""


def test_a_summary_from_before_paper_keys_reads_its_papers_as_keys(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(OLD_SOURCES_SUMMARY))
    summary = read_summary(path)
    assert summary.sources == {}
    assert [c.source for c in summary.claims] == [paper("paper2", "Theorem 3"), paper("paper1", "Figure 2"), own("Example 1")]
    assert [c.source.label(HEADINGS) for c in summary.claims] == ["paper 2, Theorem 3", "paper 1, Figure 2", "own check, Example 1"]
    groups = source_groups(HEADINGS, (c.source for c in summary.claims))  # the headings the lab declares, in key order
    assert list(groups.values()) == [HEADINGS["paper1"], HEADINGS["paper2"], "reviewers", "own checks"]
    assert [groups[c.source.group] for c in summary.claims] == [HEADINGS["paper2"], HEADINGS["paper1"], "own checks"]


def test_a_new_summary_carries_its_sources_and_stores_papers_by_key():
    spec = ClaimSpec(id="p1", statement="s", source=paper("paper1", "Theorem 2"), quantity="q", relation=">=",
                     threshold=0.5, control="c")
    summary = Summary(lab="x", seeds=[0], claims=[spec.result([0.7])], sources={"paper1": HEADINGS["paper1"]})
    data = json.loads(json.dumps(summary.to_json()))
    assert data["sources"] == {"paper1": HEADINGS["paper1"]}
    assert data["claims"][0]["source"] == {"kind": "paper", "paper": "paper1", "where": "Theorem 2"}
    assert json.loads(own("x").model_dump_json()) == {"kind": "own", "where": "x"}  # no paper key for the other kinds
    assert Summary.model_validate(data) == summary


def test_a_paper_source_names_its_paper_and_an_undeclared_one_is_shown_by_key():
    for bad in ({"kind": "paper", "where": "x"}, {"kind": "own", "paper": "paper1", "where": "x"},
                {"kind": "paper", "paper": "two words", "where": "x"}):
        with pytest.raises(ValueError):
            Source.model_validate(bad)
    source = paper("paper9", "Lemma 1")
    assert source.label() == "paper9, Lemma 1" and source_groups({}, [source])["paper:paper9"] == "paper9"


def test_a_report_over_labs_lists_papers_by_key_under_their_headings():
    """claims.md of a reproduce over labs: the first lab cites paper 2, the second paper 1, yet
    paper 1 comes first; the headings are the report's own ``sources`` over those passed in
    (an older claims.json, without them, takes the labs' declarations)."""
    from stagewise.report.html import reproduce_markdown

    claims = OLD_SOURCES_SUMMARY["claims"]  # sources of kind paper2, paper1, own
    runs = [{"name": "ntp/a", "status": "done", "seeds": [0], "claims": [claims[0], claims[2]]},
            {"name": "disentangled/b", "status": "done", "seeds": [0], "claims": [claims[1]]}]
    old = {"lab": "all", "quick": True, "runs": runs}

    def headings(report, sources=None):
        return [line[4:] for line in reproduce_markdown(report, sources).splitlines() if line.startswith("### ")
                and not line.startswith("### ntp/") and not line.startswith("### disentangled/")]

    declared = {"paper2": HEADINGS["paper2"], "paper1": HEADINGS["paper1"]}  # in the order the labs come
    assert headings(old, declared) == [HEADINGS["paper1"], HEADINGS["paper2"], "own checks"]
    assert headings(old) == ["paper1", "paper2", "own checks"]  # nothing declared: each paper under its key
    written = {**old, "sources": {"paper1": "paper 1: as the run wrote it"}}
    assert headings(written, declared) == ["paper 1: as the run wrote it", HEADINGS["paper2"], "own checks"]


# ------------------------------------------------------------------ smoke runs of the theory labs

def _run(name: str, run_cache, extra: dict | None = None, run_name: str = "smoke") -> list[Claim]:
    """The claims of lab ``name``'s smoke run with ``extra`` overrides (the session cache's run)."""
    lab = get_lab(name)
    spec = RunSpec(lab=name, overrides=deep_merge(dict(lab.smoke), extra or {}), name=run_name)
    return read_summary(run_cache.path(spec) / "summary.json").claims


def _declared_instances(name: str, claims: list[Claim]) -> None:
    declared = {c.id: c for c in get_lab(name).claims}
    assert claims
    for c in claims:
        assert c.spec_id in declared, f"{name}: claim {c.id} has no declared spec"
        spec = declared[c.spec_id]
        assert (c.relation, c.threshold, c.quantity, c.control, c.source) == \
               (spec.relation, spec.threshold, spec.quantity, spec.control, spec.source), c.id
        assert c.verdict in ("holds", "fails", "inconclusive", "not testable")
        if c.verdict in ("holds", "fails") and c.value is not None:
            assert spec.passes([c.value])[0] == (c.verdict == "holds") or c.pass_fraction not in (0.0, 1.0)


@pytest.mark.parametrize("name", THEORY_LABS)
def test_smoke_claims_instantiate_declared_specs(name, run_cache):
    _declared_instances(name, _run(name, run_cache))


@pytest.mark.parametrize("name", LABS)
def test_every_claim_is_decided_by_the_verdict_engine(name, run_cache):
    """Each lab's declared claims are engine rules (per run, and over seeds where an aggregation is
    declared), and every claim its smoke run writes says the engine decided it."""
    from stagewise.report.verdicts import ENGINE, Rule

    for spec in get_lab(name).claims:
        assert isinstance(spec.rule(), Rule)
        if spec.aggregation is not None:
            rule = spec.seeds_rule()
            assert rule.method in ("median", "paired-median") and rule.min_seeds >= 6, spec.id
    folder = run_cache.path(RunSpec(lab=name, overrides=dict(get_lab(name).smoke), name="smoke"))
    claims = read_summary(folder / "summary.json").claims
    assert claims and all(c.judged_by == ENGINE for c in claims), [c.id for c in claims if c.judged_by != ENGINE]


def test_bad_claim_declarations_are_one_line():
    with pytest.raises(ValueError, match="min_seeds=1: an over-seeds claim"):
        ClaimSpec(id="x", statement="s", source=own("t"), quantity="q", relation=">", threshold=0.0, control="c",
                  aggregation="median", min_seeds=1)
    with pytest.raises(ValueError, match="band"):
        ClaimSpec(id="x", statement="s", source=own("t"), quantity="q", relation=">", threshold=0.0, control="c", band=-1)


@pytest.mark.parametrize("name", LABS)
def test_a_new_run_writes_the_current_schema_version(name, run_cache):
    """summary.json of a run made now says the version the code writes (issue 26: the reader's
    version-1 default for summaries without the key also stamped new summaries 1)."""
    folder = run_cache.path(RunSpec(lab=name, overrides=dict(get_lab(name).smoke), name="smoke"))
    written = json.loads((folder / "summary.json").read_text())["schema_version"]
    assert written == SCHEMA_VERSION and SCHEMA_VERSION > 1
    assert read_summary(folder / "summary.json").schema_version == written


def test_a_summary_built_in_python_is_the_current_version():
    built = Summary(lab="ntp", seeds=[0])
    assert built.schema_version == SCHEMA_VERSION
    assert Summary.from_stored(built.to_json()).schema_version == SCHEMA_VERSION


def test_ntp_stage1_direction_fails_under_its_control(run_cache):
    """The declared control of stage1_direction (preset adam) makes it fail; two-stage NGD passes."""
    base = {c.id: c for c in _run("ntp", run_cache)}
    assert base["stage1_direction"].holds is True
    adam = {c.id: c for c in _run("ntp", run_cache, get_lab("ntp").preset_overrides("adam"), "adam")}
    _declared_instances("ntp", list(adam.values()))
    assert adam["stage1_direction"].holds is False, adam["stage1_direction"]


def test_disentangled_p_learned_fails_under_its_control(run_cache):
    """The declared control of p_learned_stage1 (the shuffled-label control variant) makes it
    fail: the stage claims evaluated on the control's own records."""
    from stagewise.labs.disentangled.claims import stage_claims
    from stagewise.runs import TableStore

    lab = get_lab("disentangled")
    spec = RunSpec(lab="disentangled", overrides=dict(lab.smoke), name="smoke")
    config = spec_config(spec)
    stages = TableStore(run_cache.path(spec) / "tables").get("stages")
    assert "control" in set(stages["variant"]), "the smoke run has no shuffled-label control"
    on_run = {c.id: c for c in stage_claims(config, stages)}
    on_control = {c.id: c for c in stage_claims(config, stages, "control")}
    assert on_control["p_learned_stage1"].holds is False, on_control["p_learned_stage1"]
    assert on_control["p_learned_stage1"].value > on_run["p_learned_stage1"].value  # K1 / log 2: the control learns no P
    assert "shuffled-label control" in on_control["p_learned_stage1"].control


# --------------------------------------------------------------------------- damaged summaries
def one_line(code, stderr, needle):
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and needle in lines[0], (code, lines)


@pytest.fixture(scope="module")
def done_run(run_cache):
    """A finished NTP run (the session cache's: read it, copy it to change it)."""
    return run_cache.path(EXAMPLE1_SHORT)


def test_show_on_a_truncated_summary(cli, tmp_path, done_run):
    import shutil

    run = tmp_path / "r"
    shutil.copytree(done_run, run)
    (run / "summary.json").write_text((run / "summary.json").read_text()[:100])
    code, out, err = cli("show", str(run))
    one_line(code, err, "unreadable summary")
    (run / "summary.json").write_text('{"lab": "ntp"}')
    code, _, err = cli("show", str(run))
    one_line(code, err, "not a stagewise summary")


def test_not_applicable_is_neither_judged_nor_untestable():
    spec = ClaimSpec(id="typed", statement="s", source=own("here"), quantity="q", relation=">", threshold=0.0,
                     control="c", aggregation="paired-bootstrap")
    claim = spec.not_applicable("a type claim; this task's answers are label words")
    assert claim.holds is None and claim.verdict == "not applicable" and claim.aggregation == "paired-bootstrap"
    assert "label words" in claim.reason
    again = Claim.model_validate(claim.model_dump(mode="json"))  # survives summary.json
    assert again.verdict == "not applicable"
    summary = Summary(lab="x", seeds=[0], claims=[claim, spec.result(1.0)])
    assert summary.counts() == {"holds": 1, "fails": 0, "inconclusive": 0, "not testable": 0, "not applicable": 1}
    with pytest.raises(ValueError, match="disagrees"):
        Claim(id="x", statement="s", holds=True, verdict="not applicable")
