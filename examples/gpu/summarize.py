"""The take-home results of examples/gpu/authors_regime.sh, small enough to copy off a GPU
machine (OUT/results, at most 16 MiB without the optional snapshots).

    python summarize.py arm RUN DEST RANKCURVES [--snapshots]
    python summarize.py index OUT MACHINE ARM...

``arm`` writes one finished run's results into DEST: summary.json, config.yaml, manifest.json,
metrics.parquet, show.txt (made by the script), the run's figures, categories.csv (the
per-epoch category counts under both type rules with the loss and the median answer rank),
categories_by_example.parquet (category under both rules and answer rank per example and
epoch), rank_curve/ (the rank curves of the kept snapshots, from the per-snapshot folders
under RANKCURVES, in one table and one figure), snapshots/ with --snapshots, and summary.md.

``index`` writes OUT/results/summary.md (the machine, the wall times of OUT/work/calls.tsv,
each arm's summary or how far it got) and checks the size: exit 1 over the limit.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pandas as pd

LIMIT_BYTES = 16 * 2**20
MARKS = {0, 1, 2, 3, 5, 10, 20, 30, 50, 100, 150, 200, 250, 300}
"""Epochs shown in the markdown tables (every epoch is in categories.csv)."""
COPIED = ("summary.json", "config.yaml", "manifest.json", "metrics.parquet")
CATEGORY_COLUMNS = ("semantic-correct", "type-correct", "type-wrong", "excluded")
BATCH_METRICS = {"train.batch_loss", "lr", "epoch"}


def mib(size: float) -> str:
    return f"{size / 2**20:.2f} MiB"


def table_md(frame: pd.DataFrame) -> str:
    """A DataFrame as a markdown table (floats to 4 significant digits, NaN as '-')."""
    def cell(value: Any) -> str:
        if value is None or (isinstance(value, float) and value != value):
            return "-"
        if isinstance(value, float):
            return f"{value:.4g}"
        return str(value).replace("|", "\\|")

    head = "| " + " | ".join(str(c) for c in frame.columns) + " |"
    rule = "|" + "---|" * len(frame.columns)
    rows = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *rows])


# ------------------------------------------------------------------ one arm
def categories_per_epoch(run: Path) -> pd.DataFrame:
    """One row per recorded epoch: the epoch metrics (train.* and, where the run has them,
    eval.*) and, from the predictions, the median answer rank and mean answer log-probability."""
    metrics = pd.read_parquet(run / "metrics.parquet")
    wide = metrics.pivot_table(index="step", columns="metric", values="value", aggfunc="last")
    if "epoch" not in wide.columns:
        return pd.DataFrame()
    wide = wide.dropna(subset=["epoch"])
    keep = [c for c in wide.columns if c.startswith(("train.", "eval.")) and c not in BATCH_METRICS]
    out = wide[["epoch", *sorted(keep)]].drop_duplicates("epoch", keep="last").reset_index()
    predictions = run / "tables" / "predictions.parquet"
    if predictions.is_file():
        p = pd.read_parquet(predictions, columns=["epoch", "answer_rank", "answer_logprob"])
        ranks = p.groupby("epoch").agg(median_answer_rank=("answer_rank", "median"),
                                       mean_answer_logprob=("answer_logprob", "mean")).reset_index()
        out = out.merge(ranks, on="epoch", how="left")
    for name in out.columns:  # counts as integers (pivoting made every column float)
        values = out[name].dropna()
        measured = any(word in name for word in ("loss", "logprob", "accuracy"))
        if not measured and pd.api.types.is_float_dtype(out[name]) and len(values) and (values == values.round()).all():
            out[name] = out[name].astype("Int64")
    return out.rename(columns=lambda c: c.removeprefix("train."))


def by_example(run: Path) -> pd.DataFrame | None:
    predictions = run / "tables" / "predictions.parquet"
    if not predictions.is_file():
        return None
    columns = ["example_id", "epoch", "category", "category_open", "answer_rank"]
    p = pd.read_parquet(predictions)
    p = p[[c for c in columns if c in p.columns]]
    for name in ("example_id", "category", "category_open"):
        if name in p.columns:
            p[name] = p[name].astype("category")
    if "answer_rank" in p.columns:
        p["answer_rank"] = p["answer_rank"].astype("int32")
    return p


def rank_curves(folder: Path, dest: Path) -> pd.DataFrame | None:
    """The per-snapshot rank curves under ``folder`` (epoch_EEEEE/rank_curve.parquet) as one
    table, CSV and figure in ``dest``."""
    parts = [pd.read_parquet(path) for path in sorted(folder.glob("epoch_*/rank_curve.parquet"))] if folder.is_dir() else []
    if not parts:
        return None
    table = pd.concat(parts, ignore_index=True)
    dest.mkdir(parents=True, exist_ok=True)
    table.to_parquet(dest / "rank_curve.parquet", index=False)
    table.to_csv(dest / "rank_curve.csv", index=False)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cats = [c for c in CATEGORY_COLUMNS if c in table.columns]
    fig, axes = plt.subplots(1, len(cats), figsize=(4.2 * len(cats), 3.4), squeeze=False)
    mean = table.groupby(["model", "p"], sort=False)[cats].mean().reset_index()
    for i, (label, rows) in enumerate(mean.groupby("model", sort=False)):
        for ax, cat in zip(axes[0], cats):
            ax.plot(rows["p"], rows[cat], marker="o", ms=3, color=f"C{i}", label=str(label))
    for ax, cat in zip(axes[0], cats):
        ax.set_title(cat)
        ax.set_xlabel("rank preservation p")
        ax.set_ylabel("examples")
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(dest / "rank_curve.png", dpi=120)
    plt.close(fig)
    return table


def claims_md(summary: dict[str, Any]) -> str:
    rows = []
    for claim in summary.get("claims") or []:
        value = claim.get("value")
        note = claim.get("reason") or claim.get("evidence") or ""
        rows.append({"claim": claim.get("id", "?"), "verdict": claim.get("verdict", "?"),
                     "value": "-" if value is None else value, "reason or evidence": str(note)[:300]})
    return table_md(pd.DataFrame(rows)) if rows else "(no claims)"


def epochs_md(categories: pd.DataFrame) -> str:
    if categories.empty:
        return "(no epoch records)"
    last = categories["epoch"].max()
    shown = categories[categories["epoch"].isin(MARKS) | (categories["epoch"] == last)]
    names = ["epoch", "loss", "semantic_correct", "type_correct", "type_wrong", "type_correct_open", "type_wrong_open",
             "excluded_open", "median_answer_rank"]
    return table_md(shown[[c for c in names if c in shown.columns]])


def rank_md(table: pd.DataFrame | None) -> str:
    if table is None:
        return "(no rank curves)"
    cats = [c for c in CATEGORY_COLUMNS if c in table.columns]
    mean = table.groupby(["model", "p"], sort=False)[cats].mean().reset_index()
    mean["counts"] = mean[cats].apply(lambda r: " / ".join(f"{v:g}" for v in r), axis=1)
    wide = mean.pivot(index="p", columns="model", values="counts").reset_index()
    return f"counts {' / '.join(cats)} per kept snapshot (the run's training set)\n\n" + table_md(wide)


def arm(run: Path, dest: Path, curves: Path, snapshots: bool) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        if (run / name).is_file():
            shutil.copy2(run / name, dest / name)
    if (run / "figures").is_dir():
        shutil.copytree(run / "figures", dest / "figures", dirs_exist_ok=True)
    categories = categories_per_epoch(run)
    categories.to_csv(dest / "categories.csv", index=False)
    examples = by_example(run)
    if examples is not None:
        examples.to_parquet(dest / "categories_by_example.parquet", index=False, compression="zstd")
    table = rank_curves(curves, dest / "rank_curve")
    if snapshots and (run / "snapshots").is_dir():
        (dest / "snapshots").mkdir(exist_ok=True)
        for path in sorted((run / "snapshots").glob("*.safetensors")):
            target = dest / "snapshots" / path.name
            target.unlink(missing_ok=True)
            try:
                os.link(path, target)
            except OSError:
                shutil.copy2(path, target)
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
    config = _config(run)
    train = config.get("train", {})
    details = summary.get("details", {})
    examples_n = sum((details.get("examples") or {}).values()) if isinstance(details.get("examples"), dict) else "?"
    dropped = sum((details.get("dropped_multi_token") or {}).values()) if isinstance(details.get("dropped_multi_token"), dict) else "?"
    lines = [
        f"## {run.name}",
        "",
        f"- status {manifest.get('status')}, {train.get('epochs')} epochs, {examples_n} examples "
        f"({dropped} dropped: answer not one token), model {details.get('model', '?')}",
        f"- device {config.get('device')}, dtype {config.get('dtype')}, tf32 {str(train.get('tf32', False)).lower()}, "
        f"record {train.get('record')}, reproduce_original_padding {str(train.get('reproduce_original_padding')).lower()}, "
        f"config hash {manifest.get('config_hash')}, git {str(manifest.get('git_sha'))[:12]}",
        "",
        "### Claims",
        "",
        claims_md(summary),
        "",
        "### Categories per epoch (counts over the training set; closed and open type rules; every epoch in categories.csv)",
        "",
        epochs_md(categories),
        "",
        "### Rank reduction of the kept snapshots (rank_curve/)",
        "",
        rank_md(table),
        "",
    ]
    (dest / "summary.md").write_text("\n".join(lines), encoding="utf-8")


def _config(run: Path) -> dict[str, Any]:
    import yaml

    data = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


# ------------------------------------------------------------------ the index and the size check
def progress(run: Path) -> str:
    """How far an unfinished run got: its status and last recorded epoch."""
    manifest = run / "manifest.json"
    if not manifest.is_file():
        return "not started"
    status = json.loads(manifest.read_text(encoding="utf-8")).get("status")
    epoch = None
    if (run / "metrics.parquet").is_file():
        metrics = pd.read_parquet(run / "metrics.parquet")
        epochs = metrics.loc[metrics["metric"] == "epoch", "value"]
        epoch = None if epochs.empty else epochs.max()
    epochs = _config(run).get("train", {}).get("epochs")
    return f"status {status}" + (f", last recorded epoch {epoch:g} of {epochs}" if epoch is not None else "")


def wall_times(calls: Path) -> str:
    if not calls.is_file():
        return "(none recorded)"
    frame = pd.read_csv(calls, sep="\t", names=["when", "arm", "step", "seconds", "outcome"])
    grouped = frame.groupby(["arm", "step"], sort=False).agg(minutes=("seconds", lambda s: s.sum() / 60),
                                                              calls=("seconds", "size"),
                                                              outcomes=("outcome", lambda s: ", ".join(s)))
    return table_md(grouped.reset_index())


def index(out: Path, machine: str, arms: list[str]) -> int:
    results = out / "results"
    results.mkdir(parents=True, exist_ok=True)
    lines = ["# The authors' CounterFact regime on SmolLM2-135M: both arms of the padding ablation", "",
             f"- machine: {machine}", "", "## Wall time per arm and step (minutes, summed over calls)", "",
             wall_times(out / "work" / "calls.tsv"), ""]
    for name in arms:
        text = results / name / "summary.md"
        if text.is_file():
            lines += [text.read_text(encoding="utf-8"), ""]
        else:
            lines += [f"## {name}", "", f"- not finished: {progress(out / 'work' / name)}", ""]
    (results / "summary.md").write_text("\n".join(lines), encoding="utf-8")
    files = [p for p in results.rglob("*") if p.is_file()]
    snapshots = [p for p in files if "snapshots" in p.relative_to(results).parts]
    counted = [p for p in files if p not in snapshots]
    size = sum(p.stat().st_size for p in counted)
    extra = f"; snapshots not counted: {mib(sum(p.stat().st_size for p in snapshots))}" if snapshots else ""
    print(f"results: {results}: {mib(size)} in {len(counted)} files (limit {mib(LIMIT_BYTES)}{extra})")
    if size > LIMIT_BYTES:
        largest = sorted(counted, key=lambda p: p.stat().st_size, reverse=True)[:5]
        print("authors_regime.sh: the results are over the limit; largest: "
              + ", ".join(f"{p.relative_to(results)} ({mib(p.stat().st_size)})" for p in largest), file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    if len(argv) >= 4 and argv[0] == "arm":
        arm(Path(argv[1]), Path(argv[2]), Path(argv[3]), "--snapshots" in argv[4:])
        return 0
    if len(argv) >= 3 and argv[0] == "index":
        return index(Path(argv[1]), argv[2], argv[3:])
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
