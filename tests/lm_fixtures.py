"""Tiny datasets in the schemas of the shared data (CounterFact/ROME, HotpotQA, BLiMP, SICK),
written in the shared-data layout, so the LM lab runs in tests without ../shared/data."""

from __future__ import annotations

import json
import os
from pathlib import Path

SHARED_DATA = Path(os.environ.get("STAGEWISE_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
"""The project's shared data (../shared/data next to the checkout, or $STAGEWISE_SHARED_DATA);
tests that need it skip with a reason when it is absent."""

# (relation_id, prompt template, [(subject, answer), ...]): answers are single GPT-2 tokens
RELATIONS = [
    ("P30", "{} is located in", [("Angola", "Africa"), ("Peru", "America"), ("Laos", "Asia"), ("Spain", "Europe")]),
    ("P37", "The official language of {} is", [("Poland", "Polish"), ("Italy", "Italian"), ("Greece", "Greek"),
                                               ("Norway", "Norwegian")]),
    ("P36", "The capital of {} is", [("France", "Paris"), ("Japan", "Tokyo"), ("Egypt", "Cairo"), ("Russia", "Moscow")]),
]
MULTI_TOKEN = ("P101", "{} works in the field of", ("Zbigniew", "ornithological taxonomy"))

BLIMP = {
    "anaphor_gender_agreement": ("morphology", [("Katherine can't help herself.", "Katherine can't help himself."),
                                                ("Karla could listen to herself.", "Karla could listen to himself."),
                                                ("Mary saw herself.", "Mary saw himself.")]),
    "principle_A_case_2": ("syntax/semantics", [("Eva imagines herself is happy.", "Eva imagines herself happy."),
                                                 ("Tom thinks he left.", "Tom thinks himself left."),
                                                 ("Ann says she won.", "Ann says herself won.")]),
}

SICK_ROWS = [
    ("A man is playing a guitar", "A person is playing a guitar", "ENTAILMENT", "TRAIN"),
    ("A dog is running in the park", "A cat is sleeping", "NEUTRAL", "TRAIN"),
    ("A woman is cutting an onion", "Nobody is cutting an onion", "CONTRADICTION", "TRAIN"),
    ("Two kids are playing", "Children are playing", "ENTAILMENT", "TRAIN"),
    ("A man is cooking", "A man is dancing", "NEUTRAL", "TRIAL"),
    ("A boy is jumping", "No boy is jumping", "CONTRADICTION", "TEST"),
]

HOTPOT = [("Were Scott Derrickson and Ed Wood of the same nationality?", "yes"),
          ("How many stars are in the Big Dipper?", "7"),
          ("In what year was the university founded?", "1865"),
          ("Which city hosts the festival?", "Paris")]


def counterfact_records(multi_token: bool = True) -> list[dict]:
    records, case = [], 0
    for rel, template, pairs in RELATIONS:
        for subject, answer in pairs:
            records.append(_record(case, rel, template, subject, answer))
            case += 1
    if multi_token:
        rel, template, (subject, answer) = MULTI_TOKEN
        records.append(_record(case, rel, template, subject, answer))
    return records


def _record(case: int, rel: str, template: str, subject: str, answer: str) -> dict:
    return {"case_id": case, "pararel_idx": case,
            "requested_rewrite": {"prompt": template, "relation_id": rel, "subject": subject,
                                  "target_true": {"str": answer, "id": f"Q{case}"}, "target_new": {"str": "X", "id": "Q0"}},
            "paraphrase_prompts": [f"News. {template.format(subject)}", f"Note: {template.format(subject)}"],
            "neighborhood_prompts": [], "attribute_prompts": [], "generation_prompts": []}


def write_layout(root: Path) -> Path:
    """Write all four datasets under ``root`` in the shared-data layout; returns root."""
    (root / "counterfact").mkdir(parents=True, exist_ok=True)
    (root / "counterfact" / "counterfact_500.json").write_text(json.dumps(counterfact_records()), encoding="utf-8")
    (root / "hotpotqa").mkdir(exist_ok=True)
    lines = [json.dumps({"_id": f"h{i}", "question": q, "answer": a, "type": "bridge", "level": "hard",
                         "supporting_facts": [], "context": []}) for i, (q, a) in enumerate(HOTPOT)]
    (root / "hotpotqa" / "hotpotqa_dev_500.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "blimp").mkdir(exist_ok=True)
    for uid, (field, pairs) in BLIMP.items():
        rows = [json.dumps({"sentence_good": g, "sentence_bad": b, "field": field, "linguistics_term": "term", "UID": uid,
                            "simple_LM_method": True, "pairID": str(i)}) for i, (g, b) in enumerate(pairs)]
        (root / "blimp" / f"{uid}.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    (root / "sick").mkdir(exist_ok=True)
    header = ["pair_ID", "sentence_A", "sentence_B", "entailment_label", "relatedness_score", "entailment_AB",
              "entailment_BA", "sentence_A_original", "sentence_B_original", "sentence_A_dataset", "sentence_B_dataset",
              "SemEval_set"]
    body = ["\t".join([str(i + 1), a, b, label, "3.0", "A_x_B", "B_x_A", a, b, "FLICKR", "FLICKR", split])
            for i, (a, b, label, split) in enumerate(SICK_ROWS)]
    (root / "sick" / "SICK.txt").write_text("\n".join(["\t".join(header), *body]) + "\n", encoding="utf-8")
    return root
