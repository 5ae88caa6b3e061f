//! The bench-vm data model: what a report holds (`report.json`), and the figures the
//! renderers and `bench-compare` read from it, one value per valid boot and mode. Knows nothing
//! of rendering; the renderers (`markdown`, `plot`) and `compare` read it.
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::stats::{self, Better};
use crate::domain::arch::Arch;
use crate::results::report::AccelInfo;
use crate::support::status::Status;
use bpfvm_common::bench_results::{Results, Stat};

/// How much to measure (the guest runner's plan of the same name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Size {
    /// One size per benchmark, one boot per mode (CI: the code cannot rot).
    Smoke,
    /// The headline rows and a few more: 3 boots per mode under the instruction clock (TCG),
    /// 5 under the wall clock (KVM).
    Quick,
    /// The threads' whole tables.
    Full,
}

impl Size {
    pub fn name(self) -> &'static str {
        match self {
            Size::Smoke => "smoke",
            Size::Quick => "quick",
            Size::Full => "full",
        }
    }

    /// Boots per mode unless `--boots` says otherwise.
    pub fn default_boots(self, clock: Clock) -> u32 {
        match (self, clock) {
            (Size::Smoke, _) => 1,
            // Instruction counts repeat across boots to about 0.01 %, but bench-compare's
            // simultaneous intervals need degrees of freedom: over 36 row-modes (each at
            // 99.86 %) the t quantile is about 460 with 2 boots per mode (1 df; a 0.01 % spread
            // gives intervals of several %), about 8 with 3 (about 4 df).
            (_, Clock::Icount) => 3,
            // Five boots per mode keep a wall-clock run within its 10-minute budget under TCG.
            (Size::Quick, Clock::Wall) => 5,
            (Size::Full, Clock::Wall) => 3,
        }
    }
}

impl FromStr for Size {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        [Size::Smoke, Size::Quick, Size::Full]
            .into_iter()
            .find(|z| z.name() == s)
            .ok_or_else(|| format!("unknown size `{s}` (smoke, quick, full)"))
    }
}

/// The boots in order, ABBA: pairs of one boot per mode whose order alternates (retpoline
/// then off, then off then retpoline, ...), so a drift linear in time over any two pairs
/// weighs on both modes alike (with plain alternation the mode that goes first in every pair
/// is always measured earlier: the KVM case, where a host's speed drifts).
pub fn schedule(boots_per_mode: u32) -> Vec<Mode> {
    (0..boots_per_mode.max(1))
        .flat_map(|pair| match pair % 2 {
            0 => [Mode::Retpoline, Mode::Off],
            _ => [Mode::Off, Mode::Retpoline],
        })
        .collect()
}

/// The mitigation a boot asks for: the slot of the kernel's mitigations and the slot without.
/// On x86_64 the mitigated slot is `spectre_v2=retpoline`; retpoline is x86's, so on arm64 it
/// is the kernel's default mitigations (`mitigations=auto`) against `mitigations=off`
/// (Documentation/admin-guide/kernel-parameters.txt). The report's `params.arch` says which;
/// the JSON names the slots `retpoline` and `off` on both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Retpoline,
    Off,
}

impl Mode {
    /// The mode's name in a report: in a null run the two arms of the schedule, A (the
    /// mitigated slot) and B (the off slot), both booted with the mitigations off.
    pub fn label(self, null: bool, arch: Arch) -> &'static str {
        match (null, self) {
            (false, _) => self.name(arch),
            (true, Mode::Retpoline) => "A (off)",
            (true, Mode::Off) => "B (off)",
        }
    }

    /// What a boot of this mode is booted with: in a null run both modes are `Off`.
    pub fn booted(self, null: bool) -> Mode {
        if null {
            Mode::Off
        } else {
            self
        }
    }

    pub fn name(self, arch: Arch) -> &'static str {
        match (arch, self) {
            (Arch::X86_64, Mode::Retpoline) => "retpoline",
            (Arch::Arm64, Mode::Retpoline) => "mitigations",
            (_, Mode::Off) => "off",
        }
    }

    /// The kernel command line argument.
    pub fn cmdline_arg(self, arch: Arch) -> String {
        match (arch, self) {
            (Arch::X86_64, m) => format!("spectre_v2={}", m.name(arch)),
            (Arch::Arm64, Mode::Retpoline) => "mitigations=auto".into(),
            (Arch::Arm64, Mode::Off) => "mitigations=off".into(),
        }
    }

    /// What `/sys/devices/system/cpu/vulnerabilities/spectre_v2` shows in this mode, where it
    /// tells the modes apart: not on arm64 under TCG, where qemu's CPU has no firmware
    /// workaround and it reads "Vulnerable" either way (the guest's command line says the
    /// mode there).
    pub fn expected(self, arch: Arch) -> Option<&'static str> {
        match (arch, self) {
            (Arch::X86_64, Mode::Retpoline) => Some("Retpolines"),
            (Arch::X86_64, Mode::Off) => Some("Vulnerable"),
            (Arch::Arm64, _) => None,
        }
    }
}

fn x86_64() -> Arch {
    Arch::X86_64
}

/// What a run was asked to measure: two reports compare only when these are equal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Params {
    pub size: Size,
    /// Benchmark groups; empty: all.
    pub only: Vec<String>,
    /// Producer threads in the guest (`-p`).
    pub producers: u32,
    pub cpus: u32,
    pub memory: String,
    pub boots_per_mode: u32,
    /// A null (A/A) run (`--null`): both modes of every boot pair booted with
    /// `spectre_v2=off`, so every cost is 1 and any verdict of a difference is a false
    /// positive of the method (format 3; earlier reports are not null runs).
    #[serde(default)]
    pub null: bool,
    /// The kernel's architecture, which names the modes (reports before `--arch` are
    /// x86_64's).
    #[serde(default = "x86_64")]
    pub arch: Arch,
    /// The kernel's own `bench` ran after the suite's benchmarks in every boot (`upstream`;
    /// reports before it have none).
    #[serde(default)]
    pub upstream: bool,
}

/// The host's load while one boot ran.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct HostLoad {
    /// CPUs' worth of time other processes used during the boot: the host's busy time
    /// (/proc/stat) minus this process's and its children's (getrusage).
    pub other_cpus: f64,
    /// The 1-minute load average when the boot ended.
    pub loadavg_1m: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Run {
    pub mode: Mode,
    /// `uname -r` in the guest: which kernel this boot ran (an A/B's boots are each A's or
    /// B's, checked against what was asked for).
    #[serde(default)]
    pub release: Option<String>,
    pub spectre_v2: Option<String>,
    pub cmdline: Option<String>,
    /// The guest ran in the asked mode and its runner finished.
    pub valid: bool,
    pub invalid_reason: Option<String>,
    #[serde(default)]
    pub host: HostLoad,
    /// Invalid only for a splat the kernel logged in its own start-up, before anything of
    /// ours ran (`Health::spoiled_at_boot`): the one invalid boot that may be repeated.
    #[serde(default)]
    pub spoiled_at_boot: bool,
    /// Why the statistics leave this boot out and a repeat of it ran: it ran on a busy host
    /// (wall clock), or the kernel spoiled it while it booted (once per boot of the schedule).
    #[serde(default)]
    pub excluded: Option<String>,
    pub wall_time_s: f64,
    #[serde(flatten)]
    pub results: Results,
    /// The kernel's own `bench`, one entry per invocation (`upstream`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upstream_bench: Vec<Outcome>,
}

/// One invocation of the kernel's `bench` (`upstream`): the benchmark and its options (the
/// timing apart).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Call {
    pub bench: String,
    pub args: Vec<String>,
}

/// One boot's run of one call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    #[serde(flatten)]
    pub call: Call,
    /// bench's exit status; None when the guest wrote none (the boot ended before).
    pub status: Option<i32>,
    /// The measured iterations' figures (`upstream::parse::Parsed::samples`).
    pub samples: Vec<f64>,
    /// bench's `Summary:` line.
    pub summary: Option<String>,
}

impl Run {
    /// Counted in the statistics.
    pub fn counts(&self) -> bool {
        self.valid && self.excluded.is_none()
    }

    /// This boot fails the run: a benchmark failed, or it is invalid, but for a boot the
    /// kernel spoiled while it booted that a repeat replaced.
    pub fn fails(&self) -> bool {
        if self.valid {
            !self.results.errors.is_empty()
        } else {
            !(self.spoiled_at_boot && self.excluded.is_some())
        }
    }
}

/// The version of `report.json`'s layout this code writes: 2 added `format` and `clock`
/// (reports without them are version 1, measured by the wall clock); 3 times the
/// get_next_key dump once per boot (one row, [`ENTRY_DUMP_KEY`]; every buffer's row carries
/// the same runs) and added `params.null`.
pub const FORMAT: u32 = 3;

/// The key of the get_next_key dump's one row from format 3 on (before: one per buffer).
pub const ENTRY_DUMP_KEY: &str = "get_next_key dump";

fn format_v1() -> u32 {
    1
}

/// What the guest's clock counted while the benchmarks timed themselves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Clock {
    /// Real time: under KVM hardware time, under TCG the emulator's speed of the moment.
    #[default]
    Wall,
    /// qemu's `-icount shift=0`: the guest clock advances one nanosecond per guest
    /// instruction executed, so a "time" is an instruction count, whatever the host does.
    Icount,
}

impl Clock {
    pub fn name(self) -> &'static str {
        match self {
            Clock::Wall => "wall",
            Clock::Icount => "icount",
        }
    }

    /// What the clock means for the figures, for the report's header.
    pub fn note(self) -> &'static str {
        match self {
            Clock::Wall => "wall: the guest clock follows real time; figures are times and rates",
            Clock::Icount => {
                "icount: qemu's -icount shift=0,sleep=off, one virtual nanosecond per guest \
                 instruction on one vCPU; figures are instruction counts, exact whatever the \
                 host does"
            }
        }
    }

    /// The headline rows' target half-width (95 %), in percent.
    pub fn headline_target_pct(self) -> f64 {
        match self {
            Clock::Wall => 5.0,
            Clock::Icount => 1.0,
        }
    }
}

/// qemu's arguments for [`Clock::Icount`]: shift=0 is one ns per instruction; sleep=off lets
/// an idle guest's clock jump instead of waiting in real time.
pub const ICOUNT_QEMU_OPTS: [&str; 2] = ["-icount", "shift=0,sleep=off"];

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchReport {
    /// The layout version ([`FORMAT`]).
    #[serde(default = "format_v1")]
    pub format: u32,
    #[serde(default)]
    pub clock: Clock,
    pub kernel: String,
    pub release: String,
    /// The source tree the kernel was built from (`--kernel-tree`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree: Option<crate::kernel::source_tree::TreeInfo>,
    pub accel: AccelInfo,
    /// What the accelerator means for the figures.
    pub accel_note: String,
    pub host_cpu: String,
    pub params: Params,
    pub wall_time_s: f64,
    /// Why the kernel's `bench` did not run although asked for (`params.upstream`): no
    /// selftests to build for this kernel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_skipped: Option<String>,
    pub runs: Vec<Run>,
}

impl BenchReport {
    /// The distinct values of one parameter over every run's rows, sorted.
    pub fn distinct(&self, param: impl Fn(&Results) -> Vec<u32>) -> Vec<u32> {
        let mut keys: Vec<u32> = self
            .runs
            .iter()
            .flat_map(|run| param(&run.results))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    /// No boot fails the run ([`Run::fails`]), those left out included.
    pub fn ok(&self) -> bool {
        !self.runs.iter().any(Run::fails)
    }

    /// The run's exit status: 0, or 1 when a boot fails it. What judged nothing (qemu, the
    /// host) never made a report: it is the run's error, 255.
    pub fn status(&self) -> Status {
        if self.ok() {
            Status::Good
        } else {
            Status::Bad
        }
    }

    /// `f` of every counted run, split by mode.
    pub fn pair(&self, f: impl Fn(&Results) -> Option<f64>) -> Pair {
        let mut p = Pair::default();
        for run in self.runs.iter().filter(|run| run.counts()) {
            if let Some(v) = f(&run.results) {
                match run.mode {
                    Mode::Retpoline => p.on.push(v),
                    Mode::Off => p.off.push(v),
                }
            }
        }
        p
    }
}

/// One figure measured in both modes: one value per counted boot.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pair {
    pub on: Vec<f64>,
    pub off: Vec<f64>,
}

/// A figure of the report: one row of one table.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// Stable across reports: what `bench-compare` matches rows by.
    pub key: String,
    /// The table it belongs to.
    pub table: &'static str,
    pub unit: &'static str,
    /// The row's parameters, for the table.
    pub params: String,
    pub better: Better,
    /// One of the rows the quick plan must resolve to +-5 %.
    pub headline: bool,
    /// What the cells show: the figure itself.
    pub values: Pair,
    /// What the statistics compare: the figure over the guest's reference speed measured
    /// beside it (times: times the speed), which takes out the host's speed drift; the figure
    /// itself for reports without reference speeds.
    pub relative: Pair,
    /// The thread's figure, if it has one.
    pub thread: Option<f64>,
}

impl Figure {
    /// The retpoline cost with its 95 % CI (see [`stats::cost`]).
    pub fn cost(&self) -> Option<stats::Ci> {
        stats::cost(&self.relative.on, &self.relative.off, self.better)
    }

    /// The same from the raw figures (the cells), not normalised by the reference speed: shown
    /// beside the cost, so a verdict that only the normalisation makes is visible. The two
    /// are one under the instruction clock.
    pub fn raw_cost(&self) -> Option<stats::Ci> {
        stats::cost(&self.values.on, &self.values.off, self.better)
    }
}

/// A boot's figure from its samples. Wall clock: their median (robust to one sample hit by a
/// busy host), or the mean the guest computed when no samples were kept. Instruction clock:
/// the highest rate, i.e. the fewest instructions per op: whatever else the one vCPU runs
/// during a sample (a timer tick, a kworker) only adds instructions to it, never removes any,
/// so the least count is the operation's own (one sample of 36 once read 33 % low).
pub fn boot_value(clock: Clock, s: &Stat) -> f64 {
    match clock {
        Clock::Wall => stats::median(&s.samples).unwrap_or(s.mean),
        Clock::Icount => s.samples.iter().copied().reduce(f64::max).unwrap_or(s.mean),
    }
}

/// A dump's figure in ms (M instructions under the instruction clock) from its timed runs:
/// their median under the wall clock, their least under the instruction clock (see
/// [`boot_value`]); `fallback_ns` (the guest's median) for reports without runs.
pub fn dump_value(clock: Clock, runs_ns: &[u64], fallback_ns: f64) -> f64 {
    let runs: Vec<f64> = runs_ns.iter().map(|&t| t as f64).collect();
    let v = match clock {
        Clock::Wall => stats::median(&runs),
        Clock::Icount => runs.iter().copied().reduce(f64::min),
    };
    v.unwrap_or(fallback_ns) / 1e6
}

/// A boot's figure over the reference speed: the median of sample / speed; the
/// [`boot_value`] when the samples have no speeds.
pub fn boot_relative(s: &Stat) -> f64 {
    if s.speeds.len() != s.samples.len() || s.samples.is_empty() {
        return boot_value(Clock::Wall, s);
    }
    let r: Vec<f64> = s
        .samples
        .iter()
        .zip(&s.speeds)
        .map(|(x, v)| x / v)
        .collect();
    stats::median(&r).unwrap_or(f64::NAN)
}

pub(crate) const RATE: &str = "M ops/s";
pub(crate) const LATENCY: &str = "ns per iteration";
pub(crate) const DUMP: &str = "ms per dump";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boots_run_in_abba_order() {
        use Mode::*;
        assert_eq!(schedule(2), vec![Retpoline, Off, Off, Retpoline]);
        assert_eq!(
            schedule(3),
            vec![Retpoline, Off, Off, Retpoline, Retpoline, Off]
        );
        assert_eq!(schedule(1), vec![Retpoline, Off]);
        assert_eq!(schedule(0), vec![Retpoline, Off]);
    }

    #[test]
    fn a_null_run_boots_both_modes_with_spectre_v2_off() {
        assert_eq!(Mode::Retpoline.booted(true), Mode::Off);
        assert_eq!(Mode::Retpoline.booted(false), Mode::Retpoline);
        assert_eq!(Mode::Off.booted(true), Mode::Off);
        assert_eq!(
            (
                Mode::Retpoline.label(true, Arch::X86_64),
                Mode::Off.label(true, Arch::X86_64)
            ),
            ("A (off)", "B (off)")
        );
    }

    /// Retpoline is x86's: on arm64 the slots are the kernel's default mitigations and none,
    /// told apart by the command line, since spectre_v2 reads the same in both under TCG.
    #[test]
    fn each_architecture_names_its_own_modes() {
        let args = |a| (Mode::Retpoline.cmdline_arg(a), Mode::Off.cmdline_arg(a));
        assert_eq!(
            args(Arch::X86_64),
            ("spectre_v2=retpoline".into(), "spectre_v2=off".into())
        );
        assert_eq!(
            args(Arch::Arm64),
            ("mitigations=auto".into(), "mitigations=off".into())
        );
        assert_eq!(Mode::Retpoline.expected(Arch::X86_64), Some("Retpolines"));
        assert_eq!(Mode::Off.expected(Arch::Arm64), None);
        assert_eq!(Mode::Retpoline.label(false, Arch::Arm64), "mitigations");
    }

    #[test]
    fn sizes_parse_by_name() {
        assert_eq!("quick".parse::<Size>(), Ok(Size::Quick));
        assert!("medium".parse::<Size>().is_err());
    }

    #[test]
    fn a_boot_value_is_the_median_of_its_samples() {
        let s = Stat::of(vec![1.0, 9.0, 2.0]);
        assert_eq!(boot_value(Clock::Wall, &s), 2.0);
        let no_samples = Stat {
            mean: 4.0,
            ..Stat::default()
        };
        assert_eq!(boot_value(Clock::Wall, &no_samples), 4.0);
        assert_eq!(boot_value(Clock::Icount, &no_samples), 4.0);
    }

    #[test]
    fn under_the_instruction_clock_a_boot_keeps_its_least_count() {
        // A disturbed sample reads a lower rate (more instructions per op): the highest rate
        // is the boot's figure, and the least of its timed dumps.
        let s = Stat::of(vec![4.0, 3.0, 4.0001]);
        assert_eq!(boot_value(Clock::Icount, &s), 4.0001);
        assert_eq!(
            dump_value(Clock::Icount, &[63_750_000, 59_100_000], 0.0),
            59.1
        );
        assert_eq!(
            dump_value(Clock::Wall, &[3_000_000, 1_000_000, 2_000_000], 0.0),
            2.0
        );
        assert_eq!(dump_value(Clock::Icount, &[], 5e6), 5.0);
    }
}
