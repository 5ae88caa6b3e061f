//! The verifier's statistics of every BPF object of a selftests build, by the selftests' own
//! `veristat` on the run's kernel: one boot runs `veristat -o csv *.bpf.o` in the build
//! directory, its CSV is kept beside the report ([`CSV`]) and its rows are the report's
//! `verifier`, which `selftests --against` compares as `veristat -C base.csv head.csv` does.
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{bail, Context, Result};
use bpfvm_common::verifier::ProgStats;

use crate::domain::options::VmOptions;
use crate::flows::run::{self, Prepared, RunDir};
use crate::machine::guest;
use crate::results::verifier::csv;
use crate::support::guest_files;
use crate::support::output::Events;
use crate::support::shell::quote;

/// veristat's CSV, kept in the run's directory: `veristat -C` reads two of them.
pub(crate) const CSV: &str = "veristat.csv";

/// The guest script: as the selftests' boots do, `bpf_testmod.ko` loaded (programs call its
/// kfuncs) before the first marker, so that its taints are the boot's, and the kernel's
/// `config` where libbpf reads it for `__kconfig` externs; then veristat over every object of
/// the build's top directory `dir` (the `no_alu32/` and `cpuv4/` copies are the same programs
/// under the same file names), its CSV on stdout.
fn script(out: &Path, dir: &Path, config: &Path) -> String {
    let mut s = guest::preamble(out);
    writeln!(s, "cd {} || exit 1", quote(&dir.display().to_string())).unwrap();
    writeln!(
        s,
        "insmod bpf_testmod.ko >/dev/null 2>&1\n\
         mount -t tmpfs tmpfs /boot\n\
         cp {} \"/boot/config-$(uname -r)\"",
        quote(&config.display().to_string())
    )
    .unwrap();
    let line = format!(
        "./{} -o csv *.bpf.o < /dev/null > \"$OUT/{}\" 2> \"$OUT/{}\"",
        super::build::VERISTAT,
        guest::EXEC_STDOUT,
        guest::EXEC_STDERR
    );
    guest::command_phase(&mut s, dir, &line);
    s
}

/// Runs veristat over the objects of the build `dir` in one boot of `p`'s kernel; keeps its
/// CSV as `out_dir/veristat.csv` and returns its rows. A boot or a veristat that did not run
/// to its end is an error: the objects were not all judged.
pub(crate) fn run(
    p: &Prepared,
    vm: &VmOptions,
    dir: &Path,
    config: &Path,
    out_dir: &Path,
    events: &Events,
) -> Result<Vec<ProgStats>> {
    events.step(format!(
        "veristat over every BPF object of {} (one boot)",
        dir.display()
    ));
    let files = RunDir::new(out_dir)?;
    guest::write(&files.script, &script(&files.shared, dir, config))?;
    let outcome = run::boot(p, vm, &files.shared, &files.script, events)?;
    let problems = run::judge_boot(&files.shared, &outcome, p)?.problems;
    let out = guest_files::read(&files.shared.join(guest::EXEC_STDOUT)).unwrap_or_default();
    if !problems.is_empty() || out.trim().is_empty() {
        let stderr = guest_files::read(&files.shared.join(guest::EXEC_STDERR)).unwrap_or_default();
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        bail!(
            "veristat did not judge the objects of {}: {}; {} (its stderr ends: {})",
            dir.display(),
            outcome.diagnosis(),
            problems.join("; "),
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        );
    }
    let csv = csv_of(&out);
    crate::support::fs::write_atomic(&out_dir.join(CSV), csv.as_bytes())?;
    files.keep(&out_dir.join("veristat-boot"), events);
    rows(csv, &out_dir.join(CSV).display().to_string())
}

/// The CSV of veristat's stdout: from its header on, after the notes it prints there while
/// it loads the objects (`Using guessed program type 'sched_cls' for ...`, `fixup_obj`).
fn csv_of(out: &str) -> &str {
    const HEADER: &str = "file_name,";
    match out.starts_with(HEADER) {
        true => out,
        false => out
            .find(&format!("\n{HEADER}"))
            .map_or(out, |at| &out[at + 1..]),
    }
}

/// veristat's CSV (or its stdout) as the report's statistics (`what` names it in errors).
fn rows(text: &str, what: &str) -> Result<Vec<ProgStats>> {
    let rows =
        csv::parse(csv_of(text), what).with_context(|| format!("reading veristat's {what}"))?;
    Ok(rows.iter().map(csv::Row::stats).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rows of two recorded runs (vm/testdata/veristat/): veristat of linux-source-6.12
    /// 6.12.118 (base: its kept `veristat.csv`) and of the same tree with a branch planted in
    /// `check_bloom` (head: veristat's stdout, its first note kept), each on its own kernel,
    /// cut to `bloom_filter_map.bpf.o` and `bpf_loop.bpf.o`.
    fn recorded(side: &str) -> (String, Vec<ProgStats>) {
        let path = crate::support::paths::workspace_root()
            .join(format!("vm/testdata/veristat/6.12-bloom-{side}.csv"));
        let text = std::fs::read_to_string(&path).unwrap();
        let rows = rows(&text, &path.display().to_string()).unwrap();
        (text, rows)
    }

    /// Joined on file and program, only the planted program moved: listed with both sides'
    /// counts, and no regression until a threshold says so.
    #[test]
    fn the_recorded_runs_differ_in_the_planted_program_only() {
        use crate::results::change::verifier::diff;
        let ((_, base), (_, head)) = (recorded("base"), recorded("head"));
        assert!(
            base.len() >= 8 && base.len() == head.len(),
            "{}",
            base.len()
        );
        let moved = diff("tree", &base, &head, None);
        let names: Vec<&str> = moved.iter().map(|p| p.program.as_str()).collect();
        assert_eq!(names, ["bloom_filter_map.bpf.o/check_bloom"]);
        let (b, h) = (
            moved[0].base.clone().unwrap(),
            moved[0].head.clone().unwrap(),
        );
        assert!(h.processed_insns > b.processed_insns, "{b:?} {h:?}");
        assert!(h.total_states > b.total_states, "{b:?} {h:?}");
        assert_eq!(moved[0].regression, None);
        let strict = diff("tree", &base, &head, Some(0.0));
        let why = strict[0].regression.as_deref().unwrap();
        assert!(
            why.starts_with("bloom_filter_map.bpf.o/check_bloom: processed insns "),
            "{why}"
        );
    }

    /// A program veristat verified at the base and not at head fails the change at any
    /// threshold, with veristat's word for why.
    #[test]
    fn a_recorded_program_that_no_longer_verifies_is_a_regression() {
        use crate::results::change::verifier::diff;
        let ((_, base), (text, _)) = (recorded("base"), recorded("head"));
        let lost = text.replacen(
            "bpf_loop.bpf.o,stack_check,success",
            "bpf_loop.bpf.o,stack_check,failure",
            1,
        );
        assert_ne!(lost, text, "the recorded head has stack_check");
        let head = rows(&lost, "lost.csv").unwrap();
        let moved = diff("tree", &base, &head, Some(1000.0));
        let lost = moved
            .iter()
            .find(|p| p.program == "bpf_loop.bpf.o/stack_check")
            .unwrap();
        assert_eq!(
            lost.regression.as_deref(),
            Some("bpf_loop.bpf.o/stack_check: success -> rejected (veristat: failure)")
        );
    }

    /// Recorded: veristat of 6.12.118 prints its notes on stdout before the CSV.
    #[test]
    fn the_csv_starts_at_its_header_after_veristats_notes() {
        let out = "Using guessed program type 'sched_cls' for exceptions_ext.bpf.o/extension...\n\
                   file_name,prog_name,verdict\nbpf_loop.bpf.o,test_prog,success\n";
        assert_eq!(
            csv_of(out),
            "file_name,prog_name,verdict\nbpf_loop.bpf.o,test_prog,success\n"
        );
        assert_eq!(csv_of("file_name,prog_name\n"), "file_name,prog_name\n");
        assert_eq!(rows(out, "out").unwrap()[0].prog_name, "test_prog");
    }

    #[test]
    fn the_module_loads_before_the_first_marker_then_veristat_runs_over_every_object() {
        let s = script(
            Path::new("/o"),
            Path::new("/b/bpf"),
            Path::new("/k/.config"),
        );
        let insmod = s.find("insmod bpf_testmod.ko").unwrap();
        let first_mark = s.find("bpfvm_mark ").unwrap();
        assert!(insmod < first_mark, "the module's taints are the boot's");
        assert!(
            s.contains("cp /k/.config \"/boot/config-$(uname -r)\"\n"),
            "{s}"
        );
        assert!(s.contains("cd /b/bpf || exit 1\n"), "{s}");
        let veristat = s.find("./veristat -o csv *.bpf.o < /dev/null > \"$OUT/exec.stdout\"");
        assert!(veristat.unwrap() > first_mark, "{s}");
    }
}
