//! pieces.yml's matrix as its plan job cuts it: the workflow's own KERNELS, ARCHES and
//! BPFVM_ACCEL through `plan`'s inputs give arm64 rows beside x86_64's, the arm64 ones under
//! TCG (KVM runs the host's architecture only), and the piece and merge jobs pass on what the
//! rows and the plan say (docs/pieces.md, "In GitHub Actions").
use std::path::Path;

use bpfvm::pieces::PlanInputs;
use bpfvm_host::domain::arch::Arch;
use bpfvm_host::results::plan::{self, Kind, MatrixRow};
use bpfvm_host::support::output::Events;

const WORKFLOW: &str = ".github/workflows/pieces.yml";

/// The value of the workflow-level `env:` entry `name` (`  NAME: "value"`).
fn env(text: &str, name: &str) -> String {
    let prefix = format!("  {name}: ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("{WORKFLOW} sets no {name}"))
        .trim_matches('"')
        .to_string()
}

#[test]
fn the_workflow_plans_arm64_rows_under_tcg_and_each_piece_runs_its_row() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let text = std::fs::read_to_string(root.join(WORKFLOW)).unwrap();
    for wanted in [
        r#"cargo xtask plan --for suite --kernel "$KERNELS" --arch "$ARCHES""#,
        r#"cargo xtask merge --for suite --kernel "$KERNELS" --arch "$ARCHES""#,
        "arch: ${{ matrix.arch }}",
        "accel: ${{ matrix.accel }}",
        "LABEL: ${{ matrix.label }}",
        "artifact-name: piece-${{ matrix.label }}-",
    ] {
        assert!(text.contains(wanted), "{WORKFLOW} has no `{wanted}`");
    }
    let inputs = PlanInputs {
        what: Some(Kind::Suite),
        kernel: Some(env(&text, "KERNELS")),
        arch: Some(env(&text, "ARCHES")),
        accel: env(&text, "BPFVM_ACCEL").parse().unwrap(),
        pieces: Some(2),
    };
    let plans = inputs.plans(&Events::silent()).unwrap();
    let rows: Vec<MatrixRow> =
        serde_json::from_value(plan::matrix(&plans)["include"].clone()).unwrap();
    for arch in Arch::EVERY {
        let of_arch: Vec<&MatrixRow> = rows.iter().filter(|r| r.arch == arch).collect();
        assert!(!of_arch.is_empty(), "no {arch} rows: {rows:?}");
        if !arch.is_host() {
            assert!(
                of_arch
                    .iter()
                    .all(|r| r.accel == "tcg" && r.label.ends_with(&format!("-{arch}"))),
                "{arch}: {of_arch:?}"
            );
        }
    }
}
