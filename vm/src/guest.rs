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
    /// The feature probe's exit status and stderr (not `probe.*`: the probe binary's own test
    /// harness is a test binary named `probe`).
    pub const PROBE_RC: &str = "features.rc";
    pub const PROBE_STDERR: &str = "features.stderr";
    pub const SKIPS: &str = "skips.jsonl";

    /// Where test binary `name` lists its tests (`--list --format terse`).
    pub fn list(name: &str) -> String {
        format!("{name}.list")
    }
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
    // Backtraces for panics, not for every anyhow error: capturing one takes std's backtrace
    // lock, which a panic's symbolisation (seconds under TCG) holds meanwhile.
    s.push_str("export RUSTC_BOOTSTRAP=1 RUST_BACKTRACE=1 RUST_LIB_BACKTRACE=0\n");
    writeln!(
        s,
        "{} > \"$OUT/{}\" 2> \"$OUT/{}\"; echo $? > \"$OUT/{}\"",
        quote(&probe.display().to_string()),
        files::FEATURES,
        files::PROBE_STDERR,
        files::PROBE_RC,
    )
    .unwrap();
    s.push_str(KERNEL_BTF_ONCE);
    for b in binaries {
        let path = b.path.display().to_string();
        let n = &b.name;
        // The list first: tests a crash never reaches are reported by name.
        let mut list = vec![
            path.clone(),
            "--list".into(),
            "--format".into(),
            "terse".into(),
        ];
        list.extend(filter.map(str::to_string));
        writeln!(
            s,
            "{} > \"$OUT/{}\" 2> \"$OUT/{n}.stderr\" || rm -f \"$OUT/{}\"",
            join(&list),
            files::list(n),
            files::list(n)
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
        argv.extend(filter.map(str::to_string));
        writeln!(
            s,
            "{{ with_kernel_btf_once {} 2>> \"$OUT/{n}.stderr\"; echo $? > \"$OUT/{n}.rc\"; }} | tee \"$OUT/{n}.jsonl\"",
            join(&argv)
        )
        .unwrap();
    }
    epilogue(&mut s, "0");
    s
}

/// Defines `with_kernel_btf_once CMD...`. aya 0.14's `EbpfLoader::new` parses the kernel's BTF
/// (`/sys/kernel/btf/vmlinux`, ~0.3 s under TCG) on every object load, even when it is then
/// handed a parsed copy; that parse was most of a test's time. So the tests parse a copy once
/// per process (`BPFVM_KERNEL_BTF`, see `tests/src/object.rs`) and run in a mount namespace where
/// the sysfs file reads empty, so that the loader's own parse fails at once. A kernel without
/// BTF runs the tests as they are.
const KERNEL_BTF_ONCE: &str = r#"if cp /sys/kernel/btf/vmlinux /tmp/bpfvm-vmlinux.btf 2>/dev/null; then
  export BPFVM_KERNEL_BTF=/tmp/bpfvm-vmlinux.btf
  with_kernel_btf_once() { unshare --mount sh -c 'mount --bind /dev/null /sys/kernel/btf/vmlinux && exec "$@"' sh "$@"; }
else
  with_kernel_btf_once() { "$@"; }
fi
"#;

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
            "{ with_kernel_btf_once /t/deps/bpfvm_tests-abc -Z unstable-options --format json \
             --report-time bloom"
        ));
        assert!(s.contains(KERNEL_BTF_ONCE));
        assert!(s.contains(
            "/t/probe > \"$OUT/features.json\" 2> \"$OUT/features.stderr\"; echo $? > \"$OUT/features.rc\""
        ));
        assert!(s.contains(
            "/t/deps/bpfvm_tests-abc --list --format terse bloom > \"$OUT/bpfvm_tests.list\""
        ));
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
