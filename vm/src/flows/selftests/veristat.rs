//! The verifier's statistics of every BPF object of a selftests build, by the selftests' own
//! `veristat` on the run's kernel: one boot runs `veristat -o csv *.bpf.o` in the build
//! directory, its CSV is kept beside the report ([`CSV`]) and its rows are the report's
//! `verifier`, which `selftests --against` compares as `veristat -C base.csv head.csv` does.
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

/// The guest's command: as the selftests' boots do, `bpf_testmod.ko` loaded (programs call
/// its kfuncs) and the kernel's config where libbpf reads it for `__kconfig` externs; then
/// veristat over every object of the build's top directory (the `no_alu32/` and `cpuv4/`
/// copies are the same programs, under the same file names).
fn command(config: &Path) -> String {
    format!(
        "insmod bpf_testmod.ko >/dev/null 2>&1; mount -t tmpfs tmpfs /boot && \
         cp {} \"/boot/config-$(uname -r)\" && exec ./{} -o csv *.bpf.o",
        quote(&config.display().to_string()),
        super::build::VERISTAT
    )
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
    let argv = ["sh".to_string(), "-c".into(), command(config)];
    guest::write(
        &files.script,
        &guest::exec_script(&files.shared, dir, &[], &argv),
    )?;
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
    crate::support::fs::write_atomic(&out_dir.join(CSV), out.as_bytes())?;
    files.keep(&out_dir.join("veristat-boot"), events);
    rows(&out, &out_dir.join(CSV).display().to_string())
}

/// veristat's CSV as the report's statistics (`what` names it in errors).
fn rows(text: &str, what: &str) -> Result<Vec<ProgStats>> {
    let rows = csv::parse(text, what).with_context(|| format!("reading veristat's {what}"))?;
    Ok(rows.iter().map(csv::Row::stats).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guest_loads_the_module_and_the_config_then_runs_veristat_over_every_object() {
        let c = command(Path::new("/k/.config"));
        assert!(c.starts_with("insmod bpf_testmod.ko"), "{c}");
        assert!(
            c.contains("cp /k/.config \"/boot/config-$(uname -r)\""),
            "{c}"
        );
        assert!(c.ends_with("exec ./veristat -o csv *.bpf.o"), "{c}");
    }
}
