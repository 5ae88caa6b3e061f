//! The kept guest's side: the script virtme-ng runs instead of one run's, a loop that waits for
//! the host's word, records its own state when asked (a check), then runs one run's guest
//! script (unchanged but for its kernel log copy, `machine::guest`), and again.
//!
//! The host speaks a line at a time on the loop's stdin (`check.N`, `go.N ...`, `end.N`; virtme-ng's
//! `virtme.stdin` port, `vng::VmSpec::input`), which the loop waits on in a blocking read: an
//! idle guest polls nothing, and its end of file (the keeper gone) ends the loop. The guest
//! speaks on its stdout, one `bpfvm-warm: ` line per step, which the keeper reads as it comes.
//! Each check also writes a marker into the kernel log, `bpfvm: warm check N`, so that the
//! host knows which records it covers.
//!
//! The guest keeps one copy of `/dev/kmsg` running for its whole life (`kmsg.log` in the
//! shared directory): a run's own copy is that file from the byte after its check, and the
//! host reads the records between two checks there.
use std::path::Path;

use crate::domain::arch::Arch;
use crate::machine::guest::KERNEL_BTF_COPY;
use crate::machine::vng::START_MARKER;
use crate::support::guest_files;
use crate::support::shell::quote;

/// The prefix of every line the loop prints for the keeper.
pub const SAYS: &str = "bpfvm-warm: ";
/// The guest's running copy of its kernel log, in the shared directory.
pub const KMSG_LOG: &str = "kmsg.log";
/// The record of the guest's state right after its boot, in the shared directory.
pub const BOOT_STATE: &str = "state.boot";

/// The record of check `n`, in the shared directory.
pub fn state_file(n: u64) -> String {
    format!("state.{n}")
}

/// The kernel log marker of check `n`.
pub fn check_marker(n: u64) -> String {
    format!("bpfvm: warm check {n}")
}

/// The kernel log marker the guest writes once it settled after run `n`: the run's kernel log
/// ends there.
pub fn end_marker(n: u64) -> String {
    format!("bpfvm: warm end {n}")
}

/// Writes the guest's state to stdout as `KIND VALUE` lines ending with `end`, as
/// `results::freshness` reads them; its arguments are the architecture's `bpf(2)` number
/// (`Arch::bpf_syscall`) and the kernel BTF's copy. Shell builtins but one `perl` (Essential in
/// Debian, as `machine::guest`'s settle step uses; an arm64 pin's root lists `perl-base`), which
/// uses no module ([`PERL`]). A process is named by its pid and `comm`; kernel threads
/// (kthreadd's children) and the loop's own shell are left out.
const STATE: &str = r#"bpfvm_state() {
  local f line pid rest ppid comm
  read -r line < /proc/sys/kernel/osrelease && echo "release $line"
  read -r line < /proc/sys/kernel/tainted && echo "tainted $line"
  while read -r line _; do echo "module $line"; done < /proc/modules
  while read -r _ line f _; do echo "mount $line $f"; done < /proc/self/mounts
  bpfvm_tmp /proc/self/mounts
  for f in /proc/[0-9]*/stat; do
    { read -r line < "$f"; } 2>/dev/null || continue
    pid=${line%% *}
    rest=${line##*\) }
    ppid=${rest#* }
    ppid=${ppid%% *}
    [ "$pid" = 2 ] || [ "$ppid" = 2 ] || [ "$pid" = $$ ] && continue
    comm=${line#*\(}
    echo "process $pid ${comm%)*}"
  done
  perl -e "$bpfvm_perl" "$1" "$2" || echo "perl failed"
  echo end
}
"#;

/// The part of the record `perl` writes (in `$bpfvm_perl`: its text has no single quote, so
/// that the shell can hold it), from the kernel's own interfaces, no tool's:
/// - `bpffs PATH`: every file and directory under `/sys/fs/bpf`;
/// - `btfcopy INODE SIZE CTIME`: the loop's copy of the kernel's BTF, which runs take instead of
///   copying it again (`machine::guest::KERNEL_BTF_COPY`): any write, truncation, `touch` or
///   replacement changes one of them;
/// - `prog`/`map`/`btf`/`link ID`: every BPF object (`BPF_PROG_GET_NEXT_ID` 11,
///   `BPF_MAP_GET_NEXT_ID` 12, `BPF_BTF_GET_NEXT_ID` 23, `BPF_LINK_GET_NEXT_ID` 31, each taking
///   `start_id` and returning `next_id`, include/uapi/linux/bpf.h). Only ENOENT (2 on both
///   architectures) ends a list: any other failure (a wrong syscall number's ENOSYS) is
///   `perl failed`, which the judgement refuses;
/// - `sysctl PATH VALUE`: every readable file under `/proc/sys` (whitespace made one space)
///   but `vm/stat_refresh`, a command, whose read makes every CPU fold its counters and may log
///   a line (`vmstat_refresh`, mm/vmstat.c);
/// - `modparam MODULE.NAME VALUE`: every readable `/sys/module/*/parameters/*`;
/// - `cgroup PATH SUBTREE`: every cgroup directory under `/sys/fs/cgroup`, with the
///   controllers it enables for its children;
/// - `trace NAME VALUE`: tracefs's switches and lists (`tracing_on`, the tracer, the enabled
///   events `set_event`, the dynamic events `kprobe_events`, `uprobe_events`,
///   `dynamic_events`, the function filters, the buffer's size, options and clock), and
///   `trace instances/NAME dir` for each instance;
/// - `file PATH dir|SIZE MTIME`: every file and directory under `/run` (the guest's own
///   tmpfs, which holds the upper directories of virtme-ng's overlays on `/etc`, `/var`,
///   `/home`, `/tmp`, ...: `mount_virtme_overlays`), `/dev/shm`, and `/var/tmp` when it is a
///   file system of its own (an arm64 root's tmpfs; on x86_64 it is in `/var`'s overlay); not
///   `/run/udev`, udev's database and locks, which its own events change (a kept 6.1 guest's
///   `links/*/.lock` files were there at its first record and gone a few seconds later);
/// - the root network namespace over rtnetlink (`NETLINK_ROUTE` 0; an `RTM_GET*` dump, each
///   reply a `struct nlmsghdr` of 16 bytes then the family's header and its attributes,
///   include/uapi/linux/netlink.h, rtnetlink.h, if_link.h, if_addr.h, pkt_sched.h):
///   `netdev NAME VALUE` for each device (`RTM_GETLINK` 18: `struct ifinfomsg`, 16 bytes;
///   its flags, `IFLA_MTU` 4, `IFLA_QDISC` 6, `IFLA_TXQLEN` 13, `IFLA_ADDRESS` 1,
///   `IFLA_OPERSTATE` 16, `IFLA_MASTER` 10, `IFLA_LINKINFO` 18's `IFLA_INFO_KIND` 1, no
///   counter), `netaddr` each address (`RTM_GETADDR` 22: `struct ifaddrmsg`, 8 bytes;
///   `IFA_ADDRESS` 1, `IFA_LOCAL` 2, `IFA_LABEL` 3), `route` each route of every table and
///   family (`RTM_GETROUTE` 26: `struct rtmsg`, 12 bytes; every attribute but `RTA_CACHEINFO`
///   12 and `RTA_EXPIRES` 23, which count time), `netrule` each policy rule (`RTM_GETRULE` 34)
///   and `qdisc` each queueing discipline (`RTM_GETQDISC` 38: `struct tcmsg`, 20 bytes;
///   `TCA_KIND` 1 and `TCA_OPTIONS` 2, not its statistics nor its reference count in
///   `tcm_info`).
const PERL: &str = r#"
my ($nr, $btf) = (shift, shift // "");
sub names { opendir(my $h, $_[0]) or return (); return sort grep { $_ ne "." && $_ ne ".." } readdir $h }
my %skip = ("/run/udev" => 1);
sub walk { my ($d, $f) = @_; for my $e (names($d)) { my $p = "$d/$e"; next if $skip{$p};
  $f->($p); walk($p, $f) if -d $p && !-l $p } }
sub value { open(my $h, "<", $_[0]) or return undef; local $/; my $v = <$h>;
  return undef unless defined $v; $v =~ s/\s+/ /g; $v =~ s/^ | $//g; return $v }
walk("/sys/fs/bpf", sub { print "bpffs $_[0]\n" });
if (my @s = stat($btf)) { print "btfcopy $s[1] $s[7] $s[10]\n" }
for my $c ([11, "prog"], [12, "map"], [23, "btf"], [31, "link"]) {
  my $id = 0;
  while (1) { my $a = pack("L3", $id, 0, 0);
    if (syscall($nr, $c->[0], $a, 12) != 0) { last if $! == 2; die "bpf: $!\n" }
    $id = (unpack("L3", $a))[1]; print "$c->[1] $id\n" } }
walk("/proc/sys", sub { my $v; print "sysctl $_[0] $v\n" if -f $_[0] && $_[0] ne "/proc/sys/vm/stat_refresh"
  && defined($v = value($_[0])) });
for my $m (names("/sys/module")) { for my $p (names("/sys/module/$m/parameters")) {
  my $v = value("/sys/module/$m/parameters/$p"); print "modparam $m.$p $v\n" if defined $v } }
walk("/sys/fs/cgroup", sub { print "cgroup $_[0] ", value("$_[0]/cgroup.subtree_control") // "", "\n" if -d $_[0] });
my $t = "/sys/kernel/tracing";
for my $f (qw(tracing_on current_tracer set_event kprobe_events uprobe_events dynamic_events
    set_ftrace_filter set_ftrace_notrace set_graph_function set_ftrace_pid set_event_pid
    buffer_size_kb trace_options trace_clock tracing_cpumask)) {
  my $v = value("$t/$f"); print "trace $f $v\n" if defined $v }
print "trace instances/$_ dir\n" for names("$t/instances");
my @own = ("/run", "/dev/shm");
push @own, "/var/tmp" if (stat("/var/tmp"))[0] != (stat("/var"))[0];
for my $r (@own) { walk($r, sub { my @s = lstat($_[0]); print "file $_[0] ", (-d _ ? "dir" : "$s[7] $s[9]"), "\n" }) }
sub nl { my ($type, $body) = @_; my @out;
  socket(my $s, 16, 3, 0) or die "netlink: $!\n";
  send($s, pack("LSSLL", 16 + length($body), $type, 0x301, 1, 0) . $body, 0) or die "netlink: $!\n";
  while (1) { defined(recv($s, my $buf, 1 << 20, 0)) or die "netlink: $!\n";
    while (length($buf) >= 16) { my ($len, $t) = unpack("LS", $buf);
      return @out if $t == 3;
      die "netlink: an error for $type\n" if $t == 2 || $len < 16;
      push @out, substr($buf, 16, $len - 16); $buf = substr($buf, ($len + 3) & ~3) } } }
sub attrs { my ($d) = @_; my %at; while (length($d) >= 4) { my ($l, $t) = unpack("SS", $d);
  last if $l < 4; $at{$t & 0x3fff} = substr($d, 4, $l - 4); $d = substr($d, ($l + 3) & ~3) } return %at }
sub ip { my ($f, $x) = @_; return "" unless defined $x;
  return $f == 2 ? join(".", unpack("C4", $x)) : $f == 10 ? join(":", unpack("(H4)8", $x)) : unpack("H*", $x) }
sub str { return defined $_[0] ? unpack("Z*", $_[0]) : "" }
sub u32 { return defined $_[0] ? unpack("L", $_[0]) : "" }
my %dev;
for my $m (nl(18, pack("CCSlLL", 0, 0, 0, 0, 0, 0))) {
  my (undef, undef, $type, $i, $flags) = unpack("CCSlL", $m); my %at = attrs(substr($m, 16));
  my %info = attrs($at{18} // ""); $dev{$i} = str($at{3});
  printf "netdev %s index=%d type=%d flags=0x%x mtu=%s qdisc=%s txqlen=%s address=%s operstate=%s master=%s kind=%s\n",
    $dev{$i}, $i, $type, $flags, u32($at{4}), str($at{6}), u32($at{13}), unpack("H*", $at{1} // ""),
    defined $at{16} ? unpack("C", $at{16}) : "", u32($at{10}), str($info{1}) }
for my $m (nl(22, pack("CCCCL", 0, 0, 0, 0, 0))) {
  my ($f, $len, undef, $scope, $i) = unpack("CCCCL", $m); my %at = attrs(substr($m, 8));
  printf "netaddr %s %s/%d scope=%d local=%s label=%s\n", $dev{$i} // $i, ip($f, $at{1}), $len, $scope,
    ip($f, $at{2}), str($at{3}) }
for my $m (nl(26, pack("C8L", 0, 0, 0, 0, 0, 0, 0, 0, 0))) {
  my ($f, $dl, $sl, $tos, $table, $proto, $scope, $type) = unpack("C8", $m); my %at = attrs(substr($m, 12));
  my $more = join(" ", map { "$_=" . unpack("H*", $at{$_}) } grep { !/^(1|2|4|5|12|15|23)$/ } sort { $a <=> $b } keys %at);
  printf "route family=%d table=%s type=%d proto=%d scope=%d tos=%d dst=%s/%d src=%s/%d gateway=%s dev=%s %s\n",
    $f, $at{15} ? u32($at{15}) : $table, $type, $proto, $scope, $tos, ip($f, $at{1}), $dl, ip($f, $at{2}), $sl,
    ip($f, $at{5}), defined $at{4} ? $dev{u32($at{4})} // u32($at{4}) : "", $more }
print "netrule ", unpack("H*", $_), "\n" for nl(34, pack("C8L", 0, 0, 0, 0, 0, 0, 0, 0, 0));
for my $m (nl(38, pack("CCSlLLL", 0, 0, 0, 0, 0, 0, 0))) {
  my (undef, undef, undef, $i, $handle, $parent) = unpack("CCSlLL", $m); my %at = attrs(substr($m, 20));
  printf "qdisc %s handle=%x parent=%x kind=%s options=%s\n", $dev{$i} // $i, $handle, $parent, str($at{1}),
    unpack("H*", $at{2} // "") }
"#;

/// Writes a `tmp NAME` line for each entry the guest wrote into `/tmp`, as the mount table
/// in `$1` shows it: virtme-ng mounts an overlay there, over the host's `/tmp` or over an own
/// root's empty one (virtme-init's `mount_virtme_overlays`, its upper directory in
/// `/run/tmp`), so only the upper directory is the guest's. Another `/tmp` gives no line,
/// and a record without one is refused.
const TMP: &str = r#"bpfvm_tmp() {
  local line f rest
  while read -r _ line f rest _; do
    [ "$line $f" = "/tmp overlay" ] || continue
    rest=${rest#*upperdir=}
    for f in "${rest%%,*}"/* "${rest%%,*}"/.[!.]*; do [ -e "$f" ] || [ -L "$f" ] && echo "tmp ${f##*/}"; done
  done < "$1"
}
"#;

/// The loop's reading of the host's lines: `check.N` records the state (`bpfvm_check N`),
/// `go.N` runs the script it names (`bpfvm_run N`, with the seq and byte in `bpfvm_after` and
/// `bpfvm_from`, and the script, the rest of the line, in `bpfvm_script`), but only for the
/// last check and once: a run that went away after its check (a failed build) leaves no go,
/// and the next check is heard. `end.N` settles after run N (`bpfvm_end`), the run just
/// ended, and only it. Other lines are passed over; the end of the input ends it.
const DISPATCH: &str = r#"bpfvm_n= bpfvm_ran=
while read -r bpfvm_word bpfvm_after bpfvm_from bpfvm_script; do
  case $bpfvm_word in
    check.[0-9]*)
      bpfvm_n=${bpfvm_word#check.}
      bpfvm_check "$bpfvm_n" ;;
    go.[0-9]*)
      bpfvm_ran=
      if [ -n "$bpfvm_n" ] && [ "$bpfvm_word" = "go.$bpfvm_n" ]; then
        bpfvm_run "$bpfvm_n"; bpfvm_ran=$bpfvm_n
      fi
      bpfvm_n= ;;
    end.[0-9]*)
      if [ -n "$bpfvm_ran" ] && [ "$bpfvm_word" = "end.$bpfvm_ran" ]; then
        bpfvm_end "$bpfvm_ran"; bpfvm_ran=
      fi ;;
  esac
done
"#;

/// How often, in seconds, a run's copy of the kernel log looks for more in the guest's
/// running copy (`tail -s`, `machine::guest`): an own root's `tail` is busybox's, which
/// refuses a fraction ("invalid number '0.05'") and so copies nothing.
fn log_poll(arch: Arch) -> &'static str {
    if arch.boots_host_root() {
        "0.05"
    } else {
        "1"
    }
}

/// The loop, for a guest whose shared directory is `share`. As `machine::guest`'s scripts, it
/// runs under bash, mounts bpffs and debugfs and copies the kernel's BTF to where each run
/// puts it, so that its state before the first run is what each run's own preamble leaves.
/// `go.N` carries the seq of the check's marker, the byte of the kernel log copy after it
/// (1-based, as `tail -c +K`) and the run's script.
pub fn loop_script(share: &Path, arch: Arch) -> String {
    let w = quote(&share.display().to_string());
    let (bpf, poll) = (arch.bpf_syscall(), log_poll(arch));
    let btf = KERNEL_BTF_COPY;
    let blocks = guest_files::MAX_FILE / 512;
    let settle = crate::machine::guest::settle();
    format!(
        r#"#!/bin/sh
# Written by bpfvm: a kept guest's loop (cargo xtask vm-guest); runs inside the guest as root.
[ -n "$BASH_VERSION" ] || exec bash "$0"
echo '{START_MARKER}' >&2
W={w}
echo on > /proc/sys/kernel/printk_devkmsg 2>/dev/null
(ulimit -f {blocks}; exec dd if=/dev/kmsg of="$W/{KMSG_LOG}" bs=8k conv=noerror status=none 2>/dev/null) &
grep -q ' /sys/fs/bpf ' /proc/self/mounts || mount -t bpf bpf /sys/fs/bpf
grep -q ' /sys/kernel/debug ' /proc/self/mounts || mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
# Each run's tests read the kernel's BTF from this copy and find the sysfs file empty
# (`machine::guest::kernel_btf_once`): hidden here once, for the guest's whole life.
cp /sys/kernel/btf/vmlinux {btf} 2>/dev/null && mount --bind /dev/null /sys/kernel/btf/vmlinux
# The loop's own file in /tmp: a record of the overlay there always has a `tmp` line.
: > /tmp/.bpfvm-warm
bpfvm_perl='{PERL}'
{TMP}{STATE}bpfvm_state {bpf} {btf} < /dev/null > "$W/{BOOT_STATE}"
bpfvm_check() {{
  bpfvm_state {bpf} {btf} < /dev/null > "$W/state.$1"
  echo "bpfvm: warm check $1" > /dev/kmsg
  echo "{SAYS}checked $1"
}}
bpfvm_run() {{
  echo "{SAYS}started $1"
  BPFVM_WARM_KMSG="$W/{KMSG_LOG}" BPFVM_WARM_KMSG_FROM=$bpfvm_from BPFVM_WARM_AFTER=$bpfvm_after \
    BPFVM_WARM_POLL={poll} bash "$bpfvm_script" < /dev/null
  echo "{SAYS}ended $1 $?"
}}
# After a run: the kernel's deferred work (as a run's script waits for it before its last
# phase), then the marker that ends the run's kernel log (`end_marker`).
bpfvm_end() {{
{settle}  echo "bpfvm: warm end $1" > /dev/kmsg
  echo "{SAYS}settled $1"
}}
echo "{SAYS}ready"
{DISPATCH}echo "{SAYS}stopped"
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `bpfvm_state` with `bpf` for its syscall number, run under the host's bash as it would
    /// be in the guest: its record and its stderr.
    fn state_on_the_host(bpf: u32) -> (String, String) {
        state_with_btf(bpf, Path::new("/nowhere"))
    }

    fn state_with_btf(bpf: u32, btf: &Path) -> (String, String) {
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!(
                "bpfvm_perl='{PERL}'\n{TMP}{STATE}bpfvm_state {bpf} {}",
                btf.display()
            ))
            .output()
            .unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (text(&out.stdout), text(&out.stderr))
    }

    /// The record is whole, with every kind the judgement needs (sysctls whole, module
    /// parameters, files, the network namespace's loopback device, its address and its local
    /// routes), no kernel thread, and the BPF objects listed by the host's own `bpf(2)`: as an
    /// unprivileged user the kernel refuses the listing (EPERM), which is still that syscall,
    /// never ENOSYS.
    #[test]
    fn the_state_record_is_whole_and_names_no_kernel_thread() {
        let (text, stderr) = state_on_the_host(Arch::host().bpf_syscall());
        assert!(text.ends_with("end\n"), "{text}");
        for kind in [
            "release ",
            "tainted ",
            "mount ",
            "process 1 ",
            "sysctl /proc/sys/kernel/ostype Linux",
            "sysctl /proc/sys/fs/file-nr ",
            "modparam ",
            "file /run/",
            "netdev lo index=1 ",
            "netaddr lo 127.0.0.1/8 ",
            "route family=2 table=255 ",
        ] {
            assert!(text.lines().any(|l| l.starts_with(kind)), "{kind}: {text}");
        }
        assert!(!text.contains("process kthreadd"), "{text}");
        assert!(!text.contains("file /run/udev/"), "udev's own: {text}");
        assert!(
            !text.contains("perl failed") || stderr.contains("bpf: Operation not permitted"),
            "{text}{stderr}"
        );
    }

    /// The BTF copy's line changes with any write to it, a `touch`, or a new file in its place,
    /// and is absent when there is no copy (a kernel without BTF).
    #[test]
    fn the_btf_copy_is_recorded_so_that_any_change_shows() {
        let t = tempfile::tempdir().unwrap();
        let btf = t.path().join("bpfvm-vmlinux.btf");
        let line = || {
            let (text, _) = state_with_btf(Arch::host().bpf_syscall(), &btf);
            let lines: Vec<String> = text
                .lines()
                .filter(|l| l.starts_with("btfcopy "))
                .map(String::from)
                .collect();
            lines
        };
        assert_eq!(line(), Vec::<String>::new());
        std::fs::write(&btf, "BTF").unwrap();
        let first = line();
        assert_eq!(first.len(), 1, "{first:?}");
        assert_eq!(line(), first, "the same file reads the same");
        let changed = |what: &str, change: &dyn Fn()| {
            let before = line();
            // A change time in whole seconds: let the next change fall in another second.
            std::thread::sleep(std::time::Duration::from_millis(1100));
            change();
            assert_ne!(line(), before, "{what}");
        };
        changed("rewritten, same size", &|| {
            std::fs::write(&btf, "FTB").unwrap()
        });
        changed("touched", &|| {
            std::fs::File::options()
                .write(true)
                .open(&btf)
                .unwrap()
                .set_modified(std::time::SystemTime::UNIX_EPOCH)
                .unwrap()
        });
        changed("replaced", &|| {
            std::fs::remove_file(&btf).unwrap();
            std::fs::write(&btf, "FTB").unwrap();
        });
    }

    /// A syscall that is not `bpf(2)` (another architecture's number) ends in `perl failed`,
    /// which the judgement refuses, not in a record without BPF objects.
    #[test]
    fn a_syscall_that_is_not_bpf_fails_the_record() {
        let (text, stderr) = state_on_the_host(999_999);
        assert!(text.ends_with("perl failed\nend\n"), "{text}");
        assert!(stderr.contains("bpf: Function not implemented"), "{stderr}");
    }

    /// `/tmp` as an arm64 guest's mount table shows it (virtme-init's overlay over its own
    /// root's `/tmp`, read in a 6.12 arm64 guest), and as an x86_64 guest's (the host's
    /// `/tmp` below): only its upper directory's entries are listed, hidden and dangling ones
    /// too, and nothing of another overlay's.
    #[test]
    fn the_tmp_record_lists_what_the_guest_wrote_over_its_tmp() {
        let t = tempfile::tempdir().unwrap();
        let upper = |n: u32| t.path().join(format!("run/tmp/virtme_rw_overlay{n}/upper"));
        for n in [6, 7] {
            std::fs::create_dir_all(upper(n)).unwrap();
        }
        std::fs::write(upper(7).join("bpfvm-vmlinux.btf"), "").unwrap();
        std::fs::write(upper(7).join(".bpfvm-warm-wait"), "").unwrap();
        std::os::unix::fs::symlink("/nowhere", upper(7).join("left")).unwrap();
        std::fs::write(upper(6).join("not-tmp"), "").unwrap();
        let overlay = |n: u32, dir: &str, tail: &str| {
            format!(
                "virtme_rw_overlay{n} {dir} overlay rw,relatime,lowerdir={dir},upperdir={},\
                 workdir=/run/tmp/virtme_rw_overlay{n}/work{tail} 0 0\n",
                upper(n).display()
            )
        };
        let list = |mounts: String| {
            let file = t.path().join("mounts");
            std::fs::write(&file, mounts).unwrap();
            let out = std::process::Command::new("bash")
                .arg("-c")
                .arg(format!("{TMP}bpfvm_tmp {}", file.display()))
                .output()
                .unwrap();
            let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(String::from)
                .collect();
            lines.sort();
            lines
        };
        let want = ["tmp .bpfvm-warm-wait", "tmp bpfvm-vmlinux.btf", "tmp left"];
        let arm64 = format!(
            "ROOTFS / virtiofs ro,relatime 0 0\n{}{}tmpfs /var/tmp tmpfs rw,relatime 0 0\n",
            overlay(6, "/var", ",uuid=on"),
            overlay(7, "/tmp", ",uuid=on")
        );
        assert_eq!(list(arm64), want);
        let x86_64 = format!(
            "ROOTFS / virtiofs ro,relatime 0 0\n{}",
            overlay(7, "/tmp", ",xino=off")
        );
        assert_eq!(list(x86_64), want);
        assert_eq!(
            list("tmpfs /tmp tmpfs rw,relatime 0 0\n".into()),
            Vec::<String>::new()
        );
    }

    /// The dispatch under the host's bash, fed as the keeper feeds it: a go runs only after
    /// its own check, the last one, and once (a check left without its go, as by a run whose
    /// build failed, does not keep the next check from being heard); a script path with a
    /// space is whole; other lines are passed over; the end of the input ends the loop.
    #[test]
    fn a_go_runs_only_its_own_last_check_and_the_next_check_is_always_heard() {
        let run = |input: &str| {
            let stubs = "bpfvm_check() { echo \"check $1\"; }\n\
                         bpfvm_run() { echo \"run $1 [$bpfvm_after] [$bpfvm_from] [$bpfvm_script]\"; }\n\
                         bpfvm_end() { echo \"end $1\"; }\n";
            let mut child = std::process::Command::new("bash")
                .arg("-c")
                .arg(format!("{stubs}{DISPATCH}echo end"))
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            std::io::Write::write_all(child.stdin.as_mut().unwrap(), input.as_bytes()).unwrap();
            drop(child.stdin.take());
            String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap()
        };
        assert_eq!(
            run("go.0 1 2 /a\ncheck.0\nnoise\ngo.0 42 1234 /t/my run/guest.sh\ngo.0 1 2 /again\n"),
            "check 0\nrun 0 [42] [1234] [/t/my run/guest.sh]\nend\n"
        );
        assert_eq!(
            run("check.1\ncheck.2\ngo.1 1 2 /stale\ncheck.3\ngo.3 7 8 /s\n"),
            "check 1\ncheck 2\ncheck 3\nrun 3 [7] [8] [/s]\nend\n"
        );
        assert_eq!(run("check.1\n"), "check 1\nend\n");
        assert_eq!(
            run("end.0\ncheck.4\ngo.4 1 2 /s\nend.3\nend.4\nend.4\ncheck.5\nend.5\n"),
            "check 4\nrun 4 [1] [2] [/s]\nend 4\ncheck 5\nend\n",
            "an end settles after the run just ended, once"
        );
    }

    #[test]
    fn the_loop_checks_then_runs_each_script_with_its_log_copy() {
        let s = loop_script(Path::new("/t/vm-guest/share"), Arch::Arm64);
        assert!(s.contains("W=/t/vm-guest/share\n"));
        let order: Vec<usize> = [
            "bpfvm_state 280 /tmp/bpfvm-vmlinux.btf < /dev/null > \"$W/state.boot\"",
            "bpfvm_state 280 /tmp/bpfvm-vmlinux.btf < /dev/null > \"$W/state.$1\"",
            "echo \"bpfvm: warm check $1\" > /dev/kmsg",
            "echo \"bpfvm-warm: checked $1\"",
            "echo \"bpfvm-warm: started $1\"",
            "BPFVM_WARM_KMSG=\"$W/kmsg.log\" BPFVM_WARM_KMSG_FROM=$bpfvm_from",
            "echo \"bpfvm-warm: ended $1 $?\"",
            "bpfvm_end() {",
            "bpfvm_workqueues_busy",
            "echo \"bpfvm: warm end $1\" > /dev/kmsg",
            "echo \"bpfvm-warm: settled $1\"",
            "echo \"bpfvm-warm: ready\"",
            DISPATCH,
        ]
        .iter()
        .map(|p| s.find(p).unwrap_or_else(|| panic!("{p}")))
        .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
        assert_eq!(check_marker(3), "bpfvm: warm check 3");
        assert_eq!(end_marker(3), "bpfvm: warm end 3");
        assert!(s.contains("BPFVM_WARM_POLL=1 bash \"$bpfvm_script\""));
        let x86_64 = loop_script(Path::new("/t/vm-guest/share"), Arch::X86_64);
        assert!(
            x86_64.contains("bpfvm_state 321 /tmp/bpfvm-vmlinux.btf < /dev/null > \"$W/state.$1\"")
        );
        assert!(x86_64.contains("BPFVM_WARM_POLL=0.05 bash \"$bpfvm_script\""));
    }
}
