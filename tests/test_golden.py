"""Golden values of both labs' default presets, recorded before the lab-contract refactor
(12 significant digits): the first and last logged losses and the final weight norms of
`stagewise run ntp` and `stagewise run disentangled` with no preset and no overrides.
A change of any digit means a change of results, not of code layout."""

from __future__ import annotations

import pandas as pd
import pytest

from stagewise import RunSpec, execute_spec

RTOL = 5e-12  # the recorded values carry 12 significant digits

GOLDEN = {
    "ntp": {
        "loss@0": [2.99573227355],
        "loss@1800": [0.0160176160087],
        "loss_stage1@0": [2.99573227355],
        "loss_stage1@1800": [0.00185421576458],
        "norm_wov@0": [0.0],
        "norm_wov@1800": [40.249223595],
        "norm_wkq@0": [0.0],
        "norm_wkq@1800": [9.81204004313],
    },
    "disentangled": {
        "train.loss@0": [0.693255979548, 0.69036580072, 0.693550946497, 0.693690255264, 0.692855175005, 0.695685434601, 0.694929773952, 0.695879897265],
        "train.loss@6000": [0.232438378556, 0.24569764872, 0.240990878146, 0.220816929993, 0.222252380664, 0.213228196183, 0.26191682036, 0.23922172848],
        "test.loss@0": [0.693106815522, 0.690512672407, 0.693413534335, 0.693472904511, 0.692990105809, 0.695384485654, 0.695201431177, 0.695718723223],
        "test.loss@6000": [0.247495864372, 0.253753477069, 0.238929085019, 0.238279877742, 0.237606286, 0.242284524321, 0.243039097218, 0.250589086552],
        "W.fro@0": [0.302671603285, 0.299148426809, 0.300736032083, 0.286475551779, 0.31275485562, 0.300208390732, 0.305080313106, 0.296298456931],
        "W.fro@6000": [5.43092197681, 5.23960455971, 5.33601075917, 5.48839498649, 5.54533664726, 5.46632218788, 5.3791219787, 5.37623226332],
        "V.fro@0": [0.297209947918, 0.301471352559, 0.305942687979, 0.297274007943, 0.305741782807, 0.312170024682, 0.3074384592, 0.29069725068],
        "V.fro@6000": [3.48734607189, 3.36611799202, 3.43800593559, 3.37091223461, 3.5286338953, 3.41322647578, 3.37873171548, 3.49580956995],
        "train.K1@0": [0.693313032387, 0.690547280606, 0.693530151225, 0.693830496852, 0.692908165628, 0.695654642535, 0.694926075354, 0.695938158932],
        "train.K1@6000": [0.234933198645, 0.248316665473, 0.243427022949, 0.222841017997, 0.225181222315, 0.215038104932, 0.263962585484, 0.241206109354],
        "train.K2@0": [0.693090131949, 0.692965197965, 0.693167933952, 0.693006969967, 0.693094144877, 0.693177830355, 0.693150849903, 0.6930890004],
        "train.K2@6000": [0.686716181725, 0.687023018642, 0.687002901591, 0.687708629268, 0.685647089299, 0.688079701294, 0.68839841101, 0.688365850357],
    },
}


@pytest.mark.parametrize("lab", sorted(GOLDEN))
def test_default_preset_golden_values(tmp_path, lab):
    manifest = execute_spec(RunSpec(lab=lab, name="golden"), tmp_path / lab, raise_on_failure=True)
    assert manifest["status"] == "done"
    frame = pd.read_parquet(tmp_path / lab / "metrics.parquet")
    for key, expected in GOLDEN[lab].items():
        metric, step = key.rsplit("@", 1)
        got = frame[(frame["metric"] == metric) & (frame["step"] == int(step))].sort_values("seed")["value"].tolist()
        assert got == pytest.approx(expected, rel=RTOL, abs=1e-300), key
