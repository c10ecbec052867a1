"""The lm lab's declared claims (:class:`~stagewise.report.claims.ClaimSpec`), fixed before any run.

Imports nothing heavy: `stagewise claims lm` lists these without torch.

Paper 1's real-model evidence (Gong et al., arXiv 2502.20681; /work/shared/specs/lm-lab.md):
fine-tuning passes from syntactically wrong to type-correct to factually right answers; the
authors' proposed follow-up in the review: BLiMP (syntax) is learned before SICK (semantics). One fine-tuned model is one value per run
(``over="run"``); the times are epochs of the per-epoch evaluation, ``thresholds.half`` =
0.5 (docs/lm.md). The earlier conjunction "(a) and (b) and (c)" of type_before_fact is
one claim here, (c), the part the controls fail; (a) and (b) are descriptions. Every claim
declares how seeds aggregate (``aggregation``, ``min_seeds``; the verdict engine, :mod:`stagewise.report.verdicts`), computed by
:func:`stagewise.labs.lm.claims.across_runs` in sweep reports and ``stagewise reproduce lm``. Every claim is
judged in :mod:`stagewise.labs.lm.claims`.
"""

from __future__ import annotations

from ...report.claims import ClaimSpec, own, paper, reviewer

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
# that template-frequency baseline, trained on the same batches (baselines.py).
# Issue 38 redeclares them, before their runs: a lead in epochs compares learning speeds (it flipped from fails to
# holds when the baseline's rate went from 1e-3 to 1e-2), so both are read on each model's own facts' clock, against
# every rate of a declared grid, judged against the rate strongest for the alternative (claims.py).
FACT_FRACTIONS = (0.1, 0.25, 0.5)
"""The fact progress (semantic-correct / its final count) at which the type-correct shares are compared."""
SETTLE_SPAN = 0.2
"""A claim measured against the final fact count needs facts that had settled: over the last 20 % of the recorded
epochs the semantic-correct count grew by at most :data:`SETTLE_GROWTH` of its final value ..."""
SETTLE_GROWTH = 0.1
"""... 10 % (else: not testable, the facts were still rising at the last record)."""
SETTLE_TOL = 1e-12
"""Round-off allowance of the settling test (a share of the final count)."""
MIN_RECORDS_BEFORE = 3
"""Records a model needs before its facts reach h of their final count for its phase to be read on the facts'
clock (fewer: not testable, record more often with train.eval_every)."""
BASELINE_LR_GRID = (1e-3, 3e-3, 1e-2, 3e-2)
"""The declared grid of the baselines' rates (baselines.lr_grid) of the issue-38 study."""
_BASELINE = (" The baseline is bow-last (baselines.kinds includes bow-last: a mean bag of words plus the last "
             "baselines.last_k = 2 token embeddings -> linear softmax, no attention), trained on the same examples, "
             "batches, optimizer and schedule and categorised by the same rule, at every rate of baselines.lr_grid "
             f"(the study's grid: {', '.join(f'{r:g}' for r in BASELINE_LR_GRID)}); the claim is judged against the rate "
             "whose value is largest (the strongest for the alternative) and reported at every rate. Each model is read "
             "on its own facts' clock, fact progress = semantic-correct / its final count; a clock needs facts that "
             f"settled (at most {SETTLE_GROWTH:.0%} growth over the last {SETTLE_SPAN:.0%} of the epochs) and "
             f"{MIN_RECORDS_BEFORE} records before progress h; a phase that never happens counts as a lead of 0.")
TYPE_LEAD_BEYOND_BASELINE = ClaimSpec(
    id="type_lead_beyond_baseline", statement="on the facts' clock the transformer's type-correct majority comes "
    "earlier than the no-attention baseline's: its lead, h minus the fact progress at its first record where "
    "type-correct answers are at least h of the wrong predictions (0 without such a record, floored at 0), exceeds "
    "the baseline's." + _BASELINE + _RULE, source=_STAGES,
    quantity="the transformer's lead on the facts' clock minus the largest bow-last lead over the rate grid",
    relation=">", threshold=0.0, unit="fact progress", over="run",
    control=_CONTROL + "; the baseline itself is the run's within-run control", aggregation="paired-median",
    min_seeds=MIN_SEEDS)
TYPE_SHARE_BEYOND_BASELINE = ClaimSpec(
    id="type_share_beyond_baseline", statement="at matched fact progress the transformer's wrong answers are more "
    "often type-correct than the no-attention baseline's: the type-correct share of the wrong predictions where the "
    f"facts first reach {', '.join(f'{f:g}' for f in FACT_FRACTIONS)} of their final count (linear in fact progress "
    "between records), averaged, exceeds the baseline's." + _BASELINE + _RULE, source=_STAGES,
    quantity="the transformer's mean type-correct share at matched fact progress minus the largest bow-last share "
    "over the rate grid", relation=">", threshold=0.0, unit="", over="run",
    control=_CONTROL + "; the baseline itself is the run's within-run control", aggregation="paired-median",
    min_seeds=MIN_SEEDS)
# Issue 38, the mechanism test, declared before its runs. The paper's reading: the type cue (the relation, in the
# prompt's last tokens: an elementary feature) is easy to fit and the fact (the subject, earlier in the prompt: a
# specialized feature) is hard, so the type phase is the time between the two. On the facts' clock that reading
# predicts the type-correct share at matched fact progress falls when the type cue is made harder (less type
# learning by the time the facts get as far) and also when the facts are made easier (the facts get as far in fewer
# steps, with as little time for the type cue). (The text expected the second to lengthen the phase; with
# the facts coming sooner and the cue unchanged the reading gives the opposite, and that is what is declared.)
SUBJECT_REPEAT = 3
"""The easier-facts arm: each prompt starts with its subject repeated twice ('Angola. Angola. Angola is located in')."""
_ARMS = ("one run per seed and subsample in each arm, paired with the real run (task.prompts=all, task.subject_repeat=1) "
         "of the same seed and subsample; per seed the arm's value minus the real run's; over seeds the exact interval "
         "of the median, 6 seeds at least")
TYPE_PHASE_HARDER_CUE = ClaimSpec(
    id="type_phase_shrinks_with_harder_cue", statement="a type cue that is harder to fit shrinks the type phase: "
    "trained on CounterFact's paraphrase prompts only (task.prompts=paraphrase: a noise sentence first, the relation "
    "in a wording of each record's own), the transformer's type-correct share at matched fact progress is lower than "
    "with every prompt (the rewrite template shared by a relation's records, and the paraphrases)." + _RULE,
    source=paper("paper1", "the mechanism its reading implies (elementary feature first, specialized feature later); "
                           "not run in the paper"),
    quantity="the paraphrase arm's mean type-correct share at matched fact progress minus the real run's",
    relation="<", threshold=0.0, unit="", over="run",
    control=_ARMS + "; manipulation check beside it: the bow-last baselines' share at matched progress, which a harder "
    "template cue should lower too", aggregation="median", min_seeds=MIN_SEEDS)
TYPE_PHASE_EASIER_FACTS = ClaimSpec(
    id="type_phase_shrinks_with_easier_facts", statement="facts that are easier to fit shrink the type phase: with "
    f"each prompt starting with its subject repeated (task.subject_repeat={SUBJECT_REPEAT}), the transformer's "
    "type-correct share at matched fact progress is lower than without." + _RULE,
    source=paper("paper1", "the mechanism its reading implies (elementary feature first, specialized feature later); "
                           "not run in the paper"),
    quantity=f"the subject-repeat-{SUBJECT_REPEAT} arm's mean type-correct share at matched fact progress minus the "
    "real run's", relation="<", threshold=0.0, unit="", over="run",
    control=_ARMS + "; manipulation check beside it: the facts' half-way epoch, which easier facts should bring "
    "forward", aggregation="median", min_seeds=MIN_SEEDS)
# Declared after the paraphrase arm's runs had started and before any of its own: measured on the 500 records,
# CounterFact's paraphrases still end with the relation phrase, and their endings are *less* varied than the
# rewrite prompts' (0.317 distinct two-word endings per example against 0.42), so the paraphrase arm need not make
# the cue harder (its manipulation check decides). This arm moves the cue out of the last tokens for certain: a
# fixed suffix ends every prompt, so the last tokens are the same for every relation and the relation must be read
# from further back (bow-last, which reads the last 2 tokens in place, then has the relation only in its bag).
PROMPT_SUFFIX = "; answer:"
"""The moved-cue arm's suffix (3 GPT-2 tokens, more than bow-last's 2 slots)."""
TYPE_PHASE_MOVED_CUE = ClaimSpec(
    id="type_phase_shrinks_with_moved_cue", statement="a type cue moved out of the prompt's last tokens shrinks the "
    f"type phase: with every prompt ending in the same suffix (task.prompt_suffix='{PROMPT_SUFFIX}'), the "
    "transformer's type-correct share at matched fact progress is lower than without." + _RULE,
    source=paper("paper1", "the mechanism its reading implies (elementary feature first, specialized feature later); "
                           "not run in the paper"),
    quantity="the moved-cue arm's mean type-correct share at matched fact progress minus the real run's",
    relation="<", threshold=0.0, unit="", over="run",
    control=_ARMS + "; manipulation check beside it: the bow-last baselines' share at matched progress, which loses "
    "the cue's fixed slots", aggregation="median", min_seeds=MIN_SEEDS)
MECHANISM_CLAIMS = (TYPE_PHASE_HARDER_CUE, TYPE_PHASE_EASIER_FACTS, TYPE_PHASE_MOVED_CUE)
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
# the late one", against the random-direction baseline. Measured by :mod:`.rankcurve`, judged by
# :func:`.claims.spectral_claim` (``stagewise lm rank-curve RUN@E RUN@L ... --claim``).
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
    aggregation="median", min_seeds=MIN_SEEDS,  # per seed rho_early - rho_late (paired within the seed); claims.py
)

# Issue 39: a researcher's own order claims on any two probe metrics, declared in the run's config (``order``:
# id, first, then, sustain) before the run; each is a case of this family (``probe_order_{id}``).
PROBE_ORDER = ClaimSpec(
    id="probe_order", statement="probe metric A reaches its threshold before probe metric B reaches its own (the run's "
    "declared order claim: config order[].first, order[].then; a threshold is reached at the first record from which it "
    "holds at order[].sustain records in a row)",
    source=own("issue 39: a researcher's declared order of two probe metrics (the run's config, before the run)"),
    quantity="B's reach step minus A's reach step (B never reached: at least the steps from A's to one past the last "
    "record; A never reached while B is: no value, a failing seed; neither: not testable)",
    relation=">", threshold=0.0, unit="steps", over="run",
    control="a control run the researcher declares (e.g. a training on shuffled words, task.name=none with the same "
    "probes): the same order claim must fail or be not testable there; over seeds the exact interval of the median lead, "
    "6 seeds at least", aggregation="median", min_seeds=MIN_SEEDS)

# ---- issue 44: in what order a small GPT-2 learns grammar and meaning while it is pretrained, declared before its
# runs (judged by acquisition.judge_study; the definitions, with formulas, in acquisition.py's docstring).
FINAL_RECORDS = 2
"""A curve's final value: the mean of its last 2 records (one record alone is one noisy draw)."""
ACQUIRED_GAIN = 0.10
"""A paradigm is acquired in a run when final - chance >= 0.10 (chance: its accuracy at the first record, step 0)."""
HALF = 0.5
"""An acquisition step (an onset) is where the curve first reaches chance + 0.5 x its gain (start + 0.5 x its rise)."""
SUSTAIN = 2
"""... and stays there at 2 records in a row (measure.stages.crossing_step, direction above)."""
HEURISTIC_DROP = 0.10
"""A learned heuristic: final <= chance - 0.10 while the held-out loss fell (last record below the first); reported
per paradigm with its number of seeds, never averaged away."""
MIN_COVERED_PAIRS = 50
"""A paradigm with fewer minimal pairs whose words the corpus covers is not testable for that corpus."""
MIN_RISE = 0.02
"""A word-share curve whose final - start is below 0.02 did not rise: no onset."""
MIN_PARADIGMS = 5
"""Claim 2 needs at least 5 paradigms acquired in every real seed (fewer: not testable, naming how many)."""
PERMUTATIONS = 10_000
"""Draws of claim 2's permutation null (paradigm labels permuted within each seed independently)."""
PERMUTATION_SEED = 44
"""The seed of the numpy Generator that draws claim 2's permutations (fixed: the same p on every rerun)."""
ORDER_ALPHA = 0.05
"""Claim 2 holds when its permutation p <= 0.05."""
PARALLEL_SHARE = 0.2
"""Claim 3 holds when the last-acquired tercile has done >= 0.2 of its learning when the first tercile is acquired."""
MIN_TERCILE_PARADIGMS = 6
"""Claim 3 needs at least 6 acquired paradigms in a seed (two per tercile; fewer: no value for that seed)."""
BEYOND_NGRAM = 0.05
"""Claim 4 holds for a paradigm when the model's final accuracy beats the best n-gram order's by >= 0.05."""
_SHUFFLED = ("the shuffled-word corpus (the same text, words shuffled within each sentence: syntax destroyed, word "
             "statistics kept), trained and probed the same way")
_ACQUISITION = (f"Per paradigm and run: chance = the accuracy at the first record (step 0), final = the mean of the last "
                f"{FINAL_RECORDS} records, acquired when final - chance >= {ACQUIRED_GAIN:g}, its step the first record "
                f"from which the accuracy is >= chance + {HALF:g} (final - chance) at {SUSTAIN} records in a row; "
                f"paradigms with fewer than {MIN_COVERED_PAIRS} covered pairs are not testable for that corpus.")
SYNTAX_BEFORE_SEMANTICS_PRETRAINING = ClaimSpec(
    id="syntax_before_semantics_pretraining", statement="pretrained from scratch on raw text, a small GPT-2 predicts "
    "the right word class at content-word positions before the exact word: the share of content positions whose top-1 "
    "is of the gold word's class (the exact word included) reaches half of its rise at an earlier record than the "
    "exact-word share", source=paper("paper1", "abstract: syntactically wrong -> type-correct -> right, asked of "
                                               "pretraining from scratch (issue 44)"),
    quantity="log2(onset(exact) + 1) - log2(onset(class_correct) + 1), onset(m) = the first record from which m >= "
    f"start + {HALF:g} (final - start) at {SUSTAIN} records in a row (start: the first record; final: the mean of the "
    f"last {FINAL_RECORDS}); exact never rising: log2(last step + 2) in its place (a lower bound); no rise (final - "
    f"start < {MIN_RISE:g}) in either: no value", relation=">", threshold=0.0, unit="log2 steps", over="every",
    control=_SHUFFLED + ", judged by the same rule, must fail (a control that holds makes the claim fail: not "
    "specific); over seeds the exact interval of the median, 6 seeds at least",
    aggregation="median", min_seeds=MIN_SEEDS, missing="not testable")
ACQUISITION_ORDER_AGREES_OVER_SEEDS = ClaimSpec(
    id="acquisition_order_agrees_over_seeds", statement="the order in which grammar paradigms are acquired agrees "
    "over seeds: the mean over seed pairs of Spearman's rho between their acquisition steps, over the paradigms "
    "acquired in every seed, is larger than the same paradigm labels permuted within each seed give. " + _ACQUISITION,
    source=own("issue 44; Choshen et al. ACL 2022 (The Grammar-Learning Trajectories of Neural Language Models): "
               "are paradigms learned in the same order whatever the seed"),
    quantity=f"permutation p = (1 + #null >= observed) / (1 + {PERMUTATIONS}) of the mean pairwise Spearman rho "
    f"(paradigm labels permuted within each seed independently, a numpy Generator seeded {PERMUTATION_SEED}); fewer "
    f"than {MIN_PARADIGMS} paradigms acquired in every seed: not testable", relation="<=", threshold=ORDER_ALPHA,
    over="run", control=_SHUFFLED + ", over the same paradigms (one not acquired there takes the last rank, tied; no "
    "variance at all: p = 1, no order to agree on), must fail; 6 seeds at least (fewer: inconclusive)",
    min_seeds=MIN_SEEDS)
PARALLEL_ACQUISITION = ClaimSpec(
    id="parallel_acquisition", statement="paradigms are learned in parallel, not one after another: by the time the "
    f"first-acquired third of a seed's paradigms are acquired, the last-acquired third have done at least "
    f"{PARALLEL_SHARE:g} of their learning. " + _ACQUISITION,
    source=own("issue 44; Evanson et al. ACL Findings 2023: are grammatical abilities acquired in parallel or in "
               "sequence"),
    quantity="per seed: its acquired paradigms sorted by step, early = the median (on log2(step + 1)) step of the "
    "first-acquired tercile; the median over the last-acquired tercile of (accuracy at the last record at or before "
    f"early - chance) / gain; fewer than {MIN_TERCILE_PARADIGMS} acquired paradigms: no value",
    relation=">=", threshold=PARALLEL_SHARE, over="every",
    control="no trainable control makes learning sequential, so none is run as an arm; the shuffled-word corpus's "
    "value is reported beside it; over seeds the exact interval of the median, 6 seeds at least",
    aggregation="median", min_seeds=MIN_SEEDS, missing="not testable")
BEYOND_NGRAM_CLAIM = ClaimSpec(
    id="beyond_ngram", statement="the model's grammar goes beyond the corpus's n-gram statistics: on paradigm P its "
    "final minimal-pair accuracy exceeds the best n-gram reference's (orders 1-4, trained on the same corpus, scored "
    f"on the same covered pairs) by at least {BEYOND_NGRAM:g}. " + _ACQUISITION,
    source=own("issue 44; Choshen et al. ACL 2022: n-gram models as the reference of what word statistics explain"),
    quantity="final accuracy (the mean of the last records) minus the best n-gram order's accuracy on the same pairs",
    relation=">=", threshold=BEYOND_NGRAM, over="every",
    floor=f"not testable for a paradigm with fewer than {MIN_COVERED_PAIRS} covered pairs (the coverage is shown)",
    control=_SHUFFLED + ", against the shuffled corpus's own n-gram references, must fail; over seeds the exact "
    "interval of the median, 6 seeds at least", aggregation="median", min_seeds=MIN_SEEDS, missing="not testable")
ACQUISITION_CLAIMS = (SYNTAX_BEFORE_SEMANTICS_PRETRAINING, ACQUISITION_ORDER_AGREES_OVER_SEEDS, PARALLEL_ACQUISITION,
                      BEYOND_NGRAM_CLAIM)
"""Issue 44's claims, judged over the seeds of a pretraining study (acquisition.judge_study), not by a run's summary."""

CLAIMS: tuple[ClaimSpec, ...] = (*TYPE_CLAIMS, SYNTAX_BEFORE_SEMANTICS, SPECTRAL_SMALL_DIRECTIONS_EARLY,
                                 *MECHANISM_CLAIMS, PROBE_ORDER, *ACQUISITION_CLAIMS)
"""Every declared claim; the spectral one is made by ``stagewise lm rank-curve ... --claim`` (claims.spectral_claim),
the mechanism claims only over seeds (claims.across_runs: an arm against the real runs), not by a run's summary."""
