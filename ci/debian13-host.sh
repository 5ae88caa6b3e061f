#!/usr/bin/env bash
# Debian 13 (trixie) as a second host: make a trixie root with mmdebstrap (Debian's package),
# copy this checkout into it and run the README's main command there, as a new user on a fresh
# Debian 13 machine would: the only Rust there is Debian's rustc-web/cargo-web (the toolchain
# bpfvm's own provisioning uses), and `cargo xtask` installs everything else itself.
#
#   ci/debian13-host.sh ROOT [COMMAND...]    default COMMAND: cargo xtask vm-test --kernel 6.1
#
# ROOT is made once (about 3 minutes) and reused; the checkout is copied again on every run
# (tracked files, as in the work tree; the copy's target/ is kept). Run as root on a Debian host with mmdebstrap
# (`apt-get install mmdebstrap`). ROOT gets /proc, /sys and /dev from the host.
#
# What a chroot cannot show: it shares this host's kernel and /dev/kvm (so the accelerator
# decision is the host's), its network and its CPU; udev inside it is the package only, not
# a running daemon. It does show Debian 13's packages: qemu 10.0, python 3.13, LLVM,
# rustc-web, busybox, and everything bpfvm installs and builds with them.
set -euo pipefail

root=${1:?usage: ci/debian13-host.sh ROOT [COMMAND...]}
shift
if [ "$#" -eq 0 ]; then
    set -- cargo xtask vm-test --kernel 6.1
fi
repo=$(cd "$(dirname "$0")/.." && pwd)
mirror=http://deb.debian.org/debian

if [ ! -e "$root/etc/debian_version" ]; then
    echo "debian13-host: making a trixie root in $root"
    mmdebstrap --variant=important --components=main \
        --include=ca-certificates,rustc-web,cargo-web,git \
        trixie "$root" \
        "deb $mirror trixie main" \
        "deb $mirror trixie-updates main" \
        "deb http://deb.debian.org/debian-security trixie-security main"
fi

mounted=()
# shellcheck disable=SC2329 # called by the EXIT trap
unmount() {
    local i
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
        umount -R "${mounted[i]}" || echo "debian13-host: could not unmount ${mounted[i]}" >&2
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

echo "debian13-host: running '$*' in $root"
start=$(date +%s)
status=0
chroot "$root" /usr/bin/env -i HOME=/root TERM="${TERM:-dumb}" \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    sh -c 'cd /work/bpfvm && exec "$@"' sh "$@" || status=$?
# shellcheck disable=SC2016 # dpkg-query's format, not a shell expansion
qemu=$(chroot "$root" dpkg-query -W -f '${Version}' qemu-system-x86 2>/dev/null || echo none)
echo "debian13-host: '$*' exited $status after $(($(date +%s) - start)) s (qemu-system-x86 $qemu)"
exit "$status"
