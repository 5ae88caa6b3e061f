//! A run, in the steps every flow shares: `prepare` (the options checked, the kernel made
//! ready, the accelerator chosen), `dir` (the run's files), `boot` (the VM, retried once under
//! TCG), `conclude` (the kernel log judged, the report written, the exit status). `vm_run` and
//! `vm_test` are the two flows made of them alone; `exec`, `crate_test`, `bench`, `pieces` and
//! `selftests` call the same steps.
pub(crate) mod boot;
pub(crate) mod conclude;
pub(crate) mod dir;
mod kept_guest;
pub(crate) mod prepare;
mod vm_run;
mod vm_test;

// The steps by name, as the flows import them.
pub(crate) use boot::{boot, boot_tests, vm_spec, BOOT_TIMEOUT};
pub(crate) use conclude::{
    boot_health, boot_problems, conclude, judge_boot, kernel_health, BootLog, TestRun,
};
pub use conclude::{judge_kernel_log, run_status};
pub(crate) use dir::{run_dir_reading, RunDir};
pub(crate) use prepare::{prepare, prepare_any_arch, Prepared};
pub use vm_run::vm_run;
pub(crate) use vm_test::with_offline_cpus;
pub use vm_test::{vm_test, vm_test_all, TestOptions};
