"""Can a Hugging Face hub model or dataset be had, decided before anything is made on disk?

A hub id (``org/name``) can be had when its files are in the local Hugging Face cache, or
else when the hub answers. "Offline" is decided at once, without the libraries' retries:

* ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) is set in the environment, or
* ONE TCP connection to the hub endpoint (``HF_ENDPOINT``, default huggingface.co:443; the
  proxy of ``https_proxy`` / ``all_proxy`` when one applies) does not open within
  :data:`HUB_PROBE_TIMEOUT_S` seconds, name resolution included.

The probe's answer is remembered for :data:`HUB_PROBE_MEMORY_S` seconds per endpoint, so a
check and the load that follows cost one probe. A model found in the cache while the hub is
unreachable is then loaded with ``local_files_only=True`` (:func:`local_files_only`), never
through the hub's retry loop.

A revision of a hub model, ``REPO@REVISION`` (a branch, tag or commit hash, e.g. Pythia's
``EleutherAI/pythia-70m@step1000``), is a folder too (:func:`hub_revision_folder`): its
snapshot in the cache, else downloaded when the hub answers, else one line saying how to get it.
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

from ..errors import NotAvailable, UserError

HUB_PROBE_TIMEOUT_S = 2.0
"""Seconds one connection attempt to the hub endpoint may take (DNS included); no retries."""

HUB_PROBE_MEMORY_S = 60.0
"""Seconds a probe's answer is reused for the same endpoint."""

DEFAULT_ENDPOINT = "https://huggingface.co"
OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
_TRUE = {"1", "ON", "YES", "TRUE"}

CONFIG_FILE = "config.json"
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")
"""A cached hub model needs config.json and one of these (a GGUF repo: its .gguf file)."""

PICKLE_WEIGHT_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json")
"""Weights in pickle format, never read (:mod:`.weightfiles`): a cache holding only these is said so."""

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json")
"""A cached hub tokenizer needs one of these."""

REVISION_SEPARATOR = "@"
REVISION_FILES = ("config.json", "generation_config.json", "model*.safetensors", "model.safetensors.index.json",
                  *TOKENIZER_FILES, "special_tokens_map.json", "added_tokens.json", "merges.txt", "tokenizer.model")
"""What is downloaded of a hub revision: config, safetensors weights (never pickles) and tokenizer."""

_REVISION_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*(/[A-Za-z0-9_][A-Za-z0-9_.\-]*)*")
_REVISION_MAX = 255
_PYTHIA_STEP = re.compile(r"step([0-9]+)")

_probes: dict[tuple[str, int], tuple[float, str | None]] = {}  # (host, port) -> (when, why unreachable | None)


def offline_by_environment() -> str | None:
    """The offline variable set to true in the environment (read now, not at import), or None.

    Example::

        os.environ["HF_HUB_OFFLINE"] = "1"
        offline_by_environment()                    # "HF_HUB_OFFLINE"
    """
    for name in OFFLINE_VARIABLES:
        if os.environ.get(name, "").strip().upper() in _TRUE:
            return name
    return None


def hub_endpoint() -> str:
    """``$HF_ENDPOINT`` (read now) or huggingface.co.

    Example::

        hub_endpoint()                              # "https://huggingface.co" unless HF_ENDPOINT is set
    """
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def _probe_address(endpoint: str) -> tuple[str, int]:
    """(host, port) the first connection to ``endpoint`` goes to: its proxy when one applies."""
    parts = urllib.parse.urlsplit(endpoint)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if proxy and host and not urllib.request.proxy_bypass(host):
        p = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        return p.hostname or "", p.port or (443 if p.scheme == "https" else 80)
    return host, port


def _connect_once(host: str, port: int, timeout: float) -> str | None:
    """None when one TCP connection to (host, port) opens within ``timeout`` s (name
    resolution included: the attempt runs in a daemon thread), else why not."""
    outcome: list[str | None] = []

    def attempt() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            outcome.append(None)
        except OSError as err:
            outcome.append(err.strerror or str(err) or type(err).__name__)

    worker = threading.Thread(target=attempt, name="stagewise-hub-probe", daemon=True)
    worker.start()
    worker.join(timeout)
    return outcome[0] if outcome else f"no answer within {timeout:g} s"


def hub_unreachable() -> str | None:
    """Why the hub cannot be used now (an offline variable, or the probe's failure), or None.

    Example::

        hub_unreachable()                           # None online; else why, e.g. "HF_HUB_OFFLINE is set"
    """
    variable = offline_by_environment()
    if variable:
        return f"{variable} is set"
    endpoint = hub_endpoint()
    host, port = _probe_address(endpoint)
    if not host:
        return f"HF_ENDPOINT={endpoint} names no host"
    now = time.monotonic()
    seen = _probes.get((host, port))
    if seen is not None and now - seen[0] < HUB_PROBE_MEMORY_S:
        why = seen[1]
    else:
        why = _connect_once(host, port, HUB_PROBE_TIMEOUT_S)
        _probes[(host, port)] = (now, why)
    return None if why is None else f"no connection to {host}:{port}: {why}"


def is_hub_id(name: str) -> bool:
    """Whether ``name`` is written as a hub repository id (``name`` or ``org/name``).

    Example::

        is_hub_id("HuggingFaceTB/SmolLM2-135M"), is_hub_id("./a/b/c")   # (True, False)
    """
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def cache_folder() -> str:
    """The hub cache the loaders of this process use.

    Example::

        cache_folder()                              # e.g. "/home/me/.cache/huggingface/hub"
    """
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


def is_cached(repo: str, filename: str) -> bool:
    """Whether ``filename`` of hub repo ``repo`` is in the local cache (a file system lookup).

    Example::

        is_cached("gpt2", "config.json")            # True once gpt2 was downloaded here
    """
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(repo, filename), str)
    except Exception:  # noqa: BLE001 (a malformed cache is "not cached")
        return False


def model_files_cached(repo: str, gguf_file: str | None = None) -> bool:
    """A GGUF repo: its file; else config.json and one weight file (:data:`WEIGHT_FILES`).

    Example::

        model_files_cached("gpt2")                  # config.json and a weight file in the cache
    """
    if gguf_file is not None:
        return is_cached(repo, gguf_file)
    return is_cached(repo, CONFIG_FILE) and any(is_cached(repo, f) for f in WEIGHT_FILES)


def cached_pickle_weights(repo: str) -> list[str]:
    """The :data:`PICKLE_WEIGHT_FILES` of hub repo ``repo`` in the local cache (beside its config.json).

    Example::

        cached_pickle_weights("old-org/old-model")  # ["pytorch_model.bin"] for a repo cached before safetensors
    """
    if not is_cached(repo, CONFIG_FILE):
        return []
    return [f for f in PICKLE_WEIGHT_FILES if is_cached(repo, f)]


def tokenizer_files_cached(repo: str) -> bool:
    """Whether one of :data:`TOKENIZER_FILES` of hub repo ``repo`` is in the local cache.

    Example::

        tokenizer_files_cached("gpt2")              # tokenizer.json, tokenizer_config.json or vocab.json cached
    """
    return any(is_cached(repo, f) for f in TOKENIZER_FILES)


def require_hub_repo(subject: str, repo: str, cached: bool) -> None:
    """One-line :class:`~stagewise.errors.NotAvailable` (a UserError) when ``repo`` is neither
    cached nor downloadable now.

    ``subject`` starts the message (``model.name=org/x``); ``cached`` says whether what is
    needed is in the local cache.

    Example::

        require_hub_repo("model.name=gpt2", "gpt2", model_files_cached("gpt2"))   # NotAvailable when it cannot be had
    """
    if cached:
        return
    why = hub_unreachable()
    if why is None:
        return
    raise NotAvailable(repo, f"{subject}: not in the local Hugging Face cache ({cache_folder()}) and the hub is "
                       f"unreachable ({why}); "
                       f"download it where there is network (hf download {repo}) and copy the cache here, "
                       f"point HF_HOME at a cache that has it, or give a local model folder")


def local_files_only(name: str) -> bool:
    """Load ``name`` from the cache only: it is a hub id (no local folder of that name) and
    the hub is unreachable, so a cached model loads at once and a missing one fails at once.

    Example::

        AutoModelForCausalLM.from_pretrained("gpt2", local_files_only=local_files_only("gpt2"))
    """
    return not Path(name).expanduser().exists() and is_hub_id(name) and hub_unreachable() is not None


def datasets_offline() -> bool:
    """Whether the ``datasets`` library itself is in offline mode (it then reads its cache only).

    Example::

        datasets_offline()                          # True when datasets reads its cache only
    """
    import datasets

    return bool(getattr(datasets.config, "HF_HUB_OFFLINE", False))


# ---------------------------------------------------------------------------- hub revisions
def revision_step(revision: str) -> int | None:
    """The training step a Pythia-style revision name gives (``stepN``), else None.

    Example::

        revision_step("step1000"), revision_step("step0"), revision_step("main")   # (1000, 0, None)
    """
    match = _PYTHIA_STEP.fullmatch(revision)
    return int(match.group(1)) if match else None


def _written_as_path(name: str) -> bool:
    """``./x``, ``../x``, ``/x``, ``~/x``, ``a/b/c``, ``a\\b``: a folder, never a hub id."""
    return name.startswith((".", "/", "~")) or "\\" in name or name.count("/") > 1


def split_hub_revision(name: str, subject: str) -> tuple[str, str] | None:
    """(repo, revision) of ``name`` written as ``REPO@REVISION``; None when it is an existing
    local path, has no ``@``, or is written as a path (``./x@y``, ``a/b/c@y``: a folder). A
    malformed revision (an empty part, a repo that is not a hub id, a revision with other
    characters than a branch, tag or commit hash has) is one UserError line; ``subject``
    starts it (e.g. ``source.checkpoints[0]=NAME``).

    Example::

        split_hub_revision("EleutherAI/pythia-70m@step1000", "ckpt")   # ("EleutherAI/pythia-70m", "step1000")
        split_hub_revision("gpt2", "ckpt")                             # None: no revision
    """
    if REVISION_SEPARATOR not in name or Path(name).expanduser().exists():
        return None
    repo, _, revision = name.partition(REVISION_SEPARATOR)
    if _written_as_path(repo):
        return None
    start = f"{subject}: not an existing folder, nor a hub revision REPO@REVISION"
    if not repo:
        raise UserError(f"{start} (the repo before '@' is empty; e.g. EleutherAI/pythia-70m@step1000)")
    if not is_hub_id(repo):
        raise UserError(f"{start} (the repo {repo!r} is not a hub id: [org/]name of letters, digits, '-', '_' and '.', "
                        "not starting or ending with '-' or '.', at most 96 characters each)")
    if not revision:
        raise UserError(f"{start} (the revision after '@' is empty; give a branch, tag or commit hash, e.g. step1000)")
    if len(revision) > _REVISION_MAX or ".." in revision or not _REVISION_NAME.fullmatch(revision):
        raise UserError(f"{start} (the revision {revision!r} is not a branch, tag or commit hash: letters, digits, '-', '_', "
                        f"'.' and '/' between parts, no '..', at most {_REVISION_MAX} characters)")
    return repo, revision


def _missing_model_files(folder: Path) -> str | None:
    """What a revision's folder lacks to be loaded (config.json, safetensors weights, a shard
    its index names), or None when it has everything."""
    if not (folder / CONFIG_FILE).is_file():
        return f"no {CONFIG_FILE}"
    index = folder / WEIGHT_FILES[1]
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return f"an unreadable {index.name}"
        absent = [s for s in shards if not (folder / s).is_file()]
        return f"no weight shard{'s' if len(absent) > 1 else ''} {', '.join(absent[:3])}" if absent else None
    if any(p.is_file() for p in folder.glob("model*.safetensors")):
        return None
    pickles = [f for f in PICKLE_WEIGHT_FILES if (folder / f).is_file()]
    return f"only pickle weights ({', '.join(pickles)})" if pickles else "no safetensors weights (model.safetensors)"


def _cached_snapshot(repo: str, revision: str) -> Path | None:
    """The cached snapshot folder of ``revision`` of ``repo`` (a ref's commit, or the commit
    hash itself), looked up on disk only (``local_files_only``), or None. A snapshot the
    cache's tree listing calls incomplete is returned too: :func:`_missing_model_files` judges."""
    from huggingface_hub import snapshot_download

    try:
        folder = snapshot_download(repo, revision=revision, cache_dir=cache_folder(), local_files_only=True,
                                   allow_patterns=list(REVISION_FILES))
    except (OSError, ValueError) as err:  # not cached (incomplete: IncompleteSnapshotError names it), a malformed cache
        partial = getattr(err, "snapshot_path", None)
        return Path(partial) if isinstance(partial, str) and Path(partial).is_dir() else None
    return Path(folder)


def _download_revision(repo: str, revision: str, subject: str) -> Path:
    """Download the :data:`REVISION_FILES` of ``revision`` of ``repo`` into the cache; one
    UserError line when the hub refuses (no such repo or revision, gated) or the download fails."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

    try:
        folder = snapshot_download(repo, revision=revision, cache_dir=cache_folder(), allow_patterns=list(REVISION_FILES))
    except RevisionNotFoundError:
        raise UserError(f"{subject}: the hub has no revision {revision!r} of {repo} (give a branch, tag or commit hash it "
                        f"has: hf download {repo} --revision REV)") from None
    except RepositoryNotFoundError as err:  # gated included
        raise UserError(f"{subject}: the hub has no repo {repo} this login may read ({_first_line(err)})") from None
    except Exception as err:  # noqa: BLE001 (a network, disk or hub failure is one line too)
        raise UserError(f"{subject}: downloading from the hub failed ({type(err).__name__}: {_first_line(err)}); "
                        f"try again, or download it where there is network (hf download {repo} --revision {revision})") from None
    return Path(folder)


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return lines[0][:200] if lines else type(err).__name__


def hub_revision_folder(name: str, subject: str) -> Path | None:
    """The local folder of hub revision ``name`` (``REPO@REVISION``: a branch, tag or commit
    hash), or None when ``name`` is no hub revision (:func:`split_hub_revision`).

    The folder is the revision's snapshot in the local Hugging Face cache (:func:`cache_folder`)
    when it holds config.json and safetensors weights there; else, when the hub answers
    (:func:`hub_unreachable`), the snapshot after downloading :data:`REVISION_FILES`; else one
    :class:`~stagewise.errors.NotAvailable` line (a UserError) saying how to get it. ``subject``
    starts the messages (e.g. ``source.checkpoints[0]=NAME``).

    Example::

        hub_revision_folder("EleutherAI/pythia-70m@step1000", "ckpt")  # .../models--EleutherAI--pythia-70m/snapshots/<commit>
        hub_revision_folder("runs/ckpt-1000", "ckpt")                   # None: a local folder
    """
    parsed = split_hub_revision(name, subject)
    if parsed is None:
        return None
    repo, revision = parsed
    cached = _cached_snapshot(repo, revision)
    missing = None if cached is None else _missing_model_files(cached)
    if cached is not None and missing is None:
        return cached
    why = hub_unreachable()
    if why is None:
        folder = _download_revision(repo, revision, subject)
        missing = _missing_model_files(folder)
        if missing is not None:
            hint = "; only safetensors weights are read, since loading a pickle can run code" if "weights" in missing else ""
            raise UserError(f"{subject}: the hub's revision {revision} of {repo} has {missing}{hint}")
        return folder
    where = (f"is not in the local Hugging Face cache ({cache_folder()})" if cached is None else
             f"is only partly in the local Hugging Face cache ({cached}: {missing})")
    raise NotAvailable(f"{repo}{REVISION_SEPARATOR}{revision}",
                       f"{subject}: revision {revision} of {repo} {where} and "
                       f"the hub is unreachable ({why}); download it where there is network (hf download {repo} "
                       f"--revision {revision}) and copy the cache here, point HF_HOME at a cache that has it, or give a "
                       "local model folder")
