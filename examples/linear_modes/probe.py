"""The lab's measurements of a two-layer linear network trained elsewhere (issue 39): the
probe a :class:`stagewise.Tracker` calls on a researcher's own training.

The researcher's model is any ``torch.nn.Module`` whose ``nn.Linear`` layers are exactly two,
without bias: the first maps d_in -> h (its weight is W1, (h, d_in)), the second h -> d_out
(W2, (d_out, h)), e.g. ``nn.Sequential(nn.Linear(d_in, h, bias=False), nn.Linear(h, d_out,
bias=False))``. The target map is the config's (``data``: the singular values, the seed's
singular vectors, :func:`.data.build_target`), so the records are exactly the lab's own:

    a_i = u_i^T W2 W1 v_i   (``W2W1.mode_strength.{i}``),   1/2 ||M - W2 W1||_F^2   (``train.loss``)

each (1,) per record (one seed: the config's ``seed``). The summary and the claims then read a
tracked run as they read a run of the lab.
"""

from __future__ import annotations

from typing import Any

import torch

from stagewise.errors import UserError
from stagewise.labs.contract import RunContext

from .config import Config
from .data import build_target
from .model import loss, mode_strengths, residual


class Probe:
    """The mode strengths and the loss of ``first`` (W1) and ``second`` (W2) at any step."""

    def __init__(self, config: Config, first: torch.nn.Linear, second: torch.nn.Linear):
        self.config, self.first, self.second = config, first, second
        self.target = build_target(config, [config.seed])

    def note(self, ctx: RunContext) -> None:
        """The probed shapes into the manifest's notes."""
        ctx.note("probed", {"W1": list(self.first.weight.shape), "W2": list(self.second.weight.shape)})

    def record(self, ctx: RunContext, step: int, epoch: float) -> None:
        """The lab's metrics of the current weights at ``step`` (``epoch`` unused: the lab's records are per step)."""
        W1 = self.first.weight.detach().to("cpu", torch.float64)[None]  # (h, d_in) -> (1, h, d_in)
        W2 = self.second.weight.detach().to("cpu", torch.float64)[None]  # (d_out, h) -> (1, d_out, h)
        strengths = mode_strengths(W1, W2, self.target)  # (1, r)
        values = {"train.loss": loss(residual(W1, W2, self.target))}
        values.update({f"W2W1.mode_strength.{i}": strengths[:, i] for i in range(strengths.shape[1])})
        ctx.log(step, values)

    def extras(self, steps: int | None = None) -> dict[str, Any]:
        """What the summary reads of a run: its seeds and groups (one seed, no controls)."""
        return {"seeds": [self.config.seed], "groups": [""], "steps": steps}


def probe(config: Config, model: Any, tokenizer: Any = None) -> Probe:
    """The lab's probe of ``model`` (module docstring): one line when it is not a two-layer
    linear network of the config's shapes (``tokenizer`` is not used)."""
    layers = [m for m in model.modules() if isinstance(m, torch.nn.Linear)] if isinstance(model, torch.nn.Module) else []
    d_in, d_out, h = config.data.d_in, config.data.d_out, config.model.hidden
    if len(layers) != 2 or any(layer.bias is not None for layer in layers):
        raise UserError(f"model: {type(model).__name__} is not a two-layer linear network (the lab probes exactly two "
                        "nn.Linear layers without bias, d_in -> hidden -> d_out)")
    shapes = [tuple(layer.weight.shape) for layer in layers]
    if shapes != [(h, d_in), (d_out, h)]:
        raise UserError(f"model: layers of shapes {shapes}; the config's are [({h}, {d_in}), ({d_out}, {h})] (model.hidden, "
                        "data.d_in, data.d_out: set them to the network's)")
    return Probe(config, layers[0], layers[1])
