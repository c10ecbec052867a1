"""Tables in reports are HTML tables, never images: record tables of summary.details."""

from __future__ import annotations

from stagewise import RunSpec, execute_spec
from stagewise.report.pages import MAX_DETAIL_ROWS, detail_tables, run_page


def test_record_tables_are_found_at_any_depth_and_capped():
    details = {
        "cases": [{"input": "S P", "predicted": "V"}, {"input": "O S P", "predicted": "P", "seed": 0}],
        "nested": {"by_category": {"seen": {"n": 3, "acc": 1.0}, "unseen": {"n": 2, "acc": None}}},
        "long": [{"i": i} for i in range(MAX_DETAIL_ROWS + 7)],
        "stage_detection": {"order": ["a"], "stages": {"a": {"per_seed": {}, "mean": 1, "min": 1, "max": 1,
                                                             "n_reached": 1, "n_seeds": 1}}},
        "mixed": [{"a": 1}, {"b": [1, 2]}],  # not flat: not a table
        "scalar": 3,
    }
    tables = {t.where: t for t in detail_tables(details)}
    assert set(tables) == {"cases", "nested.by_category", "long"}
    assert tables["cases"].header == ["input", "predicted", "seed"] and tables["cases"].rows[0] == ["S P", "V", None]
    assert tables["nested.by_category"].header == ["name", "n", "acc"]
    assert tables["nested.by_category"].rows == [["seen", 3, 1.0], ["unseen", 2, None]]
    assert len(tables["long"].rows) == MAX_DETAIL_ROWS and tables["long"].left_out == 7


def test_ntp_generalization_is_an_html_table_not_a_figure(tmp_path):
    run = tmp_path / "run"
    execute_spec(RunSpec(lab="ntp", preset="example1", overrides={"train": {"steps_stage2": 30}}, name="x"), run)
    assert not (run / "figures" / "generalization.png").exists()
    html = run_page(run).html
    assert "<details id='table-named_cases'>" in html
    block = html.split("<details id='table-named_cases'>", 1)[1].split("</details>", 1)[0]
    assert "<table>" in block and "<th>expected</th>" in block and "<img" not in block
