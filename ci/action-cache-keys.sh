#!/usr/bin/env bash
# The action's cache keys (action.yml), as `name=key` lines for $GITHUB_OUTPUT. Computed here,
# not with hashFiles(): that reads only the workspace, and a used action lives outside it.
# - bin: the installed bpfvm, from its sources (every crate it compiles in: cli, vm, common),
#   the compiler, and the checkout's path (bpfvm reads its kernel pins from where it was built).
# - tools: virtme-ng, virtiofsd and bpf-linker, from the provisioning code and the nightly.
# - kernels: the kernels and arch inputs and the pins.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${KERNELS:?set KERNELS to the kernels input of the action}"
: "${NIGHTLY:?set NIGHTLY to the nightly input of the action}"

hash() {
    find "$@" -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16
}

rustc_version="$(rustc -V | tr -c 'a-zA-Z0-9.\n-' _)"
path_hash="$(pwd | sha256sum | cut -c1-8)"
os="${RUNNER_OS:-Linux}"
echo "bin=bpfvm-bin-$os-$rustc_version-$path_hash-$(hash cli vm common Cargo.toml Cargo.lock)"
echo "tools=bpfvm-tools-$os-$NIGHTLY-$(hash vm/src/machine/provision)"
echo "kernels=bpfvm-kernels-$(tr -c 'a-zA-Z0-9.,\n-' _ <<<"$KERNELS${ARCH:+-$ARCH}")-$(hash kernels -name '*.toml')"
