"""The toy's stages against what it can attain (issue 38; the README's figure): a finished
gate-noise run with its no-anneal twin, shuffled control and noise-free reference.

K1 (P-bearing test queries) and K2 (Q-bearing) of the annealed run over training steps (mean over
the seeds, min-max band), against K1's floor with Q unlearned (theory.p_floor_t1, dashed), the
noise-free reference's K2 (the empirical floor), the no-anneal twin's and the control's K2, log 2
and t1.

    stagewise run disentangled --preset gate-noise --set seed=2000 --seeds 8 --out runs/gate-noise-s2000
    python examples/gate_noise_story_figure.py runs/gate-noise-s2000 --out docs/figures/gate_noise_story.png
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

import stagewise
from stagewise.labs.disentangled.config import Config
from stagewise.labs.disentangled.ensemble import members_from_config
from stagewise.labs.disentangled.theory import p_floor_t1

SERIES = (("baseline", "test.K1.p_queries", "K1 (P), annealed", "tab:blue", "-"),
          ("baseline", "test.K2.q_queries", "K2 (Q), annealed", "tab:red", "-"),
          ("no-anneal", "test.K2.q_queries", "K2, no-anneal twin", "tab:orange", "--"),
          ("baseline|control", "test.K2.q_queries", "K2, shuffled control", "tab:gray", ":"),
          ("no-noise", "test.K2.q_queries", "K2, noise-free reference (floor)", "tab:green", "-."))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--out", type=Path, default=Path("gate_noise_story.png"))
    args = parser.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run = stagewise.load_run(args.run)
    config = Config.model_validate(run.config)
    floor, _ = p_floor_t1(config, members_from_config(config)[0])
    metrics = run.metrics
    fig, ax = plt.subplots(figsize=(8.4, 4.2))
    for variant, name, label, colour, style in SERIES:
        rows = metrics[metrics["metric"] == f"{variant}/{name}"]
        if not len(rows):
            continue
        table = rows.pivot_table(index="step", columns="seed", values="value")  # (steps, seeds)
        steps = table.index.to_numpy()
        ax.plot(steps, table.mean(axis=1), color=colour, linestyle=style, label=label)
        ax.fill_between(steps, table.min(axis=1), table.max(axis=1), color=colour, alpha=0.15, linewidth=0)
    ax.axhline(math.log(2), color="black", linewidth=0.8)
    ax.text(0.99, math.log(2), "log 2", va="bottom", ha="right", fontsize=8, transform=ax.get_yaxis_transform())
    if math.isfinite(floor):
        ax.axhline(floor, color="tab:blue", linewidth=0.8, linestyle="--")
        ax.text(0.99, floor, "K1 floor with Q unlearned (theory)", va="bottom", ha="right", fontsize=8, color="tab:blue",
                transform=ax.get_yaxis_transform())
    ax.axvline(config.train.t1, color="black", linewidth=0.6, linestyle=":")
    ax.text(config.train.t1, ax.get_ylim()[1], " t1 (anneal)", va="top", fontsize=8)
    ax.set_xscale("symlog", linthresh=max(1, config.train.t1))
    ax.set_xlim(left=0, right=config.train.steps)
    ax.set_xlabel("step")
    ax.set_ylabel("test loss (nats)")
    seeds = sorted(int(s) for s in np.unique(metrics["seed"]))
    ax.set_title(f"gate-noise toy, seeds {seeds[0]}-{seeds[-1]}: P first, then Q after annealing, against the floors",
                 fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=120)
    plt.close(fig)
    print(f"figure: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
