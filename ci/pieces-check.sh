#!/usr/bin/env bash
# The pieces workflow's steps (.github/workflows/pieces.yml) run locally as its runners would,
# on real boots: a fresh clone for the plan and the merge, the plan of `vm-test --kernel
# $KERNEL` in $PIECES pieces, each piece in a fresh clone of its own with its own target
# directory, each piece's report directory laid out as upload-artifact and download-artifact
# (the versions the workflow pins) lay it out, the merge; then the merged report's tests and outcomes
# against one whole `vm-test --kernel $KERNEL` run (in the merge's clone, or the report.json
# given as WHOLE). docs/pieces.md. Takes about 5 minutes per clone that builds the guest suite.
#
#   ci/pieces-check.sh                       # KERNEL=6.1 PIECES=2, under /tmp
#   WHOLE=target/vm-test/6.1/report.json ci/pieces-check.sh
set -euo pipefail

KERNEL="${KERNEL:-6.1}"
PIECES="${PIECES:-2}"
root="$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)"
commit="$(git -C "$root" rev-parse HEAD)"
work="$(mktemp -d "${TMPDIR:-/tmp}/bpfvm-pieces.XXXXXX")"
# Each clone builds in its own target directory, as a runner does.
unset CARGO_TARGET_DIR
echo "commit $commit, kernel $KERNEL, $PIECES pieces, in $work"

clone() {
    git clone -q --no-checkout "$root" "$1"
    git -C "$1" checkout -q --detach "$commit"
}

clone "$work/main"
cd "$work/main"
matrix="$(cargo xtask plan --for suite --kernel "$KERNEL" --pieces "$PIECES")"
echo "matrix: $matrix"

i=0
while read -r row; do
    kernel="$(jq -r .kernel <<<"$row")"
    piece="$(jq -r .piece <<<"$row")"
    plan="$(jq -r .plan <<<"$row")"
    dir="$work/piece-$i"
    clone "$dir"
    echo "=== piece $piece of kernel $kernel (plan $plan) in $dir"
    rc=0
    (cd "$dir" && BPFVM_PIECE="$piece" BPFVM_PLAN="$plan" cargo xtask vm-test --kernel "$kernel") \
        >"$work/piece-$i.log" 2>&1 || rc=$?
    echo "piece $piece exited $rc ($(grep -E '^kernel .*passed' "$work/piece-$i.log" || echo 'no summary'))"
    # upload-artifact (v4 and later) given one directory: the artifact holds that directory's
    # files at its root, hidden files left out. Named as the workflow names it.
    uploaded="$work/uploaded/piece-$kernel-$i"
    mkdir -p "$uploaded"
    cp -r "$dir/target/vm-test/$kernel.piece-${piece%/*}-of-${piece#*/}/." "$uploaded/"
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
cargo xtask merge --for suite --kernel "$KERNEL" --pieces "$PIECES" --out "$work/merged" "$work/artifacts" \
    >"$work/merge.log" 2>&1 || rc=$?
tail -n 3 "$work/merge.log"
echo "merge exited $rc"

whole="${WHOLE:-}"
if [ -z "$whole" ]; then
    echo "=== the whole run, for comparison"
    cargo xtask vm-test --kernel "$KERNEL" >"$work/whole.log" 2>&1 || true
    whole="$work/main/target/vm-test/$KERNEL/report.json"
fi
tests() {
    jq -r '.tests[] | select(.name | test("^(feature|binary|guest|kernel|merge):") | not)
           | "\(.name) \(.outcome)"' "$1" | sort
}
if diff <(tests "$whole") <(tests "$work/merged/$KERNEL/report.json") >"$work/diff.txt"; then
    echo "merged = whole: $(tests "$whole" | wc -l) tests, the same names and outcomes"
else
    echo "merged differs from whole (< whole, > merged):"
    cat "$work/diff.txt"
    exit 1
fi
exit "$rc"
