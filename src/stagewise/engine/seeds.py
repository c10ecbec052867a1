"""One seed-stream scheme: every random draw of a member comes from a named stream of
that member's seed, ``SeedSequence([seed, key])``, so member i of an ensemble equals a
single run with its seed, and streams never overlap.

A lab declares its streams once (name -> integer key, with a stride for numbered
sub-streams such as one per weight matrix)::

    STREAMS = SeedStreams({"data": 1, "init": (13, 10)})
    STREAMS.numpy(seed, "init", 2)      # key 13 + 2 * 10
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch


def stream_word(seed: int, key: int, bits: int = 64) -> int:
    """The first ``bits``-bit word (32 or 64) of ``SeedSequence([seed, key])``."""
    if bits not in (32, 64):
        raise ValueError(f"bits={bits}: must be 32 or 64")
    dtype = np.uint64 if bits == 64 else np.uint32
    return int(np.random.SeedSequence([int(seed), int(key)]).generate_state(1, dtype=dtype)[0])


class SeedStreams:
    """Named streams of a member's seed. ``keys[name]`` is ``key`` or ``(key, stride)``.

    ``width`` is the bit width of torch generator seeds: 64 (the word) or 63 (the word
    mod 2**63; the disentangled lab's training streams use it, kept so results do not change).
    """

    def __init__(self, keys: Mapping[str, int | tuple[int, int]], width: Mapping[str, int] | None = None):
        self.keys = {name: (k, 1) if isinstance(k, int) else (int(k[0]), int(k[1])) for name, k in keys.items()}
        self.width = dict(width or {})
        used = [self.key(n) for n in self.keys]
        if len(set(used)) != len(used):
            raise ValueError(f"seed streams share keys: {self.keys}")

    def key(self, name: str, sub: int = 0) -> int:
        if name not in self.keys:
            raise KeyError(f"unknown seed stream '{name}'; declared: {', '.join(self.keys)}")
        base, stride = self.keys[name]
        return base + stride * sub

    def sequence(self, seed: int, name: str, sub: int = 0) -> np.random.SeedSequence:
        return np.random.SeedSequence([int(seed), self.key(name, sub)])

    def numpy(self, seed: int, name: str, sub: int = 0) -> np.random.Generator:
        """A numpy Generator on the stream."""
        return np.random.default_rng(self.sequence(seed, name, sub))

    def word(self, seed: int, name: str, sub: int = 0, bits: int = 64) -> int:
        """An integer seed drawn from the stream (for APIs that take an int), 32 or 64 bits."""
        return stream_word(seed, self.key(name, sub), bits)

    def torch(self, seed: int, name: str, sub: int = 0, device: str | torch.device = "cpu") -> torch.Generator:
        """A torch Generator seeded from the stream's first word."""
        word = self.word(seed, name, sub)
        if self.width.get(name, 64) == 63:
            word %= 2**63
        return torch.Generator(device=device).manual_seed(word)
