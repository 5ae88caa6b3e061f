//! `cargo xtask soak`: boot each pinned kernel many times in a row under `vm-run -- true`,
//! with busy threads keeping the host's cores loaded, and count what went wrong: runs that
//! failed (each judged as `vm-run` judges it, its kernel log included), boots the runner
//! retried (`run::boot` retries a TCG boot that dies before the guest script starts), and
//! processes left behind. It answers "does a boot flake fail a run?", the hardening issue's
//! done-when; a measurement, so it reports rather than asserts durations. Its exit status is
//! the table's (docs/exit-status.md): 1 when a kernel failed a boot, 255 when a boot judged
//! nothing or a process was left behind.
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use bpfvm::VmArgs;
use bpfvm_host::support::output::Events;
use bpfvm_host::support::status::Status;
use clap::Args;

/// Boot each kernel many times under `vm-run -- true` with the host kept busy; counts
/// failed runs, retried boots and processes left behind. Exits 1 when a kernel failed a boot
/// (a splat, a panic, a log that lost records), 255 when a boot judged nothing (qemu, the
/// host, a timeout) or a process was left behind.
#[derive(Args)]
pub(crate) struct Options {
    #[command(flatten)]
    vm: VmArgs,
    /// Boots per kernel.
    #[arg(long, default_value_t = 30)]
    boots: usize,
    /// Host threads that spin during the soak.
    #[arg(long, default_value_t = 2)]
    hogs: usize,
    /// Seconds before each VM is killed.
    #[arg(long, default_value_t = 300)]
    timeout: u64,
}

/// One kernel's tally.
struct Tally {
    pub kernel: String,
    pub boots: usize,
    /// Each boot that did not pass, with its status: 1 when the kernel failed it (as
    /// `vm-run` judges, its kernel log included), 255 when it judged nothing, 125 when the
    /// kernel could not be built.
    pub failed: Vec<(Status, String)>,
    pub retries: Vec<String>,
    pub leftovers: Vec<String>,
    /// Seconds from starting vng to the guest script's first line, per boot that got there.
    pub boot_secs: Vec<f64>,
}

impl Tally {
    /// The worst of the boots' statuses; a process left behind is bpfvm's failure (255),
    /// never the kernel's.
    pub(crate) fn status(&self) -> Status {
        let left = (!self.leftovers.is_empty()).then_some(Status::Stopped);
        Status::combine(self.failed.iter().map(|(s, _)| *s).chain(left))
    }
}

/// Soaks every kernel `--kernel` names, prints the tallies; exits with the worst status.
pub(crate) fn run(opts: Options, events: &Events) -> Result<ExitCode> {
    let hogs = opts.hogs;
    let tallies = soak(opts, events)?;
    outln!("{}", summary(&tallies, hogs));
    Ok(ExitCode::from(
        Status::combine(tallies.iter().map(Tally::status)).code(),
    ))
}

/// What one boot of `true` came to: `vm-run`'s exit status (`bpfvm::command_code`, the kernel
/// log judged) as a status, or the run's error's.
fn boot_status(code: Result<u8>) -> Result<(), (Status, String)> {
    match code {
        Ok(0) => Ok(()),
        Ok(125) => Err((Status::Untestable, "exit status 125".into())),
        Ok(code) => Err((
            Status::Bad,
            format!("exit status {code}: the kernel failed the run"),
        )),
        Err(e) => Err((Status::of_error(&e), format!("{e:#}"))),
    }
}

fn soak(opts: Options, events: &Events) -> Result<Vec<Tally>> {
    if opts.boots == 0 {
        bail!("--boots 0 boots nothing: give at least 1 (30 for the hardening soak)");
    }
    let kernels = opts.vm.kernel_args().many()?;
    let vm = opts.vm.options(opts.timeout);
    let _hogs = Hogs::start(opts.hogs);
    let mut tallies = Vec::new();
    for kernel in kernels {
        let version = kernel.shown();
        let mut t = Tally {
            kernel: version.clone(),
            boots: 0,
            failed: vec![],
            retries: vec![],
            leftovers: vec![],
            boot_secs: vec![],
        };
        for i in 1..=opts.boots {
            if bpfvm_host::support::proc::interrupted() {
                bail!("interrupted during kernel {version}, boot {i}");
            }
            events.step(format!("kernel {version}: boot {i} of {}", opts.boots));
            t.boots += 1;
            let ran = bpfvm_host::flows::run::vm_run(&kernel, &vm, &["true".to_string()], events);
            let code = ran.and_then(|(outcome, health)| {
                for r in &outcome.retries {
                    t.retries.push(format!("boot {i}: {}", r.ending));
                }
                if let Some(b) = outcome.boot {
                    t.boot_secs.push(b.as_secs_f64());
                }
                bpfvm::command_code(&outcome, &health, false, events)
            });
            if let Err((status, why)) = boot_status(code) {
                t.failed.push((status, format!("boot {i}: {why}")));
            }
            t.leftovers.extend(
                children()
                    .into_iter()
                    .map(|c| format!("after boot {i}: {c}")),
            );
        }
        tallies.push(t);
    }
    Ok(tallies)
}

/// A markdown table, one row per kernel, then each failure, retry and leftover by name.
fn summary(tallies: &[Tally], hogs: usize) -> String {
    let mut s = String::from(
        "| kernel | boots | failed | retried | left behind | boot s min / median / max |\n\
         |---|---|---|---|---|---|\n",
    );
    for t in tallies {
        let spread = crate::bench_suite::spread(&t.boot_secs)
            .map_or("-".into(), |(lo, mid, hi)| {
                format!("{lo:.1} / {mid:.1} / {hi:.1}")
            });
        s += &format!(
            "| {} | {} | {} | {} | {} | {spread} |\n",
            t.kernel,
            t.boots,
            t.failed.len(),
            t.retries.len(),
            t.leftovers.len()
        );
    }
    s += &format!("\nhost kept busy by {hogs} spinning thread(s)\n");
    for t in tallies {
        for (status, line) in &t.failed {
            s += &format!("kernel {} FAILED ({}): {line}\n", t.kernel, status.code());
        }
        for (what, list) in [("retried", &t.retries), ("left behind", &t.leftovers)] {
            for line in list {
                s += &format!("kernel {} {what}: {line}\n", t.kernel);
            }
        }
    }
    s
}

/// Processes whose parent is this one once a run has returned. The runner is a child
/// subreaper (`bpfvm_host::support::proc`), so a qemu or virtiofsd the run failed to reap would be
/// reparented here rather than to init: an empty list means nothing was left.
fn children() -> Vec<String> {
    let me = std::process::id().to_string();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    dir.flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter_map(|stat| {
            // "pid (comm) state ppid ...": comm may hold spaces, so split after its ')'.
            let (head, tail) = stat.rsplit_once(')')?;
            let ppid = tail.split_whitespace().nth(1)?;
            (ppid == me).then(|| head.replacen(" (", " ", 1))
        })
        .collect()
}

/// Threads that spin until dropped: the "busy host" the boot flake was seen on.
struct Hogs {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Hogs {
    fn start(n: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..1_000_000 {
                            x = std::hint::black_box(x.wrapping_mul(6364136223846793005) + 1);
                        }
                    }
                })
            })
            .collect();
        // Let the hogs reach the scheduler before the first boot.
        std::thread::sleep(Duration::from_millis(100));
        Hogs { stop, threads }
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(failed: usize, retries: usize) -> Tally {
        Tally {
            kernel: "6.12".into(),
            boots: 30,
            failed: (0..failed)
                .map(|i| (Status::Bad, format!("boot {i}: panic")))
                .collect(),
            retries: (0..retries).map(|i| format!("boot {i}: Oops")).collect(),
            leftovers: vec![],
            boot_secs: vec![12.0, 10.0, 30.0],
        }
    }

    #[test]
    fn summary_counts_failures_and_retries_and_names_each() {
        let s = summary(&[tally(1, 2)], 2);
        assert!(
            s.contains("| 6.12 | 30 | 1 | 2 | 0 | 10.0 / 12.0 / 30.0 |"),
            "{s}"
        );
        assert!(s.contains("kernel 6.12 FAILED (1): boot 0: panic"), "{s}");
        assert!(s.contains("kernel 6.12 retried: boot 1: Oops"), "{s}");
    }

    #[test]
    fn a_retry_alone_is_not_a_failure() {
        assert_eq!(tally(0, 3).status(), Status::Good);
        assert_eq!(tally(1, 0).status(), Status::Bad);
    }

    /// A boot whose command passed but whose kernel log fails the run (`command_code`'s 1)
    /// is the kernel's failure; a boot that judged nothing (qemu crashed) or a process left
    /// behind is 255, never 1.
    #[test]
    fn each_boot_is_judged_by_the_status_table() {
        assert_eq!(boot_status(Ok(0)), Ok(()));
        assert_eq!(boot_status(Ok(1)).unwrap_err().0, Status::Bad);
        let crashed = boot_status(Err(anyhow::anyhow!("qemu crashed")));
        assert_eq!(crashed.unwrap_err().0, Status::Stopped);
        let mut t = tally(0, 0);
        t.failed
            .push((Status::Stopped, "boot 2: qemu crashed".into()));
        assert_eq!(t.status(), Status::Stopped);
        t.failed.push((Status::Bad, "boot 3: exit status 1".into()));
        assert_eq!(t.status(), Status::Bad);
        let mut left = tally(0, 0);
        left.leftovers
            .push("after boot 1: 77 qemu-system-x86".into());
        assert_eq!(left.status(), Status::Stopped);
    }

    /// The kernel log decides a boot that exited 0: a WARN while `true` ran fails it, as
    /// `vm-run` would (the soak looked only at how the VM ended); a stall under TCG judges
    /// nothing.
    #[test]
    fn a_splat_fails_a_boot_that_exited_0() {
        use bpfvm_host::machine::vng::{Ending, RunOutcome};
        use bpfvm_host::results::health;
        let outcome = RunOutcome {
            ending: Ending::Exited(0),
            console_tail: vec![],
            elapsed: Duration::from_secs(1),
            boot: None,
            guest: None,
            retries: vec![],
        };
        let log = "12,0,0,-;bpfvm: phase command\n\
                   4,1,1,-;------------[ cut here ]------------\n\
                   4,2,2,-;WARNING: CPU: 0 PID: 9 at kernel/bpf/syscall.c:512 f+0x1/0x2\n\
                   4,3,3,-;---[ end trace 0000000000000000 ]---\n\
                   12,4,4,-;bpfvm: phase end\n";
        let health = health::judge(log, &health::allow::parse("").unwrap(), "6.1", None);
        let code = bpfvm::command_code(&outcome, &health, false, &Events::silent());
        assert_eq!(boot_status(code).unwrap_err().0, Status::Bad);
        // A soft lockup under TCG (recorded in `vm-run`) judges nothing: the boot neither.
        let lockup = bpfvm_host::support::paths::workspace_root()
            .join("vm/testdata/health/vm-run-soft-lockup.kmsg");
        let tcg = bpfvm_host::machine::accel::Accel {
            kind: bpfvm_host::machine::accel::Kind::Tcg,
            reason: "the test's".into(),
            tcg_thread: None,
        };
        let health = bpfvm_host::flows::run::judge_kernel_log(
            &std::fs::read_to_string(lockup).unwrap(),
            &health::allow::parse("").unwrap(),
            "6.1",
            &tcg,
            &None,
        );
        let code = bpfvm::command_code(&outcome, &health, false, &Events::silent());
        assert_eq!(boot_status(code).unwrap_err().0, Status::Stopped);
    }

    #[test]
    fn a_spawned_child_is_seen_as_left_behind() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let seen = children();
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(seen.iter().any(|c| c.contains("sleep")), "{seen:?}");
    }
}
