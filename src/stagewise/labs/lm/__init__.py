"""The language-model lab: real Hugging Face causal LMs fine-tuned on single-token answer
tasks (CounterFact, HotpotQA, BLiMP, SICK), per-example prediction categories per epoch,
BLiMP minimal-pair evaluation, attention surgery (rank reduction) and spectra.

The lab's contract value is :data:`.lab.LAB`; the pieces are importable on their own and
load on first use (PEP 562), so importing the lab's contract needs no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...lazy import lazy_exports

if TYPE_CHECKING:
    from .adapters import AttentionAdapter, adapter_for
    from .categories import CATEGORIES, AnswerSpace, answer_space, categorize
    from .config import Config
    from .models import LoadedModel, build, gpt2_bpe
    from .tasks import Example, Sentence, load_examples, load_sentences

_EXPORTS: dict[str, str] = {
    **dict.fromkeys(("AttentionAdapter", "adapter_for"), ".adapters"),
    **dict.fromkeys(("CATEGORIES", "AnswerSpace", "answer_space", "categorize"), ".categories"),
    "Config": ".config",
    **dict.fromkeys(("LoadedModel", "build", "gpt2_bpe"), ".models"),
    **dict.fromkeys(("Example", "Sentence", "load_examples", "load_sentences"), ".tasks"),
}

__all__ = [
    "CATEGORIES", "AnswerSpace", "AttentionAdapter", "Config", "Example", "LoadedModel", "Sentence", "adapter_for",
    "answer_space", "build", "categorize", "gpt2_bpe", "load_examples", "load_sentences",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
