"""Up-front size estimate of an NTP run (memory and metric disk), from the config alone:
no dataset is generated, so absurd sizes are refused in milliseconds.

Sizes: S members, V vocabulary, d dimension, N samples per member (upper bound), L the
longest sentence, G generalization cases. The batched step keeps about ``WORKING_COPIES``
float tensors of each of (S, N, V), (S, V, V), (S, V, d), (S, d, d) alive, plus index
tensors (S, N, L) and the generalization suite (S, G, L); the max-margin QPs of one member
hold O(V^2 + N V) nonzeros.
"""

from __future__ import annotations

import json

from ..contract import Resources
from .config import Config

WORKING_COPIES = 12  # live float tensors per shape in a step with metrics (measured peak / size, rounded up)
BYTES_PER_METRIC_VALUE = 11  # base64 float64 in the JSONL stream (8 bytes * 4/3) plus framing
METRICS_PER_STEP = 24
PROCESS_BASE = 400 << 20  # torch + numpy + scipy + clarabel after import


def _file_sizes(path) -> tuple[int, int, int]:
    """(V, N, L) of a JSON dataset file (cheap header read; the file is read once here)."""
    try:
        obj = json.loads(path.read_text())
        tokens, samples = obj.get("tokens", []), obj.get("samples", [])
        longest = max((len(s.get("input", [])) for s in samples if isinstance(s, dict)), default=1)
        return len(tokens), len(samples) + len(tokens), longest
    except Exception:  # the data check reports a bad file with its own message
        return 1, 1, 1


def estimate(config: Config) -> Resources:
    """Peak memory and metric disk of ``config``'s run (upper estimates)."""
    dc, S = config.data, config.n_seeds
    if dc.source == "example1":
        V, N, L = 4, 12, 4
    elif dc.source == "file":
        V, N, L = _file_sizes(dc.file)
    else:
        V, L = dc.vocab_size, dc.max_len
        pairs = dc.optimal_per_query[1] * dc.non_optimal_per_query[1] if dc.complete else 0
        per_query = dc.sentences_per_query * (L if dc.prefix_closed else 1) + 2 * pairs
        N = V + V * per_query
    d = dc.dim or V
    G = 3 * config.generalize.max_cases
    width = 8 if config.model.dtype == "float64" else 4
    floats = S * (N * V + V * V + V * d + d * d) * WORKING_COPIES
    ints = S * (N * L + G * L) * 8 * 2
    qp = (V * V + N * V) * 8 * 16
    memory = PROCESS_BASE + floats * width + ints + qp
    steps = config.train.steps_stage1 + config.train.steps_stage2
    logged = steps // config.log_interval() + 25
    disk = logged * S * METRICS_PER_STEP * BYTES_PER_METRIC_VALUE
    return Resources(int(memory), int(disk), f"S={S} members, |V|={V}, d={d}, N<={N} samples, L={L}, {logged} logged steps")
