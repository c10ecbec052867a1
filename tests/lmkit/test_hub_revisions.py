"""Issue 39 (hub revisions): a checkpoint given as ``REPO@REVISION`` (a branch, tag or commit
hash, e.g. Pythia's ``EleutherAI/pythia-70m@step1000``) is the folder of that revision's
snapshot in the local Hugging Face cache; offline and not cached it is one line saying how to
get it, without a wait on the network; a local folder whose name holds '@' stays a folder;
Pythia's ``stepN`` names give training steps. Fully offline: the cache is built here, in
huggingface_hub's layout (refs/, snapshots/ of symlinks into blobs/)."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from stagewise.errors import NotAvailable, UserError
from stagewise.lmkit import hub
from cli_errors import raised_one_line

transformers = pytest.importorskip("transformers", reason="the lm extra (transformers) builds and loads the model")

REPO = "EleutherAI/pythia-tiny"
STEP_COMMIT = "a" * 40       # refs/step1000
MAIN_COMMIT = "b" * 40       # refs/main
LOOSE_COMMIT = "c" * 40      # a snapshot no ref names: reached by its hash only
PARTIAL_COMMIT = "d" * 40    # refs/step2000: config.json only (a partial download)


def tiny_gpt2_folder(folder: Path, seed: int) -> Path:
    """A random 1-layer GPT-2 (vocabulary 64) saved with save_pretrained: config.json + model.safetensors."""
    import torch

    torch.manual_seed(seed)
    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=8, n_layer=1, n_head=2)
    transformers.GPT2LMHeadModel(config).save_pretrained(folder)
    return folder


def add_snapshot(repo_folder: Path, commit: str, files: dict[str, Path]) -> Path:
    """snapshots/COMMIT/NAME -> ../../blobs/SHA256 for each file, as huggingface_hub writes them."""
    snapshot = repo_folder / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo_folder / "blobs").mkdir(exist_ok=True)
    for name, source in files.items():
        data = source.read_bytes()
        blob = repo_folder / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snapshot / name).symlink_to(os.path.relpath(blob, snapshot))
    return snapshot


@pytest.fixture(scope="module")
def hf_cache(tmp_path_factory) -> Path:
    """A Hugging Face hub cache holding REPO at four commits (module docstring)."""
    made = tmp_path_factory.mktemp("made")
    cache = tmp_path_factory.mktemp("hf-cache")
    repo_folder = cache / ("models--" + REPO.replace("/", "--"))
    for commit, seed in ((STEP_COMMIT, 0), (MAIN_COMMIT, 1), (LOOSE_COMMIT, 2)):
        saved = tiny_gpt2_folder(made / commit, seed)
        add_snapshot(repo_folder, commit, {p.name: p for p in saved.iterdir() if p.is_file()})
    add_snapshot(repo_folder, PARTIAL_COMMIT, {"config.json": made / STEP_COMMIT / "config.json"})
    (repo_folder / "refs").mkdir()
    for ref, commit in (("step1000", STEP_COMMIT), ("main", MAIN_COMMIT), ("step2000", PARTIAL_COMMIT)):
        (repo_folder / "refs" / ref).write_text(commit)
    return cache


@pytest.fixture
def offline_cache(hf_cache, monkeypatch) -> Path:
    """This process reads ``hf_cache`` (the environment and huggingface_hub's constants, read at
    its import) and is offline: HF_HUB_OFFLINE=1, so nothing waits on the network."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_CACHE", str(hf_cache))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hf_cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return hf_cache


def snapshot_of(cache: Path, commit: str) -> Path:
    return cache / ("models--" + REPO.replace("/", "--")) / "snapshots" / commit


# ------------------------------------------------------------------ cached revisions
@pytest.mark.parametrize("revision, commit", [("step1000", STEP_COMMIT), ("main", MAIN_COMMIT), (STEP_COMMIT, STEP_COMMIT),
                                              (LOOSE_COMMIT, LOOSE_COMMIT)])
def test_a_cached_revision_is_its_snapshot_folder(offline_cache, revision, commit):
    folder = hub.hub_revision_folder(f"{REPO}@{revision}", "ckpt")
    assert folder == snapshot_of(offline_cache, commit)


def test_the_snapshot_folder_loads_as_that_revisions_model(offline_cache):
    import torch

    step = transformers.AutoModelForCausalLM.from_pretrained(hub.hub_revision_folder(f"{REPO}@step1000", "ckpt"))
    by_hash = transformers.AutoModelForCausalLM.from_pretrained(hub.hub_revision_folder(f"{REPO}@{STEP_COMMIT}", "ckpt"))
    main = transformers.AutoModelForCausalLM.from_pretrained(hub.hub_revision_folder(f"{REPO}@main", "ckpt"))
    weight = "transformer.wte.weight"
    assert torch.equal(step.state_dict()[weight], by_hash.state_dict()[weight])
    assert not torch.equal(step.state_dict()[weight], main.state_dict()[weight])  # another commit, another seed


# ------------------------------------------------------------------ not cached, offline
@pytest.mark.parametrize("revision", ["step3000", "e" * 40])
def test_an_uncached_revision_offline_is_one_line_at_once(offline_cache, revision):
    start = time.monotonic()
    with pytest.raises(NotAvailable) as err:
        hub.hub_revision_folder(f"{REPO}@{revision}", f"source.checkpoints[1]={REPO}@{revision}")
    assert time.monotonic() - start < 1.0  # no probe, no retries
    line = raised_one_line(err)
    assert line.startswith(f"source.checkpoints[1]={REPO}@{revision}: revision {revision} of {REPO} is not in the local "
                           f"Hugging Face cache ({offline_cache})")
    assert "the hub is unreachable (HF_HUB_OFFLINE is set)" in line
    assert f"hf download {REPO} --revision {revision}" in line


def test_a_partly_cached_revision_offline_says_what_it_lacks(offline_cache):
    with pytest.raises(NotAvailable) as err:
        hub.hub_revision_folder(f"{REPO}@step2000", "ckpt")
    line = raised_one_line(err)
    assert (f"revision step2000 of {REPO} is only partly in the local Hugging Face cache "
            f"({snapshot_of(offline_cache, PARTIAL_COMMIT)}: no safetensors weights (model.safetensors))") in line
    assert "the hub is unreachable (HF_HUB_OFFLINE is set)" in line


@pytest.mark.parametrize("commit, loads", [(STEP_COMMIT, True), (PARTIAL_COMMIT, False)])
def test_a_snapshot_its_tree_listing_calls_incomplete_is_judged_by_what_loading_needs(offline_cache, monkeypatch, commit, loads):
    """huggingface_hub refuses a snapshot missing any file its cached tree listing names (a
    tokenizer file, say): one with config.json and safetensors weights is used all the same."""
    import huggingface_hub
    from huggingface_hub.errors import IncompleteSnapshotError

    def incomplete(*_, **__):
        raise IncompleteSnapshotError("1 file(s) are missing (tokenizer.json)", snapshot_path=str(snapshot_of(offline_cache, commit)))

    monkeypatch.setattr(huggingface_hub, "snapshot_download", incomplete)
    if loads:
        assert hub.hub_revision_folder(f"{REPO}@step1000", "ckpt") == snapshot_of(offline_cache, commit)
    else:
        with pytest.raises(NotAvailable, match="is only partly in the local Hugging Face cache"):
            hub.hub_revision_folder(f"{REPO}@step2000", "ckpt")


# ------------------------------------------------------------------ not cached, hub reachable
def test_an_uncached_revision_is_downloaded_when_the_hub_answers(offline_cache, tmp_path, monkeypatch):
    """The download path, with huggingface_hub's snapshot_download standing in for the hub: it
    is asked for config, safetensors weights and tokenizer files only, into this cache."""
    import huggingface_hub

    monkeypatch.setattr(hub, "hub_unreachable", lambda: None)
    fetched = tiny_gpt2_folder(tmp_path / "fetched", seed=3)
    calls = []

    def fake_snapshot_download(repo_id, *, revision, cache_dir, local_files_only=False, allow_patterns=None, **_):
        calls.append((repo_id, revision, cache_dir, local_files_only, allow_patterns))
        if local_files_only:
            raise huggingface_hub.errors.LocalEntryNotFoundError("not cached")
        return str(fetched)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    assert hub.hub_revision_folder(f"{REPO}@step4000", "ckpt") == fetched
    (_, _, _, cached_only, _), (repo, revision, cache_dir, local_only, patterns) = calls
    assert cached_only and not local_only
    assert (repo, revision, cache_dir) == (REPO, "step4000", str(offline_cache))
    assert {"config.json", "model*.safetensors", "tokenizer.json"} <= set(patterns)
    assert not any(p.endswith((".bin", ".pt", ".pth", ".ckpt")) or p == "*" for p in patterns)


def test_a_downloaded_revision_without_safetensors_is_one_line(offline_cache, tmp_path, monkeypatch):
    import huggingface_hub

    monkeypatch.setattr(hub, "hub_unreachable", lambda: None)
    only_config = tmp_path / "only-config"
    only_config.mkdir()
    (only_config / "config.json").write_text("{}")

    def fake_snapshot_download(repo_id, *, local_files_only=False, **_):
        if local_files_only:
            raise huggingface_hub.errors.LocalEntryNotFoundError("not cached")
        return str(only_config)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    with pytest.raises(UserError) as err:
        hub.hub_revision_folder(f"{REPO}@step5000", "ckpt")
    assert raised_one_line(err).startswith("ckpt: the hub's revision step5000 of EleutherAI/pythia-tiny has no safetensors weights")


def test_a_failed_download_is_one_line(offline_cache, monkeypatch):
    """The probe passed but huggingface_hub is offline by its own constant: one line, no traceback."""
    monkeypatch.setattr(hub, "hub_unreachable", lambda: None)
    with pytest.raises(UserError) as err:
        hub.hub_revision_folder(f"{REPO}@step6000", "ckpt")
    assert raised_one_line(err).startswith("ckpt: downloading from the hub failed (LocalEntryNotFoundError: ")


# ------------------------------------------------------------------ not a hub revision
def test_an_existing_folder_named_with_at_is_not_a_revision(offline_cache, tmp_path, monkeypatch):
    folder = tiny_gpt2_folder(tmp_path / "ckpt@step1000", seed=0)
    monkeypatch.chdir(tmp_path)
    assert hub.hub_revision_folder(str(folder), "ckpt") is None
    assert hub.hub_revision_folder("ckpt@step1000", "ckpt") is None  # relative, one '@', a valid hub id before it
    tiny_gpt2_folder(tmp_path / "org" / "name@main", seed=0)  # written as a hub revision, but a folder here
    assert hub.hub_revision_folder("org/name@main", "ckpt") is None


@pytest.mark.parametrize("name", ["gpt2", "EleutherAI/pythia-70m", "./runs/ckpt@step1", "/no/such/ckpt@step1", "a/b/c@main",
                                  "~/ckpt@1"])
def test_names_without_a_revision_or_written_as_paths_are_not_revisions(offline_cache, name):
    assert hub.hub_revision_folder(name, "ckpt") is None
    assert hub.split_hub_revision(name, "ckpt") is None


def test_split_hub_revision():
    assert hub.split_hub_revision("EleutherAI/pythia-70m@step1000", "ckpt") == ("EleutherAI/pythia-70m", "step1000")
    assert hub.split_hub_revision("gpt2@refs/pr/1", "ckpt") == ("gpt2", "refs/pr/1")
    assert hub.split_hub_revision(f"gpt2@{STEP_COMMIT}", "ckpt") == ("gpt2", STEP_COMMIT)


@pytest.mark.parametrize("name, why", [
    ("@step1000", "the repo before '@' is empty"),
    ("EleutherAI/pythia-70m@", "the revision after '@' is empty"),
    ("Eleuther AI/pythia@step1", "the repo 'Eleuther AI/pythia' is not a hub id"),
    ("org/-bad-@main", "the repo 'org/-bad-' is not a hub id"),
    ("org/name@step 1", "the revision 'step 1' is not a branch, tag or commit hash"),
    ("org/name@../main", "the revision '../main' is not a branch, tag or commit hash"),
    ("org/name@main@2", "the revision 'main@2' is not a branch, tag or commit hash"),
    ("org/name@main/", "the revision 'main/' is not a branch, tag or commit hash"),
])
def test_a_malformed_revision_is_one_line_naming_it(offline_cache, name, why):
    with pytest.raises(UserError) as err:
        hub.hub_revision_folder(name, f"source.checkpoints[0]={name}")
    line = raised_one_line(err)
    assert not isinstance(err.value, NotAvailable)
    assert line.startswith(f"source.checkpoints[0]={name}: not an existing folder, nor a hub revision REPO@REVISION ({why}")


# ------------------------------------------------------------------ training steps
@pytest.mark.parametrize("revision, step", [("step1000", 1000), ("step0", 0), ("step143000", 143000), ("main", None),
                                            ("step", None), ("step-1", None), ("Step10", None), ("step1000a", None),
                                            ("xstep10", None), (STEP_COMMIT, None), ("", None)])
def test_revision_step(revision, step):
    assert hub.revision_step(revision) == step
