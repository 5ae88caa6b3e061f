//! qemu as the VM runs it: a wrapper that says how qemu itself ended.
//!
//! virtme-run 1.42 forks qemu and waits for it, but when the guest command has not written its
//! status it returns 255 whatever qemu's end was (`virtme/commands/run.py`, the end of `do_it`:
//! "Return special error code 255 in case of unexpected exit"), so a kernel panic, an
//! assertion in qemu (SIGABRT) and a segfault look alike to vng's caller. vng therefore starts
//! qemu through [`wrapper`] (`vng --qemu`), which runs the real qemu and prints its exit status
//! on stderr when it is not 0; [`Watch`] reads that line and qemu's own last message (glibc's
//! assertion text and qemu's `error_report` both start with the program's name).
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::domain::arch::Arch;
use crate::support::shell::status_words;

/// What qemu's own messages start with, whichever binary.
const MESSAGE_PREFIX: &str = "qemu-system-";
/// The wrapper's file name, beside the guest script.
pub const WRAPPER_FILE: &str = "qemu-wrapper.sh";
/// What the wrapper prints before qemu's non-zero exit status.
const STATUS_LINE: &str = "bpfvm: qemu exited with status ";

/// The wrapper of `qemu`: runs the real qemu (the wrapper's own name is not on PATH) and
/// reports a non-zero status as a shell sees it: 128 + N when signal N ended qemu.
fn wrapper(qemu: &str) -> String {
    format!(
        "#!/bin/sh\n\
         # qemu for bpfvm: virtme-run does not pass on how qemu ended, so this says it.\n\
         {qemu} \"$@\"\n\
         status=$?\n\
         [ \"$status\" -eq 0 ] || echo \"{STATUS_LINE}$status\" >&2\n\
         exit \"$status\"\n"
    )
}

/// Writes the wrapper of `arch`'s qemu into `dir` (the run's directory) and returns its path.
pub fn write_wrapper(dir: &Path, arch: Arch) -> Result<PathBuf> {
    let path = dir.join(WRAPPER_FILE);
    std::fs::write(&path, wrapper(arch.qemu_system()))
        .with_context(|| format!("write {}", path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("make {} executable", path.display()))?;
    Ok(path)
}

/// How qemu ended, when not with status 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QemuEnd {
    /// A signal ended it (an assertion's SIGABRT, a SIGSEGV): what qemu said, and the signal.
    Crashed(String),
    /// It exited with an error of its own (a bad option, a device it could not set up).
    Failed(String),
}

/// Reads vng's stderr lines for the wrapper's status line and qemu's own messages.
#[derive(Debug, Default)]
pub struct Watch {
    status: Option<i32>,
    message: Option<String>,
}

impl Watch {
    /// Looks at one line of vng's stderr.
    pub fn see(&mut self, line: &str) {
        if let Some(status) = line.strip_prefix(STATUS_LINE) {
            self.status = status.trim().parse().ok();
        } else if let Some((_, message)) = line
            .strip_prefix(MESSAGE_PREFIX)
            .and_then(|l| l.split_once(": "))
        {
            self.message = Some(message.to_string());
        }
    }

    /// How qemu ended, if the wrapper said it was not with status 0.
    pub fn end(&self) -> Option<QemuEnd> {
        let status = self.status?;
        let words = status_words(status);
        Some(match (status > 128, &self.message) {
            (true, Some(m)) => QemuEnd::Crashed(format!("{m} ({words})")),
            (true, None) => QemuEnd::Crashed(format!("{words}, with no message of its own")),
            (false, Some(m)) => QemuEnd::Failed(format!("qemu {words}: {m}")),
            (false, None) => QemuEnd::Failed(format!("qemu {words}")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch(lines: &[&str]) -> Option<QemuEnd> {
        let mut w = Watch::default();
        for l in lines {
            w.see(l);
        }
        w.end()
    }

    /// Debian 13's qemu 10.0.13 under TCG, as the boot's stderr ended.
    #[test]
    fn an_assertion_is_a_crash_with_its_message_and_signal() {
        let end = watch(&[
            "Poking KASLR using RDRAND RDTSC...",
            "qemu-system-x86_64: ../../hw/pci/msix.c:228: msix_table_mmio_write: Assertion \
             `addr + size <= dev->msix_entries_nr * PCI_MSIX_ENTRY_SIZE' failed.",
            "bpfvm: qemu exited with status 134",
        ]);
        assert_eq!(
            end,
            Some(QemuEnd::Crashed(
                "../../hw/pci/msix.c:228: msix_table_mmio_write: Assertion `addr + size <= \
                 dev->msix_entries_nr * PCI_MSIX_ENTRY_SIZE' failed. (signal 6 (SIGABRT))"
                    .into()
            ))
        );
    }

    #[test]
    fn a_silent_signal_is_named_and_an_error_exit_is_no_crash() {
        assert_eq!(
            watch(&["bpfvm: qemu exited with status 139"]),
            Some(QemuEnd::Crashed(
                "signal 11 (SIGSEGV), with no message of its own".into()
            ))
        );
        assert_eq!(
            watch(&[
                "qemu-system-x86_64: -foo: invalid option",
                "bpfvm: qemu exited with status 1"
            ]),
            Some(QemuEnd::Failed(
                "qemu exit status 1: -foo: invalid option".into()
            ))
        );
        // qemu's warnings alone, and a qemu that exited 0 (a guest panic with panic=-1 and
        // -no-reboot), say nothing about qemu's end.
        assert_eq!(watch(&["qemu-system-x86_64: warning: host lacks x"]), None);
    }

    /// The wrapper itself, with a stand-in qemu on PATH that aborts as an assertion does.
    #[test]
    fn the_wrapper_passes_arguments_and_reports_the_signal() {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join(Arch::Arm64.qemu_system());
        std::fs::write(
            &fake,
            "#!/bin/sh\necho \"qemu-system-aarch64: got $#: $1|$2\" >&2\nkill -ABRT $$\n",
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let wrapper = write_wrapper(dir.path(), Arch::Arm64).unwrap();
        let path = format!("{}:/usr/bin:/bin", dir.path().display());
        let out = std::process::Command::new(&wrapper)
            .args(["-name", "a b"])
            .env("PATH", path)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(134));
        let err = String::from_utf8(out.stderr).unwrap();
        let end = watch(&err.lines().collect::<Vec<_>>());
        assert_eq!(
            end,
            Some(QemuEnd::Crashed(
                "got 2: -name|a b (signal 6 (SIGABRT))".into()
            )),
            "{err}"
        );
    }
}
