"""The disentangled lab's config (labs/disentangled/config.py): experiment values (truncation
k's, grid step counts, dims, grid keys) are checked up front, one line each and nothing made;
the truncation bound follows data.d."""

from __future__ import annotations

import pytest

from cli_errors import one_error as _one_error
from stagewise.config import resolve
from stagewise.errors import UserError
from stagewise.labs.disentangled.config import Config as DisConfig


@pytest.mark.parametrize("sets,line", [
    (["experiment.truncation_ks=[-5,1000]"], "error: experiment.truncation_ks=[-5, 1000]: each k must be in 0..2d = 0..60 (data.d=30)"),
    (["experiment.grid.t1=[1.5]"], "error: experiment.grid.t1=[1.5]: step counts must be integers (0..1000000000)"),
    (["train.steps=40", "train.t1=10", "experiment.grid.t1=[100000]"], "error: experiment.grid.t1=[100000]: each must be <= train.steps (40)"),
    (["experiment.dims=[]"], "error: experiment.dims=[]: need a non-empty list of d >= 2"),
    (["experiment.grid.noize=[1]"], "error: --set experiment.grid.noize: unknown key 'noize' in experiment.grid (did you mean 'noise'?); allowed: lr_stage1, lr_stage2, t1, noise, l2, zeta, q_centre, p_flip, batch_size"),  # noqa: E501 (the whole line the user sees)
])
def test_disentangled_experiment_values_checked_up_front(cli, tmp_path, sets, line):
    args = [item for s in sets for item in ("--set", s)]
    assert _one_error(cli, "run", "disentangled", *args, "--out", str(tmp_path / "r")) == line
    assert not (tmp_path / "r").exists()


def test_truncation_ks_follow_d():
    assert resolve(DisConfig, sets=["data.d=4", "experiment.truncation_ks=[0, 8]"]).experiment.truncation_ks == [0, 8]
    with pytest.raises(UserError, match=r"0\.\.8 \(data.d=4\)"):
        resolve(DisConfig, sets=["data.d=4", "experiment.truncation_ks=[9]"])
