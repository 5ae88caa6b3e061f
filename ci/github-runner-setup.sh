#!/usr/bin/env bash
# Prepares a GitHub-hosted Ubuntu runner for bpfvm, then runs `cargo xtask setup`.
#
# How the runner differs from the Debian machines bpfvm is developed on, and what this does:
# - KVM: /dev/kvm exists but belongs to root; a udev rule opens it, so `--accel auto` finds it.
# - Rust: rustup with network and no Debian rustc-web, so the eBPF objects build with rustup's
#   nightly + rust-src (provisioning picks that route when it finds them, and says so).
#   $BPFVM_NIGHTLY pins that nightly (see the workflow); bpfvm asks rustup for it by that name.
# - LLVM: bpf-linker builds against llvm-22-dev, which Ubuntu's archive lacks; LLVM's own apt
#   repository has it for each Ubuntu release.
# - Root: the runner user has passwordless sudo. Only the Debian packages need root: they are
#   taken from `cargo xtask setup --check` (the provisioning's own list, route included) and
#   installed with sudo; `cargo xtask setup` then runs as the runner user, so the cache under
#   ~/.cache/bpfvm and target/ stay the user's. debian-archive-keyring is on that list: Ubuntu
#   ships it too, and the kernel fetch checks the Debian suites against it.
#
# Phases, all by default, in this order: `kvm` (first: an apt install can re-trigger udev and
# reset /dev/kvm's permissions unless the rule is in place), `toolchain` (rustup nightly, LLVM's
# apt repository), `setup` (Debian packages, then the setup command). The action (action.yml)
# runs `kvm`, installs bpfvm, then `toolchain setup` with BPFVM_SETUP="bpfvm setup".
# BPFVM_REQUIRE_KVM=1 makes a runner without /dev/kvm an error in the `kvm` phase.
set -euo pipefail
cd "$(dirname "$0")/.."

phases=("$@")
[ "${#phases[@]}" -gt 0 ] || phases=(kvm toolchain setup)
read -ra setup <<<"${BPFVM_SETUP:-cargo xtask setup}"
llvm=22 # vm/src/machine/provision/mod.rs: LLVM_PREFIX
tmp="${RUNNER_TEMP:-/tmp}"

kvm() {
    echo "::group::KVM"
    if [ -e /dev/kvm ]; then
        echo 'KERNEL=="kvm", GROUP="kvm", MODE="0666", OPTIONS+="static_node=kvm"' |
            sudo tee /etc/udev/rules.d/99-bpfvm-kvm.rules >/dev/null
        sudo udevadm control --reload-rules
        sudo udevadm trigger --name-match=kvm
        sudo chmod 0666 /dev/kvm
        ls -l /dev/kvm
    elif [ "${BPFVM_REQUIRE_KVM:-0}" = 1 ]; then
        echo "::error title=bpfvm::no /dev/kvm on this runner: use a runner with KVM (GitHub's Linux x86_64 runners have it), or accel: auto to run under TCG (20-50x slower)"
        exit 1
    else
        echo "no /dev/kvm on this runner: the guests run under TCG (20-50x slower)"
    fi
    echo "::endgroup::"
}

toolchain() {
    local nightly="${BPFVM_NIGHTLY:?set BPFVM_NIGHTLY to a dated nightly, e.g. nightly-2026-05-20}"

    echo "::group::rustup: $nightly with rust-src, rustfmt and clippy"
    rustup toolchain install "$nightly" --profile minimal --component rust-src
    rustc "+$nightly" -vV
    rustup component add rustfmt clippy
    echo "::endgroup::"

    echo "::group::LLVM $llvm apt repository"
    # shellcheck source=/dev/null
    . /etc/os-release
    sudo install -d -m 0755 /etc/apt/keyrings
    curl -fsSL https://apt.llvm.org/llvm-snapshot.gpg.key |
        sudo tee /etc/apt/keyrings/apt.llvm.org.asc >/dev/null
    echo "deb [signed-by=/etc/apt/keyrings/apt.llvm.org.asc] http://apt.llvm.org/$VERSION_CODENAME/ llvm-toolchain-$VERSION_CODENAME-$llvm main" |
        sudo tee "/etc/apt/sources.list.d/llvm-$llvm.list" >/dev/null
    sudo apt-get update -q
    echo "::endgroup::"
}

setup() {
    echo "::group::Debian packages"
    "${setup[@]}" --check >"$tmp/bpfvm-setup-check.txt" || true
    cat "$tmp/bpfvm-setup-check.txt"
    local missing
    mapfile -t missing < <(awk '$1 == "MISSING" && $2 ~ /^deb:/ { sub(/^deb:/, "", $2); print $2 }' "$tmp/bpfvm-setup-check.txt")
    if [ "${#missing[@]}" -gt 0 ]; then
        # The package lists may be stale or absent (a fresh Ubuntu 24.04 root has none) when
        # the toolchain phase, which updates them, did not run first.
        sudo apt-get update -q
        sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
    fi
    echo "::endgroup::"

    echo "::group::${setup[*]}"
    "${setup[@]}"
    echo "::endgroup::"
}

for phase in "${phases[@]}"; do
    case "$phase" in
    kvm | toolchain | setup) "$phase" ;;
    *)
        echo "ci/github-runner-setup.sh: unknown phase $phase (kvm, toolchain, setup)" >&2
        exit 2
        ;;
    esac
done
