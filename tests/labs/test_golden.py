"""Golden values of the theory labs' default presets, in two tiers (12 significant digits).

Default tier (seconds): the first steps of each default preset, figures not drawn.
- ntp: the default preset with both stages cut to 100 steps (stage 1 then stage 2), values
  recorded from that run at commit 9a432db;
- disentangled: seeds 0 and 1 of the default preset for 320 steps (the large rate until t1 =
  300, then the annealed one), without the shuffled-label control and the floors (neither
  changes the training members). The values were read from a 400-step run of all 8 seeds
  with the control (commit 9a432db), so the test also checks that the first steps do not
  depend on the run's length or on the ensemble's size.
- lm: the lab's smoke run (a 1-layer GPT-2 from a config, compact vocabulary, the CounterFact
  fixture, AdamW for 3 epochs; the session cache's run), float32, so compared to RTOL_FLOAT32:
  its epoch losses and every batch loss, recorded at commit 9a432db.
Slow tier: the full-length runs (`stagewise run ntp` / `stagewise run disentangled` with no
preset and no overrides), recorded before the lab-contract refactor: the first and last
logged losses and the final weight norms. A change of any digit means a change of results,
not of code layout. Keys are today's metric names (the NTP lab's were renamed into the run
store's grammar, e.g. ``norm_wov`` -> ``W_ov.fro``); the values are those recorded.
"""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from runcache import smoke_spec
from stagewise import RunSpec, execute_spec
from stagewise.labs import get_lab

RTOL = 5e-12  # the recorded values carry 12 significant digits
RTOL_FLOAT32 = 1e-5  # the LM lab trains in float32: another CPU's kernels may change the last bits, not the fifth digit

SHORT_SPECS = {  # lab -> the default tier's run (see the module docstring)
    "ntp": RunSpec(lab="ntp", name="golden-short", overrides={"train": {"steps_stage1": 100, "steps_stage2": 100}}),
    "disentangled": RunSpec(lab="disentangled", name="golden-short", overrides={
        "n_seeds": 2, "train": {"steps": 320}, "experiment": {"floors": False, "control": False}}),
}
SHORT = {
    "ntp": {
        "train.loss@0": [2.99573227355],
        "train.loss@100": [2.58843951477],
        "train.loss@200": [2.54127424542],
        "train.loss.stage1@100": [2.05546469934],
        "train.loss.stage1@200": [2.05546469934],
        "W_ov.fro@100": [4.472135955],
        "W_ov.fro@200": [4.472135955],
        "W_kq.fro@100": [0.0],
        "W_kq.fro@200": [1.1178331753],
        "W_ov.cos_target@100": [1.0],
        "W_kq.cos_target@200": [0.870453232929],
    },
    "disentangled": {
        "train.loss@0": [0.693255979548, 0.69036580072],
        "train.loss@300": [0.236080007868, 0.236044749657],
        "train.loss@320": [0.236097779515, 0.237250512867],
        "test.loss@0": [0.693106815522, 0.690512672407],
        "test.loss@300": [0.250791232095, 0.243338820934],
        "test.loss@320": [0.250704211242, 0.244492738105],
        "W.fro@0": [0.302671603285, 0.299148426809],
        "W.fro@300": [11.5788536381, 11.2499999715],
        "W.fro@320": [11.4307457529, 11.0789917506],
        "V.fro@0": [0.297209947918, 0.301471352559],
        "V.fro@300": [10.484863401, 10.1674876433],
        "V.fro@320": [10.2920711637, 9.98018995902],
        "train.K1@0": [0.693313032387, 0.690547280606],
        "train.K1@300": [0.239186208141, 0.234147098136],
        "train.K1@320": [0.239477027667, 0.235329454839],
        "train.K2@0": [0.693090131949, 0.692965197965],
        "train.K2@300": [0.684835636007, 0.697358032557],
        "train.K2@320": [0.684200641492, 0.697411130605],
    },
}

GOLDEN = {
    "ntp": {
        "train.loss@0": [2.99573227355],
        "train.loss@1800": [0.0160176160087],
        "train.loss.stage1@0": [2.99573227355],
        "train.loss.stage1@1800": [0.00185421576458],
        "W_ov.fro@0": [0.0],
        "W_ov.fro@1800": [40.249223595],
        "W_kq.fro@0": [0.0],
        "W_kq.fro@1800": [9.81204004313],
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


LM_SHORT = {
    "train.loss@0": [3.60999343793], "train.loss@3": [3.35542491078], "train.loss@6": [2.95126940807],
    "train.loss@9": [2.62818717957],
    "train.batch_loss@1": [3.63889217377], "train.batch_loss@2": [3.57028603554], "train.batch_loss@3": [3.57125282288],
    "train.batch_loss@4": [3.39753198624], "train.batch_loss@5": [3.17156600952], "train.batch_loss@6": [3.19192385674],
    "train.batch_loss@7": [2.8362891674], "train.batch_loss@8": [2.91483426094], "train.batch_loss@9": [2.80827569962],
}


def assert_golden(metrics_file, golden: dict[str, list[float]], rtol: float = RTOL) -> None:
    frame = pd.read_parquet(metrics_file)
    frame = frame[frame["variant"] == ""] if "variant" in frame else frame
    for key, expected in golden.items():
        metric, step = key.rsplit("@", 1)
        got = frame[(frame["metric"] == metric) & (frame["step"] == int(step))].sort_values("seed")["value"].tolist()
        assert got == pytest.approx(expected, rel=rtol, abs=1e-300), key


@pytest.mark.parametrize("lab", sorted(SHORT))
def test_first_steps_of_the_default_preset_golden_values(tmp_path, lab):
    no_figures = dataclasses.replace(get_lab(lab), make_figures=lambda *args: [])  # numbers only
    manifest = execute_spec(SHORT_SPECS[lab], tmp_path / lab, raise_on_failure=True, lab=no_figures)
    assert manifest["status"] == "done"
    assert_golden(tmp_path / lab / "metrics.parquet", SHORT[lab])


def test_lm_smoke_run_golden_values(run_cache):
    assert_golden(run_cache.path(smoke_spec("lm")) / "metrics.parquet", LM_SHORT, rtol=RTOL_FLOAT32)


@pytest.mark.slow  # the full default presets: 1800 NTP steps, 16 x 6000 disentangled steps with floors (minutes)
@pytest.mark.parametrize("lab", sorted(GOLDEN))
def test_default_preset_golden_values(tmp_path, lab):
    manifest = execute_spec(RunSpec(lab=lab, name="golden"), tmp_path / lab, raise_on_failure=True)
    assert manifest["status"] == "done"
    assert_golden(tmp_path / lab / "metrics.parquet", GOLDEN[lab])
