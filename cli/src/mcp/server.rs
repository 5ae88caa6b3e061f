//! The MCP server: its tools, each over a command (or, for the quick ones, the code the
//! command calls), and the resources the calls leave.
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    Implementation, ListResourcesResult, PaginatedRequestParams, ProgressNotificationParam,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, ResourceContents,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{tool, tool_handler, tool_router, ErrorData, Json, RoleServer, ServerHandler};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::args::{BisectParams, ChangeParams, Commands, Invocation, RunParams, SelftestsParams};
use super::child::{self, Ended, Running, Stream};
use super::progress::{self, Progress};
use super::queue;
use super::report::{Report, Splat};
use super::resources::Logs;

/// What the server shares between calls.
struct State {
    commands: Commands,
    target: PathBuf,
    logs: Logs,
    calls: AtomicU64,
    running: Running,
}

#[derive(Clone)]
pub(super) struct Server {
    tool_router: ToolRouter<Self>,
    state: Arc<State>,
}

/// A run's verdict: the report.json the command wrote (its stable fields), its exit status,
/// and the resources to read for more.
#[derive(Debug, Serialize, JsonSchema)]
pub(super) struct RunResult {
    /// good (exit 0: every verdict passed) or bad (exit 1: the kernel is to blame).
    pub(super) verdict: String,
    pub(super) exit_status: i32,
    /// Why it failed, when it did: the failing entries.
    pub(super) why: Option<String>,
    /// The command that ran, to rerun it in a terminal.
    pub(super) command: String,
    pub(super) report_path: String,
    pub(super) report: Report,
    /// The command's whole output and the report directory's files (kernel.log, junit.xml,
    /// the guest's output): read them with resources/read.
    pub(super) resources: Vec<String>,
}

/// One bisect step's answer, as `git bisect run` reads an exit status.
#[derive(Debug, Serialize, JsonSchema)]
pub(super) struct BisectResult {
    /// 0 good, 1 bad, 125 skip (this commit cannot be judged), 255 stop (bpfvm could not
    /// judge for a reason that is not the commit's): docs/exit-status.md.
    pub(super) exit_status: i32,
    /// good, bad, skip or stop.
    pub(super) verdict: String,
    pub(super) why: String,
    /// The commit judged, when a rev was given.
    pub(super) commit: Option<String>,
    pub(super) command: String,
    /// The report, when the run judged the kernel (0 or 1).
    pub(super) report: Option<Report>,
    pub(super) resources: Vec<String>,
}

/// A test's last outcome, the splats blamed on it and its known entry.
#[derive(Debug, Serialize, JsonSchema)]
pub(super) struct Explained {
    pub(super) test: String,
    /// The report read, and when it was written (seconds since the epoch).
    pub(super) report_path: String,
    pub(super) report_written_unix: Option<u64>,
    /// pass, fail or skip.
    pub(super) outcome: String,
    /// What it said: the failure, or the skip's reason.
    pub(super) output: Option<String>,
    pub(super) duration_ms: u64,
    /// The kernel splats logged while it ran.
    pub(super) splats: Vec<Splat>,
    /// The known-failure entry that names it (selftests on a pin), with its reason.
    pub(super) known: Option<KnownEntry>,
    /// The report directory's files (kernel.log, the guest's output): resources/read.
    pub(super) resources: Vec<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(super) struct KnownEntry {
    pub(super) file: String,
    pub(super) test: String,
    pub(super) reason: String,
    /// Whether its failure depends on timing (a pass then does not mean the entry is stale).
    pub(super) timing: bool,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(super) struct Kernels {
    pub(super) pins: Vec<PinRow>,
    /// The kernels built from source trees, most recently used first.
    pub(super) tree_builds: Vec<TreeBuild>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(super) struct PinRow {
    pub(super) version: String,
    pub(super) arch: String,
    pub(super) release: String,
    pub(super) description: String,
    /// Where it is cached; none: the first run fetches it.
    pub(super) cached_at: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(super) struct TreeBuild {
    pub(super) dir: String,
    pub(super) gigabytes: f64,
    /// The build's release, tree and commit; none when no build completed there.
    pub(super) release: Option<String>,
    pub(super) tree: Option<String>,
    pub(super) commit: Option<String>,
    pub(super) dirty: bool,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
pub(super) struct ExplainParams {
    /// The test's name as the report has it (`maps::hash::batch`, `test_progs/bpf_cookie`),
    /// or a part of it that only one test's name holds.
    pub(super) test: String,
    /// The kernel whose last report to read (default 6.1).
    pub(super) kernel: Option<String>,
    /// A report.json to read instead (e.g. a `run` result's `report_path`).
    pub(super) report: Option<String>,
}

/// A change verdict: change.json as `vm-test --against` wrote it, its exit status, and the
/// resources to read for more.
#[derive(Debug, Serialize, JsonSchema)]
pub(super) struct ChangeResult {
    /// good (exit 0: no regression) or bad (exit 1: a regression, confirmed by reruns).
    pub(super) verdict: String,
    pub(super) exit_status: i32,
    /// The command that ran, to rerun it in a terminal.
    pub(super) command: String,
    /// change.md, the pull-request comment's text.
    pub(super) change_path: String,
    /// change.json (docs/change.md): base and head, each kernel's status, every classified
    /// test with each of its runs, the verifier's diff per program and kernel.
    pub(super) change: serde_json::Value,
    /// The command's whole output and change.md, change.json, junit.xml: resources/read.
    pub(super) resources: Vec<String>,
}

#[tool_router]
impl Server {
    pub(super) fn new(commands: Commands, target: PathBuf, running: Running) -> Self {
        Self {
            tool_router: Self::tool_router(),
            state: Arc::new(State {
                commands,
                target,
                logs: Logs::default(),
                calls: AtomicU64::new(0),
                running,
            }),
        }
    }

    #[tool(
        description = "List the pinned kernels (and whether each is cached) and the cached kernel builds of source trees: the `kernel` values the other tools take."
    )]
    async fn kernels(&self) -> Result<Json<Kernels>, String> {
        kernels().map(Json).map_err(|e| format!("{e:#}"))
    }

    #[tool(
        description = "Run bpfvm's BPF test suite (cargo xtask vm-test), or your own crate's tests (crate_dir: bpfvm test), in a VM booting a pinned kernel, a kernel image or a kernel source tree; `filter` runs the tests whose name holds it. Returns the verdict and the run's report.json; sends progress (fetching, building, booting, tests N of M). Cancel the request to stop the VM and the build."
    )]
    async fn run(
        &self,
        Parameters(p): Parameters<RunParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Json<RunResult>, String> {
        let inv = self.state.commands.run(&p)?;
        let total = match (&p.crate_dir, &p.kernel_tree) {
            (None, _) => std::fs::read_to_string(
                self.state
                    .commands
                    .checkout
                    .join(bpfvm_host::results::inventory::SUITE_FILE),
            )
            .ok()
            .map(|inv| progress::selected(&inv, p.filter.as_deref())),
            (Some(_), _) => None,
        };
        let (ended, call, out, _turn) = self.run_command("run", &inv, total, &ctx).await?;
        self.verdict(&inv, &ended, call, out).map(Json)
    }

    #[tool(
        description = "Build the kernel's own BPF selftests and run test_progs -t TESTS in a VM (bpfvm selftests), each test and subtest judged (known failures of a pin are skips with their reason). Returns the verdict and the report.json; cancel to stop."
    )]
    async fn selftests(
        &self,
        Parameters(p): Parameters<SelftestsParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Json<RunResult>, String> {
        let inv = self.state.commands.selftests(&p)?;
        let (ended, call, out, _turn) = self.run_command("selftests", &inv, None, &ctx).await?;
        self.verdict(&inv, &ended, call, out).map(Json)
    }

    #[tool(
        description = "Explain a test from the last report of a kernel (or a report.json you name): its last outcome, what it said, the kernel splats blamed on it, and its known-failure entry with the reason. Runs nothing."
    )]
    async fn explain(
        &self,
        Parameters(p): Parameters<ExplainParams>,
    ) -> Result<Json<Explained>, String> {
        let call = self.state.calls.fetch_add(1, Ordering::SeqCst);
        explain(
            &self.state.target,
            &self.state.commands.checkout,
            &p,
            |dir| self.state.logs.add_dir(call, dir),
        )
        .map(Json)
    }

    #[tool(
        description = "One bisect step: build the kernel of a source tree at a rev (exported into bpfvm's cache; the tree is left alone) and judge it with the suite or a filter of it. Returns 0 (good), 1 (bad), 125 (skip: this commit cannot be judged, e.g. it does not build) or 255 (stop: bpfvm could not judge), with why, as `git bisect run` reads them."
    )]
    async fn bisect_step(
        &self,
        Parameters(p): Parameters<BisectParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Json<BisectResult>, String> {
        let tree = PathBuf::from(&p.tree);
        super::args::check_tree(&tree)?;
        let (dir, commit) = match &p.rev {
            None => (tree.clone(), None),
            Some(rev) => {
                let (tree, rev) = (tree.clone(), rev.clone());
                tokio::task::spawn_blocking(move || export_rev(&tree, &rev))
                    .await
                    .map_err(|e| format!("exporting the rev failed: {e}"))??
            }
        };
        let inv = self.state.commands.bisect(&dir, &p)?;
        let (ended, call, out, _turn) = self.run_command("bisect_step", &inv, None, &ctx).await?;
        Ok(Json(self.bisect_verdict(&inv, &ended, call, out, commit)))
    }

    #[tool(
        description = "What a change to this repository did: the suite at HEAD against the suite at a base revision (cargo xtask vm-test --against BASE), on the same kernels. Each test is a regression (confirmed by reruns at head, then at base), fixed, still failing, flaky, new, removed or unchanged; the verifier's statistics per program and kernel are diffed. Returns change.json; exit 1 only for a confirmed regression. Cancel to stop."
    )]
    async fn change_verdict(
        &self,
        Parameters(p): Parameters<ChangeParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Json<ChangeResult>, String> {
        let inv = self.state.commands.change(&p)?;
        let (ended, call, out, _turn) =
            self.run_command("change_verdict", &inv, None, &ctx).await?;
        self.change(&inv, &ended, call, out).map(Json)
    }
}

impl Server {
    /// Runs `inv` for a call: queued behind the checkout's other calls, its step lines sent
    /// as progress, stopped when the call is cancelled. The call's number, its output's
    /// resource and its turn come back beside how it ended: the caller holds the turn until it
    /// has read the report, which the next call's run would replace.
    async fn run_command(
        &self,
        tool: &str,
        inv: &Invocation,
        tests_total: Option<u64>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<(Ended, u64, String, queue::Turn), String> {
        let call = self.state.calls.fetch_add(1, Ordering::SeqCst);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(u64, String)>();
        let forward = ctx.meta.get_progress_token().map(|token| {
            let peer = ctx.peer.clone();
            tokio::spawn(async move {
                while let Some((n, message)) = rx.recv().await {
                    let param = ProgressNotificationParam::new(token.clone(), n as f64)
                        .with_message(message);
                    if peer.notify_progress(param).await.is_err() {
                        break;
                    }
                }
            })
        });
        let client = ctx
            .peer
            .peer_info()
            .map(|i| i.client_info.name.clone())
            .unwrap_or_else(|| "a client".into());
        let who = format!(
            "{client} (bpfvm mcp pid {}), {tool}: {}",
            std::process::id(),
            inv.shown()
        );
        let mut tick = 0u64;
        let turn = queue::take(
            &queue::lock_path(&self.state.target),
            &who,
            &ctx.ct,
            |holder| {
                tick += 1;
                let _ = tx.send((tick, format!("queued behind {holder}")));
            },
        )
        .await?;
        let Some(turn) = turn else {
            return Err("cancelled while queued behind another call on this checkout".into());
        };
        let mut progress = Progress::new(tests_total);
        let ended = child::run(inv, &ctx.ct, &self.state.running, |stream, line| {
            if stream == Stream::Stderr {
                if let Some((n, message)) = progress.on_line(line) {
                    let _ = tx.send((tick + n, message));
                }
            }
        })
        .await
        .map_err(|e| {
            format!("{e}; is cargo on the server's PATH (`bpfvm setup` installs the rest)?")
        })?;
        drop(tx);
        if let Some(f) = forward {
            let _ = f.await;
        }
        let text = ended
            .lines
            .iter()
            .map(|(_, l)| l.as_str())
            .collect::<Vec<_>>()
            .join("\n");
        let out = self.state.logs.add_text(call, "output", text);
        if ended.cancelled {
            return Err(format!(
                "cancelled: `{}` was stopped (SIGTERM to its process group, as Ctrl-C), its VM \
                 and build with it; its output: {out}",
                inv.shown()
            ));
        }
        Ok((ended, call, out, turn))
    }

    /// A run's result: its report, or a tool error saying why none was judged.
    fn verdict(
        &self,
        inv: &Invocation,
        ended: &Ended,
        call: u64,
        out: String,
    ) -> Result<RunResult, String> {
        let code = ended.code.unwrap_or(-1);
        let report_path = match (code, report_path(ended)) {
            (0 | 1, Some(p)) => p,
            (125, _) => {
                return Err(format!(
                    "the kernel cannot be built or judged at this commit (exit status 125): {}\n\
                     Fix the tree or choose another commit; the whole output: {out}",
                    ended.error().unwrap_or_else(|| tail(ended))
                ))
            }
            _ => {
                return Err(format!(
                    "`{}` judged nothing (exit status {}): {}\nThe whole output: {out}",
                    inv.shown(),
                    status_text(ended.code),
                    ended.error().unwrap_or_else(|| tail(ended))
                ))
            }
        };
        let report = Report::read(&report_path)?;
        let mut resources = vec![out];
        if let Some(dir) = report_path.parent() {
            resources.extend(self.state.logs.add_dir(call, dir));
        }
        Ok(RunResult {
            verdict: if code == 0 { "good" } else { "bad" }.into(),
            exit_status: code,
            why: report
                .why_failed()
                .or_else(|| (code != 0).then(|| format!("the VM ended: {}", report.vm.ending))),
            command: inv.shown(),
            report_path: report_path.display().to_string(),
            report,
            resources,
        })
    }

    /// A change verdict's result: change.json, or a tool error saying why none was made.
    fn change(
        &self,
        inv: &Invocation,
        ended: &Ended,
        call: u64,
        out: String,
    ) -> Result<ChangeResult, String> {
        let code = ended.code.unwrap_or(-1);
        let md = match (code, change_path(ended)) {
            (0 | 1, Some(p)) => p,
            _ => {
                return Err(format!(
                    "`{}` made no change verdict (exit status {}{}): {}\nThe whole output: {out}",
                    inv.shown(),
                    status_text(ended.code),
                    match code {
                        125 => ": head cannot be built",
                        255 => ": the base or a run could not be judged",
                        _ => "",
                    },
                    ended.error().unwrap_or_else(|| tail(ended))
                ))
            }
        };
        let json = md.with_file_name(bpfvm_host::results::change::JSON);
        let change = std::fs::read_to_string(&json)
            .map_err(|e| format!("reading {}: {e}", json.display()))
            .and_then(|t| {
                serde_json::from_str(&t).map_err(|e| format!("{}: {e}", json.display()))
            })?;
        let mut resources = vec![out];
        if let Some(dir) = md.parent() {
            resources.extend(self.state.logs.add_dir(call, dir));
        }
        Ok(ChangeResult {
            verdict: if code == 0 { "good" } else { "bad" }.into(),
            exit_status: code,
            command: inv.shown(),
            change_path: md.display().to_string(),
            change,
            resources,
        })
    }

    fn bisect_verdict(
        &self,
        inv: &Invocation,
        ended: &Ended,
        call: u64,
        out: String,
        commit: Option<String>,
    ) -> BisectResult {
        let code = ended.code.unwrap_or(255);
        let report = report_path(ended)
            .filter(|_| code == 0 || code == 1)
            .and_then(|p| Report::read(&p).ok());
        let mut resources = vec![out];
        if let Some(dir) = report_path(ended).as_deref().and_then(Path::parent) {
            resources.extend(self.state.logs.add_dir(call, dir));
        }
        let error = || ended.error().unwrap_or_else(|| tail(ended));
        let (verdict, why) = match code {
            0 => ("good", "every verdict passed".to_string()),
            1 => (
                "bad",
                report
                    .as_ref()
                    .and_then(Report::why_failed)
                    .unwrap_or_else(|| "the run failed (see its report)".into()),
            ),
            125 => ("skip", error()),
            _ => (
                "stop",
                format!("exit status {}: {}", status_text(ended.code), error()),
            ),
        };
        BisectResult {
            // `git bisect run` reads any other status above 127 as a stop too.
            exit_status: if matches!(code, 0 | 1 | 125) {
                code
            } else {
                255
            },
            verdict: verdict.into(),
            why,
            commit,
            command: inv.shown(),
            report,
            resources,
        }
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("bpfvm", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "bpfvm runs BPF tests in VMs booting pinned Debian kernels, kernel images or kernel \
             source trees. `kernels` lists what can be booted; `run` runs the suite or a filter \
             of it (or your crate's tests) and returns report.json's verdict; `selftests` runs \
             the kernel's test_progs -t; `explain` reads a test's last outcome; `bisect_step` \
             judges a commit as git bisect run would. Runs under TCG take minutes: watch the \
             progress, cancel to stop. Logs are resources named in each result.",
        )
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(self.state.logs.list()))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let text = self
            .state
            .logs
            .read(&request.uri)
            .map_err(|e| ErrorData::resource_not_found(e, None))?;
        Ok(ReadResourceResult::new(vec![ResourceContents::text(text, request.uri)]).into())
    }
}

/// The report the command named on its stdout: `report: PATH` (vm-test, selftests) or
/// `reports: DIR` (bpfvm test: one directory per kernel).
pub(super) fn report_path(ended: &Ended) -> Option<PathBuf> {
    ended.of(Stream::Stdout).find_map(|l| {
        if let Some(p) = l.strip_prefix("report: ") {
            return Some(PathBuf::from(p.trim()));
        }
        let dir = PathBuf::from(l.strip_prefix("reports: ")?.trim());
        let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
            .ok()?
            .flatten()
            .map(|e| e.path().join("report.json"))
            .filter(|p| p.is_file())
            .collect();
        found.sort();
        found.into_iter().next()
    })
}

/// The change.md `vm-test --against` named on its stdout (`change: PATH`).
fn change_path(ended: &Ended) -> Option<PathBuf> {
    ended
        .of(Stream::Stdout)
        .find_map(|l| Some(PathBuf::from(l.strip_prefix("change: ")?.trim())))
}

fn status_text(code: Option<i32>) -> String {
    code.map_or("none: killed by a signal".into(), |c| c.to_string())
}

/// The last lines of stderr, for a command that printed no `error:`.
fn tail(ended: &Ended) -> String {
    let err: Vec<&str> = ended.of(Stream::Stderr).collect();
    err[err.len().saturating_sub(15)..].join("\n")
}

/// `rev` of `tree` exported into bpfvm's cache: its directory and commit.
fn export_rev(tree: &Path, rev: &str) -> Result<(PathBuf, Option<String>), String> {
    use bpfvm_host::kernel::source_tree;
    let commit = source_tree::verify_rev(tree, rev).map_err(|_| {
        format!(
            "rev {rev:?} is not a commit of the git tree {}; give a commit, tag or branch of it",
            tree.display()
        )
    })?;
    let dir = source_tree::checkout_ref(tree, &commit).map_err(|e| format!("{e:#}"))?;
    Ok((dir, Some(commit)))
}

/// The pins and the cached tree builds, as `kernels list` shows them.
fn kernels() -> anyhow::Result<Kernels> {
    use bpfvm_host::kernel::{pins, source_tree};
    let mut rows = Vec::new();
    for arch in bpfvm_host::domain::arch::Arch::EVERY {
        for pin in pins::pins_for(arch)? {
            rows.push(PinRow {
                cached_at: pins::cached(&pin).map(|t| t.root.display().to_string()),
                version: pin.version,
                arch: pin.arch.name().into(),
                release: pin.release,
                description: pin.description,
            });
        }
    }
    let tree_builds = source_tree::list(&source_tree::cache_root())
        .into_iter()
        .map(|t| TreeBuild {
            dir: t.slot.dir.display().to_string(),
            gigabytes: t.bytes as f64 / 1e9,
            release: t.stamp.as_ref().map(|s| s.release.clone()),
            tree: t.stamp.as_ref().map(|s| s.tree.clone()),
            commit: t.stamp.as_ref().and_then(|s| s.commit.clone()),
            dirty: t.stamp.as_ref().is_some_and(|s| s.dirty),
        })
        .collect();
    Ok(Kernels {
        pins: rows,
        tree_builds,
    })
}

/// Whether a test's name is one of the kernel's selftests (`selftests`' rows) rather than
/// the suite's.
fn is_selftest(test: &str) -> bool {
    [
        "test_progs",
        "test_maps",
        "test_verifier",
        "guest:",
        "binary:test_",
    ]
    .iter()
    .any(|p| test.starts_with(p))
}

/// `explain`: the report at `p.report`, else the kernel's last one (`target/selftests/K` for
/// the kernel's selftests, `target/vm-test/K` for the suite's tests); `serve_dir` makes the
/// report directory's files resources.
pub(super) fn explain(
    target: &Path,
    checkout: &Path,
    p: &ExplainParams,
    serve_dir: impl FnOnce(&Path) -> Vec<String>,
) -> Result<Explained, String> {
    let kernel = p
        .kernel
        .as_deref()
        .unwrap_or(bpfvm_host::domain::options::defaults::KERNEL);
    let selftest = is_selftest(&p.test);
    let path = match &p.report {
        Some(r) => PathBuf::from(r),
        None => target
            .join(if selftest { "selftests" } else { "vm-test" })
            .join(kernel)
            .join("report.json"),
    };
    let known = if selftest {
        known_entry(checkout, kernel, &p.test)
    } else {
        None
    };
    if !path.is_file() {
        let known = known
            .map(|k| format!("; its known entry ({}): {}", k.file, k.reason))
            .unwrap_or_default();
        return Err(format!(
            "no report at {}: run it first (`{}` with kernel {kernel}){known}",
            path.display(),
            if selftest { "selftests" } else { "run" },
        ));
    }
    let report = Report::read(&path)?;
    let row = report.find(&p.test)?;
    Ok(Explained {
        test: row.name.clone(),
        report_path: path.display().to_string(),
        report_written_unix: std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_secs()),
        outcome: row.outcome.clone(),
        output: row.reason.clone(),
        duration_ms: row.duration_ms,
        splats: report.splats_of(&row.name),
        known: if selftest {
            known_entry(checkout, kernel, &row.name)
        } else {
            None
        },
        resources: path.parent().map(serve_dir).unwrap_or_default(),
    })
}

/// The known-failure entry of pin `kernel` (`kernels/selftests/<pin>.known.toml`) that names
/// `test` or the test it is a subtest of.
fn known_entry(checkout: &Path, kernel: &str, test: &str) -> Option<KnownEntry> {
    let rel = format!("kernels/selftests/{kernel}.known.toml");
    let known = bpfvm_host::results::upstream::Known::load(&checkout.join(&rel)).ok()?;
    known
        .known
        .into_iter()
        .find(|k| test == k.test || test.starts_with(&format!("{}/", k.test)))
        .map(|k| KnownEntry {
            file: rel,
            test: k.test,
            reason: k.reason,
            timing: k.timing,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(code: i32, stdout: &[&str], stderr: &[&str]) -> Ended {
        Ended {
            code: Some(code),
            cancelled: false,
            lines: stdout
                .iter()
                .map(|l| (Stream::Stdout, l.to_string()))
                .chain(stderr.iter().map(|l| (Stream::Stderr, l.to_string())))
                .collect(),
        }
    }

    #[test]
    fn the_report_is_the_one_the_command_named() {
        let e = ended(1, &["| table |", "report: /t/vm-test/6.1/report.json"], &[]);
        assert_eq!(
            report_path(&e),
            Some(PathBuf::from("/t/vm-test/6.1/report.json"))
        );
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("6.1")).unwrap();
        std::fs::write(dir.path().join("6.1/report.json"), "{}").unwrap();
        let line = format!("reports: {}", dir.path().display());
        assert_eq!(
            report_path(&ended(0, &[&line], &[])),
            Some(dir.path().join("6.1/report.json"))
        );
        assert_eq!(report_path(&ended(255, &[], &["error: x"])), None);
    }

    fn server() -> Server {
        Server::new(
            Commands {
                checkout: bpfvm_host::support::paths::workspace_root(),
                bpfvm: "/bin/false".into(),
            },
            std::env::temp_dir(),
            Running::default(),
        )
    }

    #[test]
    fn a_command_that_judged_nothing_is_a_tool_error_with_its_error_and_output() {
        let s = server();
        let inv = s.state.commands.run(&RunParams::default()).unwrap();
        let e = s
            .verdict(
                &inv,
                &ended(
                    255,
                    &[],
                    &["==> x", "error: --kernel 9.9: no such pin", "pins: 6.1"],
                ),
                0,
                "bpfvm://call/0/output".into(),
            )
            .unwrap_err();
        assert!(e.contains("exit status 255"), "{e}");
        assert!(
            e.contains("error: --kernel 9.9: no such pin\npins: 6.1"),
            "{e}"
        );
        assert!(e.contains("bpfvm://call/0/output"), "{e}");
        let e = s
            .verdict(
                &inv,
                &ended(125, &[], &["error: make failed"]),
                0,
                "o".into(),
            )
            .unwrap_err();
        assert!(e.contains("cannot be built"), "{e}");
    }

    #[test]
    fn a_change_verdict_is_the_change_json_its_command_named_or_a_tool_error() {
        let s = server();
        let inv = s
            .state
            .commands
            .change(&ChangeParams {
                against: "main".into(),
                ..Default::default()
            })
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let md = dir.path().join("change.md");
        std::fs::write(&md, "## bpfvm").unwrap();
        std::fs::write(
            dir.path().join("change.json"),
            r#"{"exit_status": 1, "tests": [{"test": "t", "category": "regression"}]}"#,
        )
        .unwrap();
        let line = format!("change: {}", md.display());
        let r = s
            .change(&inv, &ended(1, &["brief", &line], &[]), 0, "o".into())
            .unwrap();
        assert_eq!((r.verdict.as_str(), r.exit_status), ("bad", 1));
        assert_eq!(r.change["tests"][0]["category"], "regression");
        assert_eq!(r.resources.len(), 3, "{:?}", r.resources);
        let e = s
            .change(
                &inv,
                &ended(255, &[], &["error: --against x: not a commit"]),
                0,
                "o".into(),
            )
            .unwrap_err();
        assert!(e.contains("the base or a run could not be judged"), "{e}");
        assert!(e.contains("not a commit"), "{e}");
        std::fs::remove_file(dir.path().join("change.json")).unwrap();
        let e = s
            .change(&inv, &ended(0, &[&line], &[]), 0, "o".into())
            .unwrap_err();
        assert!(e.contains("change.json"), "{e}");
    }

    #[test]
    fn a_bisect_step_says_each_status_as_git_bisect_run_reads_it() {
        let s = server();
        let inv = s.state.commands.run(&RunParams::default()).unwrap();
        let step = |code| {
            s.bisect_verdict(
                &inv,
                &ended(code, &[], &["error: why"]),
                0,
                "o".into(),
                None,
            )
        };
        assert_eq!(step(125).verdict, "skip");
        assert_eq!(step(125).why, "error: why");
        assert_eq!(step(255).verdict, "stop");
        assert_eq!(
            step(143).exit_status,
            255,
            "a signal's status stops a bisect"
        );
        assert_eq!(step(0).verdict, "good");
        assert_eq!(step(1).verdict, "bad");
    }

    #[test]
    fn explain_names_the_known_entry_even_before_a_report() {
        let dir = tempfile::tempdir().unwrap();
        let e = explain(
            dir.path(),
            &bpfvm_host::support::paths::workspace_root(),
            &ExplainParams {
                test: "test_progs/bpf_cookie".into(),
                ..Default::default()
            },
            |_| vec![],
        )
        .unwrap_err();
        assert!(e.contains("no report at"), "{e}");
        assert!(e.contains("CONFIG_FUNCTION_ERROR_INJECTION"), "{e}");
    }

    #[test]
    fn explain_reads_the_row_its_splats_and_known_entry() {
        let dir = tempfile::tempdir().unwrap();
        let rdir = dir.path().join("selftests/6.1");
        std::fs::create_dir_all(&rdir).unwrap();
        let report = serde_json::json!({
            "kernel": {"version": "6.1", "pinned_release": null, "release": null},
            "accel": {"name": "tcg", "reason": "r"},
            "status": "good",
            "summary": {"passed": 0, "failed": 0, "skipped": 1},
            "tests": [{"name": "test_progs/bpf_cookie/multi_kprobe", "outcome": "skip",
                       "reason": "known failure: ...", "duration_ms": 5}],
            "kernel_splats": [{"kind": "warning", "phase": "tests",
                               "running": ["test_progs/bpf_cookie/multi_kprobe"],
                               "text": "WARNING: x", "allowed": null}],
            "vm": {"ending": "exited", "wall_time_s": 1.0},
        });
        std::fs::write(rdir.join("report.json"), report.to_string()).unwrap();
        let x = explain(
            dir.path(),
            &bpfvm_host::support::paths::workspace_root(),
            &ExplainParams {
                test: "bpf_cookie/multi".into(),
                ..Default::default()
            },
            |d| vec![d.display().to_string()],
        );
        // A part of the name is not a selftest's prefix: it reads the suite's report.
        assert!(x.unwrap_err().contains("vm-test/6.1"));
        let x = explain(
            dir.path(),
            &bpfvm_host::support::paths::workspace_root(),
            &ExplainParams {
                test: "test_progs/bpf_cookie/multi_kprobe".into(),
                ..Default::default()
            },
            |d| vec![d.display().to_string()],
        )
        .unwrap();
        assert_eq!(x.outcome, "skip");
        assert_eq!(x.splats.len(), 1);
        assert_eq!(x.known.unwrap().test, "test_progs/bpf_cookie");
        assert_eq!(x.resources, [rdir.display().to_string()]);
    }
}
