//! The host library's layers hold: every module imports only from its own layer or the layers
//! below it (the folders of `vm/src`, bottom up: `support`, `domain`, `machine`, `kernel`,
//! `results`, `flows`), and no two modules import each other, directly or through others; nor do
//! two parts of one module's folder (`results/bench/model.rs` and `results/bench/upstream/`).
//! `ui` sits on top and nothing imports it. The table in `vm/src/lib.rs` and
//! `docs/architecture.md` say the same.
//!
//! Imports are read from the source (`crate::layer::name`), test modules included: a test that
//! reaches upward ties the layers together as much as code does. Every import names its layer.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Bottom up. A module may import from its own layer and those before it.
const LAYERS: [&str; 7] = [
    "support", "domain", "machine", "kernel", "results", "flows", "ui",
];

/// A module of a layer (`results::bench`), the layer it lives in, and what it imports, with the
/// file and line of each import.
#[derive(Default)]
struct Module {
    layer: usize,
    imports: BTreeMap<String, String>,
}

/// Reads every `.rs` file under `src`: `src/<layer>/<module>.rs` or `src/<layer>/<module>/...`
/// belongs to `<layer>::<module>`; `src/ui.rs` is the `ui` layer's only module.
fn modules(src: &Path) -> BTreeMap<String, Module> {
    let mut mods: BTreeMap<String, Module> = BTreeMap::new();
    for entry in walkdir(src) {
        let rel = entry.strip_prefix(src).unwrap();
        let parts = path_parts(rel);
        let (layer, name) = match parts.as_slice() {
            [file] if file == "lib" => continue,
            [file] => (file.clone(), file.clone()),
            [layer, file] if file == "mod" => {
                assert!(
                    LAYERS.contains(&layer.as_str()),
                    "{}: not a layer",
                    rel.display()
                );
                continue;
            }
            [layer, module, ..] => (layer.clone(), format!("{layer}::{module}")),
            [] => continue,
        };
        let layer = LAYERS
            .iter()
            .position(|l| *l == layer)
            .unwrap_or_else(|| panic!("{}: {layer} is not a layer {LAYERS:?}", rel.display()));
        let m = mods.entry(name.clone()).or_default();
        m.layer = layer;
        let text = std::fs::read_to_string(&entry).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap();
            for path in crate_paths(code) {
                let to = match path.as_slice() {
                    // `ui` is a layer of one module, the file `ui.rs`.
                    [ui, ..] if ui == "ui" => ui.clone(),
                    [layer, module, ..] if LAYERS.contains(&layer.as_str()) => {
                        format!("{layer}::{module}")
                    }
                    [first, ..] => first.clone(),
                    [] => continue,
                };
                if to != name && to != "self" {
                    m.imports
                        .entry(to)
                        .or_insert_with(|| format!("{}:{}", rel.display(), n + 1));
                }
            }
        }
    }
    mods
}

/// A file's path below `src` as module names, `.rs` left off.
fn path_parts(rel: &Path) -> Vec<String> {
    rel.iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect()
}

fn walkdir(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files.extend(walkdir(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            files.push(p);
        }
    }
    files.sort();
    files
}

/// The module names a path starts with (`a::b::Item` gives `a`, `b`).
fn segments(item: &str) -> Vec<String> {
    item.trim()
        .split("::")
        .map(|s| {
            s.chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_' || c.is_ascii_digit())
                .collect::<String>()
        })
        .take_while(|s| !s.is_empty())
        .collect()
}

/// The paths after each `prefix` of a line: `prefix a::x`, `prefix {a, b::y}`.
fn paths_after(code: &str, prefix: &str) -> Vec<(usize, Vec<String>)> {
    let mut paths = Vec::new();
    for (i, _) in code.match_indices(prefix) {
        let rest = &code[i + prefix.len()..];
        let items: Vec<&str> = match rest.strip_prefix('{') {
            Some(g) => g.split('}').next().unwrap_or("").split(',').collect(),
            None => vec![rest],
        };
        paths.extend(items.into_iter().map(|item| (i, segments(item))));
    }
    paths
}

/// The crate paths a line names: `crate::a::x`, `crate::{a, b::y}`.
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    paths_after(code, "crate::")
        .into_iter()
        .map(|(_, p)| p)
        .collect()
}

/// Each import that runs to a higher layer, or to a module that is not in the tree.
fn upward(mods: &BTreeMap<String, Module>) -> Vec<String> {
    let mut bad = Vec::new();
    for (name, m) in mods {
        for (to, at) in &m.imports {
            match mods.get(to) {
                Some(t) if t.layer > m.layer => bad.push(format!(
                    "{at}: {name} ({}) imports {to} ({}), a layer above it",
                    LAYERS[m.layer], LAYERS[t.layer]
                )),
                Some(_) => {}
                None => bad.push(format!("{at}: {name} imports {to}, which no layer holds")),
            }
        }
    }
    bad
}

/// The nodes of `graph` that reach themselves through its edges (one line per cycle's members).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(m) = todo.pop() {
            for to in graph.get(&m).into_iter().flatten() {
                if seen.insert(to.clone()) {
                    todo.push(to.clone());
                }
            }
        }
        seen
    };
    let mut found: BTreeSet<BTreeSet<String>> = BTreeSet::new();
    for name in graph.keys() {
        let from = reach(name);
        if from.contains(name) {
            let members = graph
                .keys()
                .filter(|o| from.contains(*o) && reach(o).contains(name))
                .cloned()
                .collect();
            found.insert(members);
        }
    }
    found
        .into_iter()
        .map(|c| {
            let names: Vec<String> = c.into_iter().collect();
            format!("a cycle through {}", names.join(", "))
        })
        .collect()
}

/// The layers' modules as a graph of their imports.
fn graph(mods: &BTreeMap<String, Module>) -> BTreeMap<String, BTreeSet<String>> {
    mods.iter()
        .map(|(name, m)| (name.clone(), m.imports.keys().cloned().collect()))
        .collect()
}

/// Inside every module's folder and the folders below it, which part imports which: a part is
/// a file or folder of the folder (its `mod.rs` apart), named by its path
/// (`results::bench::model`), and imports another when its files name it through `super::` or
/// `crate::`.
fn parts(src: &Path) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut folders: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for file in walkdir(src) {
        let rel = file.strip_prefix(src).unwrap();
        let mut at = path_parts(rel);
        if at.last().is_some_and(|f| f == "mod") {
            at.pop();
        }
        if at.len() < 3 {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        for line in text.lines() {
            let code = line.split("//").next().unwrap();
            for to in named_paths(code, &at) {
                let common = at.iter().zip(&to).take_while(|(a, b)| a == b).count();
                if common < 2 || common >= at.len() || common >= to.len() {
                    continue;
                }
                let folder = src.join(at[..common].join("/"));
                let child = &to[common];
                if !folder.join(format!("{child}.rs")).exists() && !folder.join(child).is_dir() {
                    continue;
                }
                let key = |p: &[String]| p.join("::");
                folders
                    .entry(key(&at[..common]))
                    .or_default()
                    .entry(key(&at[..=common]))
                    .or_default()
                    .insert(key(&to[..=common]));
            }
        }
    }
    folders
}

/// The module paths a line of the module at `at` names, from the crate root: `crate::a::b`, and
/// `super::x` resolved from `at`.
fn named_paths(code: &str, at: &[String]) -> Vec<Vec<String>> {
    let mut paths = crate_paths(code);
    for (i, rest) in paths_after(code, "super::") {
        // Only the first `super::` of a run: `super::super::x` is one path.
        if code[..i].ends_with("super::") {
            continue;
        }
        let mut up = 1;
        let mut rest = rest;
        while rest.first().is_some_and(|s| s == "super") {
            up += 1;
            rest.remove(0);
        }
        if up <= at.len() {
            let mut p = at[..at.len() - up].to_vec();
            p.extend(rest);
            paths.push(p);
        }
    }
    paths
}

/// Each `crate::` path that does not name its layer first (`crate::kernel::pins`, not
/// `crate::pins`): a reader sees the layers in the imports.
fn unlayered(src: &Path) -> Vec<String> {
    let mut bad = Vec::new();
    for path in walkdir(src) {
        let text = std::fs::read_to_string(&path).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap();
            for (i, _) in code.match_indices("crate::") {
                let first: String = code[i + "crate::".len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                if !LAYERS.contains(&first.as_str()) {
                    let rel = path.strip_prefix(src).unwrap();
                    bad.push(format!("{}:{}: {}", rel.display(), n + 1, line.trim()));
                }
            }
        }
    }
    bad
}

#[test]
fn every_import_names_its_layer() {
    let package = std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets it");
    let bad = unlayered(&Path::new(&package).join("src"));
    assert!(bad.is_empty(), "\n{}", bad.join("\n"));
    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join("a.rs"),
        "use crate::paths;\nuse crate::support::fs;\n",
    )
    .unwrap();
    assert_eq!(unlayered(d.path()), ["a.rs:1: use crate::paths;"]);
}

#[test]
fn the_host_library_imports_only_downward_and_has_no_cycle() {
    // At run time: the compiled-in path would name where the checkout was built, and a moved
    // checkout (not rebuilt by cargo) would have this test read the sources of another.
    let package = std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets it");
    let src = Path::new(&package).join("src");
    let mods = modules(&src);
    assert!(mods.len() > 20, "found only {:?}", mods.keys());
    let folders = parts(&src);
    assert!(
        folders.contains_key("results::bench"),
        "found only {:?}",
        folders.keys()
    );
    let mut problems = upward(&mods);
    problems.extend(cycles(&graph(&mods)));
    for (folder, graph) in &folders {
        problems.extend(
            cycles(graph)
                .into_iter()
                .map(|c| format!("in {folder}: {c}")),
        );
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

/// The check itself bites: an upward import, a cycle inside one layer and a cycle inside one
/// module's folder are each named; a module of the same name in two layers is two modules.
#[test]
fn an_upward_import_and_a_cycle_are_reported() {
    let d = tempfile::tempdir().unwrap();
    let write = |path: &str, text: &str| {
        let p = d.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    write("lib.rs", "pub use support::paths;");
    write("support/mod.rs", "pub mod paths;");
    write(
        "support/paths.rs",
        "use crate::results::report::Report; // crate::ui in a comment\n",
    );
    write(
        "domain/a.rs",
        "use crate::domain::b::x;\nuse crate::support::paths;\n",
    );
    write("domain/b/mod.rs", "fn f() { crate::domain::a::g() }\n");
    write("results/report.rs", "use crate::support::paths;\n");
    write("flows/run.rs", "pub(in crate::domain::a) fn f() {}\n");
    write("flows/exec.rs", "use crate::ui::terminal;\n");
    write("ui.rs", "");
    write("flows/bench/mod.rs", "use crate::results::bench::model;\n");
    write(
        "results/bench/mod.rs",
        "pub mod model;\npub mod upstream;\n",
    );
    write(
        "results/bench/model.rs",
        "use super::stats::median;\nuse super::upstream::Outcome;\n",
    );
    write("results/bench/stats.rs", "pub fn median() {}\n");
    write("results/bench/upstream/mod.rs", "pub mod side;\n");
    write(
        "results/bench/upstream/side.rs",
        "use super::Outcome;\nfn f() { super::super::model::g() }\n",
    );
    let mods = modules(d.path());
    assert_eq!(
        upward(&mods),
        [
            "flows/exec.rs:1: flows::exec (flows) imports ui (ui), a layer above it",
            "support/paths.rs:1: support::paths (support) imports results::report (results), a layer above it"
        ]
    );
    assert!(
        mods["flows::run"].imports.contains_key("domain::a"),
        "a path through a layer names its module"
    );
    assert!(
        mods["flows::bench"].imports.contains_key("results::bench"),
        "flows' bench imports results' bench, a layer below: no cycle"
    );
    let cycles_ = cycles(&graph(&mods));
    assert_eq!(
        cycles_,
        [
            "a cycle through domain::a, domain::b",
            "a cycle through results::report, support::paths"
        ]
    );
    let folders = parts(d.path());
    assert_eq!(
        cycles(&folders["results::bench"]),
        ["a cycle through results::bench::model, results::bench::upstream"]
    );
    assert!(
        folders["results::bench"]["results::bench::model"].contains("results::bench::stats"),
        "{:?}",
        folders["results::bench"]
    );
}
