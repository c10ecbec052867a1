"""Up-front size checks of a run (orchestrate.runner.check_size): a run whose estimated peak
memory or disk use cannot fit is refused in one line, exit 2, before any data is built and
with nothing made, unless --allow-large."""

from __future__ import annotations

import json

import pytest
from costbudget import cpu_seconds  # this process and its reaped children: CPU, not moved by load


def one_line(code, stderr, needle):
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and needle in lines[0], (code, lines)


@pytest.mark.parametrize("args,needle", [
    (["run", "ntp", "--set", "data.dim=100000"], "estimated peak memory"),
    (["run", "ntp", "--set", "data.vocab_size=2000", "--seeds", "4096"], "estimated peak memory"),
    (["run", "ntp", "--set", "data.vocab_size=1000000"], "estimated peak memory"),
    (["run", "ntp", "--set", "data.sentences_per_query=10000000"], "estimated peak memory"),
    (["run", "disentangled", "--set", "data.n_test=100000000"], "estimated peak memory"),
    (["run", "disentangled", "--set", "data.d=100000"], "estimated peak memory"),
    (["run", "disentangled", "--set", "data.prompt_len=10000000"], "estimated peak memory"),
    (["run", "ntp", "--set", "train.steps_stage1=900000000", "--set", "train.log_every=1", "--seeds", "4096"],
     "estimated disk use"),
])
def test_sizes_that_cannot_fit_are_refused_up_front(cli, tmp_path, args, needle):
    start = cpu_seconds()
    code, _, err = cli(*args, "--out", str(tmp_path / "r"))
    one_line(code, err, needle)
    assert "--allow-large" in err and cpu_seconds() - start < 10  # refused before any data is built
    assert not (tmp_path / "r").exists()


def test_allow_large_skips_the_refusal():
    from stagewise import RunSpec, spec_config, spec_lab
    from stagewise.errors import UserError
    from stagewise.orchestrate import check_size

    spec = RunSpec(lab="ntp", overrides={"data": {"dim": 100000}}, name="x")
    with pytest.raises(UserError):
        check_size(spec_lab(spec), spec_config(spec), None)
    check_size(spec_lab(spec), spec_config(spec), None, allow_large=True)


def test_a_20k_token_data_file_is_refused(cli, tmp_path):
    tokens = [f"t{i}" for i in range(20000)]
    samples = [{"input": [t], "next": tokens[(i + 1) % len(tokens)]} for i, t in enumerate(tokens)]
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"tokens": tokens, "samples": samples}))
    code, _, err = cli("run", "ntp", "--set", f"data.file={path}", "--out", str(tmp_path / "r"))
    one_line(code, err, "estimated peak memory")


def test_stagewise_figures_0_skips_the_figures_and_nothing_else(cli, tmp_path, monkeypatch):
    """STAGEWISE_FIGURES=0 (what large sweeps of small runs use): the run ends done with its
    metrics, summary and claims, and no figures (the runs that draw them: the figure tests)."""
    monkeypatch.setenv("STAGEWISE_FIGURES", "0")
    out = tmp_path / "run"
    code, _, err = cli("run", "ntp", "--preset", "example1", "--set", "train.steps_stage1=20", "--set",
                       "train.steps_stage2=20", "-q", "--out", str(out))
    assert code == 0, err
    assert json.loads((out / "manifest.json").read_text())["status"] == "done"
    assert json.loads((out / "summary.json").read_text())["claims"] and (out / "metrics.parquet").is_file()
    assert not (out / "figures").exists() or not any((out / "figures").iterdir())
