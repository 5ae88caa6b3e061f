//! The user's VM options, checked before anything is installed, fetched or booted. Each error
//! names the option, what is wrong with it and a value that works.

use std::time::Duration;

use anyhow::{bail, Context, Result};

/// VM settings shared by every flow (which kernel is `kernel::choice`'s).
#[derive(Debug, Clone)]
pub struct VmOptions {
    pub accel: Choice,
    /// Under TCG, a host thread per vCPU or one for all (`--tcg-thread`).
    pub tcg_thread: TcgThread,
    pub append: Vec<String>,
    pub timeout: Duration,
    pub cpus: u32,
    pub memory: String,
    /// Boot once more when a TCG boot panics or hangs before the guest script starts.
    pub retry: bool,
    /// Extra qemu arguments (see `vng::VmSpec::qemu_opts`); bench-vm sets them, users do not.
    pub qemu_opts: Vec<String>,
}

/// The defaults every command that boots a VM starts from (the CLIs' option defaults, `ci`'s
/// runs): one place, so `cargo xtask` and `bpfvm` agree.
pub mod defaults {
    /// The pin a command boots when none is named.
    pub const KERNEL: &str = "6.1";
    pub const CPUS: u32 = 2;
    /// Guest memory, qemu syntax.
    pub const MEMORY: &str = "2G";
    /// Seconds for one command (`vm-run`, `bpfvm exec`).
    pub const RUN_TIMEOUT_S: u64 = 600;
    /// Seconds for a whole suite in one boot (`vm-test`, `bpfvm test`).
    pub const TEST_TIMEOUT_S: u64 = 2400;
    /// Seconds for each benchmark boot (`bench-vm`).
    pub const BENCH_TIMEOUT_S: u64 = 7200;
}

impl VmOptions {
    /// Every option at its default but `timeout`.
    pub fn new(timeout: Duration) -> Self {
        VmOptions {
            accel: Choice::Auto,
            tcg_thread: TcgThread::Auto,
            append: vec![],
            timeout,
            cpus: defaults::CPUS,
            memory: defaults::MEMORY.into(),
            retry: true,
            qemu_opts: vec![],
        }
    }
}

/// What the user asked for with `--accel`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    Auto,
    Kvm,
    Tcg,
}

impl std::str::FromStr for Choice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Choice::Auto),
            "kvm" => Ok(Choice::Kvm),
            "tcg" => Ok(Choice::Tcg),
            _ => Err(format!("{s:?} is not an accelerator: auto, kvm or tcg")),
        }
    }
}

impl std::fmt::Display for Choice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Choice::Auto => "auto",
            Choice::Kvm => "kvm",
            Choice::Tcg => "tcg",
        })
    }
}

/// What the user asked for with `--tcg-thread` (`tcg_thread::decide`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcgThread {
    /// Single where qemu's version needs it, else multi.
    Auto,
    Single,
    Multi,
}

impl std::str::FromStr for TcgThread {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(TcgThread::Auto),
            "single" => Ok(TcgThread::Single),
            "multi" => Ok(TcgThread::Multi),
            _ => Err(format!(
                "{s:?} is not a TCG threading: auto, single or multi"
            )),
        }
    }
}

impl std::fmt::Display for TcgThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TcgThread::Auto => "auto",
            TcgThread::Single => "single",
            TcgThread::Multi => "multi",
        })
    }
}

/// The smallest guest that boots the cloud kernels and runs the suite.
const MIN_MEMORY_MIB: u64 = 256;

pub fn check(opts: &VmOptions) -> Result<()> {
    crate::support::paths::check_target_dir(&crate::support::paths::target_dir())?;
    cpus(opts.cpus, host_cpus())?;
    memory_mib(&opts.memory, host_memory_mib())?;
    if opts.timeout.is_zero() {
        bail!(
            "--timeout 0 would kill the VM before it boots; give the seconds the run may take, \
             e.g. --timeout 600"
        );
    }
    for a in &opts.append {
        append(a)?;
    }
    Ok(())
}

/// Under TCG each vCPU is a host thread: more vCPUs than cores slow every one of them down and
/// starve the boot (see `run::retry_boot`); under KVM they only contend. Either way no test
/// needs it.
fn cpus(cpus: u32, host: usize) -> Result<()> {
    if cpus == 0 {
        bail!("--cpus 0: a VM needs at least one CPU; e.g. --cpus 2");
    }
    if cpus as usize > host {
        bail!(
            "--cpus {cpus} is more than the {host} CPUs this machine gives bpfvm; use --cpus {host} \
             or fewer"
        );
    }
    Ok(())
}

fn host_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// qemu's `-m` syntax: a number of MiB, or a number with a K, M, G or T suffix (an optional
/// trailing B, any case). Returns MiB.
fn memory_mib(memory: &str, host_mib: Option<u64>) -> Result<u64> {
    let mib = parse_mib(memory).with_context(|| {
        format!(
            "--memory {memory:?} is not a size: use qemu's syntax, MiB or a number with a suffix, \
             e.g. --memory 2G or --memory 1536M"
        )
    })?;
    if mib < MIN_MEMORY_MIB {
        bail!("--memory {memory} is too little to boot the kernel; give at least {MIN_MEMORY_MIB}M, e.g. --memory 2G");
    }
    if let Some(host) = host_mib.filter(|&h| mib > h) {
        bail!(
            "--memory {memory} is more than this machine's {:.1} GiB of memory; e.g. --memory 2G",
            host as f64 / 1024.0
        );
    }
    Ok(mib)
}

fn parse_mib(s: &str) -> Option<u64> {
    // Untrimmed: the string goes to qemu as it is, and qemu refuses "2G\n".
    let s = s
        .strip_suffix('B')
        .or_else(|| s.strip_suffix('b'))
        .unwrap_or(s);
    let (num, unit) = match s.char_indices().last()? {
        (i, c) if c.is_ascii_alphabetic() => (&s[..i], c.to_ascii_uppercase()),
        _ => (s, 'M'),
    };
    let scale = match unit {
        'K' => 1.0 / 1024.0,
        'M' => 1.0,
        'G' => 1024.0,
        'T' => 1024.0 * 1024.0,
        _ => return None,
    };
    if num.is_empty() || !num.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return None;
    }
    let mib = num.parse::<f64>().ok()? * scale;
    (mib.is_finite() && mib < 1e12).then_some(mib as u64)
}

fn host_memory_mib() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kib / 1024)
}

/// virtme-ng splits each `--append` like a shell (`shlex.split`) and quotes a word holding
/// spaces in double quotes for the kernel (`quote_karg` in virtme/commands/run.py), which
/// refuses a word holding a double quote. So `foo="a b"` reaches the kernel as `"foo=a b"`;
/// what vng would crash on is refused here with the fix.
fn append(a: &str) -> Result<()> {
    if a.contains(['\n', '\r']) {
        bail!(
            "--append {a:?} contains a line break: the kernel command line is one line; pass each \
             parameter as its own --append"
        );
    }
    let Some(words) = shlex::split(a) else {
        bail!(
            "--append {a:?} has an unmatched quote; close it, e.g. --append 'foo=\"a b\"' for a \
             value with spaces"
        );
    };
    if let Some(w) = words.iter().find(|w| w.contains('"')) {
        bail!(
            "--append {a:?}: the word {w:?} keeps a double quote, which virtme-ng cannot pass to \
             the kernel; quote only whole values, e.g. --append 'foo=\"a b\"'"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpus_between_one_and_the_host_cores() {
        assert!(cpus(1, 2).is_ok());
        assert!(cpus(2, 2).is_ok());
        let e = cpus(0, 2).unwrap_err().to_string();
        assert!(e.contains("at least one CPU"), "{e}");
        let e = cpus(3, 2).unwrap_err().to_string();
        assert!(e.contains("more than the 2 CPUs"), "{e}");
        assert!(e.contains("--cpus 2 or fewer"), "{e}");
    }

    #[test]
    fn memory_in_qemu_syntax_within_the_host() {
        let host = Some(4096);
        assert_eq!(memory_mib("2G", host).unwrap(), 2048);
        assert_eq!(memory_mib("1536M", host).unwrap(), 1536);
        assert_eq!(memory_mib("1536", host).unwrap(), 1536);
        assert_eq!(memory_mib("1.5g", host).unwrap(), 1536);
        assert_eq!(memory_mib("2GB", host).unwrap(), 2048);
        assert_eq!(memory_mib("1048576K", host).unwrap(), 1024);
        for bad in [
            "lots", "", "2X", "-1G", "G", "1e9", "2 G", "0x10", "2G\n", " 2G", "2G ",
        ] {
            let e = format!("{:#}", memory_mib(bad, host).unwrap_err());
            assert!(e.contains("is not a size"), "{bad}: {e}");
            assert!(e.contains("e.g. --memory 2G"), "{bad}: {e}");
        }
        let e = memory_mib("8G", host).unwrap_err().to_string();
        assert!(e.contains("more than this machine's 4.0 GiB"), "{e}");
        let e = memory_mib("64M", host).unwrap_err().to_string();
        assert!(e.contains("too little"), "{e}");
        assert!(host_memory_mib().is_some_and(|m| m > 0));
    }

    #[test]
    fn append_takes_what_reaches_the_kernel_intact() {
        append("spectre_v2=off").unwrap();
        append("foo=\"a b\" bar").unwrap();
        append("dyndbg='file x.c +p'").unwrap();
        append("a;b$(touch /x)").unwrap();
        let e = append("foo=1\nbar=2").unwrap_err().to_string();
        assert!(e.contains("line break"), "{e}");
        let e = append("foo=\"a b").unwrap_err().to_string();
        assert!(e.contains("unmatched quote"), "{e}");
        let e = append("foo='say \"hi\"'").unwrap_err().to_string();
        assert!(e.contains("keeps a double quote"), "{e}");
    }
}
