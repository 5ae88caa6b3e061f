//! What a call leaves to read on demand rather than in its reply: the command's whole output
//! and the files of its report's directory (report.json, kernel.log, junit.xml, the guest's
//! output). Each is a resource `bpfvm://call/<N>/<name>`; only files a call named are served.
//! A report's files are read where the run wrote them, so a later run on the same kernel (this
//! client's or another's) replaces them: a file is served only while it is as the call left it.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use rmcp::model::Resource;

/// The calls whose resources are kept; an older call's are dropped.
const KEPT_CALLS: u64 = 50;
/// The files of one report directory served at most (selftests' boots/ hold many).
const MAX_FILES: usize = 200;

#[derive(Debug)]
enum Body {
    Text(String),
    File(PathBuf, Option<Stamp>),
}

/// What tells a file from the one a later run writes in its place.
#[derive(Debug, PartialEq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
}

fn stamp(path: &Path) -> Option<Stamp> {
    std::fs::metadata(path).ok().map(|m| Stamp {
        len: m.len(),
        modified: m.modified().ok(),
    })
}

/// The resources of the calls so far.
#[derive(Debug, Default)]
pub(super) struct Logs {
    inner: Mutex<BTreeMap<(u64, String), Body>>,
}

pub(super) fn uri(call: u64, name: &str) -> String {
    format!("bpfvm://call/{call}/{name}")
}

impl Logs {
    /// Keeps `text` as call `call`'s `name`; its URI.
    pub(super) fn add_text(&self, call: u64, name: &str, text: String) -> String {
        self.insert(call, name, Body::Text(text))
    }

    /// Serves the files under `dir` (a report's directory) as call `call`'s; their URIs.
    pub(super) fn add_dir(&self, call: u64, dir: &Path) -> Vec<String> {
        files_under(dir)
            .into_iter()
            .map(|rel| {
                let name = rel.display().to_string();
                let path = dir.join(&rel);
                let at = stamp(&path);
                self.insert(call, &name, Body::File(path, at))
            })
            .collect()
    }

    fn insert(&self, call: u64, name: &str, body: Body) -> String {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.insert((call, name.to_string()), body);
        inner.retain(|(c, _), _| c + KEPT_CALLS > call);
        uri(call, name)
    }

    pub(super) fn list(&self) -> Vec<Resource> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner
            .iter()
            .map(|((call, name), body)| {
                let r = Resource::new(uri(*call, name), format!("call {call}: {name}"));
                match body {
                    Body::Text(t) => r.with_size(t.len() as u64),
                    Body::File(p, _) => match std::fs::metadata(p) {
                        Ok(m) => r.with_size(m.len()),
                        Err(_) => r,
                    },
                }
                .with_mime_type(mime(name))
            })
            .collect()
    }

    /// The text of the resource at `uri`.
    pub(super) fn read(&self, uri: &str) -> Result<String, String> {
        let (call, name) = parse(uri).ok_or_else(|| {
            format!("{uri}: not a resource of bpfvm's (bpfvm://call/<N>/<name>, as a result names)")
        })?;
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        match inner.get(&(call, name.to_string())) {
            Some(Body::Text(t)) => Ok(t.clone()),
            Some(Body::File(p, at)) => {
                if stamp(p) != *at {
                    return Err(format!(
                        "{uri}: {} is no longer call {call}'s: a later run on this checkout \
                         replaced it (or removed it); run the call again to read its files",
                        p.display()
                    ));
                }
                std::fs::read(p)
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
                    .map_err(|e| format!("{uri}: cannot read {}: {e}", p.display()))
            }
            None => Err(format!(
                "{uri}: no such resource (the server keeps the last {KEPT_CALLS} calls'; \
                 resources/list names them)"
            )),
        }
    }
}

fn parse(uri: &str) -> Option<(u64, &str)> {
    let rest = uri.strip_prefix("bpfvm://call/")?;
    let (call, name) = rest.split_once('/')?;
    Some((call.parse().ok()?, name))
}

fn mime(name: &str) -> &'static str {
    match Path::new(name).extension().and_then(|e| e.to_str()) {
        Some("json") => "application/json",
        Some("xml") => "application/xml",
        _ => "text/plain",
    }
}

/// The regular files under `dir`, relative to it, sorted, at most [`MAX_FILES`].
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(dir.join(&rel)) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(ft) = e.file_type() else { continue };
            let r = rel.join(e.file_name());
            if ft.is_dir() {
                todo.push(r);
            } else if ft.is_file() {
                found.push(r);
            }
        }
    }
    found.sort();
    found.truncate(MAX_FILES);
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_calls_output_and_report_files_are_read_by_uri_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("report.json"), "{}").unwrap();
        std::fs::create_dir(dir.path().join("guest")).unwrap();
        std::fs::write(dir.path().join("guest/out.txt"), "hello").unwrap();
        let logs = Logs::default();
        let out = logs.add_text(3, "output", "==> booting\n".into());
        assert_eq!(out, "bpfvm://call/3/output");
        let files = logs.add_dir(3, dir.path());
        assert_eq!(
            files,
            ["bpfvm://call/3/guest/out.txt", "bpfvm://call/3/report.json"]
        );
        assert_eq!(logs.read(&out).unwrap(), "==> booting\n");
        assert_eq!(logs.read("bpfvm://call/3/guest/out.txt").unwrap(), "hello");
        assert_eq!(logs.list().len(), 3);
        // A later run's file in its place is not call 3's.
        std::fs::write(dir.path().join("guest/out.txt"), "a later run").unwrap();
        let err = logs.read("bpfvm://call/3/guest/out.txt").unwrap_err();
        assert!(
            err.contains("a later run on this checkout replaced it"),
            "{err}"
        );
        assert!(logs
            .read("bpfvm://call/3/../../etc/passwd")
            .unwrap_err()
            .contains("no such resource"));
        assert!(logs
            .read("file:///etc/passwd")
            .unwrap_err()
            .contains("not a resource"));
        // An old call's resources go.
        logs.add_text(3 + KEPT_CALLS, "output", String::new());
        assert!(logs.read(&out).is_err());
    }
}
