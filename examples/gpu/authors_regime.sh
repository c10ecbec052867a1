#!/usr/bin/env bash
# The authors' CounterFact regime on SmolLM2-135M, both arms of the padding ablation, on a GPU machine that has its
# own CUDA build of torch and may have no package registry (docs/lm.md, "The authors' regime on a GPU machine"):
#
#   counterfact-smollm2-authors         their padding (right, EOS, no mask) and their recording
#   counterfact-smollm2-authors-masked  attention masks, each prompt's true last token
#
# Usage: examples/gpu/authors_regime.sh DATA_DIR OUT_DIR [ARM...]
#
#   DATA_DIR  the shared-data layout: DATA_DIR/counterfact/counterfact_500.json
#   OUT_DIR   OUT_DIR/work: the run folders (checkpoints, snapshots), the rank curves, calls.tsv (wall times);
#             OUT_DIR/results: what to take home (< 16 MiB, checked): summary.md, and per arm summary.json,
#             show.txt, metrics, categories.csv, categories_by_example.parquet, rank_curve/, figures/
#   ARM       authors | masked (or the preset names); default both, one after the other; reduced | reduced-masked:
#             the reduced regime (counterfact-smollm2-authors-reduced[-masked]: 14 records, 30 examples, 300 epochs)
#
# Exit status: 0 every arm done and summarised; 75 not finished (TIME_LIMIT reached, or the script was stopped by
# SIGINT/SIGTERM): call again with the same arguments to resume; 2 a bad argument or something missing (one line
# says what); 1 a run failed or the results are over 16 MiB (the lines above say which).
#
# Environment (the overrides apply to new runs only: a run folder that exists resumes with its own config):
#   TIME_LIMIT      seconds from the start of this call after which the training is stopped cleanly (SIGTERM: the run
#                   checkpoints at its next step) and the call exits 75; leave a minute or two under a hard limit
#   WHEELDIR        wheels made by examples/gpu/fetch_wheels.sh: what this Python lacks is installed from there
#   PYTHON          the interpreter that has this machine's torch (default python3); torch is never installed
#   TF32=1          allow TF32 matmuls (train.tf32=true; ~1e-3 relative error); default: full float32
#   DTYPE           float32 (default) | bfloat16 | auto (bfloat16 where the GPU supports it); bfloat16 is opt-in
#   DEVICE          cuda | cpu (default: cuda when torch sees a GPU)
#   EPOCHS          train.epochs (default: the presets' 300; snapshot epochs beyond it are dropped)
#   LIMIT           task.limit: the first N CounterFact records (3 examples each; default: all 500)
#   RANK_P          the rank-curve grid (default 0.1:1.0:0.1, the paper's)
#   KEEP_SNAPSHOTS=1  also put the kept snapshots (0.5 GB each, not counted in the 16 MiB) under results
#
# CPU smoke test (16 min on 2 busy cores, measured): EPOCHS=2 LIMIT=5 RANK_P=0.5,1.0 examples/gpu/authors_regime.sh DATA /tmp/smoke
set -euo pipefail
{  # the whole script is read before it runs: an edit of this file during a call (a git pull) cannot change that call

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
PRESETS=(counterfact-smollm2-authors counterfact-smollm2-authors-masked)
NOT_FINISHED=75

die() {  # one line, exit 2
    echo "authors_regime.sh: $*" >&2
    exit 2
}

# ---------------------------------------------------------------- arguments, before anything is made
if [ $# -lt 2 ]; then
    echo "usage: examples/gpu/authors_regime.sh DATA_DIR OUT_DIR [ARM...]   (ARM: authors, masked; default both)" >&2
    exit 2
fi
DATA=$1
OUT=$2
shift 2
[ -d "$DATA" ] || die "DATA_DIR $DATA: no such folder (the shared-data layout: DATA_DIR/counterfact/counterfact_500.json)"
[ -d "$DATA/counterfact" ] || die "DATA_DIR $DATA has no counterfact/ folder (the shared-data layout: DATA_DIR/counterfact/counterfact_500.json)"
DATA=$(cd "$DATA" && pwd)
# OUT_DIR: a folder (or one to make) where OUT/work and OUT/results can be folders, checked before anything runs
[ ! -e "$OUT" ] || [ -d "$OUT" ] || die "OUT_DIR $OUT: is a file, not a folder; give a folder (made when missing)"
for path in "$OUT/work" "$OUT/results"; do
    [ ! -e "$path" ] || [ -d "$path" ] || die "OUT_DIR $OUT: $path is a file, where the script keeps a folder; move it away"
done
parent=$OUT
while [ ! -e "$parent" ]; do parent=$(dirname "$parent"); done
[ -d "$parent" ] || die "OUT_DIR $OUT: cannot be made, $parent is a file; give a folder (made when missing)"
[ -w "$parent" ] && [ -x "$parent" ] || die "OUT_DIR $OUT: $parent is not writable; give a folder you can write in"
ARMS=()
for arm in "$@"; do
    case $arm in
        authors | counterfact-smollm2-authors) ARMS+=(counterfact-smollm2-authors) ;;
        masked | counterfact-smollm2-authors-masked) ARMS+=(counterfact-smollm2-authors-masked) ;;
        reduced | counterfact-smollm2-authors-reduced) ARMS+=(counterfact-smollm2-authors-reduced) ;;
        reduced-masked | counterfact-smollm2-authors-reduced-masked) ARMS+=(counterfact-smollm2-authors-reduced-masked) ;;
        *) die "ARM $arm: not an arm; use authors, masked, reduced, reduced-masked (or their preset names)" ;;
    esac
done
[ ${#ARMS[@]} -gt 0 ] || ARMS=("${PRESETS[@]}")

whole() {  # whole NAME VALUE: VALUE is a positive integer, else one line
    [[ $2 =~ ^[1-9][0-9]*$ ]] || die "$1=$2: must be a positive whole number"
}
[ -z "${TIME_LIMIT:-}" ] || whole TIME_LIMIT "$TIME_LIMIT"
[ -z "${EPOCHS:-}" ] || whole EPOCHS "$EPOCHS"
[ -z "${LIMIT:-}" ] || whole LIMIT "$LIMIT"
case ${TF32:-0} in 0 | 1) ;; *) die "TF32=${TF32}: use 1 (allow TF32 matmuls) or 0" ;; esac
case ${KEEP_SNAPSHOTS:-0} in 0 | 1) ;; *) die "KEEP_SNAPSHOTS=${KEEP_SNAPSHOTS}: use 1 or 0" ;; esac
case ${DTYPE:=float32} in float32 | bfloat16 | auto) ;; *) die "DTYPE=$DTYPE: use float32, bfloat16 or auto" ;; esac
case ${DEVICE:-} in '' | cuda | cpu) ;; *) die "DEVICE=$DEVICE: use cuda or cpu" ;; esac
RANK_P=${RANK_P:-0.1:1.0:0.1}
[[ $RANK_P =~ ^[0-9.:,]+$ ]] || die "RANK_P=$RANK_P: use START:STOP:STEP or a comma list, e.g. 0.1:1.0:0.1"
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || die "PYTHON=$PY: not found; point PYTHON at the interpreter that has this machine's torch"
if [ -n "${WHEELDIR:-}" ]; then
    [ -d "$WHEELDIR" ] || die "WHEELDIR $WHEELDIR: no such folder (make it with examples/gpu/fetch_wheels.sh)"
    WHEELDIR=$(cd "$WHEELDIR" && pwd)
fi

# ---------------------------------------------------------------- what is missing (never torch)
plan=$("$PY" "$HERE/deps.py" "$REPO" "$HERE/requirements.txt" "${WHEELDIR:-}") || exit 2
if [ -n "$plan" ]; then
    mapfile -t wheels <<<"$plan"
    echo "installing from $WHEELDIR (--no-deps): $(for w in "${wheels[@]}"; do basename "$w"; done | tr '\n' ' ')"
    "$PY" -m pip install -q --no-index --no-deps "${wheels[@]}" || die "pip could not install the wheels above from $WHEELDIR"
fi
stagewise_here() {  # the stagewise this interpreter imports is this checkout's
    "$PY" - "$REPO/src" <<'EOF'
import importlib.util, os, sys
spec = importlib.util.find_spec("stagewise")
sys.exit(spec is None or spec.origin is None or os.path.realpath(os.path.dirname(os.path.dirname(spec.origin))) != os.path.realpath(sys.argv[1]))
EOF
}
if ! stagewise_here; then
    echo "installing $REPO (pip install --no-deps -e)"
    if "$PY" -c 'import setuptools, sys; sys.exit(int(setuptools.__version__.split(".")[0]) < 68)' 2>/dev/null; then
        build=(--no-build-isolation)
    elif [ -n "${WHEELDIR:-}" ]; then
        build=(--find-links "$WHEELDIR")  # setuptools and wheel for the isolated build, from fetch_wheels.sh's folder
    else
        die "installing $REPO needs setuptools>=68 for $PY, or WHEELDIR with the setuptools and wheel wheels (examples/gpu/fetch_wheels.sh)"
    fi
    "$PY" -m pip install -q --no-index --no-deps "${build[@]}" -e "$REPO" || die "pip could not install $REPO (above)"
    stagewise_here || die "$PY still does not import stagewise from $REPO/src after installing it"
fi
left=$("$PY" "$HERE/deps.py" "$REPO" "$HERE/requirements.txt" "${WHEELDIR:-}") || exit 2
[ -z "$left" ] || die "still to install after installing: $left"
SW=("$PY" -c 'import sys; from stagewise.cli import main; sys.argv[0] = "stagewise"; main()')

# ---------------------------------------------------------------- device and dtype
read -r CUDA BF16 GPU TORCH PYV < <("$PY" -c '
import platform, torch
cuda = torch.cuda.is_available()
print(int(cuda), int(cuda and torch.cuda.is_bf16_supported()), torch.cuda.get_device_name(0).replace(" ", "_") if cuda else "-",
      torch.__version__, platform.python_version())')
[ -n "${TORCH:-}" ] || die "$PY could not import torch (above)"
DEVICE=${DEVICE:-$([ "$CUDA" = 1 ] && echo cuda || echo cpu)}
if [ "$DEVICE" = cuda ] && [ "$CUDA" != 1 ]; then
    die "DEVICE=cuda: torch $TORCH of $PY sees no GPU"
fi
if [ "$DTYPE" = auto ]; then
    DTYPE=$([ "$DEVICE" = cuda ] && [ "$BF16" = 1 ] && echo bfloat16 || echo float32)
fi
if [ "$DTYPE" = bfloat16 ] && { [ "$DEVICE" != cuda ] || [ "$BF16" != 1 ]; }; then
    die "DTYPE=bfloat16: needs a CUDA device with bfloat16 support (here: device $DEVICE, bf16 $BF16)"
fi
MACHINE="$([ "$GPU" = - ] && echo "no GPU" || echo "GPU ${GPU//_/ }"), torch $TORCH, Python $PYV, $(nproc 2>/dev/null || echo '?') CPU cores"
echo "device $DEVICE ($MACHINE), dtype $DTYPE, tf32 $([ "${TF32:-0}" = 1 ] && echo on || echo off)"

# ---------------------------------------------------------------- the time limit and stops
CHILD=
STOPPED=0
past_deadline() {
    [ -n "${TIME_LIMIT:-}" ] && [ "$SECONDS" -ge "$TIME_LIMIT" ]
}
index() {  # OUT/results/summary.md and the size check (its status: 1 when over the limit)
    "$PY" "$HERE/summarize.py" index "$OUT" "$MACHINE" "${ARMS[@]}"
}
not_finished() {
    index || true
    echo "not finished: call again to resume (the same arguments; exit $NOT_FINISHED)"
    exit "$NOT_FINISHED"
}
# shellcheck disable=SC2317  # invoked by the trap below
on_signal() {  # SIGINT/SIGTERM to this script: stop the command that runs the same way, then say so
    trap '' INT TERM
    if [ -n "$CHILD" ]; then
        kill -TERM "$CHILD" 2>/dev/null || true
        wait "$CHILD" 2>/dev/null || true
    fi
    not_finished
}
trap on_signal INT TERM
timed() {  # timed CMD...: CMD in the background, SIGTERM at the deadline; sets RC and STOPPED
    STOPPED=0
    "$@" &
    CHILD=$!
    while kill -0 "$CHILD" 2>/dev/null; do
        if [ "$STOPPED" = 0 ] && past_deadline; then
            echo "== TIME_LIMIT=${TIME_LIMIT}s reached: stopping (SIGTERM; a run checkpoints at its next step)"
            kill -TERM "$CHILD" 2>/dev/null || true
            STOPPED=1
        fi
        sleep 1
    done
    RC=0
    wait "$CHILD" || RC=$?
    CHILD=
}
record() {  # record ARM STEP SECONDS OUTCOME: one line of OUT/work/calls.tsv
    printf '%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$1" "$2" "$3" "$4" >>"$OUT/work/calls.tsv"
}

# --set overrides of a fresh run of preset $1 (snapshot epochs beyond EPOCHS are dropped)
overrides() {
    local sets=(--set "device=$DEVICE" --set "dtype=$DTYPE" --set "data.root=$DATA")
    if [ "${TF32:-0}" = 1 ]; then sets+=(--set "train.tf32=true"); fi
    if [ -n "${EPOCHS:-}" ]; then
        local kept evals
        read -r kept evals < <("$PY" -c '
import sys
from stagewise.labs import get_lab
train = get_lab("lm").preset_overrides(sys.argv[1])["train"]
within = lambda key: "[" + ",".join(str(e) for e in train.get(key, []) if e <= int(sys.argv[2])) + "]"  # noqa: E731
print(within("snapshot_epochs"), within("eval_epochs"))' "$1" "$EPOCHS")
        sets+=(--set "train.epochs=$EPOCHS" --set "train.snapshot_epochs=$kept" --set "train.eval_epochs=$evals")
    fi
    if [ -n "${LIMIT:-}" ]; then sets+=(--set "task.limit=$LIMIT"); fi
    printf '%s\n' "${sets[@]}"
}
status_of() {  # the run folder's status: none when it holds no run
    [ -f "$1/manifest.json" ] || { echo none; return; }
    "$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["status"])' "$1/manifest.json"
}

# ---------------------------------------------------------------- each arm: train, then summarise
mkdir -p "$OUT/work" "$OUT/results"
OUT=$(cd "$OUT" && pwd)
failed=0
for preset in "${ARMS[@]}"; do
    run="$OUT/work/$preset"
    status=$(status_of "$run")
    if [ "$status" != "done" ]; then
        past_deadline && not_finished
        if [ "$status" = none ]; then
            listed=$(overrides "$preset")
            mapfile -t sets <<<"$listed"
            echo "== $preset -> $run: ${sets[*]}"
            cmd=("${SW[@]}" run lm --preset "$preset" "${sets[@]}" --out "$run")
        else
            echo "== $preset: resuming $run (status $status; its own config: EPOCHS, LIMIT, TF32, DTYPE, DEVICE not applied)"
            cmd=("${SW[@]}" run --resume "$run")
        fi
        start=$SECONDS
        timed "${cmd[@]}"
        status=$(status_of "$run")
        record "$preset" train $((SECONDS - start)) "$status"
        printf '== %s: %s after %d min %02d s\n' "$preset" "$status" $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60))
        if [ "$status" != "done" ]; then
            if [ "$STOPPED" = 1 ] || [ "$status" = interrupted ]; then not_finished; fi
            echo "== $preset: the run ended with status $status (exit $RC): see $run/manifest.json; the next call resumes it" >&2
            failed=1
            continue
        fi
    fi
    dest="$OUT/results/$preset"
    [ -f "$dest/summary.md" ] && continue
    # the rank curves of the kept snapshots, one folder per snapshot (a stopped one is made again)
    grid=${RANK_P//[:,]/_}
    curves="$OUT/work/rank-curve/p_$grid/$preset"
    for snapshot in "$run"/snapshots/epoch_*.safetensors; do
        [ -f "$snapshot" ] || continue
        name=$(basename "$snapshot" .safetensors)
        [ -f "$curves/$name/rank_curve.parquet" ] && continue
        past_deadline && not_finished
        epoch=$((10#${name#epoch_}))
        echo "== $preset: rank curve of epoch $epoch (p = $RANK_P)"
        mkdir -p "$curves"
        start=$SECONDS
        timed "${SW[@]}" lm rank-curve "$run@$epoch" --p "$RANK_P" --out "$curves/$name"
        record "$preset" "rank-curve@$epoch" $((SECONDS - start)) "$([ "$RC" = 0 ] && echo "done" || echo "exit $RC")"
        [ "$STOPPED" = 1 ] && not_finished
        if [ "$RC" != 0 ]; then
            echo "== $preset: the rank curve of epoch $epoch failed (exit $RC; above)" >&2
            failed=1
        fi
    done
    past_deadline && not_finished
    staging="$OUT/results/.$preset.partial"
    rm -rf "$staging"
    mkdir -p "$staging"
    COLUMNS=160 "${SW[@]}" show "$run" --long >"$staging/show.txt"
    snapshots=()
    if [ "${KEEP_SNAPSHOTS:-0}" = 1 ]; then snapshots=(--snapshots); fi
    timed "$PY" "$HERE/summarize.py" arm "$run" "$staging" "$curves" ${snapshots[@]+"${snapshots[@]}"}
    [ "$STOPPED" = 1 ] && not_finished
    if [ "$RC" != 0 ]; then
        echo "== $preset: summarising failed (exit $RC; above)" >&2
        failed=1
        continue
    fi
    rm -rf "$dest"
    mv "$staging" "$dest"
    echo "== $preset: results in $dest"
    sed -n '/^### Claims/,/^### Categories/p' "$dest/summary.md" | sed '$d'
done
index || failed=1
echo "wall time of this call: $((SECONDS / 60)) min $((SECONDS % 60)) s"
exit "$failed"
}
