"""`stagewise findings` (orchestrate/findings.py): one table from report folders, claims files
that round-trip, a control's verdict found by its claim id, one line and nothing written for a
folder without claims, and docs/findings.md regenerated from results/ equal to the committed page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stagewise.labs import get_lab
from stagewise.orchestrate.findings import CLAIMS_KIND, ClaimsFile, collect, control_verdicts, markdown, rows, save
from stagewise.report.claims import ClaimSpec, own, paper
from stagewise import RunSpec

ROOT = Path(__file__).resolve().parents[2]


def _ntp_run(run_cache) -> Path:
    return run_cache.path(RunSpec(lab="ntp", overrides=dict(get_lab("ntp").smoke), name="smoke"))


def test_a_run_folder_becomes_one_row_per_claim_and_its_claims_file_round_trips(run_cache, tmp_path, cli):
    run = _ntp_run(run_cache)
    records = collect([run])
    summary = json.loads((run / "summary.json").read_text())
    assert [r["claim"] for r in rows(records)] == [c["id"] for c in summary["claims"]]
    assert [r["verdict"] for r in rows(records)] == [c["verdict"] for c in summary["claims"]]
    written = save(records, tmp_path / "results")
    stored = json.loads(written[0].read_text())
    assert stored["kind"] == CLAIMS_KIND and "metrics" not in stored and stored["lab"] == "ntp"
    assert stored["command"].startswith("stagewise run ntp --config")
    # the page from the claims file is the page from the run folder (the run's path kept as the origin aside)
    again = collect([tmp_path / "results"])
    assert markdown(again).split("## Reproduce")[0] == markdown(records).split("## Reproduce")[0]
    code, out, err = cli("findings", str(run), "--markdown", str(tmp_path / "page.md"), "--save", str(tmp_path / "saved"))
    assert code == 0, err
    page = (tmp_path / "page.md").read_text()
    assert all(f"`{c['id']}`" in page for c in summary["claims"]) and "paper 2" in page


def test_a_folder_without_claims_is_one_line_exit_2_and_nothing_written(tmp_path, cli):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.json").write_text('{"kind": "something else"}')
    code, out, err = cli("findings", str(empty), "--save", str(tmp_path / "saved"), "--markdown", str(tmp_path / "page.md"))
    assert code == 2 and "holds no claims" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "saved").exists() and not (tmp_path / "page.md").exists()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"kind": CLAIMS_KIND, "claims": [{"id": "x"}]}))
    code, out, err = cli("findings", str(bad))
    assert code == 2 and "is not a claim" in err and len(err.strip().splitlines()) == 1
    code, out, err = cli("findings", str(tmp_path / "missing"))
    assert code == 2 and "no such file" in err


def _spec(id: str, control: str, relation: str = ">=") -> ClaimSpec:
    return ClaimSpec(id=id, statement=id, source=paper("paper1", "abstract") if id == "real" else own("control"),
                     quantity="q", relation=relation, threshold=0.5, control=control)


def test_a_control_named_by_its_claim_id_shows_its_verdict():
    real = _spec("real", "the shuffled control (ctrl_claim) must fail").result([0.9, 0.8], seeds=[0, 1])
    ctrl = _spec("ctrl_claim", "none", "<=").result([0.7, 0.1], seeds=[0, 1])
    record = ClaimsFile("r", "disentangled", "stagewise run x", [0, 1], {"paper1": "paper 1: Gong et al."}, [real, ctrl])
    by_id = {c.id: c for c in record.claims}
    assert control_verdicts(real, by_id) == "ctrl_claim: fails" and control_verdicts(ctrl, by_id) == "-"
    table = rows([record])
    assert table[0]["group"] == "paper 1: Gong et al." and table[0]["value"] == "0.8 (2 seeds)"
    page = markdown([record])
    assert page.index("## paper 1") < page.index("## The project's own checks")


RESULTS = ROOT / "results"


@pytest.mark.skipif(not RESULTS.is_dir(), reason="no results folder in this checkout")
def test_the_findings_page_is_generated_from_the_committed_results():
    """docs/findings.md is `stagewise findings results --markdown docs/findings.md`: regenerated here and compared."""
    page = markdown(collect([RESULTS])).replace(str(ROOT) + "/", "")
    assert (ROOT / "docs" / "findings.md").read_text() == page, \
        "docs/findings.md is out of date: run `stagewise findings results --markdown docs/findings.md` from the repository root"


def test_a_phase_map_file_counts_each_criterion_over_its_points(tmp_path):
    spec = _spec("real", "none")
    points = [{"levers": {"rho": rho}, "claims": [spec.result([v, v], seeds=[0, 1]).model_dump(mode="json")]}
              for rho, v in ((26.0, 0.9), (40.0, 0.1))]
    path = tmp_path / "map.phase-map.json"
    path.write_text(json.dumps({"kind": "stagewise.phase-map/1", "label": "map", "command": "stagewise sweep x", "points": points}))
    (row,) = rows(collect([path]))
    assert row["verdict"] == "holds at 1 of 2 points, fails at 1 of 2 points" and row["value"] == "2 points"
    assert "map: holds at 1 of 2 points" in markdown(collect([tmp_path]))


def test_a_sweep_with_claims_over_seeds_reads_them_there_not_once_per_run(run_cache, tmp_path):
    """A claim judged over seeds is one row (its per-seed values inside); the runs' other claims stay."""
    import shutil

    run = _ntp_run(run_cache)
    sweep = tmp_path / "sweep"
    shutil.copytree(run, sweep / "runs" / "a")
    summary = json.loads((run / "summary.json").read_text())
    first, *rest = summary["claims"]
    pooled = {**first, "id": f"{first['id']}_over_seeds"}
    (sweep / "sweep.json").write_text(json.dumps({"lab": "ntp", "points": [{"run_dir": "runs/a", "label": "a"}]}))
    (sweep / "over_seeds.json").write_text(json.dumps({"claims": [pooled]}))
    records = collect([sweep])
    assert [r.label for r in records] == ["sweep: a", "sweep: over seeds"]
    assert [c.id for c in records[0].claims] == [c["id"] for c in rest]
    assert [c.id for c in records[1].claims] == [pooled["id"]]


def test_a_claims_files_figures_are_shown_after_the_tables(tmp_path):
    """notes.figures (paths from the repository root) become images linked from docs/ (the page's folder)."""
    from stagewise.orchestrate.findings import ClaimsFile, markdown

    record = ClaimsFile("study: corpus", "lm", "python study.py", [0], {}, [],
                        notes={"figures": ["docs/figures/heat.png", "results/lm/curves.png", "/abs/x.png"]})
    page = markdown([record])
    figures = page[page.index("## Figures"):page.index("## Reproduce")]
    assert "](figures/heat.png)" in figures and "](../results/lm/curves.png)" in figures and "](/abs/x.png)" in figures
    assert "## Figures" not in markdown([ClaimsFile("plain", "lm", "cmd", [0], {}, [])])
