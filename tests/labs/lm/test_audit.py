"""Issue 26, section 5 (`lm sample`): seeds out of range, a corrupted or foreign
predictions.parquet, a run made before the open rule, rows without a top id or with an id the
tokenizer does not have, and rich markup in example ids or subject text. Each is one line
(exit 2) or printed as it is, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from runcache import smoke_spec
from stagewise.config import MAX_SEED
from stagewise.errors import UserError
from stagewise.labs.lm.refs import decode_top, read_predictions, sample_predictions
from cli_errors import one_error_line

TABLE = Path("tables") / "predictions.parquet"


@pytest.fixture
def run(run_cache, tmp_path, capsys) -> Path:
    """A private copy of the lm smoke run (CounterFact, answer framing, both type rules)."""
    folder = run_cache.copy(smoke_spec("lm"), tmp_path / "run")
    capsys.readouterr()  # what making the cached run printed is not the command's output
    return folder


def rewrite(run: Path, change) -> pd.DataFrame:
    frame = change(pd.read_parquet(run / TABLE))
    frame.to_parquet(run / TABLE, index=False)
    return frame


# ------------------------------------------------------------------ seeds
def test_seeds_out_of_range_are_one_line(cli, run):
    for seed in ("-1", str(MAX_SEED), str(10**30)):
        line = one_error_line(*cli("lm", "sample", str(run), "--seed", seed)[::2])
        assert "--seed" in line, line
    with pytest.raises(UserError, match=rf"--seed -1: between 0 and {MAX_SEED - 1}"):
        sample_predictions(run, "type-wrong", 2, seed=-1)  # numpy's ValueError before
    code, out, err = cli("lm", "sample", str(run), "--category", "type-wrong", "--epoch", "0", "--seed", str(MAX_SEED - 1))
    assert code == 0, err


# ------------------------------------------------------------------ the predictions table
@pytest.mark.parametrize("damage", ["garbage", "cut-in-half", "empty-file"])
def test_a_corrupted_predictions_table_is_one_line_naming_it(cli, run, damage):
    path = run / TABLE
    raw = path.read_bytes()
    path.write_bytes({"garbage": b"not parquet at all" * 10, "cut-in-half": raw[:len(raw) // 2], "empty-file": b""}[damage])
    line = one_error_line(*cli("lm", "sample", str(run))[::2])
    assert f"{path}: not a readable Parquet file" in line and "run the run again" in line, line


@pytest.mark.parametrize("change,fragment", [
    (lambda p: p[["example_id", "task"]], "not a predictions table of the lm lab (no column epoch, category, top_ids"),
    (lambda p: p.assign(epoch=p["epoch"].astype(str)), "column epoch holds large_string, expected numbers"),
    (lambda p: p.assign(top_ids=[str(list(x)) for x in p["top_ids"]]), "column top_ids holds large_string, expected lists"),
    (lambda p: p.assign(top_ids=[[float(i) for i in x] for x in p["top_ids"]]), "column top_ids holds list<element: double>"),
    (lambda p: p.assign(category=1), "column category holds int64, expected text"),
], ids=["other-table", "epoch-text", "top-ids-text", "top-ids-float", "category-numbers"])
def test_a_predictions_table_of_another_schema_is_one_line(cli, run, change, fragment):
    rewrite(run, change)
    line = one_error_line(*cli("lm", "sample", str(run))[::2])
    assert f"{run / TABLE}: " in line and fragment in line, line


def test_an_empty_predictions_table_is_one_line(cli, run):
    rewrite(run, lambda p: p.iloc[:0])
    assert "no predictions recorded (0 rows)" in one_error_line(*cli("lm", "sample", str(run))[::2])


def test_a_run_from_before_the_open_rule(cli, run, monkeypatch):
    """No category_open column: the open rule (the default) says what to do; the closed rule
    samples, showing the open verdict as absent."""
    monkeypatch.setenv("COLUMNS", "300")
    rewrite(run, lambda p: p.drop(columns=["category_open"]))
    line = one_error_line(*cli("lm", "sample", str(run))[::2])
    assert "no open-rule categories" in line and "use --rule closed" in line, line
    code, out, err = cli("lm", "sample", str(run), "--rule", "closed", "--category", "type-wrong", "--epoch", "0", "--n", "2")
    assert code == 0, err
    rows = [row for row in out.splitlines() if "counterfact/" in row]
    assert len(rows) == 2 and all(row.split("│")[-2].strip() == "(none)" for row in rows), out
    predictions, column = read_predictions(run, "closed")
    assert column == "category" and predictions["category_open"].isna().all()


# ------------------------------------------------------------------ top ids
def test_rows_without_a_top_id_or_with_an_unknown_one_are_shown_as_such(cli, run, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    unknown = 10**9

    def damage(p):
        ids = [list(x) for x in p["top_ids"]]
        for i in range(len(ids)):
            ids[i] = [] if i % 3 == 0 else [unknown, *ids[i][1:]] if i % 3 == 1 else ids[i]
        return p.assign(top_ids=ids)

    rewrite(run, damage)
    code, out, err = cli("lm", "sample", str(run), "--category", "type-wrong", "--epoch", "0", "--n", "12")
    assert code == 0, err
    assert "(no top id recorded)" in out and f"(id {unknown} is not one of the tokenizer's 50257 ids)" in out
    sample, _, _ = sample_predictions(run, "type-wrong", 12, epoch="0")
    assert sample["prediction"].isna().any() and sample["prediction"].map(lambda v: v is None or isinstance(v, str)).all()


def test_decode_top_on_hand_made_rows():
    from stagewise.lmkit.models import gpt2_bpe

    texts, notes = decode_top(gpt2_bpe(), [[6342, 11], [], None, [-1], [50257], [13]])
    assert texts == [" Paris", None, None, None, None, "."]
    assert notes[:3] == [None, "no top id recorded", "no top id recorded"]
    assert notes[3] == "id -1 is not one of the tokenizer's 50257 ids" and notes[4].startswith("id 50257 ") and notes[5] is None


# ------------------------------------------------------------------ rich markup is text
def test_markup_in_example_ids_and_subject_text_is_printed_literally(cli, run, tmp_path, monkeypatch):
    """Example ids (from the table) and prompts (from the run's data) that look like rich
    markup, including a closing tag that would crash rich, are printed as they are."""
    from lm_fixtures import counterfact_records

    monkeypatch.setenv("COLUMNS", "400")
    records = counterfact_records(multi_token=False)
    for record in records:
        rewrite_ = record["requested_rewrite"]
        rewrite_["subject"] = f"[/x]{rewrite_['subject']}[bold]"
        record["paraphrase_prompts"] = [p.replace(" is", " [red]is[/red]", 1) for p in record["paraphrase_prompts"]]
    data = tmp_path / "cf.json"
    data.write_text(json.dumps(records), encoding="utf-8")
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["data"]["path"] = str(data)
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    rewrite(run, lambda p: p.assign(example_id=[f"[bold]{i}" if i.endswith("/2") else i for i in p["example_id"]]))
    code, out, err = cli("lm", "sample", str(run), "--category", "type-wrong", "--epoch", "0", "--n", "40", "--rule", "closed")
    assert code == 0, err
    assert "[/x]" in out and "[bold]" in out and "[red]is[/red]" in out, out
    assert "[bold]counterfact/" in out and "(none)" in out  # an id the data does not have: no prompt

    def fake(*args, **kwargs):
        sample = pd.DataFrame({"example_id": ["[/x]"], "group": ["[bold]"], "prompt": ["[/]"], "answer": ["[i]"],
                               "prediction": ["[/bold]"], "prediction_note": [None], "closed": ["type-wrong"],
                               "open": ["type-wrong"]})
        return sample, 0.0, 1

    from stagewise.labs.lm import refs

    monkeypatch.setattr(refs, "sample_predictions", fake)
    code, out, err = cli("lm", "sample", str(run), "--category", "type-wrong")
    assert code == 0, err
    for text in ("[/x]", "[bold]", "[/]", "'[i]'", "'[/bold]'"):
        assert text in out, (text, out)
