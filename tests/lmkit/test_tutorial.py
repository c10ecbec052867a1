"""docs/lmkit.md's tutorial, run as written: its Python blocks execute in order, in a folder
holding a tiny random GPT-2 saved with ``save_pretrained`` (``my-gpt2/``) and the BLiMP
fixtures (``blimp/``), and what they made is checked against the model itself. Also: every
public function of ``stagewise.lmkit`` carries an ``Example::`` block that is valid Python,
and the package's names are what its modules define."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
import textwrap
from pathlib import Path

import pytest
import torch
import transformers
from lm_fixtures import BLIMP, write_layout

import stagewise.lmkit as lmkit
from stagewise.lmkit import gpt2_bpe, kept_rank

DOC = Path(__file__).resolve().parents[2] / "docs" / "lmkit.md"
N_LAYER, N_EMBD, N_HEAD, N_POSITIONS = 2, 32, 4, 64
D_HEAD = N_EMBD // N_HEAD
P, REDUCED = 0.25, ("q", "k")  # the tutorial's reduce_rank(model, "blocks.0.attn.{q,k}.head.1", p=0.25)
LAYER, HEAD = 0, 1
RANK_TOL = 1e-5  # singular values below this share of the largest count as zero (the edit is cast to float32)
LOGIT_TOL = 1e-5  # the exported folder, reloaded, against the edited model in memory (float32)


def tutorial_blocks() -> list[str]:
    """The ```python blocks of the "## Tutorial" section, in order."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("\n## Tutorial\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```python\n(.*?)^```$", section, flags=re.S | re.M)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """A tiny random GPT-2 and GPT-2's tokenizer written with save_pretrained, and BLiMP fixtures."""
    root = tmp_path_factory.mktemp("lmkit_tutorial")
    tokenizer = gpt2_bpe()
    config = transformers.GPT2Config(n_layer=N_LAYER, n_embd=N_EMBD, n_head=N_HEAD, n_positions=N_POSITIONS,
                                     vocab_size=len(tokenizer))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = transformers.GPT2LMHeadModel(config)
    model.save_pretrained(root / "my-gpt2")
    tokenizer.save_pretrained(root / "my-gpt2")
    write_layout(root)
    return root


@pytest.fixture(scope="module")
def tutorial(folder) -> dict:
    """The namespace the tutorial's blocks leave behind, run in ``folder``."""
    blocks = tutorial_blocks()
    assert len(blocks) == 4, "the tutorial has four steps"
    namespace: dict = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        for block in blocks:
            exec(compile(block, str(DOC), "exec"), namespace)  # our own docs, as a reader would run them
    return namespace


def original(folder: Path):
    return transformers.GPT2LMHeadModel.from_pretrained(folder / "my-gpt2").eval()


def test_step_1_loads_the_folder(tutorial):
    assert isinstance(tutorial["model"], transformers.GPT2LMHeadModel)
    assert tutorial["loaded"].vocab_ids is None and len(tutorial["tokenizer"]) == tutorial["loaded"].vocab_size


def test_step_2_heads_are_slices_of_the_stored_weights_and_spectra_their_singular_values(tutorial, folder):
    w_q, w_o, spectra = tutorial["w_q"], tutorial["w_o"], tutorial["spectra"]
    assert w_q.shape == (N_HEAD, N_EMBD, D_HEAD) and w_o.shape == (N_HEAD, D_HEAD, N_EMBD)
    stored = original(folder).transformer.h[LAYER].attn
    c_attn, c_proj = stored.c_attn.weight.detach(), stored.c_proj.weight.detach()  # (d, 3d) = [Q | K | V], (d, d)
    for h in range(N_HEAD):
        cols = slice(h * D_HEAD, (h + 1) * D_HEAD)
        torch.testing.assert_close(w_q[h], c_attn[:, cols], rtol=0, atol=0)  # "x @ W": q_h = x @ W_Q[h]
        torch.testing.assert_close(w_o[h], c_proj[cols, :], rtol=0, atol=0)
    assert tutorial["qk"].shape == (N_LAYER, N_HEAD, D_HEAD)
    w_k = c_attn[:, N_EMBD + HEAD * D_HEAD:N_EMBD + (HEAD + 1) * D_HEAD].double()  # (d, d_head)
    direct = torch.linalg.svdvals(c_attn[:, HEAD * D_HEAD:(HEAD + 1) * D_HEAD].double() @ w_k.T)[:D_HEAD]
    # spectra of the loaded model before step 3 edited it: the saved weights
    torch.testing.assert_close(spectra.sv["qk"][LAYER, HEAD], direct, rtol=1e-10, atol=1e-12)
    assert float(tutorial["stable_rank"]) == pytest.approx(float((direct ** 2).sum() / direct[0] ** 2))
    assert set(tutorial["table"].columns) == {"layer", "head", "proj", "index", "value"}


def test_step_3_reduces_exactly_the_chosen_heads(tutorial, folder):
    model, reduction = tutorial["model"], tutorial["reduction"]
    k = kept_rank(P, D_HEAD)
    assert reduction.names == tuple(f"blocks.{LAYER}.attn.{p}.head.{HEAD}" for p in REDUCED)
    assert all(item.rank == D_HEAD and item.kept == k and item.changed for item in reduction.items)
    before, after = original(folder), lmkit.adapter_for(model)
    for proj in ("q", "k", "v", "o"):
        old, new = after.heads(before, LAYER, proj), after.heads(model, LAYER, proj)  # (H, ., .)
        for h in range(N_HEAD):
            if proj in REDUCED and h == HEAD:
                sv = torch.linalg.svdvals(new[h].double())  # (d_head,)
                assert int((sv > RANK_TOL * sv[0]).sum()) == k
            else:
                assert torch.equal(old[h], new[h]), f"{proj} head {h} changed"
    torch.testing.assert_close(after.heads(model, 1, "q"), after.heads(before, 1, "q"), rtol=0, atol=0)


def test_step_3_export_reloads_as_the_edited_model(tutorial, folder):
    out = folder / "my-gpt2-reduced"
    assert tutorial["written"].out == Path("my-gpt2-reduced") and (out / "config.json").is_file()
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    ids = torch.arange(12)[None]  # (1, T)
    with torch.no_grad():
        torch.testing.assert_close(reloaded(input_ids=ids).logits, tutorial["model"](input_ids=ids).logits,
                                   rtol=LOGIT_TOL, atol=LOGIT_TOL)


def test_step_4_scores_every_fixture_pair(tutorial):
    result, scored, logprobs = tutorial["result"], tutorial["scored"], tutorial["logprobs"]
    assert result.n_pairs == sum(len(pairs) for _, pairs in BLIMP.values()) and result.n_paradigms == len(BLIMP)
    assert result.accuracy == pytest.approx(float(scored["correct"].mean()))
    assert logprobs.shape == (2,) and (logprobs < 0).all()
    first = scored.iloc[0]
    again = lmkit.sequence_logprobs(tutorial["model"], tutorial["tokenizer"], [" " + first["sentence_good"]])
    assert again[0] == pytest.approx(first["ll_good"], abs=1e-9)


# ------------------------------------------------------------------ the package's documentation
def public_functions():
    """(qualified name, function) of every public module-level function of stagewise.lmkit."""
    for info in pkgutil.iter_modules(lmkit.__path__):
        module = importlib.import_module(f"stagewise.lmkit.{info.name}")
        for name, value in vars(module).items():
            if inspect.isfunction(value) and value.__module__ == module.__name__ and not name.startswith("_"):
                yield f"{info.name}.{name}", value


def test_every_public_function_has_an_example_that_parses():
    missing, broken = [], []
    for qualname, function in public_functions():
        doc = inspect.getdoc(function) or ""
        if "Example::" not in doc:
            missing.append(qualname)
            continue
        body = doc.split("Example::", 1)[1].split("\n\n", 2)[1]  # the indented block after the blank line
        try:
            ast.parse(textwrap.dedent(body))
        except SyntaxError as err:
            broken.append(f"{qualname}: {err}")
    assert not missing, f"public functions without an Example:: block: {missing}"
    assert not broken, broken


def test_every_module_says_what_it_is_and_the_package_exports_the_real_objects():
    for info in pkgutil.iter_modules(lmkit.__path__):
        assert (importlib.import_module(f"stagewise.lmkit.{info.name}").__doc__ or "").strip(), info.name
    assert set(lmkit.__all__) <= set(dir(lmkit))
    for name in lmkit.__all__:
        value = getattr(lmkit, name)
        home = importlib.import_module(lmkit._EXPORTS[name], "stagewise.lmkit")
        assert getattr(home, name) is value, name
    assert '"x @ W"' in lmkit.__doc__ and '"x @ W"' in importlib.import_module("stagewise.lmkit.adapters").__doc__
