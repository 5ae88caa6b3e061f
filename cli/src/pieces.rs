//! `plan`, `merge` and `costs`, the same for `bpfvm` and `cargo xtask`: a run cut into
//! pieces by measured cost for a GitHub Actions matrix, the pieces' reports merged into one
//! verdict, and the cost files refreshed from reports (`bpfvm_host::results::{plan, merge}`).
//! docs/pieces.md.
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use bpfvm_host::domain::options::Choice;
use bpfvm_host::kernel::choice::{KernelArgs, KernelChoice};
use bpfvm_host::results::plan::{self, KernelPlan, Kind};
use bpfvm_host::results::{change, merge, report};
use bpfvm_host::support::output::Events;
use clap::Args;

use crate::github;

/// What a plan is cut from, the same for `plan` and `merge` (the merge cuts the plan again
/// and checks the pieces against it).
#[derive(Args, Debug, Clone)]
pub struct PlanInputs {
    /// What the run runs: suite (`cargo xtask vm-test`), crate (`bpfvm test` of the crate in
    /// the current directory) or selftests (the kernel's `test_progs`).
    /// Required (`merge --change` has none).
    #[arg(long = "for", value_name = "WHAT")]
    pub what: Option<Kind>,
    /// Pinned kernels: one, a comma-separated list or `all`. Default: $BPFVM_KERNEL, else 6.1.
    #[arg(long)]
    pub kernel: Option<String>,
    /// The guests' architecture: x86_64, arm64 or all. Default: the host's.
    #[arg(long, env = "BPFVM_ARCH")]
    pub arch: Option<String>,
    /// Whose costs to cut by: kvm's with `kvm`, else tcg's (the runs' own --accel; `auto` is
    /// decided on each runner, so it cannot choose the plan).
    #[arg(long, env = "BPFVM_ACCEL", default_value_t = Choice::Auto)]
    pub accel: Choice,
    /// How many pieces each kernel's tests are cut into.
    /// Required (`merge --change` has none).
    #[arg(long, value_name = "N")]
    pub pieces: Option<usize>,
}

impl PlanInputs {
    /// Each kernel's plan.
    pub fn plans(&self, events: &Events) -> Result<Vec<KernelPlan>> {
        let (Some(what), Some(pieces)) = (self.what, self.pieces) else {
            anyhow::bail!("give --for WHAT and --pieces N: the plan is cut from them");
        };
        let root = match what {
            Kind::Crate => bpfvm_host::flows::crate_test::cargo_dirs(events)?.workspace_root,
            Kind::Suite | Kind::Selftests => bpfvm_host::support::paths::workspace_root(),
        };
        self.kernels()?
            .iter()
            .map(|k| {
                let inputs = plan::Inputs::of(what, &root, k, self.accel == Choice::Kvm)?;
                KernelPlan::of(&inputs, pieces)
            })
            .collect()
    }

    /// The kernels `--kernel` and `--arch` name.
    fn kernels(&self) -> Result<Vec<KernelChoice>> {
        KernelArgs {
            kernel: self.kernel.clone(),
            env: None,
            modules: None,
            kernel_tree: None,
            kconfig: vec![],
            arch: self.arch.clone(),
        }
        .with_env()
        .many()
    }
}

/// `plan`'s options.
#[derive(Args, Debug, Clone)]
pub struct PlanArgs {
    #[command(flatten)]
    pub inputs: PlanInputs,
    /// Print every piece's tests too (JSON), not only the matrix.
    #[arg(long)]
    pub tests: bool,
}

/// `plan`: the matrix as one line of JSON on stdout (`{"include": [{kernel, arch, piece,
/// plan, ...}]}`, for `strategy.matrix: ${{ fromJSON(...) }}`), each kernel's balance on stderr.
pub fn plan(args: &PlanArgs, events: &Events) -> Result<ExitCode> {
    let plans = args.inputs.plans(events)?;
    for p in &plans {
        let even = p.total_ms.div_ceil(p.pieces.len() as u64);
        bpfvm_host::ui::print_stderr(&format!(
            "{} ({}): {} tests, {:.1} s in all; longest piece {:.1} s = {:.2} x total/{} \
             ({:.1} s; longest test {:.1} s); plan {}",
            p.kernel,
            p.arch,
            p.pieces.iter().map(|x| x.tests.len()).sum::<usize>(),
            p.total_ms as f64 / 1e3,
            p.longest_ms() as f64 / 1e3,
            p.longest_ms() as f64 / even.max(1) as f64,
            p.pieces.len(),
            even as f64 / 1e3,
            p.longest_test_ms as f64 / 1e3,
            p.hash
        ));
    }
    let out = if args.tests {
        serde_json::to_value(&plans)?
    } else {
        plan::matrix(&plans)
    };
    bpfvm_host::ui::print_stdout(&serde_json::to_string(&out)?);
    Ok(ExitCode::SUCCESS)
}

/// `merge`'s options.
#[derive(Args, Debug, Clone)]
pub struct MergeArgs {
    #[command(flatten)]
    pub inputs: PlanInputs,
    /// Where the merged reports go: `<kernel>/report.json`, `<kernel>/junit.xml` and
    /// `matrix.json`. Default: <target>/merged.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// The file the step summary is appended to. Default: $GITHUB_STEP_SUMMARY, else none.
    #[arg(long)]
    pub summary: Option<PathBuf>,
    /// Merge the `--against` verdicts of a matrix's jobs, one per kernel (each job's
    /// change.json), into one change.md, change.json and junit.xml in --out; every kernel of
    /// --kernel must be judged by exactly one job (docs/change.md).
    #[arg(long, conflicts_with_all = ["what", "pieces"])]
    pub change: bool,
    /// The directories holding the pieces' reports (artifacts downloaded), looked into deeply
    /// (with --change, the jobs' change.json).
    #[arg(required = true, value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
}

/// `merge`: the pieces' reports checked and merged; exits with the whole run's status.
pub fn merge(args: &MergeArgs, events: &Events) -> Result<ExitCode> {
    if args.change {
        return merge_change(args);
    }
    let plans = args.inputs.plans(events)?;
    let found = merge::find(&args.dirs)?;
    let root = bpfvm_host::support::paths::workspace_root();
    let commit = plan::commit(&std::env::current_dir().unwrap_or(root));
    let merged = merge::merge(&plans, found, commit.as_deref());
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| bpfvm_host::support::paths::target_dir().join("merged"));
    let _ = std::fs::remove_dir_all(&out);
    for r in &merged.reports {
        report::write(r, &out.join(&r.kernel.version))?;
    }
    std::fs::create_dir_all(&out)?;
    bpfvm_host::support::fs::write_atomic(
        &out.join("matrix.json"),
        (serde_json::to_string_pretty(&merged.reports)? + "\n").as_bytes(),
    )?;
    if !merged.reports.is_empty() {
        bpfvm_host::ui::print_stdout(&report::matrix_table(&merged.reports));
    }
    if let Some(file) = args.summary_file() {
        let md = github::step_summary(
            &merged.reports,
            &github::Paths {
                prefix: PathBuf::new(),
                repo: None,
            },
        );
        append(&file, &md)?;
    }
    for p in &merged.problems {
        events.warn(p.clone());
    }
    let status = merged.status();
    bpfvm_host::ui::print_stdout(&format!(
        "merged {} kernel(s) into {}: exit status {}",
        merged.reports.len(),
        out.display(),
        status.code()
    ));
    Ok(ExitCode::from(status.code()))
}

impl MergeArgs {
    /// `--summary`, else $GITHUB_STEP_SUMMARY.
    fn summary_file(&self) -> Option<PathBuf> {
        let env = || std::env::var_os("GITHUB_STEP_SUMMARY").map(PathBuf::from);
        self.summary.clone().or_else(env)
    }
}

fn append(file: &std::path::Path, md: &str) -> Result<()> {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .and_then(|mut f| f.write_all(md.as_bytes()))
        .with_context(|| format!("writing {}", file.display()))
}

/// `merge --change`: the jobs' verdicts as one, written to --out and the step summary; exits
/// with the merged change's status. A refusal writes nothing.
fn merge_change(args: &MergeArgs) -> Result<ExitCode> {
    let expected: Vec<String> = args.inputs.kernels()?.iter().map(|k| k.shown()).collect();
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| bpfvm_host::support::paths::target_dir().join("merged"));
    let _ = std::fs::remove_dir_all(&out);
    let jobs = change::merge::find(&args.dirs)?;
    let merged = change::merge::merge(&expected, &jobs)?;
    let md = change::render::write(&merged, &out)?;
    if let Some(file) = args.summary_file() {
        append(&file, &md)?;
    }
    bpfvm_host::ui::print_stdout(&format!(
        "merged {} job(s) into {}",
        jobs.len(),
        out.display()
    ));
    Ok(crate::against::show(&merged, &out))
}

/// `costs`' options.
#[derive(Args, Debug, Clone)]
pub struct CostsArgs {
    /// What the reports ran: suite, crate or selftests (how a row's cost is counted).
    #[arg(long = "for", value_name = "WHAT")]
    pub what: Kind,
    /// Reports (`report.json`, or a directory holding them) whose rows' times are kept.
    #[arg(required = true, value_name = "REPORT")]
    pub reports: Vec<PathBuf>,
}

/// `costs`: each report's measured times into its kernel's `kernels/costs/` file.
pub fn costs(args: &CostsArgs, events: &Events) -> Result<ExitCode> {
    let mut reports = Vec::new();
    for path in &args.reports {
        if path.is_dir() {
            reports.extend(
                merge::find(std::slice::from_ref(path))?
                    .into_iter()
                    .map(|f| f.report),
            );
        } else {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("read {}", path.display()))?;
            reports.push(
                serde_json::from_str(&text)
                    .with_context(|| format!("{} is not a report", path.display()))?,
            );
        }
    }
    let root = match args.what {
        plan::Kind::Crate => bpfvm_host::flows::crate_test::cargo_dirs(events)?.workspace_root,
        _ => bpfvm_host::support::paths::workspace_root(),
    };
    for (path, n) in plan::refresh_costs(&root, args.what, &reports)? {
        bpfvm_host::ui::print_stdout(&format!("wrote {} ({n} tests measured)", path.display()));
    }
    Ok(ExitCode::SUCCESS)
}
