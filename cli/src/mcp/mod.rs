//! `bpfvm mcp`: bpfvm's runs served to an agent over the Model Context Protocol on stdio,
//! with rmcp (the official Rust SDK).
//!
//! How a call runs: each tool call that boots a VM runs the command a terminal would run
//! (`cargo xtask vm-test`, `bpfvm test`, `bpfvm selftests`) as a child of the server, in a
//! process group of its own (`child`), and reads back the report.json it wrote. Not in-process,
//! because:
//! - stdout is the JSON-RPC stream, and the commands print their tables there; a child's
//!   stdout is a pipe, so nothing a command (or a guest) prints can corrupt the stream;
//! - bpfvm's cancellation is process-wide (`support::proc`: a signal sets one flag that every
//!   wait polls), so two calls in one process could not be stopped one at a time; a child per
//!   call makes a client's cancel a SIGTERM to that call's group, the very path Ctrl-C takes
//!   (the command kills its VM, stops its build, exits 143), tested with the commands;
//! - the result is the file the command writes for CI, read back with its stable fields
//!   (`report`), so a call and a terminal run agree by construction.
//!
//! The child's stderr step lines become progress notifications (`progress`); its output and
//! the report directory's files are resources read on demand (`resources`); calls on one
//! checkout queue behind a lock file that names its holder (`queue`). Listing the kernels and
//! explaining a test read files only, and run in the server.
//!
//! A client that goes away (stdin closed, the client killed) ends the service, which cancels
//! every call still running: their commands are stopped as for a cancel, and the server waits
//! for them before it exits. SIGTERM, SIGINT and SIGHUP to the server do the same.
mod args;
mod child;
mod progress;
mod queue;
mod report;
mod resources;
mod server;

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use rmcp::ServiceExt;
use tokio::signal::unix::{signal, SignalKind};

/// How long the server waits, once its client is gone, for the calls' commands to stop (each
/// has 30 s between SIGTERM and SIGKILL).
const STOPPING: Duration = Duration::from_secs(45);

/// Serves on stdin and stdout until the client goes; the commands run from the checkout bpfvm
/// was built from.
pub fn run() -> Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the MCP server's runtime")?;
    let result = rt.block_on(serve());
    // A blocking read of stdin may still be in flight (a signal ended the service).
    rt.shutdown_timeout(Duration::from_secs(1));
    result
}

async fn serve() -> Result<ExitCode> {
    let running = child::Running::default();
    let commands = args::Commands {
        checkout: bpfvm_host::support::paths::workspace_root(),
        bpfvm: std::env::current_exe().context("cannot find the bpfvm binary itself")?,
    };
    let server = server::Server::new(
        commands,
        bpfvm_host::support::paths::target_dir(),
        running.clone(),
    );
    let service = server
        .serve(rmcp::transport::stdio())
        .await
        .context("the MCP client's initialization failed")?;
    let stop = service.cancellation_token();
    let (mut term, mut int, mut hup) = (
        signal(SignalKind::terminate())?,
        signal(SignalKind::interrupt())?,
        signal(SignalKind::hangup())?,
    );
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
            _ = hup.recv() => {}
        }
        stop.cancel();
    });
    service.waiting().await.context("the MCP service failed")?;
    let deadline = tokio::time::Instant::now() + STOPPING;
    while running.count() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(ExitCode::SUCCESS)
}
