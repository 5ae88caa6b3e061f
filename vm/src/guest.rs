//! The scripts the guest runs. A script file (not `--exec 'long command'`, which overflows the
//! kernel command line) prepares the guest, runs the payload, writes machine-readable results
//! into the shared directory, and finally the exit status that tells the host it finished.
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};

use crate::build::TestBinary;
use crate::shell::{join, quote};
use crate::vng::{END_MARKER, START_MARKER, STATUS_FILE};

/// Files the guest writes into the shared directory, read back by `report`.
pub mod files {
    pub const RELEASE: &str = "uname-r";
    pub const CMDLINE: &str = "cmdline";
    pub const SPECTRE_V2: &str = "spectre_v2";
    pub const FEATURES: &str = "features.json";
    pub const SKIPS: &str = "skips.jsonl";
}

/// Mounts what BPF tests need and records which kernel and mitigations the guest really got.
fn preamble(out: &Path) -> String {
    let o = quote(&out.display().to_string());
    format!(
        "#!/bin/sh\n\
         # Written by bpfvm; runs inside the guest as root.\n\
         echo '{START_MARKER}' >&2\n\
         OUT={o}\n\
         export BPFVM_RESULTS=\"$OUT\"\n\
         mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf\n\
         mountpoint -q /sys/kernel/debug || mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null\n\
         uname -r > \"$OUT/{rel}\"\n\
         cat /proc/cmdline > \"$OUT/{cmd}\"\n\
         cat /sys/devices/system/cpu/vulnerabilities/spectre_v2 > \"$OUT/{sp}\" 2>/dev/null\n",
        rel = files::RELEASE,
        cmd = files::CMDLINE,
        sp = files::SPECTRE_V2,
    )
}

/// The `vm-test` script: probe features, then run every test binary with libtest's JSON
/// output (unstable, hence RUSTC_BOOTSTRAP), echoing events to stdout for live progress.
pub fn test_script(
    out: &Path,
    release: &str,
    probe: &Path,
    binaries: &[TestBinary],
    filter: Option<&str>,
) -> String {
    let mut s = preamble(out);
    writeln!(s, "export BPFVM_EXPECT_RELEASE={}", quote(release)).unwrap();
    s.push_str("export RUSTC_BOOTSTRAP=1 RUST_BACKTRACE=1\n");
    writeln!(
        s,
        "{} > \"$OUT/{}\"",
        quote(&probe.display().to_string()),
        files::FEATURES
    )
    .unwrap();
    for b in binaries {
        let mut argv = vec![
            b.path.display().to_string(),
            "-Z".into(),
            "unstable-options".into(),
            "--format".into(),
            "json".into(),
            "--report-time".into(),
        ];
        argv.extend(filter.map(str::to_string));
        let n = &b.name;
        writeln!(
            s,
            "{{ {} 2> \"$OUT/{n}.stderr\"; echo $? > \"$OUT/{n}.rc\"; }} | tee \"$OUT/{n}.jsonl\"",
            join(&argv)
        )
        .unwrap();
    }
    epilogue(&mut s, "0");
    s
}

/// The `bench-vm` script: run the guest benchmark binary with plan `size` and the runner's
/// other arguments `args` (progress lines on stdout), its results to `results`, its exit
/// status to `rc`.
pub fn bench_script(
    out: &Path,
    bin: &Path,
    size: &str,
    args: &[String],
    results: &Path,
    rc: &Path,
) -> String {
    let mut s = preamble(out);
    let mut argv = vec![bin.display().to_string(), size.to_string()];
    argv.extend(args.iter().cloned());
    argv.extend(["--out".to_string(), results.display().to_string()]);
    writeln!(
        s,
        "{}; echo $? > {}",
        join(&argv),
        quote(&rc.display().to_string())
    )
    .unwrap();
    epilogue(&mut s, "0");
    s
}

/// The `vm-run` script: run one command from `cwd` and hand its status back.
pub fn command_script(out: &Path, cwd: &Path, argv: &[String]) -> String {
    let mut s = preamble(out);
    writeln!(s, "cd {} || exit 1", quote(&cwd.display().to_string())).unwrap();
    writeln!(s, "{}", join(argv)).unwrap();
    epilogue(&mut s, "$?");
    s
}

/// The script's last lines: the exit status (`status`, a shell word) that tells the host the
/// guest finished, then the marker that times the end of the script.
fn epilogue(s: &mut String, status: &str) {
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

    #[test]
    fn test_script_runs_each_binary_with_json_output_and_the_filter() {
        let s = test_script(
            Path::new("/t/run"),
            "6.1.0-57-cloud-amd64",
            Path::new("/t/probe"),
            &[TestBinary {
                name: "bpfvm_tests".into(),
                path: "/t/deps/bpfvm_tests-abc".into(),
            }],
            Some("bloom"),
        );
        assert!(s.contains("export BPFVM_EXPECT_RELEASE=6.1.0-57-cloud-amd64"));
        assert!(s.contains(
            "/t/deps/bpfvm_tests-abc -Z unstable-options --format json --report-time bloom"
        ));
        assert!(s.contains("/t/probe > \"$OUT/features.json\""));
        assert!(
            s.ends_with("echo 0 > \"$OUT/exit-status\"\necho 'bpfvm: guest script finished' >&2\n")
        );
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
        assert!(s.ends_with(
            "echo $? > \"$OUT/exit-status\"\necho 'bpfvm: guest script finished' >&2\n"
        ));
    }
}
