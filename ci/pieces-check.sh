#!/usr/bin/env bash
# The pieces workflow's steps (.github/workflows/pieces.yml) run locally as its runners would,
# on real boots: a fresh clone for the plan and the merge, the plan of `vm-test --kernel
# $KERNEL --arch $ARCH` in $PIECES pieces, each piece in a fresh clone of its own with its own
# target directory, under its row's accelerator, each piece's report directory laid out as
# upload-artifact and download-artifact (the versions the workflow pins) lay it out, the merge;
# then each merged report's tests and outcomes against one whole `vm-test --kernel $KERNEL
# --arch $ARCH` run (in the merge's clone, or, for a plan of one kernel and architecture, the
# report.json given as WHOLE). docs/pieces.md. Takes about 5 minutes per clone that builds the
# guest suite, more for arm64 (the guest binaries are cross-built).
#
#   ci/pieces-check.sh                       # KERNEL=6.1 ARCH=x86_64 PIECES=2, under /tmp
#   ARCH=arm64 ci/pieces-check.sh
#   WHOLE=target/vm-test/6.1/report.json ci/pieces-check.sh
set -euo pipefail

KERNEL="${KERNEL:-6.1}"
# x86_64, arm64 or a list (x86_64,arm64), as the workflow's ARCHES.
ARCH="${ARCH:-x86_64}"
PIECES="${PIECES:-2}"
# The plan's and the merge's accelerator, as the workflow's BPFVM_ACCEL (kvm there); each
# piece runs under its row's. auto, the default here, cuts by TCG's costs on every row.
export BPFVM_ACCEL="${ACCEL:-auto}"
root="$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)"
commit="$(git -C "$root" rev-parse HEAD)"
work="$(mktemp -d "${TMPDIR:-/tmp}/bpfvm-pieces.XXXXXX")"
# Each clone builds in its own target directory, as a runner does.
unset CARGO_TARGET_DIR
echo "commit $commit, kernel $KERNEL, arch $ARCH, accel $BPFVM_ACCEL, $PIECES pieces, in $work"

clone() {
    git clone -q --no-checkout "$root" "$1"
    git -C "$1" checkout -q --detach "$commit"
}

clone "$work/main"
cd "$work/main"
matrix="$(cargo xtask plan --for suite --kernel "$KERNEL" --arch "$ARCH" --pieces "$PIECES")"
echo "matrix: $matrix"
mapfile -t labels < <(jq -r '[.include[].label] | unique[]' <<<"$matrix")
if [ -n "${WHOLE:-}" ] && [ "${#labels[@]}" -ne 1 ]; then
    echo "WHOLE is one run's report.json, and this plan has ${#labels[*]}: ${labels[*]}" >&2
    exit 2
fi

i=0
while read -r row; do
    kernel="$(jq -r .kernel <<<"$row")"
    arch="$(jq -r .arch <<<"$row")"
    label="$(jq -r .label <<<"$row")"
    accel="$(jq -r .accel <<<"$row")"
    piece="$(jq -r .piece <<<"$row")"
    plan="$(jq -r .plan <<<"$row")"
    dir="$work/piece-$i"
    clone "$dir"
    echo "=== piece $piece of $label under $accel (plan $plan) in $dir"
    rc=0
    start=$SECONDS
    # As the action runs it: the row's kernel, arch and accel, piece and plan in the environment.
    (cd "$dir" && BPFVM_KERNEL="$kernel" BPFVM_ARCH="$arch" BPFVM_ACCEL="$accel" \
        BPFVM_PIECE="$piece" BPFVM_PLAN="$plan" cargo xtask vm-test) \
        >"$work/piece-$i.log" 2>&1 || rc=$?
    echo "piece $piece of $label exited $rc in $((SECONDS - start)) s" \
        "($(grep -E '^kernel .*passed' "$work/piece-$i.log" || echo 'no summary'))"
    # upload-artifact (v4 and later) given one directory: the artifact holds that directory's
    # files at its root, hidden files left out. Named as the workflow names it.
    uploaded="$work/uploaded/piece-$label-$i"
    mkdir -p "$uploaded"
    cp -r "$dir/target/vm-test/$label.piece-${piece%/*}-of-${piece#*/}/." "$uploaded/"
    find "$uploaded" -mindepth 1 -name '.*' -prune -exec rm -rf {} +
    i=$((i + 1))
done < <(jq -c '.include[]' <<<"$matrix")

# download-artifact (v5 and later) with a pattern: one matching artifact is extracted into the
# path itself, several each into path/<its name>.
mkdir -p "$work/artifacts"
uploads=("$work"/uploaded/*)
if [ "${#uploads[@]}" -eq 1 ]; then
    cp -r "${uploads[0]}/." "$work/artifacts/"
else
    cp -r "$work/uploaded/." "$work/artifacts/"
fi
echo "artifacts: $(cd "$work/artifacts" && find . -name report.json | sort | tr '\n' ' ')"

rc=0
cargo xtask merge --for suite --kernel "$KERNEL" --arch "$ARCH" --pieces "$PIECES" \
    --out "$work/merged" "$work/artifacts" >"$work/merge.log" 2>&1 || rc=$?
tail -n 3 "$work/merge.log"
echo "merge exited $rc"

if [ -z "${WHOLE:-}" ]; then
    echo "=== the whole run, for comparison"
    start=$SECONDS
    # auto: an arm64 kernel refuses kvm; x86_64's takes KVM where it works.
    BPFVM_ACCEL=auto cargo xtask vm-test --kernel "$KERNEL" --arch "$ARCH" \
        >"$work/whole.log" 2>&1 || true
    echo "whole run took $((SECONDS - start)) s"
fi
tests() {
    jq -r '.tests[] | select(.name | test("^(feature|binary|guest|kernel|merge):") | not)
           | "\(.name) \(.outcome)"' "$1" | sort
}
differ=0
for label in "${labels[@]}"; do
    whole="${WHOLE:-$work/main/target/vm-test/$label/report.json}"
    if diff <(tests "$whole") <(tests "$work/merged/$label/report.json") >"$work/diff-$label.txt"; then
        echo "$label: merged = whole: $(tests "$whole" | wc -l) tests, the same names and outcomes"
    else
        echo "$label: merged differs from whole (< whole, > merged):"
        cat "$work/diff-$label.txt"
        differ=1
    fi
done
if [ "$differ" -ne 0 ]; then
    exit 1
fi
exit "$rc"
