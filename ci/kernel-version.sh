#!/usr/bin/env bash
# Prints the pinned kernel a workflow matrix entry names: a version with a kernels/<v>.toml, or
# `newest`, the highest of them (so the matrix follows `cargo xtask kernels` pins without edits).
set -euo pipefail
cd "$(dirname "$0")/.."
want="${1:?usage: ci/kernel-version.sh VERSION|newest}"
if [ "$want" = newest ]; then
    for f in kernels/*.toml; do
        f="${f#kernels/}"
        echo "${f%.toml}"
    done | sort -V | tail -n 1
elif [ -f "kernels/$want.toml" ]; then
    echo "$want"
else
    echo "ci/kernel-version.sh: no pin kernels/$want.toml" >&2
    exit 1
fi
