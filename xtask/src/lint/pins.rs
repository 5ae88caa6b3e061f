//! The recorded pins ([`TABLE`]): each action used, the tag pinned, its commit and the
//! runtime its `action.yml` declares there; and the check of every `uses:` line against them.
//! A `uses:` is read a line at a time (`uses: owner/repo[/path]@ref # tag`), as the workflows
//! write it; a flow-style mapping would go unread, so the workflows do not use one.
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::Deserialize;

use super::findings::Finding;

/// The table, relative to the checkout.
pub(crate) const TABLE: &str = "ci/action-pins.toml";

/// The runtimes a pin may declare: node20 is gone from GitHub's runners (September 2026).
const RUNTIMES: [&str; 3] = ["node24", "composite", "docker"];

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Pin {
    pub action: String,
    pub tag: String,
    pub commit: String,
    pub using: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    pin: Vec<Pin>,
}

/// The pins of `text` (the table's contents); an error names a bad row and the fix.
pub(crate) fn parse(text: &str) -> Result<Vec<Pin>> {
    let table: Table = toml::from_str(text).with_context(|| format!("{TABLE} does not parse"))?;
    for (i, p) in table.pin.iter().enumerate() {
        if !RUNTIMES.contains(&p.using.as_str()) {
            bail!(
                "{TABLE}: {} {} runs on {:?}, which GitHub's runners no longer run as \
                 declared: pin a release whose action.yml says one of {RUNTIMES:?}",
                p.action,
                p.tag,
                p.using
            );
        }
        if !is_commit(&p.commit) {
            bail!(
                "{TABLE}: {} {}'s commit {:?} is not a full 40-digit commit SHA",
                p.action,
                p.tag,
                p.commit
            );
        }
        if table.pin[..i]
            .iter()
            .any(|q| q.action == p.action && q.tag == p.tag)
        {
            bail!("{TABLE}: {} {} is there twice: keep one", p.action, p.tag);
        }
    }
    Ok(table.pin)
}

/// The table of the checkout at `root`.
pub(crate) fn load(root: &Path) -> Result<Vec<Pin>> {
    let path = root.join(TABLE);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    parse(&text)
}

fn is_commit(s: &str) -> bool {
    s.len() == 40
        && s.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// The findings of `text`, shown as `file` with its line 1 at `first_line`.
pub(crate) fn check(file: &str, first_line: usize, text: &str, pins: &[Pin]) -> Vec<Finding> {
    let mut out = vec![];
    for (i, line) in text.lines().enumerate() {
        let Some((column, value, comment)) = uses(line) else {
            continue;
        };
        let problem = judge(value, comment, pins);
        if let Some(message) = problem {
            out.push(Finding {
                file: file.to_string(),
                line: first_line + i,
                column,
                tool: "pins",
                rule: "pinned-uses".into(),
                message,
            });
        }
    }
    out
}

/// A `uses:` line's column (1-based, of the value), value and comment.
fn uses(line: &str) -> Option<(usize, &str, &str)> {
    let body = line.trim_start();
    let body = body.strip_prefix("- ").map(str::trim_start).unwrap_or(body);
    let rest = body.strip_prefix("uses:")?;
    let rest_trimmed = rest.trim_start();
    let column = line.len() - rest_trimmed.len() + 1;
    let (value, comment) = match rest_trimmed.split_once(" #") {
        Some((v, c)) => (v.trim(), c.trim()),
        None => (rest_trimmed.trim(), ""),
    };
    Some((
        column,
        value.trim_matches(|c| c == '"' || c == '\''),
        comment,
    ))
}

/// What is wrong with `uses: value # comment`, if anything.
fn judge(value: &str, comment: &str, pins: &[Pin]) -> Option<String> {
    // This repository's own actions, at the run's commit.
    if value.starts_with("./") || value.starts_with("$/") {
        return None;
    }
    // The one exception: a line zizmor is told to let be unpinned, with the reason said.
    if let Some(reason) = comment
        .split_once("zizmor: ignore[unpinned-uses]")
        .map(|(_, r)| r.trim_start_matches([' ', '-']).trim())
    {
        return reason.is_empty().then(|| {
            "an unpinned `uses:` ignored without a reason: say why after the ignore".into()
        });
    }
    let Some((name, reference)) = value.split_once('@') else {
        return Some(format!("`{value}` names no ref: pin it as in {TABLE}"));
    };
    let action = name.splitn(3, '/').take(2).collect::<Vec<_>>().join("/");
    let recorded: Vec<&Pin> = pins.iter().filter(|p| p.action == action).collect();
    if recorded.is_empty() {
        return Some(format!(
            "{action} is not in {TABLE}: record its tag, commit and runs.using there first"
        ));
    }
    let tags = recorded
        .iter()
        .map(|p| p.tag.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    if !is_commit(reference) {
        return Some(format!(
            "{action}@{reference} is not pinned by commit: write `{action}@<commit> # <tag>` \
             with a tag of {TABLE} ({tags})"
        ));
    }
    let tag = comment.split_whitespace().next().unwrap_or("");
    let Some(pin) = recorded.iter().find(|p| p.tag == tag) else {
        return Some(if tag.is_empty() {
            format!("{action}@{reference} has no `# <tag>` comment: {TABLE} records {tags}")
        } else {
            format!("{action} {tag} is not in {TABLE} (it records {tags}): record it, or name the tag of the commit")
        });
    };
    (pin.commit != reference).then(|| {
        format!(
            "{action}@{reference} is not {tag}: {TABLE} records {tag} as {}",
            pin.commit
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHECKOUT: &str = "3d3c42e5aac5ba805825da76410c181273ba90b1";
    const CACHE: &str = "27d5ce7f107fe9357f9df03efb73ab90386fccae";

    fn pins() -> Vec<Pin> {
        parse(&format!(
            "[[pin]]\naction = \"actions/checkout\"\ntag = \"v7.0.1\"\ncommit = \"{CHECKOUT}\"\nusing = \"node24\"\n\
             [[pin]]\naction = \"actions/cache\"\ntag = \"v5.0.5\"\ncommit = \"{CACHE}\"\nusing = \"node24\"\n"
        ))
        .unwrap()
    }

    fn messages(text: &str) -> Vec<String> {
        check("w.yml", 1, text, &pins())
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn a_recorded_pin_with_its_tag_and_local_actions_pass() {
        let text = format!(
            "steps:\n  - uses: actions/checkout@{CHECKOUT} # v7.0.1\n    with:\n      x: 1\n  - name: c\n    uses: \"actions/cache@{CACHE}\" # v5.0.5 restore\n  - uses: ./\n  - uses: $/.github/actions/a\n"
        );
        assert_eq!(messages(&text), Vec::<String>::new());
    }

    #[test]
    fn a_tag_ref_is_unpinned_and_named_with_file_and_line() {
        assert_eq!(
            messages("jobs:\n  a:\n    steps:\n      - uses: actions/checkout@v4\n"),
            ["w.yml:4:15: pins [pinned-uses] actions/checkout@v4 is not pinned by commit: write \
              `actions/checkout@<commit> # <tag>` with a tag of ci/action-pins.toml (v7.0.1)"]
        );
    }

    #[test]
    fn a_commit_whose_comment_names_another_tag_is_named() {
        let got = messages(&format!("- uses: actions/checkout@{CACHE} # v7.0.1\n"));
        assert_eq!(
            got,
            [format!(
                "w.yml:1:9: pins [pinned-uses] actions/checkout@{CACHE} is not v7.0.1: \
                 ci/action-pins.toml records v7.0.1 as {CHECKOUT}"
            )]
        );
        let got = messages(&format!("- uses: actions/checkout@{CHECKOUT} # v6.0.0\n"));
        assert!(
            got[0].contains("actions/checkout v6.0.0 is not in ci/action-pins.toml"),
            "{got:?}"
        );
        let got = messages(&format!("- uses: actions/checkout@{CHECKOUT}\n"));
        assert!(got[0].contains("has no `# <tag>` comment"), "{got:?}");
    }

    #[test]
    fn an_action_not_recorded_and_an_ignore_without_reason_are_named() {
        let got = messages(&format!("- uses: someone/else@{CHECKOUT} # v1\n"));
        assert!(
            got[0].contains("someone/else is not in ci/action-pins.toml"),
            "{got:?}"
        );
        assert_eq!(
            messages("- uses: you/bpfvm@main # zizmor: ignore[unpinned-uses] -- your commit\n"),
            Vec::<String>::new()
        );
        let got = messages("- uses: you/bpfvm@main # zizmor: ignore[unpinned-uses]\n");
        assert!(got[0].contains("without a reason"), "{got:?}");
    }

    #[test]
    fn a_recorded_runtime_other_than_node24_composite_or_docker_is_refused() {
        let table = format!(
            "[[pin]]\naction = \"actions/checkout\"\ntag = \"v4.3.1\"\ncommit = \"{CHECKOUT}\"\nusing = \"node20\"\n"
        );
        let err = parse(&table).unwrap_err().to_string();
        assert!(
            err.contains("actions/checkout v4.3.1 runs on \"node20\""),
            "{err}"
        );
        let short = table
            .replace(CHECKOUT, "3d3c42e")
            .replace("node20", "node24");
        assert!(parse(&short)
            .unwrap_err()
            .to_string()
            .contains("not a full 40-digit"));
    }

    /// The check `ci` relies on, on the checkout's own files, without the network.
    #[test]
    fn every_uses_of_the_checkout_is_a_recorded_pin() {
        let root = bpfvm_host::support::paths::workspace_root();
        let pins = load(&root).unwrap();
        let inputs = super::super::Inputs::gather(&root).unwrap();
        let found = super::super::pin_findings(&root, &inputs, &pins).unwrap();
        assert!(found.is_empty(), "{found:#?}");
    }

    #[test]
    fn docs_ci_names_every_recorded_pin() {
        let root = bpfvm_host::support::paths::workspace_root();
        let doc = std::fs::read_to_string(root.join("docs/ci.md")).unwrap();
        for p in load(&root).unwrap() {
            let named = format!("{} {}", p.action, p.tag);
            assert!(doc.contains(&named), "docs/ci.md does not name {named}");
        }
    }
}
