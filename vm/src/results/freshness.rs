//! Whether a kept guest (`machine::warm_guest`) is still in the state its boot left it in, so
//! that the next run may use it instead of booting: the judgement of what the guest recorded
//! about itself right before that run, against what it recorded right after its boot, and of
//! its kernel log since the last check. Pure: the guest's records in, the reasons to boot
//! afresh out (none: reuse). When in doubt it refuses: an unreadable or incomplete record is a
//! reason like any other.
//!
//! What a fresh boot gives, and so what must not have changed (each line of the guest's
//! record is `KIND VALUE`; `machine::warm_guest::script` writes them):
//! - `release`: the kernel running;
//! - `tainted`: the taint mask;
//! - `module`: every loaded module;
//! - `sysctl`: every readable sysctl (`/proc/sys`) with its value; the counters that change on
//!   their own ([`CHANGE_ON_THEIR_OWN`]) by their name only;
//! - `modparam`, `cgroup`, `trace`: every module parameter with its value, every cgroup
//!   directory with the controllers it enables, tracefs's switches and lists (`tracing_on`,
//!   enabled events, kprobe, uprobe and dynamic events, filters, instances);
//! - `mount`: every mount point of the guest's own namespace, with its type;
//! - `bpffs`: every file and directory under `/sys/fs/bpf` (pinned objects);
//! - `prog`, `map`, `link`, `btf`: the id of every BPF object the kernel holds
//!   (`BPF_*_GET_NEXT_ID`);
//! - `tmp`: every entry the guest wrote into `/tmp` (the host's files there are not the guest's;
//!   the loop's own `.bpfvm-warm` is always one);
//! - `file`: every file and directory on the guest's own file systems (`/run`, which holds the
//!   upper directories of virtme-ng's overlays, `/dev/shm`, an own `/var/tmp`), with a file's
//!   size and modification time;
//! - `netdev`, `netaddr`, `route`, `netrule`, `qdisc`: the root network namespace's devices
//!   (mtu, flags, qdisc, address, ...), addresses, routes of every table, policy rules and
//!   queueing disciplines, without their counters;
//! - `btfcopy`: the inode, size and change time of the loop's copy of the kernel's BTF in
//!   `/tmp`, which runs take as it is;
//! - `process`: the pid and name of every user-space process (kernel threads left out); one
//!   that a run started and left counts, one of the boot's that is gone (a run killed it)
//!   too, udev's workers never;
//! - `perl failed`: the BPF objects and pins could not be listed, which refuses the record;
//! - `end`: the record is whole.
//!
//! The kernel log since the last check (the records after it, up to this check's marker)
//! must hold no splat, allowed or not, and no gap; the guest's running copy of the log must
//! be far from its bound.
use std::collections::BTreeMap;

use crate::results::health::{self, log::Marker};

/// The guest's running copy of its kernel log past this many bytes: boot afresh rather than
/// let it reach its bound (`guest_files::MAX_FILE`) during a run.
pub const LOG_LIMIT: u64 = crate::support::guest_files::MAX_FILE / 2;

/// The name (`comm`) of udev's short-lived workers.
const UDEV_WORKER: &str = "(udev-worker)";

/// What the guest recorded, read back: kind -> values, each kind's values sorted (a process
/// name may appear more than once).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestState {
    kinds: BTreeMap<String, Vec<String>>,
}

/// The kinds a record must hold at least once (a guest whose record lacks one of them did not
/// write it whole, whatever its `end` says; no `tmp` line: its `/tmp` was not the overlay the
/// record reads).
const ALWAYS: [&str; 5] = ["release", "tainted", "mount", "tmp", "process"];

impl GuestState {
    /// Reads a record; an `Err` says why it is not one (cut short, a line without a value).
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut kinds: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut ended = false;
        for line in text.lines() {
            if ended {
                return Err(format!("a line after its end: {line:?}"));
            }
            if line == "end" {
                ended = true;
                continue;
            }
            let Some((kind, value)) = line.split_once(' ') else {
                return Err(format!("a line without a value: {line:?}"));
            };
            kinds
                .entry(kind.to_string())
                .or_default()
                .push(value.to_string());
        }
        if !ended {
            return Err("cut short (no `end` line)".into());
        }
        if let Some(k) = ALWAYS.iter().find(|k| !kinds.contains_key(**k)) {
            return Err(format!("no `{k}` line"));
        }
        // Both records without the BPF objects would compare equal: never a pass.
        if kinds.contains_key("perl") {
            return Err("its BPF objects and pins were not listed (perl failed)".into());
        }
        for values in kinds.values_mut() {
            values.sort();
        }
        Ok(Self { kinds })
    }

    fn values(&self, kind: &str) -> &[String] {
        self.kinds.get(kind).map_or(&[], Vec::as_slice)
    }

    /// Every difference from `boot`, one line each, in the kinds' order.
    pub fn changes_since(&self, boot: &GuestState) -> Vec<String> {
        let mut why = Vec::new();
        let kinds: std::collections::BTreeSet<&String> =
            boot.kinds.keys().chain(self.kinds.keys()).collect();
        for kind in kinds {
            let (was, now) = (boot.values(kind), self.values(kind));
            if was == now {
                continue;
            }
            match kind.as_str() {
                // One value each: say both.
                "release" | "tainted" => why.push(format!(
                    "{kind} {} at boot, {} now",
                    was.join(" "),
                    now.join(" ")
                )),
                "btfcopy" => {
                    let or_none = |v: &[String]| match v {
                        [] => "none".to_string(),
                        v => v.join(", "),
                    };
                    why.push(format!(
                        "the kernel BTF's copy in /tmp changed (inode, size, change time: {} at \
                         boot, {} now)",
                        or_none(was),
                        or_none(now)
                    ))
                }
                // NAME VALUE: a changed value is one change, not a removal and an addition.
                "sysctl" | "modparam" | "trace" | "cgroup" | "file" | "netdev" => {
                    named_changes(kind, was, now, &mut why)
                }
                // A process a run left is a reason, and so is one of the boot's that is gone
                // (a run killed it); udev's workers, which come and go with udev's events,
                // are neither.
                "process" => {
                    let worker =
                        |v: &&String| v.split_once(' ').is_some_and(|(_, c)| c == UDEV_WORKER);
                    for v in difference(now, was).into_iter().filter(|v| !worker(v)) {
                        why.push(format!("a process left: {}", process(v)));
                    }
                    for v in difference(was, now).into_iter().filter(|v| !worker(v)) {
                        why.push(format!("a process of the boot is gone: {}", process(v)));
                    }
                }
                _ => {
                    for v in difference(now, was) {
                        why.push(format!("{} left: {v}", describe(kind)));
                    }
                    for v in difference(was, now) {
                        why.push(format!("{} gone since boot: {v}", describe(kind)));
                    }
                }
            }
        }
        why
    }
}

/// `PID COMM` as a reason says it.
fn process(v: &str) -> String {
    match v.split_once(' ') {
        Some((pid, comm)) => format!("{comm} (pid {pid})"),
        None => v.to_string(),
    }
}

/// The values that change on their own, with nothing left behind by a run: counters of what
/// exists at the moment (dentries, open files, inodes, pids handed out), a fresh value each
/// read, or a record kept under another kind. Their names only are compared.
pub const CHANGE_ON_THEIR_OWN: &[(&str, &str)] = &[
    (
        "sysctl /proc/sys/fs/dentry-state",
        "dentries in use and unused (`proc_nr_dentry`, fs/dcache.c)",
    ),
    (
        "sysctl /proc/sys/fs/file-nr",
        "open files (`proc_nr_files`, fs/file_table.c)",
    ),
    (
        "sysctl /proc/sys/fs/inode-nr",
        "inodes in use (`proc_nr_inodes`, fs/inode.c)",
    ),
    (
        "sysctl /proc/sys/fs/inode-state",
        "inodes in use (`proc_nr_inodes`, fs/inode.c)",
    ),
    (
        "sysctl /proc/sys/fs/aio-nr",
        "aio contexts of live processes (`aio_nr`, fs/aio.c)",
    ),
    (
        "sysctl /proc/sys/kernel/pty/nr",
        "ptys open (`pty_count`, drivers/tty/pty.c)",
    ),
    (
        "sysctl /proc/sys/kernel/ns_last_pid",
        "the last pid handed out (`pid_ns_ctl_handler`, kernel/pid_namespace.c)",
    ),
    (
        "sysctl /proc/sys/kernel/random/entropy_avail",
        "the input pool's entropy count (`proc_do_entropy`, drivers/char/random.c)",
    ),
    (
        "sysctl /proc/sys/kernel/random/uuid",
        "a new UUID each read (`proc_do_uuid`, drivers/char/random.c)",
    ),
    (
        "sysctl /proc/sys/kernel/tainted",
        "the taint mask, judged as the record's `tainted` line",
    ),
];

/// Whether `kind NAME` is one of [`CHANGE_ON_THEIR_OWN`].
fn changes_on_its_own(kind: &str, name: &str) -> bool {
    CHANGE_ON_THEIR_OWN
        .iter()
        .any(|(n, _)| n.split_once(' ') == Some((kind, name)))
}

/// The changes of a kind whose values are `NAME VALUE`: one reason a name that changed,
/// appeared or is gone, those in [`CHANGE_ON_THEIR_OWN`] compared by their name only.
fn named_changes(kind: &str, was: &[String], now: &[String], why: &mut Vec<String>) {
    let map = |v: &[String]| -> BTreeMap<String, String> {
        v.iter()
            .map(|l| match l.split_once(' ') {
                Some((k, v)) => (k.to_string(), v.to_string()),
                None => (l.clone(), String::new()),
            })
            .collect()
    };
    let (was, now) = (map(was), map(now));
    let what = describe(kind);
    let names: std::collections::BTreeSet<&String> = was.keys().chain(now.keys()).collect();
    for name in names {
        match (was.get(name), now.get(name)) {
            (a, b) if a == b => {}
            (Some(_), Some(_)) if changes_on_its_own(kind, name) => {}
            (Some(a), Some(b)) => why.push(format!("{what} {name} was {a} at boot, {b} now")),
            (Some(a), None) => why.push(format!("{what} {name} ({a}) is gone since boot")),
            (None, Some(b)) => why.push(format!("{what} {name} appeared ({b})")),
            (None, None) => {}
        }
    }
}

/// What a kind's value is, in a reason.
fn describe(kind: &str) -> String {
    match kind {
        "module" => "a module".into(),
        "mount" => "a mount".into(),
        "bpffs" => "an object pinned in bpffs".into(),
        "prog" => "a BPF program (id)".into(),
        "map" => "a BPF map (id)".into(),
        "link" => "a BPF link (id)".into(),
        "btf" => "a BTF object (id)".into(),
        "tmp" => "a file in /tmp".into(),
        "process" => "a process".into(),
        "sysctl" => "sysctl".into(),
        "modparam" => "module parameter".into(),
        "trace" => "tracefs".into(),
        "cgroup" => "cgroup".into(),
        "file" => "file".into(),
        "netdev" => "network device (root namespace)".into(),
        "netaddr" => "an address (root namespace)".into(),
        "route" => "a route (root namespace)".into(),
        "netrule" => "a routing rule (root namespace)".into(),
        "qdisc" => "a qdisc (root namespace)".into(),
        other => format!("a `{other}` line"),
    }
}

/// The values of `a` not matched by one of `b` (both sorted; a repeated value counts each time).
fn difference<'a>(a: &'a [String], b: &[String]) -> Vec<&'a String> {
    let mut left: BTreeMap<&String, usize> = BTreeMap::new();
    for v in b {
        *left.entry(v).or_default() += 1;
    }
    let mut out = Vec::new();
    for v in a {
        match left.get_mut(v) {
            Some(n) if *n > 0 => *n -= 1,
            _ => out.push(v),
        }
    }
    out
}

/// What the guest gave for one check.
#[derive(Debug, Clone)]
pub struct Evidence<'a> {
    /// The record it wrote right after its boot, before any run.
    pub boot: &'a str,
    /// The record it wrote for this check.
    pub now: &'a str,
    /// Its kernel log from the last check (exclusive) to this check's marker (inclusive), as
    /// `/dev/kmsg` records; `after` is the seq of the last record judged before (`None`: the
    /// log from the boot on).
    pub log: &'a str,
    pub after: Option<u64>,
    /// The size of its running copy of the kernel log.
    pub log_bytes: u64,
}

/// The reasons to boot afresh rather than use the guest: empty when it is, as far as these
/// records can tell, in the state its boot left it in.
pub fn judge(e: &Evidence) -> Vec<String> {
    let mut why = Vec::new();
    match (GuestState::parse(e.boot), GuestState::parse(e.now)) {
        (Ok(boot), Ok(now)) => why.extend(now.changes_since(&boot)),
        (Err(b), _) => why.push(format!("the guest's record of its boot is unreadable: {b}")),
        (_, Err(n)) => why.push(format!(
            "the guest's record for this check is unreadable: {n}"
        )),
    }
    let log = match e.after {
        Some(s) => format!("{}\n{}", Marker::Continues(s).line(), e.log),
        None => e.log.to_string(),
    };
    let scan = health::scan(&log);
    for s in &scan.splats {
        let mut lines = s.text.lines();
        let first = lines
            .find(|l| !l.contains("[ cut here ]"))
            .unwrap_or_default();
        why.push(format!(
            "the kernel log since the last check holds a splat: {first}"
        ));
    }
    for l in &scan.lost {
        why.push(format!(
            "the kernel log since the last check lost records: {}",
            l.gap.describe()
        ));
    }
    if !log.lines().any(|l| l.contains(";bpfvm: warm check ")) {
        why.push("the kernel log lacks this check's marker".into());
    }
    if e.log_bytes > LOG_LIMIT {
        why.push(format!(
            "the guest's copy of its kernel log holds {} MiB (a fresh boot starts it again)",
            e.log_bytes >> 20
        ));
    }
    why
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOOT: &str = "release 6.1.0-57-cloud-amd64\ntainted 0\nmodule virtiofs\n\
        sysctl /proc/sys/kernel/bpf_stats_enabled 0\nsysctl /proc/sys/kernel/unprivileged_bpf_disabled 2\n\
        sysctl /proc/sys/kernel/hung_task_timeout_secs 120\nsysctl /proc/sys/fs/file-nr 416 0 9223372036854775807\n\
        sysctl /proc/sys/kernel/ns_last_pid 211\nmodparam printk.time Y\ncgroup /sys/fs/cgroup \n\
        trace tracing_on 1\ntrace kprobe_events \ntrace set_event \n\
        file /dev/shm dir\nfile /run/tmp/virtme_rw_overlay7/upper/.bpfvm-warm 0 1765000000\n\
        netdev lo index=1 type=772 flags=0x10049 mtu=65536 qdisc=noqueue txqlen=1000 address=000000000000 operstate=0 master= kind=\n\
        netaddr lo 127.0.0.1/8 scope=254 local=127.0.0.1 label=lo\n\
        route family=2 table=255 type=2 proto=2 scope=254 tos=0 dst=127.0.0.1/32 src=/0 gateway= dev=lo 7=7f000001\n\
        mount /sys/fs/bpf bpf\nbtf 1\ntmp bpfvm-vmlinux.btf\nbtfcopy 12 5000 100\nprocess 1 virtme-ng-init\n\
        process 80 sh\nprocess 81 dd\nend\n";
    const LOG: &str =
        "6,100,9000000,-;virtio_net: something\n12,101,9000001,-;bpfvm: warm check 0\n";

    fn evidence<'a>(now: &'a str, log: &'a str) -> Evidence<'a> {
        Evidence {
            boot: BOOT,
            now,
            log,
            after: Some(99),
            log_bytes: 1 << 20,
        }
    }

    #[test]
    fn the_same_state_and_a_clean_log_since_the_check_reuse() {
        let reordered = BOOT.replace(
            "process 80 sh\nprocess 81 dd\n",
            "process 81 dd\nprocess 80 sh\n",
        );
        assert_eq!(judge(&evidence(&reordered, LOG)), Vec::<String>::new());
        let from_boot = format!("6,0,0,-;Linux version 6.1\n{LOG}")
            .replace(",100,", ",1,")
            .replace(",101,", ",2,");
        let e = Evidence {
            after: None,
            ..evidence(BOOT, &from_boot)
        };
        assert_eq!(judge(&e), Vec::<String>::new());
    }

    /// Each thing a run can leave behind is a reason, named.
    /// Each case's change (`was` made `now` in the boot's record) refuses the guest with
    /// `want` among the reasons.
    fn assert_named(cases: &[(&str, &str, &str)]) {
        for (was, now, want) in cases {
            let state = BOOT.replacen(was, now, 1);
            let why = judge(&evidence(&state, LOG));
            assert!(why.iter().any(|w| w == want), "{want}: {why:?}");
        }
    }

    /// What a run can change beyond BPF objects, each named: a sysctl, a module parameter, a
    /// cgroup, tracefs, a file on the guest's own file systems, the root network namespace, a
    /// process of the boot it killed.
    #[test]
    fn what_a_run_changes_in_the_rest_of_the_guest_is_named() {
        assert_named(&[
            (
                "process 81 dd\n",
                "",
                "a process of the boot is gone: dd (pid 81)",
            ),
            (
                "sysctl /proc/sys/kernel/hung_task_timeout_secs 120\n",
                "sysctl /proc/sys/kernel/hung_task_timeout_secs 5\n",
                "sysctl /proc/sys/kernel/hung_task_timeout_secs was 120 at boot, 5 now",
            ),
            (
                "modparam printk.time Y\n",
                "modparam printk.time N\n",
                "module parameter printk.time was Y at boot, N now",
            ),
            (
                "cgroup /sys/fs/cgroup \n",
                "cgroup /sys/fs/cgroup pids\ncgroup /sys/fs/cgroup/test \n",
                "cgroup /sys/fs/cgroup/test appeared ()",
            ),
            (
                "trace tracing_on 1\n",
                "trace tracing_on 0\n",
                "tracefs tracing_on was 1 at boot, 0 now",
            ),
            (
                "trace kprobe_events \n",
                "trace kprobe_events p:kprobes/p_bpf_prog_put bpf_prog_put\n",
                "tracefs kprobe_events was  at boot, p:kprobes/p_bpf_prog_put bpf_prog_put now",
            ),
            (
                "file /dev/shm dir\n",
                "file /dev/shm dir\nfile /dev/shm/left 5 1765000100\n",
                "file /dev/shm/left appeared (5 1765000100)",
            ),
            (
                "netdev lo index=1 type=772 flags=0x10049 mtu=65536 ",
                "netdev lo index=1 type=772 flags=0x10049 mtu=1500 ",
                "network device (root namespace) lo was index=1 type=772 flags=0x10049 mtu=65536 \
                 qdisc=noqueue txqlen=1000 address=000000000000 operstate=0 master= kind= at boot, \
                 index=1 type=772 flags=0x10049 mtu=1500 qdisc=noqueue txqlen=1000 \
                 address=000000000000 operstate=0 master= kind= now",
            ),
            (
                "netaddr lo 127.0.0.1/8 scope=254 local=127.0.0.1 label=lo\n",
                "netaddr lo 127.0.0.1/8 scope=254 local=127.0.0.1 label=lo\n\
                 netaddr lo 10.9.9.9/32 scope=0 local=10.9.9.9 label=lo\n",
                "an address (root namespace) left: lo 10.9.9.9/32 scope=0 local=10.9.9.9 label=lo",
            ),
            (
                "netaddr lo 127.0.0.1/8 scope=254 local=127.0.0.1 label=lo\n",
                "qdisc lo handle=ffff0000 parent=fffffff1 kind=clsact options=\n",
                "a qdisc (root namespace) left: lo handle=ffff0000 parent=fffffff1 kind=clsact \
                 options=",
            ),
        ]);
    }

    #[test]
    fn what_a_run_leaves_behind_is_named() {
        let cases = [
            (
                "mount /sys/fs/bpf bpf\n",
                "mount /sys/fs/bpf bpf\nbpffs /sys/fs/bpf/my_map\n",
                "an object pinned in bpffs left: /sys/fs/bpf/my_map",
            ),
            (
                "module virtiofs\n",
                "module virtiofs\nmodule dummy\n",
                "a module left: dummy",
            ),
            (
                "btf 1\n",
                "btf 1\nmap 7\nprog 3\nlink 2\n",
                "a BPF map (id) left: 7",
            ),
            (
                "sysctl /proc/sys/kernel/bpf_stats_enabled 0\n",
                "sysctl /proc/sys/kernel/bpf_stats_enabled 1\n",
                "sysctl /proc/sys/kernel/bpf_stats_enabled was 0 at boot, 1 now",
            ),
            ("tainted 0\n", "tainted 512\n", "tainted 0 at boot, 512 now"),
            (
                "process 81 dd\n",
                "process 81 dd\nprocess 300 sleep\nprocess 301 sh\n",
                "a process left: sh (pid 301)",
            ),
            (
                "tmp bpfvm-vmlinux.btf\n",
                "tmp bpfvm-vmlinux.btf\ntmp x\n",
                "a file in /tmp left: x",
            ),
            (
                "module virtiofs\n",
                "",
                "a module gone since boot: virtiofs",
            ),
            (
                "btfcopy 12 5000 100\n",
                "btfcopy 12 5000 107\n",
                "the kernel BTF's copy in /tmp changed (inode, size, change time: 12 5000 100 at \
                 boot, 12 5000 107 now)",
            ),
            (
                "btfcopy 12 5000 100\n",
                "",
                "the kernel BTF's copy in /tmp changed (inode, size, change time: 12 5000 100 at \
                 boot, none now)",
            ),
        ];
        assert_named(&cases);
        let why = judge(&evidence(
            &BOOT.replace("btf 1\n", "btf 1\nmap 7\nprog 3\nlink 2\n"),
            LOG,
        ));
        assert_eq!(
            why,
            [
                "a BPF link (id) left: 2",
                "a BPF map (id) left: 7",
                "a BPF program (id) left: 3"
            ]
        );
    }

    /// A udev worker that came or went is no reason; a process of the boot that a run
    /// killed is, and so is one a run left.
    #[test]
    fn a_udev_worker_is_no_reason_a_killed_or_left_process_is() {
        let worker = "process 90 (udev-worker)\n";
        let udev = BOOT.replace("process 81 dd\n", &format!("process 81 dd\n{worker}"));
        assert_eq!(judge(&evidence(&udev, LOG)), Vec::<String>::new());
        let e = Evidence {
            boot: &udev,
            ..evidence(BOOT, LOG)
        };
        assert_eq!(judge(&e), Vec::<String>::new(), "a worker that ended");
        let left = BOOT.replace(
            "process 81 dd\n",
            "process 81 dd\nprocess 91 (udev-worker)\nprocess 92 x\n",
        );
        assert_eq!(judge(&evidence(&left, LOG)), ["a process left: x (pid 92)"]);
        let killed = BOOT.replace("process 81 dd\n", "");
        assert_eq!(
            judge(&evidence(&killed, LOG)),
            ["a process of the boot is gone: dd (pid 81)"]
        );
        let again = BOOT.replace("process 81 dd\n", "process 93 dd\n");
        assert_eq!(
            judge(&evidence(&again, LOG)),
            [
                "a process left: dd (pid 93)",
                "a process of the boot is gone: dd (pid 81)"
            ],
            "started again: another process"
        );
    }

    /// Every sysctl is compared, but the counters that change on their own only by their
    /// name: a run that changed `hung_task_timeout_secs` refuses, open files and pids handed
    /// out since do not; one that is gone or appeared does.
    #[test]
    fn every_sysctl_counts_but_a_counter_that_changes_on_its_own() {
        let counters = BOOT
            .replace("file-nr 416 0 ", "file-nr 480 0 ")
            .replace("ns_last_pid 211", "ns_last_pid 377");
        assert_eq!(judge(&evidence(&counters, LOG)), Vec::<String>::new());
        let gone = BOOT.replace("sysctl /proc/sys/kernel/ns_last_pid 211\n", "");
        assert_eq!(
            judge(&evidence(&gone, LOG)),
            ["sysctl /proc/sys/kernel/ns_last_pid (211) is gone since boot"]
        );
        for (name, why) in CHANGE_ON_THEIR_OWN {
            let (kind, path) = name.split_once(' ').unwrap();
            assert!(changes_on_its_own(kind, path), "{name}: {why}");
        }
        assert!(!changes_on_its_own(
            "sysctl",
            "/proc/sys/kernel/hung_task_timeout_secs"
        ));
        assert!(!changes_on_its_own("modparam", "/proc/sys/fs/file-nr"));
    }

    /// A WARN since the last check (a run's, or one while the guest was idle), a lost record,
    /// a log without this check's marker or close to its bound: each boots afresh.
    #[test]
    fn a_splat_or_a_gap_since_the_last_check_or_a_full_log_boots_afresh() {
        let warn = "4,100,9000000,-;------------[ cut here ]------------\n\
                    4,101,9000001,-;WARNING: CPU: 0 PID: 9 at kernel/bpf/syscall.c:512 f+0x1/0x2\n\
                    4,102,9000002,-;---[ end trace 0000000000000000 ]---\n\
                    12,103,9000003,-;bpfvm: warm check 1\n";
        let why = judge(&evidence(BOOT, warn));
        assert_eq!(why.len(), 1, "{why:?}");
        assert!(
            why[0].starts_with("the kernel log since the last check holds a splat"),
            "{why:?}"
        );
        assert!(
            why[0].ends_with("WARNING: CPU: 0 PID: 9 at kernel/bpf/syscall.c:512 f+0x1/0x2"),
            "{why:?}"
        );
        let gap = LOG.replace(",100,", ",104,").replace(",101,", ",105,");
        assert_eq!(
            judge(&evidence(BOOT, &gap)),
            ["the kernel log since the last check lost records: 4 records lost between seq 99 and 104"]
        );
        assert_eq!(
            judge(&evidence(BOOT, "6,100,9000000,-;x\n")),
            ["the kernel log lacks this check's marker"]
        );
        let full = Evidence {
            log_bytes: LOG_LIMIT + 1,
            ..evidence(BOOT, LOG)
        };
        assert_eq!(judge(&full).len(), 1);
    }

    /// When in doubt, boot: a record cut short or odd is a reason, never a pass.
    #[test]
    fn a_record_cut_short_or_malformed_refuses() {
        for (now, want) in [
            (BOOT.trim_end_matches("end\n").to_string(), "cut short"),
            (format!("{BOOT}module x\n"), "a line after its end"),
            (
                BOOT.replace("module virtiofs\n", "module\n"),
                "a line without a value",
            ),
            (
                BOOT.replace("release 6.1.0-57-cloud-amd64\n", ""),
                "no `release` line",
            ),
            (String::new(), "cut short"),
            (BOOT.replace("tmp bpfvm-vmlinux.btf\n", ""), "no `tmp` line"),
            (
                BOOT.replace("btf 1\n", "perl failed\n"),
                "not listed (perl failed)",
            ),
        ] {
            let why = judge(&evidence(&now, LOG));
            assert!(
                why.iter().any(|w| w
                    .starts_with("the guest's record for this check is unreadable")
                    && w.contains(want)),
                "{want}: {why:?}"
            );
        }
    }
}
