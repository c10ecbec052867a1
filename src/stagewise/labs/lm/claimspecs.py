"""The lm lab's declared claims (:class:`~stagewise.report.claims.ClaimSpec`), fixed before any run.

Imports nothing heavy: `stagewise claims lm` lists these without torch.

Paper 1's real-model evidence (Gong et al., arXiv 2502.20681; /work/shared/specs/lm-lab.md):
fine-tuning passes from syntactically wrong to type-correct to factually right answers; the
authors' proposed follow-up in the review: BLiMP (syntax) is learned before SICK (semantics). One fine-tuned model is one value per run
(``over="run"``); the times are epochs of the per-epoch evaluation, ``thresholds.half`` =
0.5 (docs/lm.md). The earlier conjunction "(a) and (b) and (c)" of type_before_fact is
one claim here, (c), the part the controls fail; (a) and (b) are descriptions. Every claim
declares how seeds aggregate (``aggregation``, ``min_seeds``; the verdict engine, :mod:`stagewise.report.verdicts`), computed by
:func:`stagewise.labs.lm.summary.across_runs` in sweep reports and ``stagewise reproduce lm``.
"""

from __future__ import annotations

from ...report.claims import ClaimSpec, paper, reviewer

MIN_SEEDS = 6
"""Finished seeds an over-seeds verdict of these claims needs: the fewest whose exact median interval reaches 95 %
(1 - 2^-5 = 0.969 at 6 seeds; :func:`stagewise.report.verdicts.min_seeds_for`). Fewer: inconclusive (n of 6 seeds)."""

SOURCES = {"paper1": "paper 1: Gong et al., arXiv 2502.20681 (disentangled features)"}
"""The paper the claims cite (``Lab.sources``): key -> heading; ``paper("paper1", where)`` names it."""

_STAGES = paper("paper1", "abstract; the motivating GPT-2 experiment on CounterFact (syntactically wrong -> type-correct -> right)")
_CONTROL = ("both controls, each must make it fail: counterfact-tiny-shuffled-groups (task.shuffle_groups: the groups' "
            "labels and types permuted, judging broken) and counterfact-tiny-frequency-matched (task.replace_answers: each answer "
            "replaced by one of another type and the nearest frequency rank, types broken, frequencies kept); paired by "
            "training-order / subsample seed (examples/sweeps/lm_type_claims_seeds.yaml); over seeds the verdict needs "
            "6 finished seeds (fewer: inconclusive)")
_RULE = (" Judged by the open type rule (thresholds.type_rule=open: the prompt's declared answer type, categories.py; the "
         "closed rule is reported beside it), h = thresholds.half = 0.5, epochs of the run's records.")

TYPE_BEFORE_FACT = ClaimSpec(
    id="type_before_fact", statement="a type-correct, factually wrong phase comes before the facts: type-correct answers "
    "make up at least half of the wrong predictions at an epoch before semantic-correct reaches half of its final count."
    + _RULE, source=_STAGES, quantity="semantic-correct half-way epoch minus the first epoch where type-correct >= 0.5 of "
    "the wrong predictions", relation=">", threshold=0.0, unit="epochs", over="run", control=_CONTROL,
    aggregation="paired-median", min_seeds=MIN_SEEDS)
# Issue 27: a model without attention (a bag of words plus the prompt's last two tokens) shows the same phase,
# with a larger lead, on counterfact-tiny. The two claims below ask whether the transformer's phase goes beyond
# that template-frequency baseline, trained on the same batches (baselines.py); declared before their runs.
_BASELINE = (" The baseline is bow-last (baselines.kinds includes bow-last: a mean bag of words plus the last "
             "baselines.last_k = 2 token embeddings -> linear softmax, no attention), trained on the same examples, "
             "batches, optimizer and schedule and categorised by the same rule; a phase that never happens counts as a "
             "lead of 0 and a share of 0.")
TYPE_LEAD_BEYOND_BASELINE = ClaimSpec(
    id="type_lead_beyond_baseline", statement="the transformer's type-before-fact phase lasts longer than the "
    "no-attention baseline's: its lead (semantic half-way epoch minus the first type-correct-majority epoch, 0 without "
    "a phase) exceeds the baseline's." + _BASELINE + _RULE, source=_STAGES,
    quantity="the transformer's type-before-fact lead minus the bow-last baseline's", relation=">", threshold=0.0,
    unit="epochs", over="run", control=_CONTROL + "; the baseline itself is the run's within-run control",
    aggregation="paired-median", min_seeds=MIN_SEEDS)
TYPE_SHARE_BEYOND_BASELINE = ClaimSpec(
    id="type_share_beyond_baseline", statement="the transformer's type-correct phase is stronger than the no-attention "
    "baseline's: its largest type-correct share of the wrong predictions before its semantic half-way epoch exceeds "
    "the baseline's (before the baseline's own half-way epoch)." + _BASELINE + _RULE, source=_STAGES,
    quantity="the transformer's max type-correct share before the facts (0 without a phase) minus the bow-last baseline's",
    relation=">",
    threshold=0.0, unit="", over="run", control=_CONTROL + "; the baseline itself is the run's within-run control",
    aggregation="paired-median", min_seeds=MIN_SEEDS)
# (a) "type-wrong answers fall to half of their epoch-0 count before semantic-correct reaches half" was a claim
# until issue 27: it held in 3 of 3 shuffled-groups control seeds, so by the lab's rule (each control must make
# a claim fail) it is a description, kept in details.descriptions.type_wrong_falls_first. Part (b), the peak
# order, likewise (details.type_before_fact: type_correct_peak_epoch, semantic_peak_epoch, part_b).
DESCRIPTIONS = {
    "type_wrong_falls_first": "type-wrong answers fall to half of their epoch-0 count before semantic-correct reaches "
                              "half of its final count (semantic half-way epoch minus type-wrong half-way epoch; held in "
                              "its controls, so a description, not a claim)",
}
TYPE_CLAIMS = (TYPE_BEFORE_FACT, TYPE_LEAD_BEYOND_BASELINE, TYPE_SHARE_BEYOND_BASELINE)
SENSITIVITY_HALVES = (0.4, 0.5, 0.6)
"""The thresholds h of the sensitivity table printed beside the type claims (both rules), declared with them."""
PRIOR_MARGIN = 0.05
"""Issue 27, declared before any run of the fair study: a task beats its label prior when its held-out
accuracy exceeds its training majority share by at least this much ..."""
PRIOR_RECORDS = 2
"""... at this many consecutive records (one record above the margin can be noise)."""
# The earlier declaration (BLiMP's training loss falls by half of its total drop before SICK's) measured learning
# the label words: both drops happen in the first 30 steps (docs/lm.md). Its numbers stay in details.syntax_half_drop.
SYNTAX_BEFORE_SEMANTICS = ClaimSpec(
    id="syntax_before_semantics", statement="syntax before semantics, each task above its own label prior: on held-out "
    "examples (BLiMP: whole paradigms never trained on; SICK: held-out pairs), BLiMP's accuracy beats its majority share "
    "at an earlier record than SICK's", source=reviewer("review discussion: the authors' proposed follow-up, a syntax and "
                                                        "a semantics task trained together (BLiMP, SICK)"),
    quantity=f"SICK's beat-the-prior epoch minus BLiMP's; a task's beat-the-prior epoch is the first record epoch from "
    f"which its held-out accuracy minus its training majority share is >= {PRIOR_MARGIN:g} at {PRIOR_RECORDS} consecutive "
    "records; a task that never gets there is censored at the last record (the value is then a bound). Not testable: "
    "no held-out records, neither task gets there, or both at the same record", relation=">", threshold=0.0,
    unit="epochs", over="run",
    floor="each task's label prior on its training set: majority share (BLiMP 0.5, SICK yes/maybe/no about 0.57) and "
    "entropy floor (ln 2 = 0.693; about 0.96 nats for SICK), logged per record as prior.* with eval.*_minus_* above them",
    control="blimp-sick-tiny-permuted (task.permute_labels: labels permuted within each task and part, seeded, label "
    "marginals kept exactly; must be not testable or fail: no held-out accuracy can beat its majority share) and "
    "blimp-tiny-alone / sick-tiny-alone (each task trained alone: its own beat-the-prior epoch, against which the "
    "mixture's order is read)", aggregation="paired-median", min_seeds=MIN_SEEDS)

# ---- the spectral claim (issue 27), declared before the runs
# The spectral claim of the lm lab, declared before any run (issue 27): the paper's reading of
# its rank-reduction test, "removing small singular directions hurts the early model more than
# the late one", against the random-direction baseline. Computed by :mod:`.spectralclaim`
# (``stagewise lm rank-curve RUN@E RUN@L ... --claim``).
#
# Declared here, before the acceptance runs: keep fraction p* = :data:`CLAIM_P` = 0.2 of the
# singular directions of every selected attention matrix, threshold 0.1 on the per-seed value,
# :data:`CLAIM_DRAWS` = 5 random draws by default, the floor :data:`MIN_RANDOM_DAMAGE`.
#
# Quantity, for one run (seed) with an early and a late checkpoint, on the examples E that are
# semantic-correct at BOTH checkpoints before any reduction:
#
#     R_c^sel = fraction of E still semantic-correct after keeping k = floor(p* r) directions of
#               checkpoint c (c = early, late) chosen by sel = largest | random (mean of the draws)
#     D_c^sel = 1 - R_c^sel                                 (the damage)
#     rho_c   = D_c^largest / D_c^random                    (the share of the damage of dropping
#                                                            80 % of the directions at random that
#                                                            dropping only the smallest 80 % does)
#     value   = rho_early - rho_late
#
# If which directions are dropped did not matter, rho = 1 at both checkpoints and value = 0; if the
# late model were only "more fragile to any removal", both rho stay near 1 (its random damage and
# its keep-largest damage grow together) and value ~ 0; if neither model needs its small
# directions (keep-largest retains everything), both rho ~ 0 and value ~ 0. The paper's reading
# -- the small directions carry more of the early model's answers -- is value > 0. (The
# difference in differences (R_late - R_early)^largest - (R_late - R_early)^random is reported
# beside it: it is positive whenever the late model is more fragile to random removal, even
# when keep-largest changes nothing, so it cannot carry the claim.)
CLAIM_P = 0.2
"""The declared keep fraction p*: keep k = floor(0.2 r) directions of every selected matrix."""
CLAIM_THRESHOLD = 0.1
"""The declared threshold on rho_early - rho_late (per seed; over seeds on the interval's lower end)."""
CLAIM_DRAWS = 5
"""Random-direction draws per checkpoint and p (the default of --draws)."""
MIN_RANDOM_DAMAGE = 0.05
"""rho_c needs D_c^random >= this: when dropping 80 % of the directions at random costs less
than 5 % of E, there is no damage to apportion and the seed is not testable."""

SPECTRAL_SMALL_DIRECTIONS_EARLY = ClaimSpec(
    id="spectral_small_directions_early",
    statement="removing small singular directions of the attention matrices hurts the early model more than the late "
    "one, beyond what removing as many random directions does: the share of the random-removal damage that removing "
    "only the smallest directions causes is larger early than late (judged on the examples semantic-correct at both "
    f"checkpoints, keep fraction p = {CLAIM_P:g}, every selected matrix)",
    source=paper("paper1", "the rank-reduction test of the attention weights (rank preservation p, early vs late "
                           "checkpoint; /work/shared/specs/lm-lab.md section 1)"),
    quantity=f"rho_early - rho_late at p = {CLAIM_P:g}, rho_c = (1 - retained_c under keep-largest) / (1 - retained_c "
    "under keep-random, mean of the draws)",
    relation=">", threshold=CLAIM_THRESHOLD,
    floor=f"not testable for a seed whose random-direction damage is below {MIN_RANDOM_DAMAGE:g} at either checkpoint",
    control="the random-direction baseline is inside the quantity (k singular directions chosen uniformly at random, "
    f"{CLAIM_DRAWS} seeded draws: with no dependence on which directions are kept the value is 0); the keep-smallest "
    "variant (the largest directions removed) is reported beside it; one run per seed (early and late "
    "checkpoint); over seeds the exact interval of the median per-seed value, 6 seeds at least",
    over="every",
    aggregation="median", min_seeds=MIN_SEEDS,  # per seed rho_early - rho_late (paired within the seed); spectralclaim.py
)

CLAIMS: tuple[ClaimSpec, ...] = (*TYPE_CLAIMS, SYNTAX_BEFORE_SEMANTICS, SPECTRAL_SMALL_DIRECTIONS_EARLY)
"""Every declared claim; the spectral one is made by ``stagewise lm rank-curve ... --claim`` (spectralclaim.py),
not by a run's summary."""
