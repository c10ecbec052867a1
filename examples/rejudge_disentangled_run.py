"""Re-judge a finished disentangled run's claims with the current code, from what it logged.

The run's metrics and tables are read back, the lab's summarize is called again (the engine and
the claims as they are now; the run's ``extras`` are its summary's ``details.groups`` and seeds,
all the disentangled summary reads from them) and the new claims are written as a claims file
(the run folder is not touched). Use it when the claims change after a long run (issue 38: the
gate-noise claims were added while the decisive run trained; its conjunction claim was re-judged
against the floors afterwards).

    python examples/rejudge_disentangled_run.py runs/gate-noise-s2000 --save results/disentangled \\
        --command "stagewise run disentangled --preset gate-noise --set seed=2000 --seeds 8"
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stagewise.labs import get_lab
from stagewise.labs.contract import RunResult
from stagewise.orchestrate.findings import ClaimsFile, save
from stagewise.report.runview import read_run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--save", type=Path, required=True, help="folder of the claims file")
    parser.add_argument("--command", required=True, help="the command that reproduces the run")
    args = parser.parse_args()
    lab = get_lab("disentangled")
    run = read_run(args.run)
    if run.manifest.get("lab") != "disentangled" or run.summary is None:
        raise SystemExit(f"{args.run}: not a finished disentangled run")
    config = lab.Config.model_validate(run.config)
    extras = {"groups": run.summary.details["groups"], "seeds": list(run.summary.seeds)}
    summary = lab.summary(config, run.metrics, run.tables, RunResult(extras))
    record = ClaimsFile(args.run.name, "disentangled", args.command, [int(s) for s in summary.seeds], dict(summary.sources),
                        list(summary.claims), str(args.run), {"rejudged": "claims recomputed from the logged metrics"})
    for path in save([record], args.save):
        print(f"claims file: {path}")
    before = {c.id: c.verdict for c in run.summary.claims}
    for claim in summary.claims:
        if before.get(claim.id) != claim.verdict:
            print(f"changed: {claim.id}: {before.get(claim.id)} -> {claim.verdict} ({claim.reason})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
