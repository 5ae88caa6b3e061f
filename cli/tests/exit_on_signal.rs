//! The exit status table's 128 + N (docs/exit-status.md), for every command: each `main` of
//! `cargo xtask` and `bpfvm` ends through `bpfvm::main_status`, which gives the signal's
//! status whatever the run came to (its status, its error, a panic). The interrupt is
//! process-wide, so this test has its binary to itself; the signal handlers and the VM killed
//! first are xtask/tests/env_and_signals.rs's and vm_lifecycle.rs's.
use std::process::ExitCode;

use bpfvm_host::support::status::Untestable;
use signal_hook::consts::SIGINT;

#[test]
fn an_interrupted_command_exits_128_plus_the_signal_whatever_it_came_to() {
    bpfvm_host::support::proc::request_interrupt(SIGINT);
    let came_to: [fn() -> anyhow::Result<ExitCode>; 6] = [
        || Ok(ExitCode::SUCCESS),
        || Ok(ExitCode::FAILURE),
        || Ok(ExitCode::from(125)),
        || Err(Untestable("`make bzImage` failed".into()).into()),
        || Err(anyhow::anyhow!("qemu crashed")),
        || panic!("a bug"),
    ];
    for (i, run) in came_to.into_iter().enumerate() {
        assert_eq!(bpfvm::main_status(run), ExitCode::from(130), "case {i}");
    }
}
