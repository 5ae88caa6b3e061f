//! `bpfvm mcp` driven by a real MCP client: the official Python SDK (`mcp` on PyPI), pinned by
//! hash in `mcp/requirements.txt` and installed into a venv of its own under bpfvm's cache,
//! runs `mcp/client.py` against this build's `bpfvm`. The checks that boot (a run, a cancel,
//! a killed client) are one test, `cargo xtask ci`'s; the others (the tools, bad arguments, two
//! clients at once) boot nothing.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use bpfvm_host::machine::provision::{parse_requirements, PipVenv};
use bpfvm_host::support::output::Events;
use bpfvm_host::support::paths::cache_dir;

fn here() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp")
}

/// The SDK's venv, made once (again when the pins change).
fn client_venv() -> PipVenv {
    let reqs = std::fs::read_to_string(here().join("requirements.txt")).unwrap();
    let venv = PipVenv {
        dir: cache_dir().join("mcp-client"),
        specs: parse_requirements(&reqs),
        bin: "mcp",
        wheels_only: true,
    };
    if !venv.present() {
        venv.install(&cache_dir().join("logs"), "mcp-client", &Events::silent())
            .expect("installing the MCP Python SDK (see ~/.cache/bpfvm/logs/mcp-client-pip.log)");
    }
    venv
}

/// The two tests' servers share this checkout's call queue, so a test running beside the other
/// would find the other's server holding it (client B "queued behind mcp", the other test's
/// client, instead of behind client A): one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs client.py's `checks`; it asserts, and prints the session.
fn client(checks: &[&str]) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let venv = client_venv();
    let status = Command::new(venv.dir.join("bin/python"))
        .arg(here().join("client.py"))
        .arg(env!("CARGO_BIN_EXE_bpfvm"))
        .args(checks)
        .status()
        .unwrap();
    assert!(status.success(), "client.py {checks:?}: {status}");
}

#[test]
#[ignore = "installs the MCP Python SDK from PyPI; `cargo xtask ci` runs it"]
fn a_client_lists_the_tools_bad_arguments_are_tool_errors_and_two_clients_queue() {
    client(&["tools", "bad", "two"]);
}

#[test]
#[ignore = "boots VMs; `cargo xtask ci` runs it"]
fn a_client_runs_a_filter_cancels_a_boot_and_dies_in_one_leaving_no_qemu() {
    client(&["run", "cancel", "kill"]);
}
