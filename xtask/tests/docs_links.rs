//! The README is a front door: short, and every link it and `docs/` give leads somewhere (a file
//! of the repository, and the heading an `#anchor` names, as GitHub makes anchors).
use std::path::{Path, PathBuf};

/// About what a new user reads first; the reference lives in `docs/`.
const README_MAX_LINES: usize = 300;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The `(target)` of every `[text](target)` outside code blocks.
fn links(markdown: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        for (at, _) in line.match_indices("](") {
            let rest = &line[at + 2..];
            if let Some(end) = rest.find(')') {
                out.push(rest[..end].to_string());
            }
        }
    }
    out
}

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == ' ' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(markdown: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.push(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

/// Every link of `file` that leads nowhere, with why.
fn broken_links(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let dir = file.parent().unwrap();
    let mut broken = Vec::new();
    for link in links(&text) {
        if link.starts_with("http://") || link.starts_with("https://") {
            continue;
        }
        let (path, fragment) = link.split_once('#').unwrap_or((&link, ""));
        let target = if path.is_empty() {
            file.to_path_buf()
        } else {
            dir.join(path)
        };
        if !target.exists() {
            broken.push(format!("{link}: no file {}", target.display()));
        } else if !fragment.is_empty() {
            let heads = anchors(&std::fs::read_to_string(&target).unwrap_or_default());
            if !heads.iter().any(|h| h == fragment) {
                broken.push(format!("{link}: no heading #{fragment} (has {heads:?})"));
            }
        }
    }
    broken
}

fn docs() -> Vec<PathBuf> {
    let mut files = vec![repo().join("README.md")];
    for entry in std::fs::read_dir(repo().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    files
}

#[test]
fn every_link_of_the_readme_and_docs_resolves() {
    let broken: Vec<String> = docs()
        .iter()
        .flat_map(|f| {
            broken_links(f)
                .into_iter()
                .map(move |b| format!("{}: {b}", f.display()))
        })
        .collect();
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_stays_a_front_door() {
    let lines = std::fs::read_to_string(repo().join("README.md"))
        .unwrap()
        .lines()
        .count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines: move reference material into docs/ and link it"
    );
}

#[test]
fn a_missing_file_or_heading_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("b.md"), "# Kernel splats\n").unwrap();
    let a = dir.path().join("a.md");
    std::fs::write(
        &a,
        "[ok](b.md#kernel-splats) [gone](c.md) [bad](b.md#reports) [web](https://x/y)\n\
         ```\n[in code](nowhere.md)\n```\n",
    )
    .unwrap();
    let broken = broken_links(&a);
    assert_eq!(broken.len(), 2, "{broken:?}");
    assert!(broken[0].starts_with("c.md: no file"), "{broken:?}");
    assert!(
        broken[1].starts_with("b.md#reports: no heading"),
        "{broken:?}"
    );
}

#[test]
fn anchors_are_githubs() {
    assert_eq!(
        anchor(" Statistics, and how to read a verdict"),
        "statistics-and-how-to-read-a-verdict"
    );
    assert_eq!(
        anchor(" `--kernel all`: the matrix"),
        "--kernel-all-the-matrix"
    );
}
