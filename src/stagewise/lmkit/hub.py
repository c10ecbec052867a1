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
"""

from __future__ import annotations

import os
import socket
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

from ..errors import NotAvailable

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
