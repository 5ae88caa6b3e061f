#!/usr/bin/env bash
# Another distribution as a second host: make its root with mmdebstrap (Debian's package), copy
# this checkout into it and run a command there as a new user of that distribution would.
#
#   ci/host-root.sh trixie ROOT [COMMAND...]   Debian 13; default COMMAND: cargo xtask vm-test --kernel 6.1
#   ci/host-root.sh sid ROOT [COMMAND...]      Debian unstable; default COMMAND: cargo xtask
#                                              selftests --kernel 7.2 -t bloom_filter_map,bpf_loop
#   ci/host-root.sh noble ROOT [COMMAND...]    Ubuntu 24.04, as GitHub's runners are; default
#                                              COMMAND: the runner route (below)
#
# trixie: the only Rust there is Debian's rustc-web/cargo-web (the toolchain bpfvm's own
# provisioning uses), and `cargo xtask` installs everything else itself.
# sid: the 7.2 pin's selftests need it (its headers package is sid's, its config gcc 16's).
# sid has no rustc-web: its own rustc, cargo and rust-src are that route's toolchain there.
# noble: rustup from rustup-init (as on a runner), then the runner script's steps that need no
# GitHub: rustup's nightly $BPFVM_NIGHTLY (default nightly-2026-05-20) with rust-src, and
# `ci/github-runner-setup.sh setup` (`setup --check`, apt-get install of its MISSING deb: lines
# from Ubuntu's archive, `cargo xtask setup`). LLVM's apt repository, which the toolchain phase
# adds for llvm-22-dev, is not used: it is unreachable from the machines bpfvm is developed on,
# so there the run stops at llvm-22-dev. Ubuntu's archive key comes from Debian's
# ubuntu-keyring package (`apt-get install ubuntu-keyring`; Debian 13 has it, Debian 12 does
# not: point BPFVM_UBUNTU_KEYRING at the ubuntu-archive-keyring.gpg of trixie's package).
#
# ROOT is made once (under a minute to about 3 minutes) and reused; the checkout is copied
# again on every run (tracked files, as in the work tree; the copy's target/ is kept). Run as
# root on a Debian host with mmdebstrap (`apt-get install mmdebstrap`). ROOT gets /proc, /sys
# and /dev from the host.
#
# What a chroot cannot show: it shares this host's kernel and /dev/kvm (so the accelerator
# decision is the host's), its network and its CPU; udev inside it is the package only, not
# a running daemon. It does show the distribution's packages: its qemu, python, LLVM,
# rustc-web, busybox, and everything bpfvm installs and builds with them.
set -euo pipefail

usage="usage: ci/host-root.sh trixie|sid|noble ROOT [COMMAND...]"
suite=${1:?$usage}
root=${2:?$usage}
shift 2
repo=$(cd "$(dirname "$0")/.." && pwd)
me=host-root

case "$suite" in
trixie)
    [ "$#" -gt 0 ] || set -- cargo xtask vm-test --kernel 6.1
    make_root() {
        local mirror=http://deb.debian.org/debian
        mmdebstrap --variant=important --components=main \
            --include=ca-certificates,rustc-web,cargo-web,git \
            trixie "$root" \
            "deb $mirror trixie main" \
            "deb $mirror trixie-updates main" \
            "deb http://deb.debian.org/debian-security trixie-security main"
    }
    ;;
sid)
    [ "$#" -gt 0 ] || set -- cargo xtask selftests --kernel 7.2 -t bloom_filter_map,bpf_loop
    make_root() {
        # The mirror's sid Release file may be past its Valid-Until (as the private apt of
        # kernels/pins/apt.rs allows); the option stays in the root for bpfvm's apt-get.
        mmdebstrap --variant=important --components=main \
            --aptopt='Acquire::Check-Valid-Until "false"' \
            --include=ca-certificates,rustc,cargo,rust-src,git \
            sid "$root" "deb http://deb.debian.org/debian sid main"
    }
    ;;
noble)
    # shellcheck disable=SC2016 # expanded in the root, not here
    [ "$#" -gt 0 ] || set -- sh -c '
        set -e
        export PATH=$HOME/.cargo/bin:$PATH BPFVM_NIGHTLY=${BPFVM_NIGHTLY:-nightly-2026-05-20}
        if ! command -v cargo >/dev/null; then
            curl -fsSL -o /tmp/rustup-init https://static.rust-lang.org/rustup/dist/x86_64-unknown-linux-gnu/rustup-init
            chmod +x /tmp/rustup-init
            /tmp/rustup-init -y --profile minimal --default-toolchain stable --no-modify-path
        fi
        rustup toolchain install "$BPFVM_NIGHTLY" --profile minimal --component rust-src
        ci/github-runner-setup.sh setup'
    make_root() {
        local keyring=${BPFVM_UBUNTU_KEYRING:-/usr/share/keyrings/ubuntu-archive-keyring.gpg}
        local mirror=http://archive.ubuntu.com/ubuntu
        if [ ! -r "$keyring" ]; then
            echo "$me: no Ubuntu archive key at $keyring: apt-get install ubuntu-keyring (Debian 13), or set BPFVM_UBUNTU_KEYRING to its ubuntu-archive-keyring.gpg" >&2
            exit 1
        fi
        # sudo and curl as a runner has them; gcc for ci/qemu-mmio-race.sh.
        mmdebstrap --variant=apt --components=main,universe --keyring="$keyring" \
            --include=ca-certificates,sudo,git,curl,gcc,libc6-dev \
            noble "$root" \
            "deb $mirror noble main universe" \
            "deb $mirror noble-updates main universe" \
            "deb http://security.ubuntu.com/ubuntu noble-security main universe"
    }
    ;;
*)
    echo "$usage" >&2
    exit 2
    ;;
esac

if [ ! -e "$root/etc/debian_version" ]; then
    echo "$me: making a $suite root in $root"
    make_root
fi

mounted=()
# shellcheck disable=SC2329 # called by the EXIT trap
unmount() {
    local i
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
        umount -R "${mounted[i]}" || echo "$me: could not unmount ${mounted[i]}" >&2
    done
}
trap unmount EXIT
# ROOT itself a mount point: virtiofsd's sandbox bind-mounts and pivots into its shared
# directory, which fails with EINVAL ("Error entering sandbox: CleanMount") in a chroot whose
# root is a plain directory; then qemu finds no virtiofsd socket ("Connection refused").
for dir in "" /proc /sys /dev; do
    if ! mountpoint -q "$root$dir"; then
        mount --rbind "${dir:-$root}" "$root$dir"
        # Unmounting the copy must never unmount the host's own /dev or /sys.
        mount --make-rslave "$root$dir"
        mounted+=("$root$dir")
    fi
done
# The root uses the host's network: its resolver and the local CAs the host trusts (a TLS proxy).
cp /etc/resolv.conf "$root/etc/resolv.conf"
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
    chroot "$root" update-ca-certificates >/dev/null
fi

# The checkout's tracked files, copied afresh; the copy's target/ stays, so a rerun builds
# only what changed.
mkdir -p "$root/work/bpfvm"
find "$root/work/bpfvm" -mindepth 1 -maxdepth 1 ! -name target -exec rm -rf {} +
git -C "$repo" ls-files -z | tar -C "$repo" --null -T - -cf - | tar -C "$root/work/bpfvm" -xf -
# The copy is a git repository at the checkout's commit (one commit deep, its index reset to it),
# so a report names the commit it ran (`-dirty` when tracked files differ), as a runner's does:
# `merge` checks every piece against its own commit.
git -C "$root/work/bpfvm" init -q
git -C "$root/work/bpfvm" fetch -q --depth 1 "file://$repo" HEAD
git -C "$root/work/bpfvm" reset -q FETCH_HEAD

echo "$me: running '$*' in $root"
start=$(date +%s)
status=0
chroot "$root" /usr/bin/env -i HOME=/root TERM="${TERM:-dumb}" \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    sh -c 'cd /work/bpfvm && exec "$@"' sh "$@" || status=$?
# shellcheck disable=SC2016 # dpkg-query's format, not a shell expansion
qemu=$(chroot "$root" dpkg-query -W -f '${Version}' qemu-system-x86 2>/dev/null || echo none)
echo "$me: '$*' exited $status after $(($(date +%s) - start)) s (qemu-system-x86 $qemu)"
exit "$status"
