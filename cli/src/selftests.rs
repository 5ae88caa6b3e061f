//! `selftests`, the same for `bpfvm` and `cargo xtask`.
use std::process::ExitCode;

use bpfvm_host::domain::options::defaults;
use bpfvm_host::results::report;
use bpfvm_host::support::output::Events;
use clap::Args;

use crate::{judged_status, VmArgs};

/// `selftests`' options, the same for `bpfvm` and `cargo xtask`: build the kernel's own BPF
/// selftests (`test_progs`, `test_maps`, `bench`) from its source with its Makefile and run
/// them to the end in as many boots as it takes, each upstream test and subtest judged like the
/// suite's tests; writes target/selftests/<kernel>/{report.json,junit.xml} and each boot's
/// files in boots/N/. See docs/selftests.md.
#[derive(Args, Debug, Clone)]
pub struct SelftestsArgs {
    #[command(flatten)]
    pub vm: VmArgs,
    /// Seconds before each boot's VM is killed: a run takes as many boots as it needs, each
    /// starting tests for half the time after its boot, a test running at most the other half.
    #[arg(long, default_value_t = defaults::TEST_TIMEOUT_S)]
    pub timeout: u64,
    /// test_progs' own selection (`-t`: comma-separated names, each matching a test whose name
    /// contains it); every test when left out.
    #[arg(short = 't', long = "tests", value_name = "PATTERN",
          value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub pattern: Option<String>,
    /// Also run test_maps (every map test in one process).
    #[arg(long)]
    pub maps: bool,
    /// The Debian clang to build with (16, 19 or 22); default: the one the kernel's series
    /// takes (16 for 6.1).
    #[arg(long, value_name = "VERSION")]
    pub clang: Option<u32>,
    /// Write the pin's inventory (kernels/selftests/<pin>.inventory) from this build's
    /// `test_progs -l` instead of checking it.
    #[arg(long, conflicts_with = "piece")]
    pub bless: bool,
    /// Run only piece I of the selftests' plan in N pieces (`plan --for selftests`,
    /// docs/pieces.md); the piece that holds test_verifier also runs test_maps with --maps.
    #[arg(long, value_name = "I/N", conflicts_with = "pattern")]
    pub piece: Option<bpfvm_host::results::plan::PieceId>,
    /// The plan's hash the matrix gave this piece: a plan cut otherwise here is an error.
    #[arg(long, value_name = "HASH", requires = "piece")]
    pub plan: Option<String>,
    /// A deny list of your own in the format of the selftests' DENYLIST (`test` or
    /// `test/subtest` a line, `*` test_progs' glob, a `# comment` the reason), applied after
    /// the tree's own: each entry is a skip with its comment. Repeatable.
    #[arg(long = "denylist", value_name = "FILE")]
    pub denylists: Vec<std::path::PathBuf>,
    // With --kernel-tree, --against REF compares the tree as it is with a ref of it: each
    // side's own selftests and veristat on its own kernel (docs/change.md).
    #[command(flatten)]
    pub against: crate::against::AgainstArgs,
}

/// `selftests`: one run, its table and report, the run's exit status.
pub fn run(args: SelftestsArgs, events: &Events) -> anyhow::Result<ExitCode> {
    let against = args.against.parse(&args.vm, true)?;
    let opts = bpfvm_host::flows::selftests::Options {
        kernel: args.vm.kernel()?,
        vm: args.vm.options(args.timeout),
        pattern: args.pattern,
        maps: args.maps,
        clang: args.clang,
        bless: args.bless,
        piece: args.piece.map(|id| (id, args.plan)),
        denylists: args.denylists,
        veristat: false,
        unit: None,
    };
    if let Some(against) = against {
        let (change, dir) =
            bpfvm_host::flows::change::selftests::selftests_tree_against(&opts, &against, events)?;
        return Ok(crate::against::show(&change, &dir));
    }
    let (report, dir) = bpfvm_host::flows::selftests::selftests(&opts, events)?;
    bpfvm_host::ui::print_stdout(&report::summary_table(&report));
    if let Some(s) = &report.selftests {
        bpfvm_host::ui::print_stdout(&format!(
            "selftests: {}{}; {}; build {} ({:.1} s)",
            s.source,
            s.note
                .as_deref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default(),
            s.clang,
            s.build_dir,
            s.build_s
        ));
    }
    bpfvm_host::ui::print_stdout(&format!("report: {}", dir.join("report.json").display()));
    Ok(judged_status([&report]))
}
