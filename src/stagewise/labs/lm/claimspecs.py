"""The lm lab's declared claims (:class:`~stagewise.report.claims.ClaimSpec`), fixed before any run.

Imports nothing heavy: `stagewise claims lm` lists these without torch.

Paper 1's real-model evidence (Gong et al., arXiv 2502.20681; /work/shared/specs/lm-lab.md):
fine-tuning passes from syntactically wrong to type-correct to factually right answers; the
authors' proposed follow-up in the review: BLiMP (syntax) is learned before SICK (semantics). One fine-tuned model is one value per run
(``over="run"``); the times are epochs of the per-epoch evaluation, ``thresholds.half`` =
0.5 (docs/lm.md). The earlier conjunction "(a) and (b) and (c)" of type_before_fact is
three claims here: (c), the part the shuffled-groups control fails, keeps the id.
"""

from __future__ import annotations

from ...report.claims import ClaimSpec, paper, reviewer

SOURCES = {"paper1": "paper 1: Gong et al., arXiv 2502.20681 (disentangled features)"}
"""The paper the claims cite (``Lab.sources``): key -> heading; ``paper("paper1", where)`` names it."""

_STAGES = paper("paper1", "abstract; the motivating GPT-2 experiment on CounterFact (syntactically wrong -> type-correct -> right)")
_CONTROL = ("both controls, each must make it fail: counterfact-tiny-shuffled-groups (task.shuffle_groups: the groups' "
            "labels and types permuted, judging broken) and counterfact-tiny-frequency-matched (task.replace_answers: each answer "
            "replaced by one of another type and the nearest frequency rank, types broken, frequencies kept); per seed over 3 "
            "training-order / subsample seeds (examples/sweeps/lm_type_claims_seeds.yaml)")
_RULE = (" Judged by the open type rule (thresholds.type_rule=open: the prompt's declared answer type, answertypes.py; the "
         "closed rule is reported beside it), h = thresholds.half = 0.5, epochs of the run's records.")

TYPE_BEFORE_FACT = ClaimSpec(
    id="type_before_fact", statement="a type-correct, factually wrong phase comes before the facts: type-correct answers "
    "make up at least half of the wrong predictions at an epoch before semantic-correct reaches half of its final count",
    source=_STAGES, quantity="semantic-correct half-way epoch minus the first epoch where type-correct >= 0.5 of the wrong "
    "predictions", relation=">", threshold=0.0, unit="epochs", over="run", control=_CONTROL)
TYPE_WRONG_FIRST = ClaimSpec(
    id="type_wrong_falls_first", statement="type-wrong answers fall to half of their epoch-0 count before semantic-correct "
    "reaches half of its final count." + _RULE, source=_STAGES,
    quantity="semantic-correct half-way epoch minus the type-wrong half-way epoch", relation=">", threshold=0.0,
    unit="epochs", over="run", control=_CONTROL)
# Part (b), "the type-correct count peaks before the semantic-correct count", was declared with the other two
# parts and dropped after the seeds study (docs/lm.md): it held in every seed of both controls (3/3 shuffled groups,
# 3/3 frequency-matched), so it cannot tell a type phase from its controls. Its epochs stay in
# details.type_before_fact (type_correct_peak_epoch, semantic_peak_epoch, part_b) as a description.
SYNTAX_BEFORE_SEMANTICS = ClaimSpec(
    id="syntax_before_semantics", statement="syntax before semantics: BLiMP's loss falls by half of its total drop before "
    "SICK's", source=reviewer("review discussion: the authors' proposed follow-up, a syntax and a semantics task "
                              "trained together (BLiMP, SICK)"),
    quantity="SICK's half-drop time minus BLiMP's: epochs of the per-epoch evaluation, or where those tie, optimizer "
    "steps of the per-task training loss", relation=">", threshold=0.0, unit="epochs (steps at a tie)", over="run",
    control="none run in the lab: training on SICK first (BLiMP added late) would make it fail")

CLAIMS: tuple[ClaimSpec, ...] = (TYPE_BEFORE_FACT, TYPE_WRONG_FIRST, SYNTAX_BEFORE_SEMANTICS)
