"""The one verdict engine: every claim of every lab is decided here.

Inputs (declared before any run, :class:`Rule`): the relation and threshold, the attainable
bound where one is declared, the aggregation over seeds and its minimum seed count, a
practical band around the threshold, a numerical tolerance, what a missing value means.
Measured: per-seed values, and per control the same. Output (:class:`Decision`): one of
:data:`WORDS` with its reason in words, the deciding value, the interval and the sign test.

Rules, in the order they are applied:

1. Attainability. A threshold beyond the attainable bound cannot be met by any model of that
   config: ``not testable: the threshold X is below the attainable floor Y`` (a ``<``/``<=``
   claim on a quantity with a floor; ``above the attainable ceiling`` for ``>``/``>=``).
2. Values that cannot carry a verdict: NaN, infinite, or (``tolerance`` > 0) within round-off
   of zero for a fit, a rate or a ratio give ``not testable``, naming the seeds. ``None`` is a
   missing event: a failing seed when ``missing="fails"`` (the event never happened), else
   like NaN.
3. Power. An over-seeds aggregation needs ``min_seeds`` values: fewer give
   ``inconclusive (n of k seeds)``.
4. The decision. ``every``: each seed's value passes (holds) / one fails beyond the band
   (fails) / the failing seeds are all within the band (inconclusive); with several seeds the
   exact sign test is reported beside it (it does not decide). ``median`` and
   ``paired-median``: the distribution-free interval of the median (order statistics,
   :func:`median_interval`; its coverage is exact for any continuous law, not a bootstrap's
   nominal one) on the passing side of the threshold: holds; beyond the band on the failing
   side: fails; straddling: inconclusive, never fails. The exact one-sided sign test is
   reported beside it.
5. Controls. Unpaired: each control is decided by the same rule and must fail; a control that
   holds makes the claim fail (not specific), one that cannot be decided makes it
   inconclusive. ``paired-median``: the interval of the per-seed real - control differences
   decides, judged by the same relation and threshold; each arm's own decision stays beside.

The band (``band`` >= 0) is the distance from the threshold within which a value is too close
to call: a value on the failing side nearer than ``band`` is inconclusive, not a failure.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

ENGINE = "stagewise.verdicts/1"
"""Recorded on every claim the engine decides (``Claim.judged_by``)."""

Word = Literal["holds", "fails", "inconclusive", "not testable", "not applicable"]
WORDS: tuple[str, ...] = ("holds", "fails", "inconclusive", "not testable", "not applicable")
Relation = Literal[">=", ">", "<=", "<"]
Method = Literal["every", "median", "paired-median"]
METHODS: dict[str, str] = {
    "every": "every seed's value passes (no inference over seeds; a single run is one seed)",
    "median": "the exact distribution-free 95% interval of the median of the per-seed values (order statistics) "
              "lies on the passing side of the threshold; the exact one-sided sign test beside it; each control "
              "decided the same way must fail",
    "paired-median": "per seed, the paired difference (the claim's value in the run minus the same value in the "
                     "control run of the same seed); the exact 95% interval of its median decides; each arm's own "
                     "verdict is reported beside it",
}
"""Aggregation over seeds -> what it computes, as claims and reports state it."""

LEVEL = 0.95
"""Coverage an over-seeds interval must have (at least; exact for continuous laws)."""
SIGN_ALPHA = 0.05
"""The sign test's p reported beside the interval; p <= this is 'significant' in the evidence text."""

_PASSES = {">=": np.greater_equal, ">": np.greater, "<=": np.less_equal, "<": np.less}
_UP = {">=": 1.0, ">": 1.0, "<=": -1.0, "<": -1.0}  # +1: larger values pass


@functools.lru_cache(maxsize=4096)
def binomial_tail(n: int, k: int) -> float:
    """P(Binomial(n, 1/2) >= k), exact (cached: a report asks the same few (n, k) many times)."""
    if k <= 0:
        return 1.0
    return sum(math.comb(n, i) for i in range(k, n + 1)) / 2**n


def min_seeds_for(level: float = LEVEL) -> int:
    """The fewest values whose widest median interval [min, max] reaches ``level``: 1 - 2^(1-n) >= level (6 at 0.95)."""
    n = 2
    while 1 - 2.0 ** (1 - n) < level:
        n += 1
    return n


@dataclass(frozen=True)
class MedianInterval:
    """[low, high] = [x_(k), x_(n+1-k)] of n sorted values: covers the median of any continuous
    law with probability ``coverage`` = 1 - 2 P(Bin(n, 1/2) <= k - 1) >= the level asked."""

    n: int
    median: float
    low: float
    high: float
    coverage: float

    def text(self, digits: int = 3) -> str:
        return (f"median {self.median:.{digits}g} [{self.low:.{digits}g}, {self.high:.{digits}g}] "
                f"({self.coverage:.1%} interval, {self.n} seeds)")


def median_interval(values: Any, level: float = LEVEL) -> MedianInterval | None:
    """The narrowest order-statistic interval of the median with coverage >= ``level``, or None
    when n is too small for any (n < :func:`min_seeds_for`). values: (n,), not NaN (an infinite
    value is an event that never happened, on the failing side)."""
    x = np.sort(np.asarray(values, dtype=float).reshape(-1))  # (n,)
    n = int(x.size)
    if n == 0 or np.isnan(x).any():
        raise ValueError(f"median_interval: needs values that are not NaN, got {x.tolist()}")
    order = _median_order(n, level)
    if order is None:
        return None
    k, coverage = order
    return MedianInterval(n, float(np.median(x)), float(x[k - 1]), float(x[n - k]), coverage)


@functools.lru_cache(maxsize=1024)
def _median_order(n: int, level: float) -> tuple[int, float] | None:
    """(k, coverage) of the narrowest [x_(k), x_(n+1-k)] (1-based) covering the median with
    probability >= ``level``; None when even [min, max] does not."""
    best = None
    for k in range(1, n // 2 + 1):
        coverage = 1.0 - 2.0 * (1.0 - binomial_tail(n, k))  # 1 - 2 P(Bin <= k-1)
        if coverage >= level:
            best = (k, coverage)
        else:
            break
    return best


@dataclass(frozen=True)
class SignTest:
    """``passing`` of ``n`` non-tied seeds on the passing side; ``p`` = P(Bin(n, 1/2) >= passing)."""

    passing: int
    n: int
    p: float

    def text(self) -> str:
        return f"{self.passing} of {self.n} seeds pass, sign test p = {self.p:.3g}"


def sign_test(values: Any, relation: Relation, threshold: float) -> SignTest:
    """The exact one-sided sign test of 'value passes the threshold' (ties dropped)."""
    x = _UP[relation] * np.asarray(values, dtype=float).reshape(-1)  # (n,) larger = passing
    t = _UP[relation] * threshold
    above, below = int((x > t).sum()), int((x < t).sum())
    return SignTest(above, above + below, binomial_tail(above + below, above))


@dataclass(frozen=True)
class Rule:
    """How one claim is decided, declared with it.

    ``bound``: the attainable floor (``<``/``<=`` claims) or ceiling (``>``/``>=``), None where
    none is declared; ``bound_name`` says what it is ("floor of the P branch with Q unlearned",
    "empirical floor: the noise-free reference run"). ``min_seeds``: values an over-seeds
    aggregation needs (``every``: 1). ``band`` >= 0: how near the threshold a failing value is
    too close to call. ``tolerance`` >= 0: |value| <= tolerance cannot carry a verdict (a fit,
    rate or ratio at round-off). ``missing``: what a None value is ("fails": the event never
    happened, a failing seed; "not testable": no value)."""

    relation: Relation
    threshold: float
    method: Method = "every"
    min_seeds: int = 1
    band: float = 0.0
    tolerance: float = 0.0
    bound: float | None = None
    bound_name: str = ""
    missing: Literal["fails", "not testable"] = "fails"
    level: float = LEVEL

    def __post_init__(self) -> None:
        if self.relation not in _PASSES:
            raise ValueError(f"relation {self.relation!r}: one of {', '.join(_PASSES)}")
        if self.method not in METHODS:
            raise ValueError(f"aggregation {self.method!r}: one of {', '.join(METHODS)}")
        for name in ("threshold", "band", "tolerance"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name}={getattr(self, name)!r}: a finite number")
        if self.band < 0 or self.tolerance < 0:
            raise ValueError(f"band={self.band}, tolerance={self.tolerance}: both >= 0")
        if self.bound is not None and not math.isfinite(self.bound):
            raise ValueError(f"bound={self.bound!r}: a finite number or None")
        if self.method != "every":
            need = min_seeds_for(self.level)
            if self.min_seeds < max(2, need):
                raise ValueError(f"min_seeds={self.min_seeds}: an over-seeds claim ({self.method}) needs at least "
                                 f"{max(2, need)} seeds, the fewest whose median interval reaches {self.level:.0%}")
        elif self.min_seeds < 1:
            raise ValueError(f"min_seeds={self.min_seeds}: at least 1")

    def passes(self, values: Any) -> np.ndarray:
        """Bool array: which values pass (NaN never does; +-inf, the ends of the scale that
        :func:`decide_arm` lets in, by the relation: the failing end never does)."""
        arr = np.asarray(values, dtype=float).reshape(-1)
        with np.errstate(invalid="ignore"):
            return ~np.isnan(arr) & _PASSES[self.relation](arr, self.threshold)

    def fails_clearly(self, values: Any) -> np.ndarray:
        """Bool array: which values fail by more than the band (a value moved ``band`` toward
        the passing side still does not pass)."""
        arr = np.asarray(values, dtype=float).reshape(-1)
        return ~self.passes(arr + _UP[self.relation] * self.band)

    def unattainable(self) -> str:
        """Why the threshold is beyond the attainable bound ("" when it is not, or none is declared)."""
        if self.bound is None:
            return ""
        name = f" ({self.bound_name})" if self.bound_name else ""
        if _UP[self.relation] < 0 and not self.passes([self.bound])[0]:
            return f"the threshold {self.threshold:.4g} is below the attainable floor {self.bound:.4g}{name}"
        if _UP[self.relation] > 0 and not self.passes([self.bound])[0]:
            return f"the threshold {self.threshold:.4g} is above the attainable ceiling {self.bound:.4g}{name}"
        return ""

    def worst(self, values: Any) -> float:
        """The value nearest failing: the smallest for ``>``/``>=``, the largest for ``<``/``<=``."""
        arr = np.asarray(values, dtype=float).reshape(-1)
        return float(arr.min() if _UP[self.relation] > 0 else arr.max())


@dataclass(frozen=True)
class Decision:
    """The engine's verdict on one claim: ``word`` (:data:`WORDS`), ``reason`` (why it is not
    holds/fails; "" otherwise), ``evidence`` (the numbers in words), ``value`` (the deciding
    value: the worst seed, or the interval's end nearest failing), ``per_seed`` seed -> value,
    ``pass_fraction``, ``interval`` and ``sign`` (over-seeds methods), ``arms`` control name ->
    that control's own decision."""

    word: str
    reason: str = ""
    evidence: str = ""
    value: float | None = None
    per_seed: dict[str, float | None] = field(default_factory=dict)
    pass_fraction: float | None = None
    interval: MedianInterval | None = None
    sign: SignTest | None = None
    arms: dict[str, "Decision"] = field(default_factory=dict)

    @property
    def holds(self) -> bool | None:
        return True if self.word == "holds" else False if self.word == "fails" else None


def _as_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _values(values: Any) -> dict[str, float | None]:
    """seed key (str) -> value (None kept) from a mapping, a sequence or one number."""
    if isinstance(values, Mapping):
        return {str(k): _as_float(v) for k, v in values.items()}
    arr = np.asarray(values, dtype=object).reshape(-1)
    return {str(i): _as_float(v) for i, v in enumerate(arr)}


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def decide_arm(values: Any, rule: Rule, *, ordered_infinities: bool = False) -> Decision:
    """One arm's per-seed values decided by ``rule`` (attainability, values, power, decision).
    ``ordered_infinities``: a +-inf value is a value at that end of the scale, not one that cannot
    carry a verdict (the paired differences where one arm's event never happened,
    :func:`paired_differences`)."""
    per_seed = _values(values)
    shown = {k: _finite(v) for k, v in per_seed.items()}
    if not per_seed:
        if rule.method != "every":
            return Decision("inconclusive", reason=f"inconclusive (0 of {rule.min_seeds} seeds)")
        return Decision("not testable", reason="no measured value")
    unattainable = rule.unattainable()
    if unattainable:
        return Decision("not testable", reason=unattainable, per_seed=shown)
    bad, judged = [], {}
    for key, value in per_seed.items():
        if value is None and rule.missing == "fails":
            judged[key] = -_UP[rule.relation] * math.inf  # the event never happened: a failing value
        elif ordered_infinities and value is not None and math.isinf(value):
            judged[key] = value
        elif value is None or not math.isfinite(value):
            bad.append(f"seed {key}: {'no value' if value is None else value}")
        elif rule.tolerance > 0 and abs(value) <= rule.tolerance:
            bad.append(f"seed {key}: {value:.3g} is within the numerical tolerance {rule.tolerance:g} of zero")
        else:
            judged[key] = value
    if bad:
        return Decision("not testable", reason="values that cannot carry a verdict (" + "; ".join(bad) + ")",
                        per_seed=shown)
    x = np.asarray(list(judged.values()), dtype=float)  # (n,)
    passing = rule.passes(x)
    fraction = float(passing.mean())
    condition = f"{rule.relation} {rule.threshold:g}"
    if rule.method == "every":
        worst = rule.worst(x)
        value = _finite(worst)
        # several seeds: the exact sign test beside the every-seed verdict (it does not decide it)
        every_sign = sign_test(x, rule.relation, rule.threshold) if x.size > 1 else None
        text = (f"{int(passing.sum())} of {x.size} seed(s) {condition}" if x.size > 1 else f"value {worst:.4g} {condition}") \
            + (f" (sign test p = {every_sign.p:.3g})" if every_sign is not None else "")
        if x.size < rule.min_seeds:
            return Decision("inconclusive", reason=f"inconclusive ({x.size} of {rule.min_seeds} seeds)", evidence=text,
                            value=value, per_seed=shown, pass_fraction=fraction, sign=every_sign)
        if passing.all():
            return Decision("holds", evidence=text, value=value, per_seed=shown, pass_fraction=fraction, sign=every_sign)
        if rule.fails_clearly(x[~passing]).any():
            return Decision("fails", evidence=text, value=value, per_seed=shown, pass_fraction=fraction, sign=every_sign)
        return Decision("inconclusive", reason=f"the failing value(s) are within the band {rule.band:g} of the "
                        f"threshold {rule.threshold:g}", evidence=text, value=value, per_seed=shown, pass_fraction=fraction,
                        sign=every_sign)
    sign = sign_test(x, rule.relation, rule.threshold)
    if x.size < rule.min_seeds:
        return Decision("inconclusive", reason=f"inconclusive ({x.size} of {rule.min_seeds} seeds)",
                        evidence=sign.text(), per_seed=shown, pass_fraction=fraction, sign=sign)
    iv = median_interval(x, rule.level)
    assert iv is not None  # min_seeds >= min_seeds_for(level), checked by Rule
    ends = np.array([iv.low, iv.high])
    value = _finite(rule.worst(ends))
    text = f"{iv.text()}; {sign.text()}"
    if rule.passes(ends).all():
        return Decision("holds", evidence=text, value=value, per_seed=shown, pass_fraction=fraction,
                        interval=iv, sign=sign)
    if rule.fails_clearly(ends).all():
        return Decision("fails", evidence=text, value=value, per_seed=shown, pass_fraction=fraction,
                        interval=iv, sign=sign)
    band = f" or its band {rule.band:g}" if rule.band else ""
    return Decision("inconclusive", reason=f"the interval [{iv.low:.4g}, {iv.high:.4g}] straddles the threshold "
                    f"{rule.threshold:g}{band}", evidence=text, value=value, per_seed=shown, pass_fraction=fraction,
                    interval=iv, sign=sign)


def paired_differences(real: Mapping[str, float | None], control: Mapping[str, float | None],
                       rule: Rule | None = None) -> dict[str, float]:
    """{seed: real - control} over the seeds both arms have.

    Finite values differ as numbers. Where ``rule.missing == "fails"`` a None is the event that
    never happened, the failing end of ``rule``'s scale (:func:`decide_arm`): a seed where only
    the real arm never had it differs by that end (-inf for ``>``), only the control by the other
    end, and both by 0 (neither arm has it); the median interval orders these like any value.
    Otherwise (no rule, or a NaN or infinite value) the seed has no difference."""
    fail_end = -_UP[rule.relation] * math.inf if rule is not None and rule.missing == "fails" else None
    out: dict[str, float] = {}
    for seed, value in real.items():
        if seed not in control:
            continue
        other = control[seed]
        if _finite(value) is not None and _finite(other) is not None:
            out[seed] = float(value) - float(other)  # type: ignore[arg-type]  # both finite, checked above
        elif fail_end is not None and (value is None or _finite(value) is not None) and \
                (other is None or _finite(other) is not None):  # at least one never happened, neither NaN nor inf
            out[seed] = 0.0 if value is None and other is None else fail_end if value is None else -fail_end
    return out


def decide(values: Any, rule: Rule, controls: Mapping[str, Any] | None = None) -> Decision:
    """The claim's verdict: the real arm by ``rule`` (:func:`decide_arm`), against its controls
    (name -> per-seed values; none: judged on the real arm alone, and the evidence says so)."""
    real = decide_arm(values, rule)
    controls = dict(controls or {})
    if rule.method == "paired-median":
        return _decide_paired(values, rule, controls, real)
    if not controls or real.word in ("not testable", "not applicable"):
        return real if controls or real.word != "holds" else _with(real, evidence_tail="no control run: judged on the real arm alone")
    arms = {name: decide_arm(v, rule) for name, v in controls.items()}
    tail = "; ".join(f"control {name}: {arm.word}" + (f" ({arm.evidence})" if arm.evidence else "")
                     for name, arm in arms.items())
    if real.word != "holds":
        return _with(real, evidence_tail=tail, arms=arms)
    passing = [name for name, arm in arms.items() if arm.word == "holds"]
    if passing:
        return _with(real, word="fails", reason="", evidence_tail=tail + f"; the control(s) {', '.join(passing)} pass "
                     "too: the claim is not specific", arms=arms)
    open_ = [name for name, arm in arms.items() if arm.word != "fails"]
    if open_:
        return _with(real, word="inconclusive", reason=f"the control(s) {', '.join(open_)} cannot be decided",
                     evidence_tail=tail, arms=arms)
    return _with(real, evidence_tail=tail, arms=arms)


def _decide_paired(values: Any, rule: Rule, controls: Mapping[str, Any], real: Decision) -> Decision:
    """paired-median: the differences real - control (same seed) decide, per control; the claim
    holds when every control's difference holds; the arms' own verdicts are kept beside."""
    if not controls:
        return _with(real, word="not testable" if real.word in ("holds", "fails") else real.word,
                     reason=real.reason or "a paired claim without its control run", evidence_tail="no control run")
    if real.word == "not testable" and real.reason.startswith("the threshold"):
        return real
    mine = _values(values)
    arms = {name: decide_arm(v, rule) for name, v in controls.items()}
    diffs = {name: decide_arm(paired_differences(mine, _values(v), rule), rule, ordered_infinities=True)
             for name, v in controls.items()}
    words = [d.word for d in diffs.values()]
    word = "fails" if "fails" in words else "holds" if all(w == "holds" for w in words) else \
        "inconclusive" if "inconclusive" in words else "not testable"
    parts = [f"real - {name} per seed: {d.word}" + (f" ({d.evidence})" if d.evidence else "")
             + (f" [{d.reason}]" if d.reason else "") for name, d in diffs.items()]
    parts.append(f"real arm alone: {real.word}" + (f" ({real.evidence})" if real.evidence else ""))
    parts += [f"control {name} alone: {arm.word}" for name, arm in arms.items()]
    first = next(iter(diffs.values()))
    deciding = [d for d in diffs.values() if d.word == word] or [first]
    reason = "" if word in ("holds", "fails") else "; ".join(d.reason for d in diffs.values() if d.reason)
    return Decision(word, reason=reason, evidence="; ".join(parts), value=deciding[0].value, per_seed=real.per_seed,
                    pass_fraction=real.pass_fraction, interval=deciding[0].interval, sign=deciding[0].sign,
                    arms={**arms, **{f"real - {name}": d for name, d in diffs.items()}})


def _with(decision: Decision, *, word: str | None = None, reason: str | None = None, evidence_tail: str = "",
          arms: dict[str, Decision] | None = None) -> Decision:
    evidence = "; ".join(t for t in (decision.evidence, evidence_tail) if t)
    return Decision(word or decision.word, decision.reason if reason is None else reason, evidence, decision.value,
                    decision.per_seed, decision.pass_fraction, decision.interval, decision.sign,
                    decision.arms if arms is None else arms)


FRACTION_TOL = 1e-12
"""Seed fractions are k / n: compared with this rounding margin."""


def required_fraction(pass_fraction: float, need: float) -> str:
    """A per-seed claim judged by a configured fraction of passing seeds (a lab's seed fraction
    below 1 relaxes ``every``): holds when ``pass_fraction >= need``, else fails."""
    return "holds" if pass_fraction >= need - FRACTION_TOL else "fails"


def not_applicable(reason: str) -> Decision:
    """The claim does not concern this run (a type claim on a classification task): never judged."""
    return Decision("not applicable", reason=reason)


def not_testable(reason: str, values: Any = None) -> Decision:
    """The claim applies but cannot be decided here for a reason outside the values (the run has
    not settled by its declared criterion, too few epochs): ``reason``; measured values are kept."""
    return Decision("not testable", reason=reason,
                    per_seed={} if values is None else {k: _finite(v) for k, v in _values(values).items()})
