//! The linters' findings, one line each naming the file and line: the docs' examples named
//! by their doc and the doc's line, not by the file the linter read.
use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde_json::Value;

/// One finding of one linter.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Finding {
    pub file: String,
    pub line: usize,
    pub column: usize,
    /// `actionlint`, `zizmor`, `shellcheck` or `pins`.
    pub tool: &'static str,
    /// The linter's name for the check (actionlint's kind, zizmor's audit, SC number).
    pub rule: String,
    pub message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {} [{}] {}",
            self.file, self.line, self.column, self.tool, self.rule, self.message
        )
    }
}

/// Where the files the linters read are shown: the docs' examples, written elsewhere, by
/// their doc and its line; every other file as given.
#[derive(Debug)]
pub(crate) struct Places {
    /// The linters' directory, which a relative path they print is relative to.
    base: PathBuf,
    /// (the file a linter read, the doc, the doc's line of the file's line 1).
    moved: Vec<(PathBuf, String, usize)>,
}

impl Places {
    pub(crate) fn new(base: &Path) -> Self {
        Self {
            base: base.to_path_buf(),
            moved: vec![],
        }
    }

    pub(crate) fn add(&mut self, read: PathBuf, doc: &Path, first_line: usize) {
        self.moved
            .push((same(&read), doc.display().to_string(), first_line));
    }

    /// `path` and its 1-based `line`, as shown.
    pub(crate) fn shown(&self, path: &str, line: usize) -> (String, usize) {
        let read = same(&self.base.join(path));
        match self.moved.iter().find(|(r, _, _)| *r == read) {
            Some((_, doc, first)) => (doc.clone(), first + line.saturating_sub(1)),
            None => (path.to_string(), line),
        }
    }
}

/// `path` with `..` and links resolved where it exists: actionlint prints a file outside
/// its directory as `../../tmp/...`.
fn same(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// actionlint's `-format '{{json .}}'`: an array of {message, filepath, line, column, kind}.
pub(crate) fn actionlint(json: &str, places: &Places) -> Result<Vec<Finding>> {
    let errors: Vec<Value> =
        serde_json::from_str(json).context("actionlint's JSON output does not parse")?;
    errors
        .iter()
        .map(|e| {
            let (file, line) = places.shown(str_at(e, "/filepath")?, num_at(e, "/line")?);
            Ok(Finding {
                file,
                line,
                column: num_at(e, "/column")?,
                tool: "actionlint",
                rule: str_at(e, "/kind")?.to_string(),
                message: str_at(e, "/message")?.to_string(),
            })
        })
        .collect()
}

/// zizmor's `--format json-v1`: an array of findings, each with its audit (`ident`), `desc`,
/// severity and locations; the primary location's `concrete.location.start_point` is 0-based.
/// Findings an inline `# zizmor: ignore[...]` silenced (`ignored`) are not findings.
pub(crate) fn zizmor(json: &str, places: &Places) -> Result<Vec<Finding>> {
    let findings: Vec<Value> =
        serde_json::from_str(json).context("zizmor's JSON output does not parse")?;
    let mut out = vec![];
    for f in findings
        .iter()
        .filter(|f| f["ignored"] != Value::Bool(true))
    {
        let locations = f["locations"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        let Some(at) = locations
            .iter()
            .find(|l| l["symbolic"]["kind"] == "Primary")
            .or(locations.first())
        else {
            bail!("a zizmor finding without a location: {f}");
        };
        let key = &at["symbolic"]["key"]["Local"];
        let path = key["verbatim_path"]
            .as_str()
            .or(key["given_path"].as_str())
            .with_context(|| format!("a zizmor finding without a local path: {f}"))?;
        let start = &at["concrete"]["location"]["start_point"];
        let (file, line) = places.shown(path, num_at(start, "/row")? + 1);
        let annotation = at["symbolic"]["annotation"].as_str().unwrap_or("");
        out.push(Finding {
            file,
            line,
            column: num_at(start, "/column")? + 1,
            tool: "zizmor",
            rule: str_at(f, "/ident")?.to_string(),
            message: format!(
                "{} ({}): {annotation}",
                str_at(f, "/desc")?,
                f["determinations"]["severity"].as_str().unwrap_or("?")
            ),
        });
    }
    Ok(out)
}

/// shellcheck's `-f gcc`: `file:line:column: level: message [SCnnnn]`, one a line.
pub(crate) fn shellcheck(gcc: &str) -> Result<Vec<Finding>> {
    gcc.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut parts = l.splitn(4, ':');
            let (Some(file), Some(line), Some(column), Some(rest)) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                bail!("a shellcheck line that is not file:line:column: message: {l}");
            };
            let rest = rest.trim();
            let (message, rule) = match rest.rfind(" [SC") {
                Some(i) => (&rest[..i], rest[i + 2..].trim_end_matches(']')),
                None => (rest, "shellcheck"),
            };
            Ok(Finding {
                file: file.to_string(),
                line: line.parse().with_context(|| format!("line of {l}"))?,
                column: column.parse().with_context(|| format!("column of {l}"))?,
                tool: "shellcheck",
                rule: rule.to_string(),
                message: message.to_string(),
            })
        })
        .collect()
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Result<&'a str> {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .with_context(|| format!("no string at {pointer} in {v}"))
}

fn num_at(v: &Value, pointer: &str) -> Result<usize> {
    v.pointer(pointer)
        .and_then(Value::as_u64)
        .map(|n| n as usize)
        .with_context(|| format!("no number at {pointer} in {v}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An example written outside the linters' directory (`w`), as `ci` does: at
    /// `<dir>/x.yml`, which a linter may print as `../x.yml`.
    fn places() -> (tempfile::TempDir, Places) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("w")).unwrap();
        std::fs::write(dir.path().join("x.yml"), "").unwrap();
        let mut p = Places::new(&dir.path().join("w"));
        p.add(dir.path().join("x.yml"), Path::new("docs/own-crate.md"), 64);
        (dir, p)
    }

    #[test]
    fn an_example_s_finding_names_its_doc_and_the_doc_s_line() {
        let (dir, places) = places();
        let json = serde_json::json!([
            {"message": "m", "filepath": "../x.yml", "line": 5, "column": 15, "kind": "action"},
            {"message": "n", "filepath": ".github/workflows/a.yml", "line": 3, "column": 1, "kind": "syntax-check"},
            {"message": "o", "filepath": dir.path().join("x.yml"), "line": 1, "column": 1, "kind": "action"},
        ])
        .to_string();
        let got = actionlint(&json, &places).unwrap();
        assert_eq!(
            got[0].to_string(),
            "docs/own-crate.md:68:15: actionlint [action] m"
        );
        assert_eq!(
            got[1].to_string(),
            ".github/workflows/a.yml:3:1: actionlint [syntax-check] n"
        );
        assert_eq!(
            got[2].to_string(),
            "docs/own-crate.md:64:1: actionlint [action] o"
        );
    }

    #[test]
    fn zizmor_s_rows_are_0_based_and_ignored_findings_are_dropped() {
        let (dir, places) = places();
        let finding = |path: &str, row: u64, ignored: bool| {
            serde_json::json!({
                "ident": "template-injection",
                "desc": "code injection via template expansion",
                "determinations": {"severity": "High"},
                "ignored": ignored,
                "locations": [
                    {"symbolic": {"key": {"Local": {"verbatim_path": path}}, "annotation": "this step", "kind": "Related"},
                     "concrete": {"location": {"start_point": {"row": 0, "column": 0}}}},
                    {"symbolic": {"key": {"Local": {"verbatim_path": path}}, "annotation": "may expand into attacker-controllable code", "kind": "Primary"},
                     "concrete": {"location": {"start_point": {"row": row, "column": 14}}}}
                ]
            })
        };
        let json = Value::Array(vec![
            finding(".github/workflows/a.yml", 9, false),
            finding(".github/workflows/a.yml", 11, true),
            finding(&dir.path().join("x.yml").display().to_string(), 0, false),
        ])
        .to_string();
        let got: Vec<String> = zizmor(&json, &places)
            .unwrap()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            got,
            [
                ".github/workflows/a.yml:10:15: zizmor [template-injection] code injection via \
                 template expansion (High): may expand into attacker-controllable code",
                "docs/own-crate.md:64:15: zizmor [template-injection] code injection via \
                 template expansion (High): may expand into attacker-controllable code"
            ]
        );
    }

    #[test]
    fn shellcheck_gcc_lines_become_findings() {
        let got = shellcheck(
            "ci/a.sh:2:6: note: Double quote to prevent globbing and word splitting. [SC2086]\n",
        )
        .unwrap();
        assert_eq!(
            got[0].to_string(),
            "ci/a.sh:2:6: shellcheck [SC2086] note: Double quote to prevent globbing and word splitting."
        );
        assert!(shellcheck("nonsense\n").is_err());
    }
}
