//! The guest script of one `selftests` boot: what the selftests expect of their machine, then
//! the boot's share of the run's units (`test_progs` once per test, `test_verifier`,
//! `test_maps`), each marked in the kernel log, until the boot's time budget is spent.
use std::fmt::Write as _;
use std::path::Path;

use crate::machine::guest;
use crate::results::upstream::{DEFER, END, JSON_DIR, START, TESTMOD, TEST_PROGS_OUT};
use crate::support::shell::quote;

use super::units::Unit;

/// The modules the script loads (see [`script`]).
pub(crate) const GUEST_MODULES: [&str; 7] = [
    "tun",
    "nf_conntrack",
    "nf_nat",
    "loop",
    "tcp_bbr",
    "tcp_dctcp",
    "fou",
];
/// What `modprobe` said.
const MODPROBE: &str = "modprobe.out";

/// The todo file: one `bpfvm_unit NAME COST_MS ARGS...` line a unit, sourced by the script.
pub(crate) const TODO: &str = "todo.sh";

/// The todo file of `units`: each with its cost (milliseconds) and its own arguments.
pub(crate) fn todo(units: &[(&Unit, u64)]) -> String {
    units
        .iter()
        .map(|(u, cost)| {
            let mut line = format!("bpfvm_unit {} {cost}", quote(&u.name));
            for a in &u.args {
                line.push(' ');
                line.push_str(&quote(a));
            }
            line + "\n"
        })
        .collect()
}

/// The script: from the build directory `build` (test_progs opens its BPF objects and
/// `bpf_testmod.ko` from its working directory), with `config` as the running kernel's
/// `/boot/config-$(uname -r)`, runs the units of [`TODO`] in order; it starts no unit once
/// `budget_s` seconds of units have passed and the next one's cost would pass the budget
/// (the first always runs), and says which it left with a [`DEFER`] line. Each `test_progs`
/// run also writes its `--json-summary` when `json` (its test_progs has the option).
///
/// Why one `test_progs` per test: it keeps each test's output until the test ends
/// (`stdio_hijack`, test_progs.c), so its output cannot tell when a test started; a run per
/// test, between two kernel log markers, blames a splat on the test that was running, and
/// lets the host's watchdog name a test that hangs.
pub(crate) fn script(out: &Path, build: &Path, config: &Path, budget_s: u64, json: bool) -> String {
    let mut s = guest::preamble(out);
    let b = quote(&build.display().to_string());
    writeln!(s, "cd {b} || exit 1").unwrap();
    // What the selftests expect (vmtest.sh's guest): tracefs (kprobe and tracepoint tests),
    // the kernel's config where libbpf looks for it for `__kconfig` externs (the guest sees
    // the host's /boot), no locked-memory limit (kernels before 5.11 charge maps to it), and
    // the loopback up (the network tests talk over it).
    s.push_str(
        "bpfvm_mounted /sys/kernel/tracing || mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null\n\
         mount -t tmpfs tmpfs /boot\n",
    );
    writeln!(
        s,
        "cp {} \"/boot/config-$(uname -r)\"",
        quote(&config.display().to_string())
    )
    .unwrap();
    s.push_str("ulimit -l unlimited\nip link set lo up 2>/dev/null\n");
    // Unprivileged BPF on, as the kernel the selftests' config asks for boots (`# CONFIG_BPF_
    // UNPRIV_DEFAULT_OFF is not set`): Debian's kernels start at 2, where test_verifier skips
    // every unprivileged case; 2 may still go to 0 (bpf_unpriv_handler, kernel/bpf/syscall.c),
    // 1 may not. Before the first marker: x86 logs what it means for Spectre v2 then.
    s.push_str("echo 0 > /proc/sys/kernel/unprivileged_bpf_disabled 2>/dev/null\n");
    // A tmpfs on /tmp, as vmtest.sh's guest has: virtme-ng makes the host's /tmp an overlay,
    // where one fstat(2) reaches the file system below too, and d_path's checks of the files
    // it opens there see the paths shifted by one. Not when the run's files are below /tmp.
    s.push_str("case $OUT/ in /tmp/*) ;; *) mount -t tmpfs tmpfs /tmp ;; esac\n");
    // The modules vmtest.sh's config builds in and Debian's has as modules (`=m`): tun
    // (`/dev/net/tun`: flow_dissector, tc_redirect), nf_conntrack and nf_nat (the `bpf_ct_*`
    // kfuncs of bpf_nf live in their BTF), loop (test_ima's `losetup`), tcp_bbr and tcp_dctcp
    // (bpf_tcp_ca's tcp_ca_kfunc calls their kfuncs), fou (tunnel's `bpf_skb_get_fou_encap`;
    // `ip fou` cannot autoload it: it declares no generic-netlink family alias). Loaded before
    // the first marker, as bpf_testmod.
    writeln!(
        s,
        "modprobe -a {} > \"$OUT/{MODPROBE}\" 2>&1",
        GUEST_MODULES.join(" ")
    )
    .unwrap();
    // Loaded before the first marker, so that its taints (O: out of tree, E: unsigned) are the
    // boot's, not a splat of a test; test_progs reloads it itself.
    writeln!(
        s,
        "insmod bpf_testmod.ko > \"$OUT/{TESTMOD}\" 2>&1; echo $? >> \"$OUT/{TESTMOD}\""
    )
    .unwrap();
    let summary = match json {
        true => {
            writeln!(s, "mkdir -p \"$OUT/{JSON_DIR}\"").unwrap();
            format!(" -J \"$OUT/{JSON_DIR}/${{u#test_progs/}}.json\"")
        }
        false => String::new(),
    };
    s.push_str("bpfvm_mark phase tests\n");
    // The budget is read from /proc/uptime (whole seconds), which a hung test cannot hold
    // back: the check runs between units only.
    writeln!(
        s,
        "bpfvm_t0=$(cut -d. -f1 /proc/uptime)\n\
         bpfvm_unit() {{\n  \
           [ -n \"$bpfvm_stop\" ] && return\n  \
           bpfvm_now=$(cut -d. -f1 /proc/uptime)\n  \
           if [ -n \"$bpfvm_ran\" ] && [ $((bpfvm_now - bpfvm_t0 + $2 / 1000)) -gt {budget_s} ]; then\n    \
             bpfvm_stop=1; echo \"{DEFER}$1\"; return\n  \
           fi\n  \
           bpfvm_ran=1\n  \
           bpfvm_mark test start \"$1\"\n  \
           echo \"{START}$1\"\n  \
           case $1 in\n    \
             test_progs/*) u=$1; shift 2; ./test_progs \"$@\"{summary} 2>&1 < /dev/null ;;\n    \
             *) u=$1; ./\"$1\" 2>&1 < /dev/null ;;\n  \
           esac\n  \
           echo \"{END}$u $?\"\n  \
           bpfvm_mark test end \"$u\"\n\
         }}\n\
         . \"$OUT/{TODO}\" | tee \"$OUT/{TEST_PROGS_OUT}\"",
    )
    .unwrap();
    s.push_str("bpfvm_mark phase shutdown\n");
    guest::epilogue(&mut s, "0");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_unit_runs_alone_between_its_markers_within_the_budget() {
        let s = script(
            Path::new("/o"),
            Path::new("/c/build"),
            Path::new("/k/boot/config-6.1"),
            1000,
            false,
        );
        assert!(s.contains("cd /c/build || exit 1\n"));
        assert!(s.contains("cp /k/boot/config-6.1 \"/boot/config-$(uname -r)\"\n"));
        let insmod = s.find("insmod bpf_testmod.ko").unwrap();
        let first_mark = s.find("bpfvm_mark phase tests").unwrap();
        assert!(insmod < first_mark, "the module's taints are the boot's");
        assert!(s.contains("-gt 1000 ]"), "{s}");
        assert!(s.contains("case $OUT/ in /tmp/*) ;; *) mount -t tmpfs tmpfs /tmp ;; esac"));
        let unpriv = s
            .find("echo 0 > /proc/sys/kernel/unprivileged_bpf_disabled")
            .unwrap();
        assert!(unpriv < first_mark, "its Spectre v2 message is the boot's");
        assert!(s.contains("bpfvm_mark test start \"$1\"\n  echo \"bpfvm-selftest start $1\""));
        assert!(s.contains("./test_progs \"$@\" 2>&1"), "{s}");
        assert!(
            !s.contains(" -J "),
            "no --json-summary where test_progs lacks it"
        );
        assert!(s.contains(". \"$OUT/todo.sh\" | tee \"$OUT/test_progs.out\""));
        let json = script(Path::new("/o"), Path::new("/b"), Path::new("/c"), 9, true);
        assert!(
            json.contains("./test_progs \"$@\" -J \"$OUT/test_progs.json/${u#test_progs/}.json\""),
            "{json}"
        );
    }

    #[test]
    fn the_todo_quotes_each_units_arguments() {
        let a = Unit {
            name: "test_progs/xdp bonding".into(),
            args: vec!["-a".into(), "xdp bonding/*x*".into()],
        };
        let v = Unit {
            name: "test_verifier".into(),
            args: vec![],
        };
        assert_eq!(
            todo(&[(&a, 1200), (&v, 5000)]),
            "bpfvm_unit 'test_progs/xdp bonding' 1200 -a 'xdp bonding/*x*'\n\
             bpfvm_unit test_verifier 5000\n"
        );
    }
}
