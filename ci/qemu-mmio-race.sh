#!/usr/bin/env bash
# Does this host's qemu, started as bpfvm starts it, survive a guest that changes the memory
# map on one vCPU while the other does MMIO? Multi-threaded TCG on qemu 10.0.4 and later (and
# on 7.2) aborts within seconds (`msix_table_mmio_read: Assertion ... failed`); bpfvm's
# `--tcg-thread auto` runs those versions single-threaded (vm/src/machine/tcg_thread.rs,
# docs/hosts.md).
#
#   ci/qemu-mmio-race.sh [SECONDS] [VM-RUN OPTION...]
#   e.g. ci/qemu-mmio-race.sh 30 --tcg-thread multi     (shows the crash)
#
# Builds ci/qemu-mmio-race.c with the host's gcc (bpfvm's provisioning installs it) into
# target/, boots the 6.1 pin with `cargo xtask vm-run` (the guest sees the host's files) and
# runs it on the watchdog (the toggled device) and the second virtio console (the read one,
# whose MSI-X page lies above the watchdog's BAR). Exits with vm-run's status: 0 when qemu
# survived SECONDS (default 30), 1 with "qemu crashed: ..." when it did not.
set -euo pipefail

seconds=30
if [ "$#" -gt 0 ] && [[ $1 =~ ^[0-9]+$ ]]; then
    seconds=$1
    shift
fi
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
mkdir -p target
gcc -O2 -Wall -Werror -o target/qemu-mmio-race ci/qemu-mmio-race.c

# In the guest: the i6300esb watchdog vng adds (8086:25ab) and the second virtio console
# (1af4:1003, a virtio-serial-pci) by PCI address; expanded there, not here.
# shellcheck disable=SC2016
guest='
dev() { for d in /sys/bus/pci/devices/*; do
    [ "$(cat "$d/vendor"):$(cat "$d/device")" = "$1" ] && basename "$d"; done; }
toggle=$(dev 0x8086:0x25ab | head -n 1)
read=$(dev 0x1af4:0x1003 | sed -n 2p)
[ -n "$toggle" ] && [ -n "$read" ] || { echo "qemu-mmio-race: no watchdog or second virtio console" >&2; exit 1; }
exec ./target/qemu-mmio-race "$toggle" "$read" '"$seconds"

exec cargo xtask vm-run --kernel 6.1 --no-retry "$@" -- sh -c "$guest"
