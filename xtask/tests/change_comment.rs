//! change-comment.yml's comment step, run by bash as a runner runs it (`bash --noprofile
//! --norc -eo pipefail`) with a stand-in `gh` that logs its calls: the artifact's pull
//! request number is data, used only when it is digits and names the pull request whose head
//! is the run's commit; one comment is posted, or the marked one updated.
use std::path::{Path, PathBuf};
use std::process::Command;

const WORKFLOW: &str = ".github/workflows/change-comment.yml";
const STEP: &str = "- name: Post or update the comment";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .into()
}

/// The step's `run: |` block, unindented.
fn script() -> String {
    let text = std::fs::read_to_string(root().join(WORKFLOW)).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let step = lines.iter().position(|l| l.trim() == STEP).expect(STEP);
    let run = step
        + lines[step..]
            .iter()
            .position(|l| l.trim() == "run: |")
            .unwrap();
    let indent = lines[run].len() - lines[run].trim_start().len() + 2;
    lines[run + 1..]
        .iter()
        .take_while(|l| l.trim().is_empty() || l.len() - l.trim_start().len() >= indent)
        .map(|l| l.get(indent..).unwrap_or("").to_string() + "\n")
        .collect()
}

/// gh: a pull request's head from $PR_HEAD, the marked comment's id from $EXISTING.
const GH: &str = r#"#!/bin/bash
echo "gh $*" >>"$SIM/gh.log"
case "$*" in
*pulls/*) echo "$PR_HEAD" ;;
*--paginate*) echo "$EXISTING" ;;
*) echo "https://github.invalid/c" ;;
esac
"#;

struct Run {
    status: i32,
    gh: String,
    body: Option<String>,
    stdout: String,
}

/// The step with `number` as the artifact's pull-request-number (None: no such file).
fn run(number: Option<&str>, pr_head: &str, existing: &str) -> Run {
    let sim = tempfile::tempdir().unwrap();
    let (bin, dir) = (sim.path().join("bin"), sim.path().join("change"));
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(bin.join("gh"), GH).unwrap();
    Command::new("chmod")
        .arg("+x")
        .arg(bin.join("gh"))
        .status()
        .unwrap();
    if let Some(n) = number {
        std::fs::write(dir.join("pull-request-number"), n).unwrap();
    }
    std::fs::write(dir.join("change.md"), "## verdict: no change\n").unwrap();
    let out = Command::new("bash")
        .args(["--noprofile", "--norc", "-eo", "pipefail", "-c", &script()])
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("SIM", sim.path())
        .env("RUNNER_TEMP", sim.path())
        .env("DIR", &dir)
        .env("REPO", "o/r")
        .env("HEAD_SHA", "aaaa")
        .env("RUN_URL", "https://github.invalid/run")
        .env("PR_HEAD", pr_head)
        .env("EXISTING", existing)
        .output()
        .unwrap();
    Run {
        status: out.status.code().unwrap(),
        gh: std::fs::read_to_string(sim.path().join("gh.log")).unwrap_or_default(),
        body: std::fs::read_to_string(sim.path().join("comment.md")).ok(),
        stdout: String::from_utf8_lossy(&out.stdout).into(),
    }
}

#[test]
fn the_verdict_is_posted_once_then_the_marked_comment_updated() {
    let first = run(Some("12\n"), "aaaa", "");
    assert_eq!(first.status, 0, "{}", first.stdout);
    assert!(
        first
            .gh
            .contains("gh api -X POST repos/o/r/issues/12/comments"),
        "{}",
        first.gh
    );
    let body = first.body.unwrap();
    assert!(
        body.starts_with("<!-- bpfvm: vm-test change -->\n## verdict: no change\n"),
        "{body}"
    );
    assert!(
        body.contains("[The run](https://github.invalid/run)"),
        "{body}"
    );

    let again = run(Some("12"), "aaaa", "777");
    assert_eq!(again.status, 0, "{}", again.stdout);
    assert!(
        again
            .gh
            .contains("gh api -X PATCH repos/o/r/issues/comments/777"),
        "{}",
        again.gh
    );
    assert!(!again.gh.contains("POST"), "{}", again.gh);
}

#[test]
fn a_number_that_is_not_digits_is_refused_before_any_call() {
    for bad in [Some("12; id"), Some("$(id)"), Some("0"), Some(""), None] {
        let r = run(bad, "aaaa", "");
        assert_eq!(r.status, 1, "{bad:?}: {}", r.stdout);
        assert!(
            r.stdout.contains("names no pull request number"),
            "{bad:?}: {}",
            r.stdout
        );
        assert_eq!(r.gh, "", "{bad:?}: gh was called");
    }
}

#[test]
fn a_pull_request_whose_head_is_not_the_run_s_gets_no_comment() {
    let r = run(Some("13"), "bbbb", "");
    assert_eq!(r.status, 0, "{}", r.stdout);
    assert!(
        r.stdout
            .contains("pull request #13's head is bbbb, not aaaa"),
        "{}",
        r.stdout
    );
    assert_eq!(r.gh.lines().count(), 1, "only the head asked: {}", r.gh);
    assert!(r.body.is_none());
}
