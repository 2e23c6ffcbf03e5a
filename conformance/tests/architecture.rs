//! The house rules of ARCHITECTURE.md, checked on the source: the library's files
//! (`conformance/src`, the binary's `cli/` aside) import each other without a cycle, and no
//! production import runs back up the layers
//! `error, par → formats → fast → precision → suite → judge → report, protocol, peers → shrink, testing, fuzzing`.
//! Imports are read from `crate::` and `super::` paths (grouped `use` lists expanded), with
//! comments and `#[cfg(test)]` modules left out: test code may reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layer of each top-level module of the library: an import may only go to the same layer
/// or a lower one (and within a layer, only between the modules listed as allowed).
const LAYERS: &[(&str, u8)] = &[
    ("error", 0),
    ("par", 0),
    ("mem", 0),
    ("formats", 1),
    ("fast", 2),
    ("precision", 3),
    ("suite", 4),
    ("judge", 5),
    ("report", 6),
    ("protocol", 6),
    ("peers", 6),
    ("shrink", 7),
    ("testing", 7),
    ("fuzzing", 7),
];

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Module path of every library file (`judge/check.rs` → `["judge", "check"]`, `mod.rs` and
/// `lib.rs` name their folder).
fn library_files() -> BTreeMap<Vec<String>, PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).expect("read src") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let root = src_dir();
    let mut paths = Vec::new();
    walk(&root, &mut paths);
    let mut files = BTreeMap::new();
    for p in paths {
        let rel = p.strip_prefix(&root).expect("under src");
        let mut parts: Vec<String> = rel
            .iter()
            .map(|s| s.to_string_lossy().trim_end_matches(".rs").to_string())
            .collect();
        if parts[0] == "cli" {
            continue; // the binary: it reaches the library through `bnconf::` paths
        }
        if parts.last().is_some_and(|f| f.ends_with("_tests")) {
            continue; // a `#[cfg(test)] #[path = "…_tests.rs"] mod tests;`: test code
        }
        if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
            parts.pop();
        }
        files.insert(parts, p);
    }
    files
}

/// The source without comments and without `#[cfg(test)] mod name { ... }` blocks.
fn production_source(src: &str) -> String {
    let no_comments: String = src
        .lines()
        .map(|l| match l.find("//") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = String::new();
    let mut rest = no_comments.as_str();
    while let Some(i) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..i]);
        let after = &rest[i + "#[cfg(test)]".len()..];
        let head = after.trim_start();
        let is_mod = head
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub ")
            .starts_with("mod ");
        let open = after.find('{');
        let semi = after.find(';');
        match (is_mod, open, semi) {
            (true, Some(o), s) if s.is_none_or(|s| o < s) => {
                let mut depth = 0usize;
                let mut end = after.len();
                for (j, ch) in after[o..].char_indices() {
                    match ch {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = o + j + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                rest = &after[end..];
            }
            _ => rest = after,
        }
    }
    out.push_str(rest);
    out
}

/// `a::{b, c::{d, e}}` → `[[a, b], [a, c, d], [a, c, e]]`.
fn expand(prefix: &[String], body: &str) -> Vec<Vec<String>> {
    // An alias (`e as f`) becomes `e@f` before the whitespace goes; the path ends at `@`.
    let body: String = body
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace(" as ", "@")
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    let mut parts = Vec::new();
    let (mut depth, mut cur) = (0i32, String::new());
    for ch in body.chars() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            _ => {}
        }
        if ch == ',' && depth == 0 {
            parts.push(std::mem::take(&mut cur));
        } else {
            cur.push(ch);
        }
    }
    parts.push(cur);
    let mut res = Vec::new();
    for p in parts.into_iter().filter(|p| !p.is_empty()) {
        if let (Some(i), true) = (p.find("::{"), p.ends_with('}')) {
            let mut pre = prefix.to_vec();
            pre.extend(
                p[..i]
                    .split("::")
                    .filter(|s| !s.is_empty())
                    .map(String::from),
            );
            res.extend(expand(&pre, &p[i + 3..p.len() - 1]));
        } else {
            let mut path = prefix.to_vec();
            let p = p.split('@').next().unwrap_or(&p);
            path.extend(
                p.split("::")
                    .filter(|s| !s.is_empty() && *s != "self" && *s != "*")
                    .map(String::from),
            );
            res.push(path);
        }
    }
    res
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Every `crate::`/`super::` path a file names, as a module path from the crate root.
fn imported_paths(module: &[String], src: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    // Grouped `use crate::a::{...};` lists.
    let mut rest = src;
    while let Some(i) = rest.find("use crate::") {
        let after = &rest[i + "use crate::".len()..];
        let end = after.find(';').unwrap_or(after.len());
        paths.extend(expand(&[], &after[..end]));
        rest = &after[end..];
    }
    // Every other `crate::a::b` and `super::a::b`.
    // `super::` from `a/b.rs` (module a::b) and from `a/mod.rs` (module a) both name the parent.
    let parent = module[..module.len().saturating_sub(1)].to_vec();
    for (key, base) in [("crate::", Vec::new()), ("super::", parent)] {
        let mut rest = src;
        while let Some(i) = rest.find(key) {
            let before_ok = i == 0 || !is_ident(rest[..i].chars().last().unwrap_or(' '));
            let after = &rest[i + key.len()..];
            let len = after
                .find(|c: char| !(is_ident(c) || c == ':'))
                .unwrap_or(after.len());
            if before_ok {
                let mut p = base.clone();
                p.extend(
                    after[..len]
                        .split("::")
                        .filter(|s| !s.is_empty())
                        .map(String::from),
                );
                paths.push(p);
            }
            rest = &after[len..];
        }
    }
    paths
}

/// The file a module path lands in: the longest prefix that is a file.
fn resolve<'a>(
    files: &'a BTreeMap<Vec<String>, PathBuf>,
    path: &[String],
) -> Option<&'a Vec<String>> {
    (1..=path.len())
        .rev()
        .find_map(|n| files.get_key_value(&path[..n]).map(|(k, _)| k))
}

fn edges() -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let files = library_files();
    let mut edges = BTreeMap::new();
    for (module, path) in &files {
        let src = production_source(&std::fs::read_to_string(path).expect("read"));
        let mut to = BTreeSet::new();
        for p in imported_paths(module, &src) {
            if let Some(t) = resolve(&files, &p) {
                // A child naming its own folder's face is not an import of another room.
                let ancestor_face = t.len() < module.len() && module[..t.len()] == t[..];
                if t != module && !ancestor_face {
                    to.insert(t.clone());
                }
            }
        }
        edges.insert(module.clone(), to);
    }
    edges
}

fn name(m: &[String]) -> String {
    if m.is_empty() {
        "lib.rs".into()
    } else {
        m.join("/")
    }
}

type Graph = BTreeMap<Vec<String>, BTreeSet<Vec<String>>>;

/// Every cycle a depth-first search closes (a grey node reached again), as `a -> b -> a`.
fn cycles(edges: &Graph) -> Vec<String> {
    fn visit(
        v: &Vec<String>,
        edges: &Graph,
        colour: &mut BTreeMap<Vec<String>, u8>,
        stack: &mut Vec<Vec<String>>,
        cycles: &mut Vec<String>,
    ) {
        colour.insert(v.clone(), 1);
        stack.push(v.clone());
        for w in edges.get(v).into_iter().flatten() {
            match colour.get(w).copied().unwrap_or(0) {
                0 => visit(w, edges, colour, stack, cycles),
                1 => {
                    let from = stack.iter().position(|s| s == w).expect("on the stack");
                    let mut c: Vec<String> = stack[from..].iter().map(|m| name(m)).collect();
                    c.push(name(w));
                    cycles.push(c.join(" -> "));
                }
                _ => {}
            }
        }
        stack.pop();
        colour.insert(v.clone(), 2);
    }
    let (mut colour, mut found) = (BTreeMap::new(), Vec::new());
    for v in edges.keys() {
        if !colour.contains_key(v) {
            visit(v, edges, &mut colour, &mut Vec::new(), &mut found);
        }
    }
    found
}

/// Every import to a higher layer, or across to another top-level module of the same layer
/// (the utilities of layer 0 aside).
fn back_arrows(edges: &Graph) -> Vec<String> {
    let layer = |m: &[String]| -> Option<u8> {
        let top = m.first()?;
        Some(
            LAYERS
                .iter()
                .find(|(n, _)| n == top)
                .unwrap_or_else(|| {
                    panic!("top-level module {top:?} has no layer in LAYERS (and ARCHITECTURE.md)")
                })
                .1,
        )
    };
    let mut wrong = Vec::new();
    for (from, tos) in edges {
        let Some(lf) = layer(from) else { continue }; // lib.rs: the crate's face
        for to in tos {
            let Some(lt) = layer(to) else { continue };
            let same_top = from.first() == to.first();
            if lt > lf || (lt == lf && !same_top && lf != 0) {
                wrong.push(format!(
                    "{} (layer {lf}) -> {} (layer {lt})",
                    name(from),
                    name(to)
                ));
            }
        }
    }
    wrong
}

#[test]
fn no_import_cycle_between_files() {
    let edges = edges();
    assert!(edges.len() > 40, "found only {} library files", edges.len());
    let found = cycles(&edges);
    assert!(
        found.is_empty(),
        "import cycles between files:\n{}",
        found.join("\n")
    );
}

#[test]
fn no_import_runs_back_up_the_layers() {
    let wrong = back_arrows(&edges());
    assert!(
        wrong.is_empty(),
        "imports that run back up (or across) the layers:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_checker_sees_the_rules_break() {
    // The parser reads grouped lists and `super::`, and leaves test modules and comments out.
    let src = "use crate::a::{b, c::{d, e as f}};\nfn x() { super::g::h(); }\n// crate::z::y\n#[cfg(test)]\nmod tests { use crate::q::r; }\n";
    let prod = production_source(src);
    assert!(
        !prod.contains("crate::q") && !prod.contains("crate::z"),
        "{prod}"
    );
    let m = vec!["k".to_string(), "l".to_string()];
    let paths = imported_paths(&m, &prod);
    for want in [
        vec!["a", "b"],
        vec!["a", "c", "d"],
        vec!["a", "c", "e"],
        vec!["k", "g", "h"],
    ] {
        let want: Vec<String> = want.into_iter().map(String::from).collect();
        assert!(paths.contains(&want), "{want:?} not in {paths:?}");
    }
    // The rules catch a cycle and a back-arrow when there is one.
    let v = |s: &str| s.split('/').map(String::from).collect::<Vec<_>>();
    let mut g = Graph::new();
    g.entry(v("fast/eval")).or_default().insert(v("suite/case"));
    g.entry(v("suite/case")).or_default().insert(v("fast/eval"));
    assert_eq!(cycles(&g).len(), 1, "{:?}", cycles(&g));
    assert_eq!(
        back_arrows(&g),
        vec!["fast/eval (layer 2) -> suite/case (layer 4)".to_string()]
    );
    // And the real graph has the layers' edges (fast is used by suite and judge).
    let e = edges();
    let uses = |from: &str, to: &str| {
        e.iter().any(|(f, t)| {
            f.first().is_some_and(|f| f == from)
                && t.iter().any(|t| t.first().is_some_and(|t| t == to))
        })
    };
    assert!(uses("judge", "fast") && uses("suite", "fast") && uses("protocol", "judge"));
}
