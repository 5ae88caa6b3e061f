//! The scripts the guest runs. A script file (not `--exec 'long command'`, which overflows the
//! kernel command line) prepares the guest, runs the payload, writes machine-readable results
//! into the shared directory, and finally the exit status that tells the host it finished.
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{Context, Result};

use crate::domain::arch::Arch;
use crate::machine::build::TestBinary;
use crate::machine::vng::{END_MARKER, START_MARKER, STATUS_FILE};
use crate::support::guest_files;
use crate::support::shell::{join, quote};
use crate::support::wait;
use bpfvm_common::protocol::{EXPECT_RELEASE_ENV, FEATURES_ENV, KERNEL_BTF_ENV, RESULTS_ENV};

/// Files the guest writes into the shared directory, read back by `report`.
pub use bpfvm_common::protocol::files;

/// Mounts what BPF tests need, starts the kernel log copy, and records which kernel and
/// mitigations the guest really got. Only shell builtins but `dd` and `mount`: under TCG each
/// program the guest starts costs about a tenth of a second (docs/architecture.md, what a boot
/// leaves out).
pub(crate) fn preamble(out: &Path) -> String {
    let o = quote(&out.display().to_string());
    format!(
        "#!/bin/sh\n\
         # Written by bpfvm; runs inside the guest as root.\n\
         {UNDER_BASH}\
         echo '{START_MARKER}' >&2\n\
         OUT={o}\n\
         export {RESULTS_ENV}=\"$OUT\"\n\
         {log}\
         {BUILTINS}\
         bpfvm_mounted /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf\n\
         bpfvm_mounted /sys/kernel/debug || mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null\n\
         bpfvm_copy /proc/sys/kernel/osrelease \"$OUT/{rel}\"\n\
         bpfvm_copy /proc/cmdline \"$OUT/{cmd}\"\n\
         bpfvm_copy /sys/devices/system/cpu/vulnerabilities/spectre_v2 \"$OUT/{sp}\"\n",
        log = kernel_log(),
        rel = files::RELEASE,
        cmd = files::CMDLINE,
        sp = files::SPECTRE_V2,
    )
}

/// Runs the script under bash (Essential in Debian, so in the guest's root). dash's `read` takes
/// one byte per read(2), and a numeric `/proc/sys` file reads empty past offset 0
/// (`__do_proc_doulongvec_minmax`, kernel/sysctl.c): under dash `bpfvm_mark` read only the
/// taint mask's first digit (12288 as 1). bash reads a seekable file in one read(2). Without
/// bash the script fails at once rather than misread the mask.
const UNDER_BASH: &str = "[ -n \"$BASH_VERSION\" ] || exec bash \"$0\"\n";

/// `bpfvm_mounted DIR`: whether a file system is mounted on DIR (`mountpoint -q`, without a
/// program). `bpfvm_copy FILE DEST`: FILE's first line into DEST, nothing if FILE is missing
/// (`cat`, for the one-line files of /proc and /sys).
const BUILTINS: &str = r#"bpfvm_mounted() {
  while read -r _ bpfvm_dir _; do
    [ "$bpfvm_dir" = "$1" ] && return 0
  done < /proc/self/mounts
  return 1
}
bpfvm_copy() {
  { IFS= read -r bpfvm_line < "$1" && printf '%s\n' "$bpfvm_line" > "$2"; } 2>/dev/null
}
"#;

/// Copies `/dev/kmsg` into `$OUT/kernel.log` for the whole script, and
/// defines `bpfvm_mark WORDS`, which writes a marker (`vm::health::log::Marker`) into the
/// kernel log, then the taint mask when it changed. Writes to `/dev/kmsg` are rate-limited
/// per open file unless `printk_devkmsg` is `on` (`devkmsg_write`, kernel/printk/printk.c;
/// Documentation/admin-guide/sysctl/kernel.rst). `dd` writes each record as it reads it
/// (`head` would buffer them); each read returns one record of at most `CONSOLE_EXT_LOG_MAX`
/// (8 KiB, include/linux/printk.h; a smaller buffer is `EINVAL`). The copy is bounded in
/// bytes, never in records: `ulimit -f` (512-byte blocks) stops `dd` at what the host reads
/// of a guest file (`guest_files::MAX_FILE`), and the log then lacks its last marker.
/// `noerror` keeps it copying when records were overwritten before it read them (`EPIPE`,
/// after which the kernel continues at its oldest record; the host reports the jump in the
/// sequence numbers, `health::log::Gap`).
///
/// In a kept guest (`machine::warm_guest`) the script runs after others in the same kernel: its
/// copy is then the guest's running copy of `/dev/kmsg` from the byte after the check that let
/// this run in (`BPFVM_WARM_KMSG`, `BPFVM_WARM_KMSG_FROM`), after a first line that names the
/// last record before it (`health::log::Marker::Continues`, `BPFVM_WARM_AFTER`). `tail`
/// polls a virtiofs file (no inotify there) every `-s` seconds, as often as the loop says
/// (`BPFVM_WARM_POLL`: an own root's `tail` is busybox's, which takes whole seconds only).
fn kernel_log() -> String {
    format!(
        r#"echo on > /proc/sys/kernel/printk_devkmsg 2>/dev/null
if [ -n "$BPFVM_WARM_KMSG" ]; then
  (ulimit -f {blocks}; echo "bpfvm: continues after seq $BPFVM_WARM_AFTER"; exec tail -s "$BPFVM_WARM_POLL" -c "+$BPFVM_WARM_KMSG_FROM" -f "$BPFVM_WARM_KMSG") > "$OUT/{log}" 2>/dev/null &
else
  (ulimit -f {blocks}; exec dd if=/dev/kmsg of="$OUT/{log}" bs=8k conv=noerror status=none 2>/dev/null) &
fi
bpfvm_log=$!
bpfvm_mark() {{
  echo "bpfvm: $*" > /dev/kmsg
  read -r bpfvm_now < /proc/sys/kernel/tainted
  if [ "$bpfvm_now" != "$bpfvm_taint" ]; then
    bpfvm_taint=$bpfvm_now
    echo "bpfvm: tainted $bpfvm_now" > /dev/kmsg
  fi
}}
"#,
        blocks = guest_files::MAX_FILE / 512,
        log = files::KERNEL_LOG,
    )
}

/// Defines `bpfvm_mark_tests [PREFIX]`: passes libtest's JSON lines through, marking each
/// test's start (before passing its line on) and end in the kernel log, its name after PREFIX.
const MARK_TESTS: &str = r#"bpfvm_mark_tests() {
  while IFS= read -r line; do
    case $line in
      '{ "type": "test", "event": "started", "name": "'*)
        n=${line#*'"name": "'}; bpfvm_mark test start "$1${n%%'"'*}" ;;
      '{ "type": "test", "name": "'*)
        case $line in
          *'"event": "ok"'*|*'"event": "failed"'*|*'"event": "ignored"'*)
            n=${line#*'"name": "'}; bpfvm_mark test end "$1${n%%'"'*}" ;;
        esac ;;
    esac
    printf '%s\n' "$line"
  done
}
"#;

/// Waits for the kernel's deferred work before the log ends, so that its splats land in the
/// log: a BPF object's last reference queues its free (`bpf_map_put` queues
/// `bpf_map_free_deferred` on a workqueue, kernel/bpf/syscall.c; a program's goes through an RCU
/// callback first, `__bpf_prog_put_noref`). First an RCU grace period, as the kernel's
/// `test_progs` waits for one (`kern_sync_rcu()`, tools/testing/selftests/bpf/testing_helpers.c):
/// `membarrier(MEMBARRIER_CMD_GLOBAL)` (command 1; its number is the guest's architecture's,
/// which bash's own `$HOSTTYPE` tells without a process: perl's `Config` loads slowly
/// under TCG) runs `synchronize_rcu()` when more than one CPU is
/// online (`sys_membarrier`, kernel/sched/membarrier.c), called through `perl` (Essential in
/// Debian, `perl-base` in an arm64 pin's root; the shell has no syscall). Then until no kworker
/// is running or runnable (`R`/`D` in `/proc/PID/stat`; an idle worker sleeps in `I`), at most
/// 3 s. Under TCG this costs 0.3-0.5 s when nothing is pending (docs/kernel-log.md).
pub(crate) fn settle() -> String {
    let numbers: Vec<String> = Arch::EVERY
        .iter()
        .map(|a| format!("{}) bpfvm_nr={} ;;", a.machine(), a.membarrier_syscall()))
        .collect();
    format!(
        r#"case $HOSTTYPE in {} *) bpfvm_nr= ;; esac
[ -n "$bpfvm_nr" ] && perl -e 'syscall(shift, 1, 0, 0) == 0 or die "$!\n"' "$bpfvm_nr" 2>/dev/null ||
  echo "bpfvm: no RCU grace period waited for (membarrier failed)" > /dev/kmsg
{WORKQUEUES}"#,
        numbers.join(" ")
    )
}

const WORKQUEUES: &str = r#"bpfvm_workqueues_busy() {
  for bpfvm_f in /proc/[0-9]*/stat; do
    read -r bpfvm_stat < "$bpfvm_f" 2>/dev/null || continue
    case $bpfvm_stat in *' (kworker/'*') '[RD]' '*) return 0 ;; esac
  done
  return 1
}
bpfvm_wait=0
while [ $bpfvm_wait -lt 30 ] && bpfvm_workqueues_busy; do
  sleep 0.1; bpfvm_wait=$((bpfvm_wait + 1))
done
"#;

/// Ends the kernel log copy once its last record is in the file (waiting at most 5 s): the end
/// marker, or the taint mask `bpfvm_mark` wrote after it when the kernel became tainted since
/// the last marker (a taint set in the last phase would be lost with it otherwise).
const END_KERNEL_LOG: &str = r#"bpfvm_before=$bpfvm_taint
bpfvm_mark phase end
bpfvm_last=';bpfvm: phase end$'
[ "$bpfvm_taint" = "$bpfvm_before" ] || bpfvm_last=";bpfvm: tainted $bpfvm_taint\$"
bpfvm_wait=0
while [ $bpfvm_wait -lt 50 ] && ! grep -q "$bpfvm_last" "$OUT/kernel.log"; do
  sleep 0.1; bpfvm_wait=$((bpfvm_wait + 1))
done
kill $bpfvm_log 2>/dev/null
"#;

/// libtest's threads for the suite: twice the online CPUs (`nproc`), not libtest's default of
/// one per CPU. Many tests wait more than they compute (map frees and RCU grace periods,
/// the other thread of a concurrency test), so under TCG 4 threads finished the suite sooner
/// than 2 on 2 CPUs (the measurement is in this line's commit history).
const TEST_THREADS: &str = "export RUST_TEST_THREADS=$(( $(nproc) * 2 ))\n";

/// The `vm-test` script: probe features, then run every test binary with libtest's JSON
/// output (unstable, hence RUSTC_BOOTSTRAP), echoing events to stdout for live progress.
/// `probe` and `verifier` are `None` when the host put their answers into `out` already
/// (`results::reuse`): the tests then read the probe's answers from there. `args` gives each
/// binary's libtest arguments (a filter, a piece's exact names).
pub fn test_script(
    out: &Path,
    release: &str,
    probe: Option<&Path>,
    verifier: Option<&VerifierRun>,
    binaries: &[TestBinary],
    args: &dyn Fn(&str) -> Vec<String>,
) -> String {
    let mut s = preamble(out);
    writeln!(s, "export {EXPECT_RELEASE_ENV}={}", quote(release)).unwrap();
    // Backtraces for panics, not for every anyhow error: capturing one takes std's backtrace
    // lock, which a panic's symbolisation (seconds under TCG) holds meanwhile.
    s.push_str("export RUSTC_BOOTSTRAP=1 RUST_BACKTRACE=1 RUST_LIB_BACKTRACE=0\n");
    s.push_str(TEST_THREADS);
    // The probe loads a BPF object too (the bpf_loop inlining probe): the kernel BTF once.
    s.push_str(&kernel_btf_once());
    // The tests take a successful probe's answers rather than probing the same kernel again
    // (`FEATURES_ENV`, tests/src/features.rs).
    match probe {
        Some(probe) => {
            s.push_str("bpfvm_mark phase probe\n");
            writeln!(
                s,
                "with_kernel_btf_once {} > \"$OUT/{f}\" 2> \"$OUT/{}\"; bpfvm_rc=$?; echo $bpfvm_rc > \"$OUT/{}\"\n\
                 [ $bpfvm_rc -eq 0 ] && export {FEATURES_ENV}=\"$OUT/{f}\"",
                quote(&probe.display().to_string()),
                files::PROBE_STDERR,
                files::PROBE_RC,
                f = files::FEATURES,
            )
            .unwrap();
        }
        None => writeln!(s, "export {FEATURES_ENV}=\"$OUT/{}\"", files::FEATURES).unwrap(),
    }
    if let Some(verifier) = verifier {
        verifier_step(&mut s, verifier, "with_kernel_btf_once ");
    }
    s.push_str(MARK_TESTS);
    s.push_str("bpfvm_mark phase tests\n");
    for b in binaries {
        run_test_binary(
            &mut s,
            &b.name,
            &b.path,
            &args(&b.name),
            "with_kernel_btf_once ",
            "",
        );
    }
    s.push_str("bpfvm_mark phase shutdown\n");
    epilogue(&mut s, "0");
    s
}

/// The verifier statistics step: `bin` (`tests/src/bin/verifier.rs`) loads every program of
/// `objects` once for the verifier's statistics alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifierRun {
    pub bin: PathBuf,
    pub objects: Vec<PathBuf>,
}

/// Runs the verifier statistics as the `verifier` phase, before the tests (alone in the VM):
/// its JSON into `verifier.json`, its stderr and exit status beside it. `wrap` as for
/// [`run_test_binary`].
fn verifier_step(s: &mut String, run: &VerifierRun, wrap: &str) {
    s.push_str("bpfvm_mark phase verifier\n");
    let mut argv = vec![run.bin.display().to_string()];
    argv.extend(run.objects.iter().map(|o| o.display().to_string()));
    writeln!(
        s,
        "{wrap}{} > \"$OUT/{}\" 2> \"$OUT/{}\"; echo $? > \"$OUT/{}\"",
        join(&argv),
        files::VERIFIER,
        files::VERIFIER_STDERR,
        files::VERIFIER_RC
    )
    .unwrap();
}

/// Runs test binary `path` (its files named `name`) with the libtest arguments `args`: its list
/// first, so that tests a crash never reaches are reported by name (unless the host wrote it,
/// [`list_on_host`]), then the tests with
/// libtest's JSON output (each test's start and end marked in the kernel log by
/// `bpfvm_mark_tests`, which the script defines first; stdout teed to the host for live
/// progress; the exit status into `<name>.rc`). `wrap` is put before the test command (a shell
/// function, or nothing); `mark_prefix` before each test's name in its markers.
fn run_test_binary(
    s: &mut String,
    name: &str,
    path: &Path,
    args: &[String],
    wrap: &str,
    mark_prefix: &str,
) {
    let path = path.display().to_string();
    let n = name;
    let mut list = vec![
        path.clone(),
        "--list".into(),
        "--format".into(),
        "terse".into(),
    ];
    list.extend(args.iter().cloned());
    writeln!(
        s,
        "[ -e \"$OUT/{l}\" ] || {} > \"$OUT/{l}\" 2> \"$OUT/{n}.stderr\" || rm -f \"$OUT/{l}\"",
        join(&list),
        l = files::list(n),
    )
    .unwrap();
    let mut argv = vec![
        path,
        "-Z".into(),
        "unstable-options".into(),
        "--format".into(),
        "json".into(),
        "--report-time".into(),
    ];
    argv.extend(args.iter().cloned());
    let mark = match mark_prefix {
        "" => "bpfvm_mark_tests".to_string(),
        p => format!("bpfvm_mark_tests {}", quote(p)),
    };
    writeln!(
        s,
        "{{ {wrap}{} 2>> \"$OUT/{n}.stderr\"; echo $? > \"$OUT/{n}.rc\"; }} | {mark} | tee \"$OUT/{n}.jsonl\"",
        join(&argv)
    )
    .unwrap();
}

/// Writes each binary's list (`--list --format terse` with its libtest arguments `args`) into
/// `out` on the host when the host runs the guest's binaries (`arch` is the host's), so that
/// the guest script does not: a listing runs no test and asks nothing of the kernel, and each
/// program the guest starts is slow under TCG ([`preamble`]). A listing that fails or takes
/// over 10 s writes nothing, and the guest lists that binary itself.
pub fn list_on_host(
    out: &Path,
    arch: Arch,
    binaries: &[TestBinary],
    args: &dyn Fn(&str) -> Vec<String>,
) -> Result<()> {
    if arch != Arch::host() {
        return Ok(());
    }
    for b in binaries {
        let to = out.join(files::list(&b.name));
        let file =
            std::fs::File::create(&to).with_context(|| format!("create {}", to.display()))?;
        let mut cmd = std::process::Command::new(&b.path);
        cmd.args(["--list", "--format", "terse"])
            .args(args(&b.name));
        let listed = wait::status_within(&cmd, file.into(), Stdio::null(), LIST_LIMIT)
            .with_context(|| format!("list {}", b.path.display()))?;
        if !listed.is_some_and(|s| s.success()) {
            std::fs::remove_file(&to).with_context(|| format!("remove {}", to.display()))?;
        }
    }
    Ok(())
}

/// How long the host gives a test binary's listing.
const LIST_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Where the guest copies the kernel's BTF for the tests ([`kernel_btf_once`]).
pub const KERNEL_BTF_COPY: &str = "/tmp/bpfvm-vmlinux.btf";

/// Defines `with_kernel_btf_once CMD...`. aya 0.14's `EbpfLoader::new` parses the kernel's BTF
/// (`/sys/kernel/btf/vmlinux`, ~0.3 s under TCG) on every object load, even when it is then
/// handed a parsed copy; that parse was most of a test's time. So the tests parse a copy once
/// per process (`BPFVM_KERNEL_BTF`, see `tests/src/object.rs`) and run in a mount namespace where
/// the sysfs file reads empty, so that the loader's own parse fails at once. A kernel without
/// BTF runs the tests as they are. A kept guest's loop (`machine::warm_guest::script`) made the
/// copy and hid the sysfs file for the whole guest at boot, and the check before each run found
/// both as they were then (the copy's inode, size and change time; the mount): its run
/// (`BPFVM_WARM_KMSG`) takes them as they are, without copying 5 MiB again or starting three
/// programs for each namespace.
fn kernel_btf_once() -> String {
    format!(
        r#"if {{ [ -n "$BPFVM_WARM_KMSG" ] && [ -s {KERNEL_BTF_COPY} ]; }} || cp /sys/kernel/btf/vmlinux {KERNEL_BTF_COPY} 2>/dev/null; then
  export {KERNEL_BTF_ENV}={KERNEL_BTF_COPY}
  if [ -n "$BPFVM_WARM_KMSG" ] && bpfvm_mounted /sys/kernel/btf/vmlinux; then
    with_kernel_btf_once() {{ "$@"; }}
  else
    with_kernel_btf_once() {{ unshare --mount sh -c 'mount --bind /dev/null /sys/kernel/btf/vmlinux && exec "$@"' sh "$@"; }}
  fi
else
  with_kernel_btf_once() {{ "$@"; }}
fi
"#
    )
}

/// The `vm-run` script: run one command from `cwd` and hand its status back.
pub fn command_script(out: &Path, cwd: &Path, argv: &[String]) -> String {
    let mut s = preamble(out);
    command_phase(&mut s, cwd, &join(argv));
    s
}

/// Runs `line` (a shell command) from `cwd` as the `command` phase of the kernel log, then
/// ends the script with its status.
pub(crate) fn command_phase(s: &mut String, cwd: &Path, line: &str) {
    writeln!(s, "cd {} || exit 1", quote(&cwd.display().to_string())).unwrap();
    s.push_str("bpfvm_mark phase command\n");
    writeln!(s, "{line}").unwrap();
    s.push_str("bpfvm_status=$?\nbpfvm_mark phase shutdown\n");
    epilogue(s, "$bpfvm_status");
}

/// Where `bpfvm exec` has the command's stdout and stderr written, byte for byte.
pub const EXEC_STDOUT: &str = "exec.stdout";
pub const EXEC_STDERR: &str = "exec.stderr";

/// The `bpfvm exec` script (the cargo runner): run one command from `cwd` with `env` set, its
/// stdout and stderr into files the host copies out unchanged, and hand its status back.
pub fn exec_script(out: &Path, cwd: &Path, env: &[(String, String)], argv: &[String]) -> String {
    let mut s = preamble(out);
    export(&mut s, env);
    let line = format!(
        "{} < /dev/null > \"$OUT/{EXEC_STDOUT}\" 2> \"$OUT/{EXEC_STDERR}\"",
        join(argv)
    );
    command_phase(&mut s, cwd, &line);
    s
}

/// A test executable of the user's crate (`bpfvm test`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrateBinary {
    /// Names its files in the shared directory and its tests in the report: the target's name,
    /// made unique.
    pub name: String,
    pub path: PathBuf,
    /// Where cargo would run it: its package's directory.
    pub dir: PathBuf,
}

/// The `bpfvm test` script: every test binary of the user's crate from its package's
/// directory, with `env` and the libtest arguments `args`, as `vm-test` runs its own (no
/// probes; the kernel's BTF stays as it is, for the user's CO-RE loads), after the verifier
/// statistics of the user's objects when asked (`--verifier-stats`). Each test's markers name
/// it `<binary>::<libtest name>`; `args` gives each binary's libtest arguments.
pub fn crate_test_script(
    out: &Path,
    env: &[(String, String)],
    binaries: &[CrateBinary],
    args: &dyn Fn(&str) -> Vec<String>,
    verifier: Option<&VerifierRun>,
) -> String {
    let mut s = preamble(out);
    // libtest's JSON output is unstable, hence RUSTC_BOOTSTRAP; the user's env comes after.
    s.push_str("export RUSTC_BOOTSTRAP=1 RUST_BACKTRACE=1\n");
    export(&mut s, env);
    if let Some(v) = verifier {
        verifier_step(&mut s, v, "");
    }
    s.push_str(MARK_TESTS);
    s.push_str("bpfvm_mark phase tests\n");
    for b in binaries {
        writeln!(s, "cd {} || exit 1", quote(&b.dir.display().to_string())).unwrap();
        let args = args(&b.name);
        run_test_binary(
            &mut s,
            &b.name,
            &b.path,
            &args,
            "",
            &format!("{}::", b.name),
        );
    }
    s.push_str("bpfvm_mark phase shutdown\n");
    epilogue(&mut s, "0");
    s
}

/// `export NAME=VALUE` lines; names are checked by the caller (`exec::passed_env`).
fn export(s: &mut String, env: &[(String, String)]) {
    for (k, v) in env {
        writeln!(s, "export {k}={}", quote(v)).unwrap();
    }
}

/// The script's last lines: the wait for the kernel's deferred work, the end of the kernel log
/// copy, the exit status (`status`, a
/// shell word) that tells the host the guest finished, then the marker that times the end of
/// the script.
pub(crate) fn epilogue(s: &mut String, status: &str) {
    s.push_str(&settle());
    s.push_str(END_KERNEL_LOG);
    writeln!(s, "echo {status} > \"$OUT/{STATUS_FILE}\"").unwrap();
    writeln!(s, "echo '{END_MARKER}' >&2").unwrap();
}

/// Writes `script` to `path`, creating its directory.
pub fn write(path: &Path, script: &str) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    std::fs::write(path, script).with_context(|| format!("write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The grace period, run under the host's bash, finds the host's membarrier by bash's
    /// `$HOSTTYPE` and waits without failing; a machine the table lacks fails.
    #[test]
    fn the_settle_step_calls_the_hosts_own_membarrier() {
        let first = |host_type: &str| {
            let s = settle();
            let cut = s.find(" 2>/dev/null ||").unwrap();
            let status = std::process::Command::new("bash")
                .arg("-c")
                .arg(format!("HOSTTYPE={host_type}\n{}", &s[..cut]))
                .status()
                .unwrap();
            status.success()
        };
        assert!(settle().contains(&format!(
            "{}) bpfvm_nr={} ;;",
            Arch::host().machine(),
            Arch::host().membarrier_syscall()
        )));
        let host = std::process::Command::new("bash")
            .args(["-c", "echo $HOSTTYPE"])
            .output()
            .unwrap();
        let host = String::from_utf8(host.stdout).unwrap();
        assert!(first(host.trim()));
        assert!(!first("elsewhere"));
    }

    /// The host lists a binary it can run (its arguments after libtest's), writes nothing for
    /// one whose listing fails, and nothing for another architecture's; the guest's line then
    /// keeps the host's list and lists only a binary the host did not.
    #[test]
    fn the_host_lists_what_it_runs_and_the_guest_lists_the_rest() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let bin = |name: &str, body: &str| {
            let path = t.path().join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
            TestBinary {
                name: name.into(),
                path,
            }
        };
        let (ok, bad) = (
            bin("ok", "echo \"a: test $*\""),
            bin("bad", "echo a: test; exit 3"),
        );
        let out = t.path().join("out");
        std::fs::create_dir(&out).unwrap();
        let args = |b: &str| vec![format!("only-{b}")];
        let other = match Arch::host() {
            Arch::X86_64 => Arch::Arm64,
            Arch::Arm64 => Arch::X86_64,
        };
        list_on_host(&out, other, std::slice::from_ref(&ok), &args).unwrap();
        assert!(!out.join(files::list("ok")).exists());
        list_on_host(&out, Arch::host(), &[ok.clone(), bad], &args).unwrap();
        let read = || std::fs::read_to_string(out.join(files::list("ok"))).unwrap();
        assert_eq!(read(), "a: test --list --format terse only-ok\n");
        assert!(!out.join(files::list("bad")).exists());
        let guest_line = || {
            let mut s = String::new();
            run_test_binary(&mut s, "ok", &ok.path, &[], "", "");
            let line = s.lines().next().unwrap().to_string();
            let status = std::process::Command::new("bash")
                .arg("-c")
                .arg(line)
                .env("OUT", &out)
                .status()
                .unwrap();
            assert!(status.success());
        };
        guest_line();
        assert_eq!(read(), "a: test --list --format terse only-ok\n", "kept");
        std::fs::remove_file(out.join(files::list("ok"))).unwrap();
        guest_line();
        assert_eq!(
            read(),
            "a: test --list --format terse\n",
            "listed by the guest"
        );
    }

    /// A boot's run copies the kernel's BTF and hides the sysfs file in a namespace of each
    /// test binary's; a kept guest's run takes the loop's copy (checked before the run), copies
    /// only when there is none, and needs no namespace while the loop's mount hides the file.
    #[test]
    fn a_kept_guests_run_takes_the_loops_btf_copy_and_mount() {
        let t = tempfile::tempdir().unwrap();
        let (src, copy) = (t.path().join("vmlinux"), t.path().join("copy.btf"));
        std::fs::write(&src, "NEW").unwrap();
        // The loop's mount, as the mount table would show it: `HIDDEN` set.
        let mounted =
            "bpfvm_mounted() { [ -n \"$HIDDEN\" ] && [ \"$1\" = /sys/kernel/btf/vmlinux ]; }\n";
        let script = format!("{BUILTINS}{mounted}{}", kernel_btf_once())
            .replace("/sys/kernel/btf/vmlinux", &src.display().to_string())
            .replace(KERNEL_BTF_COPY, &copy.display().to_string());
        let run = |warm: bool, hidden: bool| {
            let mut cmd = std::process::Command::new("bash");
            cmd.arg("-c").arg(format!(
                "{script}echo ${KERNEL_BTF_ENV}; declare -f with_kernel_btf_once"
            ));
            if warm {
                cmd.env("BPFVM_WARM_KMSG", "/share/kmsg.log");
            }
            if hidden {
                cmd.env("HIDDEN", "1");
            }
            let out = String::from_utf8(cmd.output().unwrap().stdout).unwrap();
            let (first, wrapper) = out.split_once('\n').unwrap();
            assert_eq!(first, copy.display().to_string());
            let copied = std::fs::read_to_string(&copy).unwrap();
            (copied, wrapper.contains("unshare --mount"))
        };
        std::fs::write(&copy, "KEPT").unwrap();
        assert_eq!(run(true, true), ("KEPT".into(), false));
        assert_eq!(run(true, false), ("KEPT".into(), true));
        assert_eq!(run(false, true), ("NEW".into(), true), "a boot's run");
        std::fs::remove_file(&copy).unwrap();
        assert_eq!(run(true, true), ("NEW".into(), false));
    }

    #[test]
    fn test_script_runs_each_binary_with_json_output_and_the_filter() {
        let s = test_script(
            Path::new("/t/run"),
            "6.1.0-57-cloud-amd64",
            Some(Path::new("/t/probe")),
            Some(&VerifierRun {
                bin: "/t/verifier".into(),
                objects: vec!["/e/smoke".into(), "/e/my obj".into()],
            }),
            &[TestBinary {
                name: "bpfvm_tests".into(),
                path: "/t/deps/bpfvm_tests-abc".into(),
            }],
            &|_| vec!["bloom".into()],
        );
        assert!(s.contains("export BPFVM_EXPECT_RELEASE=6.1.0-57-cloud-amd64"));
        assert!(s.contains("export RUST_TEST_THREADS=$(( $(nproc) * 2 ))\n"));
        assert!(s.contains(
            "{ with_kernel_btf_once /t/deps/bpfvm_tests-abc -Z unstable-options --format json \
             --report-time bloom"
        ));
        assert!(s.contains(&kernel_btf_once()));
        assert!(s.contains(
            "2>> \"$OUT/bpfvm_tests.stderr\"; echo $? > \"$OUT/bpfvm_tests.rc\"; } | bpfvm_mark_tests | tee"
        ));
        assert!(s.contains(
            "with_kernel_btf_once /t/verifier /e/smoke '/e/my obj' > \"$OUT/verifier.json\" \
             2> \"$OUT/verifier.stderr\"; echo $? > \"$OUT/verifier.rc\"\n"
        ));
        let phases: Vec<usize> = ["probe", "verifier", "tests", "shutdown", "end"]
            .iter()
            .map(|p| s.find(&format!("bpfvm_mark phase {p}\n")).unwrap())
            .collect();
        assert!(phases.is_sorted(), "{phases:?}");
        assert!(s.contains(
            "with_kernel_btf_once /t/probe > \"$OUT/features.json\" 2> \"$OUT/features.stderr\"; \
             bpfvm_rc=$?; echo $bpfvm_rc > \"$OUT/features.rc\"\n\
             [ $bpfvm_rc -eq 0 ] && export BPFVM_FEATURES=\"$OUT/features.json\"\n"
        ));
        assert!(s.contains(
            "[ -e \"$OUT/bpfvm_tests.list\" ] || /t/deps/bpfvm_tests-abc --list --format terse bloom > \"$OUT/bpfvm_tests.list\""
        ));
        assert!(
            s.ends_with("echo 0 > \"$OUT/exit-status\"\necho 'bpfvm: guest script finished' >&2\n")
        );
    }

    #[test]
    fn reused_answers_are_read_from_the_shared_directory_and_not_measured_again() {
        let bins = [TestBinary {
            name: "bpfvm_tests".into(),
            path: "/t/deps/bpfvm_tests-abc".into(),
        }];
        let s = test_script(
            Path::new("/t/run"),
            "6.1.0-57-cloud-amd64",
            None,
            None,
            &bins,
            &|_| vec![],
        );
        assert!(!s.contains("phase probe") && !s.contains("phase verifier"));
        assert!(!s.contains("features.rc") && !s.contains("verifier.json"));
        let export = s
            .find("export BPFVM_FEATURES=\"$OUT/features.json\"\n")
            .unwrap();
        assert!(export < s.find("bpfvm_mark phase tests").unwrap());
    }

    /// The script's `read` gets a numeric sysctl whole when run as vng runs it (`sh SCRIPT`).
    #[test]
    fn a_multi_digit_sysctl_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("s.sh");
        let file = "/proc/sys/kernel/pid_max";
        let whole = std::fs::read_to_string(file).unwrap();
        assert!(
            whole.trim().len() > 1,
            "pid_max has several digits: {whole}"
        );
        std::fs::write(
            &script,
            format!("#!/bin/sh\n{UNDER_BASH}read -r x < {file}; echo \"$x\"\n"),
        )
        .unwrap();
        let out = std::process::Command::new("sh")
            .arg(&script)
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), whole);
        assert!(preamble(Path::new("/o")).starts_with(&format!(
            "#!/bin/sh\n# Written by bpfvm; runs inside the guest as root.\n{UNDER_BASH}"
        )));
    }

    #[test]
    fn command_script_keeps_arguments_intact() {
        let argv = [
            "sh".to_string(),
            "-c".into(),
            "echo 'hi there'; exit 7".into(),
        ];
        let s = command_script(Path::new("/o"), Path::new("/w d"), &argv);
        assert!(s.contains("cd '/w d' || exit 1\n"));
        assert!(s.contains(r"sh -c 'echo '\''hi there'\''; exit 7'"));
        assert!(s.contains("bpfvm_mark phase command\nsh -c"));
        assert!(s.ends_with(
            "echo $bpfvm_status > \"$OUT/exit-status\"\necho 'bpfvm: guest script finished' >&2\n"
        ));
    }

    #[test]
    fn the_kernel_log_is_copied_into_its_file_and_ends_after_the_last_marker() {
        let s = command_script(Path::new("/o"), Path::new("/w"), &["true".to_string()]);
        let log = kernel_log();
        assert!(log.contains(&format!("of=\"$OUT/{}\"", files::KERNEL_LOG)));
        assert!(
            log.contains("(ulimit -f 131072; exec dd if=/dev/kmsg "),
            "64 MiB: {log}"
        );
        let (start, end) = (s.find(&log).unwrap(), s.find(END_KERNEL_LOG).unwrap());
        assert!(start < s.find("bpfvm_mark phase command").unwrap());
        assert!(end > s.find("bpfvm_mark phase shutdown").unwrap());
        assert!(
            end < s.find(STATUS_FILE).unwrap(),
            "the log is whole before the status"
        );
    }

    /// Runs `bpfvm_mark_tests ARGS` under the host's `sh` on `json`, with `bpfvm_mark`
    /// writing its markers to a file instead of `/dev/kmsg`; returns what passed through and
    /// the markers.
    fn mark_tests(args: &str, json: &str) -> (String, String) {
        let dir = tempfile::tempdir().unwrap();
        let marks = dir.path().join("marks");
        let script = format!(
            "bpfvm_mark() {{ echo \"bpfvm: $*\" >> {}; }}\n{MARK_TESTS}bpfvm_mark_tests {args}",
            quote(&marks.display().to_string())
        );
        let mut child = std::process::Command::new("sh")
            .args(["-c", &script])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(json.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        (
            String::from_utf8(out.stdout).unwrap(),
            std::fs::read_to_string(&marks).unwrap(),
        )
    }

    /// The preamble's builtins answer as `mountpoint -q` and `cat` would, here on the host's
    /// /proc (the guest reads the same files of its own).
    #[test]
    fn preamble_builtins_answer_as_mountpoint_and_cat() {
        let dir = tempfile::tempdir().unwrap();
        let script = format!(
            "{BUILTINS}\
             bpfvm_mounted /proc && echo proc-mounted\n\
             bpfvm_mounted /proc/self || echo self-not-mounted\n\
             bpfvm_copy /proc/sys/kernel/osrelease \"$1/release\"\n\
             bpfvm_copy /nonexistent \"$1/missing\"\n"
        );
        let out = std::process::Command::new("sh")
            .args(["-c", &script, "sh"])
            .arg(dir.path())
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "proc-mounted\nself-not-mounted\n"
        );
        assert_eq!(String::from_utf8_lossy(&out.stderr), "");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("release")).unwrap(),
            std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap()
        );
        assert!(!dir.path().join("missing").exists());
    }

    #[test]
    fn test_events_become_start_and_end_markers_and_pass_through() {
        let json = r#"{ "type": "suite", "event": "started", "test_count": 3 }
{ "type": "test", "event": "started", "name": "tests::bloom::a" }
{ "type": "test", "event": "started", "name": "tests::batch::hash::case_1" }
{ "type": "test", "name": "tests::bloom::a", "event": "ok", "exec_time": 0.0125 }
{ "type": "test", "name": "tests::batch::hash::case_1", "event": "failed", "exec_time": 0.5, "stdout": "\"event\": \"ok\"\n" }
{ "type": "test", "event": "started", "name": "tests::smoke::c" }
{ "type": "test", "name": "tests::smoke::c", "event": "ignored" }
{ "type": "suite", "event": "failed", "passed": 1, "failed": 1 }
"#;
        let (out, marks) = mark_tests("", json);
        assert_eq!(out, json);
        assert_eq!(
            marks,
            "bpfvm: test start tests::bloom::a\n\
             bpfvm: test start tests::batch::hash::case_1\n\
             bpfvm: test end tests::bloom::a\n\
             bpfvm: test end tests::batch::hash::case_1\n\
             bpfvm: test start tests::smoke::c\n\
             bpfvm: test end tests::smoke::c\n"
        );
    }

    #[test]
    fn a_prefix_goes_before_each_marked_name() {
        let json = r#"{ "type": "test", "event": "started", "name": "maps::works" }
{ "type": "test", "name": "maps::works", "event": "ok", "exec_time": 0.01 }
"#;
        let (out, marks) = mark_tests("demo-2::", json);
        assert_eq!(out, json);
        assert_eq!(
            marks,
            "bpfvm: test start demo-2::maps::works\nbpfvm: test end demo-2::maps::works\n"
        );
    }

    #[test]
    fn exec_script_sets_env_and_keeps_output_in_files() {
        let env = [("RUST_LOG".to_string(), "debug x".to_string())];
        let argv = ["/t/deps/it-1".to_string(), "--exact".into(), "a b".into()];
        let s = exec_script(Path::new("/o"), Path::new("/w"), &env, &argv);
        let export = s.find("export RUST_LOG='debug x'\n").expect("env exported");
        let cd = s.find("cd /w || exit 1\n").expect("cd");
        assert!(export < cd);
        assert!(s.contains(
            "/t/deps/it-1 --exact 'a b' < /dev/null > \"$OUT/exec.stdout\" 2> \"$OUT/exec.stderr\"\n"
        ));
        assert!(s.contains("bpfvm_mark phase command\n/t/deps/it-1"));
        assert!(s.contains("echo $bpfvm_status > \"$OUT/exit-status\""));
    }

    #[test]
    fn crate_test_script_runs_each_binary_from_its_package_without_the_btf_mount() {
        let bins = [
            CrateBinary {
                name: "demo".into(),
                path: "/u/target/debug/deps/demo-1".into(),
                dir: "/u".into(),
            },
            CrateBinary {
                name: "maps".into(),
                path: "/u/target/debug/deps/maps-2".into(),
                dir: "/u/sub".into(),
            },
        ];
        let env = [("RUST_BACKTRACE".to_string(), "0".to_string())];
        let s = crate_test_script(
            Path::new("/o"),
            &env,
            &bins,
            &|_| vec!["--test-threads".into(), "1".into()],
            None,
        );
        // The user's RUST_BACKTRACE overrides the default set before it.
        assert!(s.find("RUST_BACKTRACE=1").unwrap() < s.find("RUST_BACKTRACE=0").unwrap());
        assert!(s.contains(
            "cd /u/sub || exit 1\n[ -e \"$OUT/maps.list\" ] || /u/target/debug/deps/maps-2 --list --format terse --test-threads 1 > \"$OUT/maps.list\""
        ));
        assert!(s.contains(
            "{ /u/target/debug/deps/demo-1 -Z unstable-options --format json --report-time --test-threads 1 2>> \"$OUT/demo.stderr\"; echo $? > \"$OUT/demo.rc\"; } | bpfvm_mark_tests demo:: | tee \"$OUT/demo.jsonl\""
        ));
        let phases: Vec<usize> = ["tests", "shutdown", "end"]
            .iter()
            .map(|p| s.find(&format!("bpfvm_mark phase {p}\n")).unwrap())
            .collect();
        assert!(phases.is_sorted(), "{phases:?}");
        assert!(s.find(MARK_TESTS).unwrap() < phases[0]);
        assert!(!s.contains("with_kernel_btf_once"));
        assert!(!s.contains("phase verifier"), "not asked for");
        let v = VerifierRun {
            bin: "/b/verifier".into(),
            objects: vec!["/u/obj".into()],
        };
        let s = crate_test_script(Path::new("/o"), &env, &bins, &|_| vec![], Some(&v));
        let step = s
            .find("/b/verifier /u/obj > \"$OUT/verifier.json\"")
            .unwrap();
        assert!(step < s.find("bpfvm_mark phase tests").unwrap());
    }

    /// The copy ends after the taint mask that follows the end marker, not at the marker: a
    /// copier (standing for `dd`) that writes the two records 0.3 s apart keeps both.
    #[test]
    fn the_log_copy_waits_for_the_taint_mask_after_the_end_marker() {
        let d = tempfile::tempdir().unwrap();
        let script = format!(
            "OUT={out}; bpfvm_taint=0\n\
             bpfvm_mark() {{ (sleep 0.3; echo '12,1,1,-;bpfvm: phase end' >> $OUT/kernel.log; \
             sleep 0.3; echo '12,2,2,-;bpfvm: tainted 512' >> $OUT/kernel.log) & \
             bpfvm_log=$!; bpfvm_taint=512; }}\n{END_KERNEL_LOG}wait\n",
            out = d.path().display()
        );
        let ok = std::process::Command::new("sh")
            .arg("-c")
            .arg(&script)
            .status()
            .unwrap()
            .success();
        assert!(ok);
        let log = std::fs::read_to_string(d.path().join("kernel.log")).unwrap();
        assert!(log.ends_with(";bpfvm: tainted 512\n"), "{log}");
    }
}
