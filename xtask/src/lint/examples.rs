//! The docs' example workflows: every ```yaml block in `README.md` and `docs/*.md` with a
//! top-level `jobs:`, written to files of their own so the linters read them as workflows, and
//! mapped back so a finding names the doc and its line.
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// One example workflow: where it is in its doc and its text.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Example {
    /// The doc, relative to the checkout.
    pub doc: PathBuf,
    /// The doc's line (1-based) of the block's first line of YAML.
    pub first_line: usize,
    pub text: String,
}

/// The docs whose blocks are read: `README.md` and `docs/*.md`, sorted.
pub(crate) fn docs(root: &Path) -> Result<Vec<PathBuf>> {
    let mut docs = vec![PathBuf::from("README.md")];
    let dir = root.join("docs");
    let mut more: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".md"))
        .map(|n| PathBuf::from("docs").join(n))
        .collect();
    more.sort();
    docs.extend(more);
    Ok(docs)
}

/// The example workflows of `docs` under `root`. A YAML block that has a `uses:` but no
/// top-level `jobs:` is an error: a fragment cannot be linted, so it would hide a stale pin.
pub(crate) fn examples(root: &Path, docs: &[PathBuf]) -> Result<Vec<Example>> {
    let mut found = vec![];
    for doc in docs {
        let path = root.join(doc);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        for (first_line, block) in yaml_blocks(&text) {
            let workflow = block.lines().any(|l| l.starts_with("jobs:"));
            if workflow {
                found.push(Example {
                    doc: doc.clone(),
                    first_line,
                    text: block,
                });
            } else if block.lines().any(|l| {
                l.trim_start().starts_with("- uses:") || l.trim_start().starts_with("uses:")
            }) {
                bail!(
                    "{}:{first_line}: a YAML example with `uses:` but no top-level `jobs:`: \
                     write it as a whole workflow (on, permissions, jobs) so that the lint \
                     step checks it",
                    doc.display()
                );
            }
        }
    }
    Ok(found)
}

/// The ```yaml (or ```yml) fenced blocks of a markdown text: each block's first line (1-based)
/// and its text. An unclosed block runs to the end.
fn yaml_blocks(text: &str) -> Vec<(usize, String)> {
    let mut blocks = vec![];
    let mut open: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let fence = line.trim_start();
        match &mut open {
            None if fence == "```yaml" || fence == "```yml" => open = Some((i + 2, String::new())),
            Some(_) if fence.starts_with("```") => blocks.extend(open.take()),
            Some((_, block)) => {
                block.push_str(line);
                block.push('\n');
            }
            None => {}
        }
    }
    blocks.extend(open);
    blocks
}

/// The file an example is written to in `dir`: named after its doc and line, so that a
/// linter's own message is readable too.
pub(crate) fn file_name(e: &Example) -> String {
    let doc = e.doc.display().to_string().replace('/', "_");
    format!("{doc}-line{}.yml", e.first_line)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "# Title\n\ntext\n\n```yaml\nname: x\non: push\njobs:\n  a:\n    runs-on: ubuntu-24.04\n```\n\n```yaml\nkey: value\n```\n\n```sh\njobs:\n```\n";

    #[test]
    fn blocks_keep_the_line_their_yaml_starts_on() {
        let blocks = yaml_blocks(DOC);
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[0].0, 6);
        assert!(
            blocks[0].1.starts_with("name: x\non: push\n"),
            "{:?}",
            blocks[0]
        );
        assert_eq!(blocks[1], (14, "key: value\n".to_string()));
    }

    #[test]
    fn only_blocks_with_jobs_are_workflows_and_a_fragment_with_uses_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("docs")).unwrap();
        std::fs::write(dir.path().join("README.md"), "none\n").unwrap();
        std::fs::write(dir.path().join("docs/a.md"), DOC).unwrap();
        let docs = docs(dir.path()).unwrap();
        assert_eq!(docs, [PathBuf::from("README.md"), "docs/a.md".into()]);
        let found = examples(dir.path(), &docs).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(
            (found[0].doc.to_str(), found[0].first_line),
            (Some("docs/a.md"), 6)
        );
        assert_eq!(file_name(&found[0]), "docs_a.md-line6.yml");

        std::fs::write(
            dir.path().join("docs/b.md"),
            "x\n```yaml\nsteps:\n  - uses: actions/checkout@v4\n```\n",
        )
        .unwrap();
        let err = examples(dir.path(), &super::docs(dir.path()).unwrap())
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("docs/b.md:3: a YAML example with `uses:`"),
            "{err}"
        );
    }

    #[test]
    fn the_repository_s_docs_hold_the_own_crate_workflow() {
        let root = bpfvm_host::support::paths::workspace_root();
        let found = examples(&root, &docs(&root).unwrap()).unwrap();
        assert!(
            found
                .iter()
                .any(|e| e.doc == Path::new("docs/own-crate.md")),
            "{found:?}"
        );
    }
}
