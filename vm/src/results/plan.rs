//! A run cut into pieces: each kernel's inventoried tests dealt into N pieces by their measured
//! cost (`results::costs`), longest first, so that N machines (a GitHub Actions matrix, or
//! concurrent VMs) each run one piece and finish together. The cut is a pure function of its
//! inputs (the inventory, the cost file, N), so every runner computes the same plan, and its
//! hash lets a piece's report and the merge check that they were cut alike. docs/pieces.md.
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::domain::arch::Arch;
use crate::kernel::choice::KernelChoice;
use crate::results::costs::Costs;
use crate::results::inventory::{self, Inventory};
use crate::results::report::{display_name, Outcome, PieceInfo, Report, TestResult};
use crate::results::upstream::TEST_VERIFIER;

/// What a plan runs, which says where its inventory is and how its report names a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// This repository's suite (`vm-test`): `tests/inventory.txt`.
    Suite,
    /// A user's crate (`bpfvm test`): its workspace's `bpfvm-inventory.txt`.
    Crate,
    /// The kernel's `test_progs` (`selftests`): `kernels/selftests/<pin>.inventory`.
    Selftests,
}

/// A pin's name in `kernels/selftests/`: its version, and for another architecture than
/// x86_64 the architecture too (`6.1.arm64`): its build and its kernel are not x86_64's.
pub fn selftests_pin_name(kernel: &str, arch: Arch) -> String {
    match arch {
        Arch::X86_64 => kernel.to_string(),
        other => format!("{kernel}.{other}"),
    }
}

impl Kind {
    /// The inventory a kernel's plan deals out, below the workspace `root`.
    pub fn inventory(self, root: &Path, kernel: &str, arch: Arch) -> PathBuf {
        match self {
            Kind::Suite => root.join(inventory::SUITE_FILE),
            Kind::Crate => root.join(inventory::CRATE_FILE),
            Kind::Selftests => root
                .join("kernels")
                .join("selftests")
                .join(format!("{}.inventory", selftests_pin_name(kernel, arch))),
        }
    }

    /// The report's name of `binary`'s test `test` (as `vm-test`, `bpfvm test` and
    /// `selftests` name their rows), the name its cost is kept under.
    pub fn row_name(self, binary: &str, test: &str) -> String {
        match self {
            Kind::Suite => display_name(test),
            Kind::Crate => format!("{binary}::{}", display_name(test)),
            Kind::Selftests => format!("{binary}/{test}"),
        }
    }
}

impl FromStr for Kind {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "suite" => Ok(Kind::Suite),
            "crate" => Ok(Kind::Crate),
            "selftests" => Ok(Kind::Selftests),
            _ => bail!(
                "`{s}` is not what a plan runs: suite (vm-test), crate (bpfvm test) or selftests"
            ),
        }
    }
}

/// Piece `index` of `count` (`2/8`), counted from 1 as a workflow's matrix shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PieceId {
    pub index: usize,
    pub count: usize,
}

impl FromStr for PieceId {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        let parsed = s
            .split_once('/')
            .and_then(|(i, n)| Some((i.trim().parse().ok()?, n.trim().parse().ok()?)));
        match parsed {
            Some((index, count)) if (1..=count).contains(&index) => Ok(PieceId { index, count }),
            _ => bail!("`{s}` is not a piece: give I/N with 1 <= I <= N, e.g. --piece 1/2"),
        }
    }
}

impl fmt::Display for PieceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// One test of a piece: the binary and the name it is run by (libtest's, or `test_progs -t`'s),
/// and its row's name in the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unit {
    pub binary: String,
    pub test: String,
    pub name: String,
}

/// A piece: its tests, sorted by report name, and what they are predicted to cost.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Piece {
    pub id: PieceId,
    pub cost_ms: u64,
    pub tests: Vec<Unit>,
}

impl Piece {
    /// The tests of each binary, by the name each is run by.
    pub fn by_binary(&self) -> BTreeMap<String, Vec<String>> {
        let mut by: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for u in &self.tests {
            by.entry(u.binary.clone()).or_default().push(u.test.clone());
        }
        by
    }

    /// libtest's arguments that run exactly this piece's tests of `binary`: `--exact` and
    /// each name. A binary with none of them gets a name no test can have (a Rust path holds
    /// no lone `:`), as libtest without a name would run them all.
    pub fn libtest_args(&self, binary: &str) -> Vec<String> {
        let mut args = vec!["--exact".to_string()];
        match self.by_binary().remove(binary) {
            Some(tests) => args.extend(tests),
            None => args.push(NO_TEST.into()),
        }
        args
    }

    /// Whether `binary`'s test `test` is one of this piece's.
    pub fn holds(&self, binary: &str, test: &str) -> bool {
        self.tests
            .iter()
            .any(|u| u.binary == binary && u.test == test)
    }

    /// The report names of its tests.
    pub fn names(&self) -> Vec<String> {
        self.tests.iter().map(|u| u.name.clone()).collect()
    }
}

/// A libtest name that selects no test.
const NO_TEST: &str = "bpfvm:no-test-of-this-piece";

/// The commit of the checkout at `root` (`-dirty` when it has uncommitted changes), for the
/// merge to check that every piece ran the same; `None` outside a git checkout.
pub fn commit(root: &Path) -> Option<String> {
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(root)
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let head = git(&["rev-parse", "HEAD"])?;
    let dirty = !git(&["status", "--porcelain", "--untracked-files=no"])?.is_empty();
    Some(if dirty { format!("{head}-dirty") } else { head })
}

/// What a kernel's plan is cut from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inputs {
    pub kind: Kind,
    /// The workspace root: the inventory's and the cost files' (`kernels/costs/`) directory.
    pub root: PathBuf,
    /// The kernel's label (a pin's version, `6.1`).
    pub kernel: String,
    pub arch: Arch,
    /// Whose costs to cut by: `tcg` or `kvm`.
    pub accel: String,
}

impl Inputs {
    /// The kernel's costs under the plan's accelerator and architecture, or the nearest
    /// measured ([`Costs::measured`]).
    pub fn costs(&self) -> Result<Costs> {
        Costs::measured(&self.root, &self.kernel, self.arch, &self.accel)
    }

    /// The inputs of `kind`'s plan for `kernel`, a pin (a plan's costs are kept per pin), cut
    /// by the costs of the accelerator it runs under when `kvm` is asked for ([`costs_accel`]).
    pub fn of(kind: Kind, root: &Path, kernel: &KernelChoice, kvm: bool) -> Result<Inputs> {
        let KernelChoice::Pin(pin) = kernel else {
            bail!(
                "{} is not a pinned kernel: a plan cuts a pin's tests by the pin's measured                  costs (kernels/costs/); run a kernel you built whole, without --piece",
                kernel.shown()
            );
        };
        Ok(Inputs {
            kind,
            root: root.to_path_buf(),
            kernel: pin.version.clone(),
            arch: pin.arch,
            accel: costs_accel(kvm, pin.arch).to_string(),
        })
    }
}

/// One kernel's tests cut into pieces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelPlan {
    pub kind: Kind,
    pub kernel: String,
    pub arch: Arch,
    pub accel: String,
    /// A digest of all of the above and every piece's tests: two runners that cut alike have
    /// the same.
    pub hash: String,
    /// The whole's cost and its longest single test's, for how close to even the cut is.
    pub total_ms: u64,
    pub longest_test_ms: u64,
    pub pieces: Vec<Piece>,
}

impl KernelPlan {
    /// Cuts the kernel of `inputs` into `count` pieces, from its inventory and cost file.
    pub fn of(inputs: &Inputs, count: usize) -> Result<KernelPlan> {
        let path = inputs
            .kind
            .inventory(&inputs.root, &inputs.kernel, inputs.arch);
        let inv = Inventory::load(&path).with_context(|| {
            format!(
                "a plan deals out the tests of an inventory; {} writes it",
                match inputs.kind {
                    Kind::Suite => inventory::SUITE_BLESS.to_string(),
                    Kind::Crate => inventory::CRATE_BLESS.to_string(),
                    Kind::Selftests => match inputs.arch {
                        Arch::X86_64 =>
                            format!("`cargo xtask selftests --kernel {} --bless`", inputs.kernel),
                        a => format!(
                            "`cargo xtask selftests --kernel {} --arch {a} --bless`",
                            inputs.kernel
                        ),
                    },
                }
            )
        })?;
        let costs = inputs.costs()?;
        let mut units: Vec<Unit> = inv
            .tests
            .iter()
            .flat_map(|(b, tests)| {
                tests.iter().map(|t| Unit {
                    binary: b.clone(),
                    test: t.clone(),
                    name: inputs.kind.row_name(b, t),
                })
            })
            .collect();
        // A whole selftests run also runs test_verifier, one unit of its own.
        if inputs.kind == Kind::Selftests {
            units.push(Unit {
                binary: TEST_VERIFIER.into(),
                test: TEST_VERIFIER.into(),
                name: TEST_VERIFIER.into(),
            });
        }
        Self::cut(inputs, units, &costs, count)
            .with_context(|| format!("cutting {} into {count} pieces", path.display()))
    }

    /// Longest processing time first: the tests by cost, longest first (ties by name), each
    /// to the piece that costs least so far (ties: the first). Its longest piece is within
    /// 4/3 of the best cut's, and never longer than total/N plus the longest test.
    pub fn cut(inputs: &Inputs, mut units: Vec<Unit>, costs: &Costs, count: usize) -> Result<Self> {
        if count == 0 {
            bail!("a plan has at least 1 piece");
        }
        if units.len() < count {
            bail!(
                "{} tests cannot fill {count} pieces (a piece would run nothing): ask for at most {}",
                units.len(),
                units.len()
            );
        }
        units.sort_by(|a, b| {
            costs
                .of(&b.name)
                .cmp(&costs.of(&a.name))
                .then_with(|| a.name.cmp(&b.name))
        });
        let mut pieces: Vec<Piece> = (1..=count)
            .map(|index| Piece {
                id: PieceId { index, count },
                cost_ms: 0,
                tests: vec![],
            })
            .collect();
        let longest_test_ms = units.first().map_or(0, |u| costs.of(&u.name));
        for u in units {
            let least = pieces
                .iter_mut()
                .min_by_key(|p| (p.cost_ms, p.id.index))
                .expect("at least one piece");
            least.cost_ms += costs.of(&u.name);
            least.tests.push(u);
        }
        for p in &mut pieces {
            p.tests.sort_by(|a, b| a.name.cmp(&b.name));
        }
        let mut plan = KernelPlan {
            kind: inputs.kind,
            kernel: inputs.kernel.clone(),
            arch: inputs.arch,
            accel: inputs.accel.clone(),
            hash: String::new(),
            total_ms: pieces.iter().map(|p| p.cost_ms).sum(),
            longest_test_ms,
            pieces,
        };
        plan.hash = plan.digest();
        Ok(plan)
    }

    fn digest(&self) -> String {
        let mut h = Sha256::new();
        let kind = serde_json::to_string(&self.kind).expect("an enum is JSON");
        h.update(format!(
            "{kind} {} {} {}\n",
            self.kernel, self.arch, self.accel
        ));
        for p in &self.pieces {
            h.update(format!("piece {}\n", p.id));
            for u in &p.tests {
                h.update(format!("{} {}\n", u.binary, u.test));
            }
        }
        format!("{:x}", h.finalize())[..16].to_string()
    }

    /// Piece `id`; an error when the plan was cut into another number of pieces.
    pub fn piece(&self, id: PieceId) -> Result<&Piece> {
        if id.count != self.pieces.len() {
            bail!(
                "piece {id} of a plan of {} pieces: give every piece the same N",
                self.pieces.len()
            );
        }
        Ok(&self.pieces[id.index - 1])
    }

    /// The longest piece's predicted cost.
    pub fn longest_ms(&self) -> u64 {
        self.pieces.iter().map(|p| p.cost_ms).max().unwrap_or(0)
    }
}

/// The piece a run was given: its plan's hash, its tests, and the commit it runs.
#[derive(Debug, Clone)]
pub struct Assigned {
    pub hash: String,
    pub piece: Piece,
    pub commit: Option<String>,
}

impl Assigned {
    /// Piece `id` of the plan of `inputs`, and the commit of its root; an error when the plan
    /// cut here is not `expected` (the inputs changed since the matrix was made).
    pub fn of(inputs: &Inputs, id: PieceId, expected: Option<&str>) -> Result<Assigned> {
        let cut = KernelPlan::of(inputs, id.count)?;
        if let Some(expected) = expected.filter(|h| **h != cut.hash) {
            bail!(
                "--plan {expected}: the plan cut here is {} (its inventory or cost file differs \
                 from the plan job's); run every piece and the plan from the same commit",
                cut.hash
            );
        }
        Ok(Assigned {
            piece: cut.piece(id)?.clone(),
            hash: cut.hash,
            commit: commit(&inputs.root),
        })
    }

    /// The report's record of it.
    pub fn info(&self) -> PieceInfo {
        PieceInfo {
            plan: self.hash.clone(),
            piece: self.piece.id.to_string(),
            commit: self.commit.clone(),
            tests: self.piece.names(),
        }
    }

    /// Its directory's name for `label`'s run: `<label>.piece-I-of-N`.
    pub fn dir_name(&self, label: &str) -> String {
        format!(
            "{label}.piece-{}-of-{}",
            self.piece.id.index, self.piece.id.count
        )
    }
}

/// The cost file a plan of an `arch` kernel cuts by for the accelerator the run asks for:
/// `kvm`'s when it asks for KVM, else `tcg`'s (`auto` is decided by a probe on each runner,
/// and a plan must not depend on it). A kernel KVM cannot run (another architecture's) runs
/// under TCG whatever was asked: a matrix planned with `--accel kvm` over both architectures
/// cuts its arm64 kernels as their pieces, which run under TCG, cut them.
pub fn costs_accel(kvm: bool, arch: Arch) -> &'static str {
    if kvm && arch.is_host() {
        "kvm"
    } else {
        "tcg"
    }
}

/// The cost unit of a report row of `kind`: the test itself (the suite's, a crate's), or the
/// top-level test `test_progs` schedules (`test_progs/<test>`, a subtest counted in its test;
/// `test_verifier` and `test_maps` whole); entries that are not tests have none.
pub fn cost_unit(kind: Kind, row: &str) -> Option<String> {
    if !crate::results::report::is_test(row) {
        return None;
    }
    match kind {
        Kind::Suite | Kind::Crate => Some(row.to_string()),
        Kind::Selftests => {
            let mut parts = row.splitn(3, '/');
            match (parts.next(), parts.next()) {
                (Some("test_progs"), Some(test)) => Some(format!("test_progs/{test}")),
                (Some(binary), _) => Some(binary.to_string()),
                _ => None,
            }
        }
    }
}

/// The rows whose times are measurements: libtest times a test to the millisecond, so a
/// suite's or crate's test that ran in under one reads 0 ms and counts as 1 (a `test_progs`
/// row of 0 ms was judged from elsewhere and is left out by `Costs::of_rows`).
fn ran_rows(kind: Kind, rows: &[TestResult]) -> Vec<TestResult> {
    let mut rows = rows.to_vec();
    if kind != Kind::Selftests {
        for r in rows.iter_mut().filter(|r| r.outcome != Outcome::Fail) {
            r.duration_ms = r.duration_ms.max(1);
        }
    }
    rows
}

/// Writes each report's measured costs into its kernel's cost file below `root`
/// (`kernels/costs/<kernel>.<arch>.<accel>.toml`), over what it held: returns each file
/// written and how many tests it measured.
pub fn refresh_costs(root: &Path, kind: Kind, reports: &[Report]) -> Result<Vec<(PathBuf, usize)>> {
    let mut written = Vec::new();
    for r in reports {
        let accel = r.accel.name.as_str();
        if accel != "tcg" && accel != "kvm" {
            bail!(
                "the report of {} ran under `{accel}`, not tcg or kvm: it measured nothing",
                r.kernel.version
            );
        }
        // A pin of another architecture is labelled `<version>-<arch>`.
        let suffix = format!("-{}", r.kernel.arch);
        let kernel = r
            .kernel
            .version
            .strip_suffix(&suffix)
            .unwrap_or(&r.kernel.version);
        let path = Costs::path(root, kernel, r.kernel.arch, accel);
        let measured = Costs::of_rows(&ran_rows(kind, &r.tests), |n| cost_unit(kind, n));
        let mut costs = Costs::load(&path)?;
        costs.update(&measured);
        std::fs::create_dir_all(path.parent().expect("under kernels/costs"))?;
        let header = format!(
            "Each test's measured milliseconds on {kernel} ({}, {accel}), the plan's costs \
             (docs/pieces.md).\nWritten by `cargo xtask costs`, from a report's rows.",
            r.kernel.arch
        );
        crate::support::fs::write_atomic(&path, costs.render(&header).as_bytes())?;
        written.push((path, measured.ms.len()));
    }
    Ok(written)
}

/// One row of the matrix a workflow runs (`strategy.matrix` through `fromJSON`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MatrixRow {
    pub kernel: String,
    pub arch: Arch,
    /// The run's label (`6.1`, `6.1-arm64`): its report's kernel and directory name.
    pub label: String,
    /// The accelerator the plan's costs are of, which the piece runs under (`--accel`): under
    /// another its plan differs.
    pub accel: String,
    /// `I/N`, what `--piece` takes.
    pub piece: String,
    /// The plan's hash, for the piece to check it cut the same (`--plan`).
    pub plan: String,
    pub tests: usize,
    pub cost_ms: u64,
}

/// The plans as the matrix `{"include": [...]}`: one row per kernel and piece.
pub fn matrix(plans: &[KernelPlan]) -> serde_json::Value {
    let rows: Vec<MatrixRow> = plans
        .iter()
        .flat_map(|k| {
            k.pieces.iter().map(|p| MatrixRow {
                kernel: k.kernel.clone(),
                arch: k.arch,
                label: k.arch.label(&k.kernel),
                accel: k.accel.clone(),
                piece: p.id.to_string(),
                plan: k.hash.clone(),
                tests: p.tests.len(),
                cost_ms: p.cost_ms,
            })
        })
        .collect();
    serde_json::json!({ "include": rows })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An arm64 pin's selftests plan deals out its own inventory, not the x86_64 pin's.
    #[test]
    fn an_arm64_selftests_plan_reads_the_arm64_inventory() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("kernels/selftests");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("6.1.arm64.inventory"), "test_progs only_arm64\n").unwrap();
        let inputs = |arch| Inputs {
            kind: Kind::Selftests,
            root: d.path().to_path_buf(),
            kernel: "6.1".into(),
            arch,
            accel: "tcg".into(),
        };
        let plan = KernelPlan::of(&inputs(Arch::Arm64), 1).unwrap();
        let names: Vec<String> = plan.pieces.iter().flat_map(|p| p.names()).collect();
        assert!(names.iter().any(|n| n.contains("only_arm64")), "{names:?}");
        let e = format!(
            "{:#}",
            KernelPlan::of(&inputs(Arch::X86_64), 1).unwrap_err()
        );
        assert!(e.contains("--kernel 6.1 --bless"), "{e}");
        let e = format!("{:#}", {
            std::fs::remove_file(dir.join("6.1.arm64.inventory")).unwrap();
            KernelPlan::of(&inputs(Arch::Arm64), 1).unwrap_err()
        });
        assert!(e.contains("--kernel 6.1 --arch arm64 --bless"), "{e}");
    }

    fn inputs() -> Inputs {
        Inputs {
            kind: Kind::Selftests,
            root: PathBuf::from("/nowhere"),
            kernel: "6.1".into(),
            arch: Arch::X86_64,
            accel: "tcg".into(),
        }
    }

    fn units(names: &[&str]) -> Vec<Unit> {
        names
            .iter()
            .map(|n| Unit {
                binary: "test_progs".into(),
                test: n.to_string(),
                name: Kind::Selftests.row_name("test_progs", n),
            })
            .collect()
    }

    fn costs(ms: &[(&str, u64)]) -> Costs {
        Costs {
            ms: ms
                .iter()
                .map(|(n, c)| (format!("test_progs/{n}"), *c))
                .collect(),
        }
    }

    #[test]
    fn the_longest_tests_go_first_to_the_cheapest_piece() {
        let c = costs(&[("a", 70), ("b", 50), ("c", 40), ("d", 30), ("e", 10)]);
        let plan = KernelPlan::cut(&inputs(), units(&["e", "d", "c", "b", "a"]), &c, 2).unwrap();
        let names: Vec<Vec<String>> = plan.pieces.iter().map(|p| p.names()).collect();
        // a(70) -> 1; b(50) -> 2; c(40) -> 2 (90); d(30) -> 1 (100); e(10) -> 2 (100).
        assert_eq!(
            names,
            [
                vec!["test_progs/a", "test_progs/d"],
                vec!["test_progs/b", "test_progs/c", "test_progs/e"]
            ]
        );
        assert_eq!(
            (plan.total_ms, plan.longest_ms(), plan.longest_test_ms),
            (200, 100, 70)
        );
    }

    #[test]
    fn a_test_longer_than_the_rest_is_a_piece_of_its_own() {
        let c = costs(&[("big", 1000), ("a", 10), ("b", 10), ("c", 10)]);
        let plan = KernelPlan::cut(&inputs(), units(&["a", "b", "c", "big"]), &c, 3).unwrap();
        assert_eq!(plan.pieces[0].names(), ["test_progs/big"]);
        assert_eq!(plan.longest_ms(), plan.longest_test_ms);
    }

    /// Unmeasured tests cost the default and are dealt by name: the same plan, and hash,
    /// whatever order the inventory was read in; another cut has another hash.
    #[test]
    fn the_same_inputs_give_the_same_plan_and_hash() {
        let c = costs(&[("a", 5)]);
        let one = KernelPlan::cut(&inputs(), units(&["x", "a", "y", "z"]), &c, 2).unwrap();
        let two = KernelPlan::cut(&inputs(), units(&["z", "y", "x", "a"]), &c, 2).unwrap();
        assert_eq!(one, two);
        assert_eq!(one.hash.len(), 16);
        assert_eq!(one.pieces[0].names(), ["test_progs/x", "test_progs/z"]);
        let three = KernelPlan::cut(&inputs(), units(&["x", "a", "y", "z"]), &c, 3).unwrap();
        assert_ne!(one.hash, three.hash);
        let mut other = inputs();
        other.kernel = "6.12".into();
        let four = KernelPlan::cut(&other, units(&["x", "a", "y", "z"]), &c, 2).unwrap();
        assert_ne!(one.hash, four.hash);
    }

    #[test]
    fn more_pieces_than_tests_and_a_bad_piece_are_refused_with_the_fix() {
        let e = KernelPlan::cut(&inputs(), units(&["a"]), &Costs::default(), 2).unwrap_err();
        assert!(e.to_string().contains("ask for at most 1"), "{e}");
        for bad in ["0/2", "3/2", "1", "a/b", "1/0"] {
            let e = bad.parse::<PieceId>().unwrap_err().to_string();
            assert!(e.contains("give I/N"), "{bad}: {e}");
        }
        let id: PieceId = "2/3".parse().unwrap();
        assert_eq!(id.to_string(), "2/3");
        let plan = KernelPlan::cut(&inputs(), units(&["a", "b"]), &Costs::default(), 2).unwrap();
        let e = plan.piece(id).unwrap_err().to_string();
        assert!(e.contains("same N"), "{e}");
    }

    /// The committed inventories and cost files cut: every inventoried test in exactly one
    /// piece, and the matrix has a row per piece with the plan's hash.
    #[test]
    fn the_committed_suite_and_selftests_inventories_cut_into_pieces_that_cover_them() {
        let root = crate::support::paths::workspace_root();
        for (kind, kernel) in [(Kind::Suite, "6.1"), (Kind::Selftests, "6.1")] {
            let inputs = Inputs {
                kind,
                root: root.clone(),
                kernel: kernel.into(),
                arch: Arch::X86_64,
                accel: "tcg".into(),
            };
            let plan = KernelPlan::of(&inputs, 4).unwrap();
            let inv = Inventory::load(&kind.inventory(&root, kernel, Arch::X86_64)).unwrap();
            let mut all: Vec<String> = plan.pieces.iter().flat_map(|p| p.names()).collect();
            let n = all.len();
            all.sort();
            all.dedup();
            assert_eq!(all.len(), n, "a test in two pieces");
            let verifier = usize::from(kind == Kind::Selftests);
            assert_eq!(
                n,
                inv.tests.values().map(|t| t.len()).sum::<usize>() + verifier
            );
            let m = matrix(std::slice::from_ref(&plan));
            assert_eq!(m["include"].as_array().unwrap().len(), 4);
            assert_eq!(m["include"][3]["piece"], "4/4");
            assert_eq!(m["include"][0]["plan"], plan.hash.as_str());
        }
        let inputs = Inputs {
            kind: Kind::Selftests,
            root: root.clone(),
            kernel: "6.1".into(),
            arch: Arch::X86_64,
            accel: "tcg".into(),
        };
        let plan = KernelPlan::of(&inputs, 8).unwrap();
        let holding: Vec<&Piece> = plan
            .pieces
            .iter()
            .filter(|p| p.holds(TEST_VERIFIER, TEST_VERIFIER))
            .collect();
        assert_eq!(holding.len(), 1, "test_verifier is in exactly one piece");
    }

    /// A matrix planned with `--accel kvm` over both architectures (as pieces.yml plans it):
    /// the host architecture's rows are KVM's, the other's TCG's, since KVM cannot run them and
    /// their pieces run under TCG; each row's piece, run under its row's `accel`, cuts the
    /// row's plan again; and each architecture's rows have a label of their own.
    #[test]
    fn a_kvm_matrix_over_both_architectures_runs_the_other_one_under_tcg() {
        let root = crate::support::paths::workspace_root();
        let kernels = crate::kernel::choice::KernelArgs {
            kernel: Some("6.1".into()),
            arch: Some("x86_64,arm64".into()),
            ..Default::default()
        }
        .many()
        .unwrap();
        let cut = |k: &KernelChoice, kvm| {
            KernelPlan::of(&Inputs::of(Kind::Suite, &root, k, kvm).unwrap(), 2).unwrap()
        };
        let plans: Vec<KernelPlan> = kernels.iter().map(|k| cut(k, true)).collect();
        let rows: Vec<MatrixRow> =
            serde_json::from_value(matrix(&plans)["include"].clone()).unwrap();
        for arch in Arch::EVERY {
            let of_arch: Vec<&MatrixRow> = rows.iter().filter(|r| r.arch == arch).collect();
            assert_eq!(of_arch.len(), 2, "{arch}: {rows:?}");
            let accel = if arch.is_host() { "kvm" } else { "tcg" };
            assert!(of_arch.iter().all(|r| r.accel == accel), "{arch}: {rows:?}");
        }
        let labels: Vec<&str> = rows.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(labels, ["6.1", "6.1", "6.1-arm64", "6.1-arm64"]);
        for (k, plan) in kernels.iter().zip(&plans) {
            assert_eq!(cut(k, plan.accel == "kvm").hash, plan.hash, "{}", k.shown());
        }
    }

    /// A suite's 0 ms pass is a test that ran in under 1 ms; a `test_progs` subtest counts in
    /// its test; entries are not tests; the file keeps what the report did not measure.
    #[test]
    fn a_report_refreshes_its_kernels_cost_file() {
        let row = |name: &str, outcome, ms| TestResult {
            name: name.into(),
            outcome,
            reason: None,
            duration_ms: ms,
            kernel_splats: vec![],
        };
        let d = tempfile::tempdir().unwrap();
        let mut r = Report::not_run("6.1", "");
        r.accel.name = "tcg".into();
        r.tests = vec![
            row("maps::a", Outcome::Pass, 0),
            row("maps::b", Outcome::Pass, 120),
            row("maps::c", Outcome::Fail, 0),
            row("guest:inventory", Outcome::Pass, 0),
        ];
        let path = Costs::path(d.path(), "6.1", Arch::X86_64, "tcg");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "[ms]\n\"maps::old\" = 7\n").unwrap();
        let written = refresh_costs(d.path(), Kind::Suite, std::slice::from_ref(&r)).unwrap();
        assert_eq!(written, [(path.clone(), 2)]);
        let costs = Costs::load(&path).unwrap();
        let want = [("maps::a", 1), ("maps::b", 120), ("maps::old", 7)];
        assert_eq!(
            costs.ms,
            want.iter().map(|(n, c)| (n.to_string(), *c)).collect()
        );
        r.tests = vec![
            row("test_progs/x", Outcome::Pass, 10),
            row("test_progs/x/sub", Outcome::Pass, 30),
            row("test_progs/y", Outcome::Pass, 0),
            row("test_maps", Outcome::Pass, 5),
        ];
        r.kernel.version = "6.12-arm64".into();
        r.kernel.arch = Arch::Arm64;
        refresh_costs(d.path(), Kind::Selftests, std::slice::from_ref(&r)).unwrap();
        let arm = Costs::load(&Costs::path(d.path(), "6.12", Arch::Arm64, "tcg")).unwrap();
        let want = [("test_maps", 5), ("test_progs/x", 40)];
        assert_eq!(
            arm.ms,
            want.iter().map(|(n, c)| (n.to_string(), *c)).collect()
        );
        r.accel.name = "none".into();
        let e = refresh_costs(d.path(), Kind::Suite, &[r]).unwrap_err();
        assert!(e.to_string().contains("measured nothing"), "{e}");
    }

    #[test]
    fn an_arm64_plan_cuts_by_x86_64_s_costs_until_arm64_s_are_measured() {
        let d = tempfile::tempdir().unwrap();
        let mut arm = inputs();
        arm.root = d.path().to_path_buf();
        arm.arch = Arch::Arm64;
        let write = |arch: Arch, accel: &str, ms: u64| {
            let path = Costs::path(d.path(), "6.1", arch, accel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, format!("[ms]\n\"test_progs/a\" = {ms}\n")).unwrap();
        };
        assert_eq!(arm.costs().unwrap().of("test_progs/a"), Costs::DEFAULT_MS);
        write(Arch::X86_64, "tcg", 900);
        assert_eq!(arm.costs().unwrap().of("test_progs/a"), 900);
        arm.accel = "kvm".into();
        write(Arch::X86_64, "kvm", 30);
        assert_eq!(arm.costs().unwrap().of("test_progs/a"), 30);
        write(Arch::Arm64, "tcg", 600);
        assert_eq!(arm.costs().unwrap().of("test_progs/a"), 600);
    }

    #[test]
    fn kvm_s_plan_cuts_by_tcg_s_costs_until_kvm_s_are_measured() {
        let d = tempfile::tempdir().unwrap();
        let mut kvm = inputs();
        kvm.root = d.path().to_path_buf();
        kvm.accel = "kvm".into();
        let write = |accel: &str, ms: u64| {
            let path = Costs::path(d.path(), "6.1", Arch::X86_64, accel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, format!("[ms]\n\"test_progs/a\" = {ms}\n")).unwrap();
        };
        write("tcg", 900);
        assert_eq!(kvm.costs().unwrap().of("test_progs/a"), 900);
        write("kvm", 30);
        assert_eq!(kvm.costs().unwrap().of("test_progs/a"), 30);
    }

    /// A piece runs its binary's tests by exact name, another binary none; a plan's hash
    /// that is not the one cut here is refused before anything runs.
    #[test]
    fn a_piece_runs_exactly_its_tests_and_only_of_the_plan_named() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("tests")).unwrap();
        std::fs::write(
            d.path().join(inventory::SUITE_FILE),
            "bpfvm_tests tests::a::x\nbpfvm_tests tests::b::y\nother tests::c\n",
        )
        .unwrap();
        let mut suite = inputs();
        suite.kind = Kind::Suite;
        suite.root = d.path().to_path_buf();
        let one = Assigned::of(&suite, "1/2".parse().unwrap(), None).unwrap();
        let all = KernelPlan::of(&suite, 2).unwrap();
        assert_eq!(one.hash, all.hash);
        assert_eq!(one.piece, all.pieces[0]);
        assert_eq!(one.info().tests, one.piece.names());
        assert_eq!(one.dir_name("6.1"), "6.1.piece-1-of-2");
        let holds: Vec<&Unit> = one.piece.tests.iter().collect();
        let b = &holds[0].binary;
        let mut want = vec!["--exact".to_string()];
        want.extend(
            holds
                .iter()
                .filter(|u| &u.binary == b)
                .map(|u| u.test.clone()),
        );
        assert_eq!(one.piece.libtest_args(b), want);
        assert_eq!(one.piece.libtest_args("absent"), ["--exact", NO_TEST]);
        let e = Assigned::of(&suite, "1/2".parse().unwrap(), Some("0000000000000000"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("--plan 0000000000000000: the plan cut here is ")
                && e.contains("same commit"),
            "{e}"
        );
    }
}
