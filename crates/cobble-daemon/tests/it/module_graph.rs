//! The daemon's modules stand in tiers, bottom up: base (`src/base/`), managers
//! (`src/managers/`), views (`src/views/`), then `src/api/`, then `src/daemon/`. A module may
//! use its own tier and the tiers below, and the modules' use of each other has no cycle.
//!
//! The graph is read from the source: every `crate::` path (in `use` declarations and inline,
//! braced groups included) and every `super::` path that climbs out of its module, with
//! comments and string literals left out, test code included. A node is a module of a tier
//! (`state`, `services`, `api`, ...), so what its submodules use counts as its own.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The tiers, bottom up, as the folders of `src/` that hold them. `api` and `daemon` are
/// tiers of one module each.
const TIERS: [&str; 5] = ["base", "managers", "views", "api", "daemon"];

/// A node of the graph: a module and the tier it stands in.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Node {
    tier: usize,
    name: String,
}

/// One use of another module, and where it is.
#[derive(Debug, Clone)]
struct Use {
    to: Node,
    file: PathBuf,
    line: usize,
}

#[test]
fn the_daemons_modules_use_only_their_own_tier_and_those_below_without_cycles() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = read_graph(&src);
    let known: BTreeSet<&Node> = graph.keys().collect();
    assert!(
        known.len() >= 15,
        "only {} modules were found: {known:?}",
        known.len()
    );
    let mut problems = Vec::new();
    for (from, uses) in &graph {
        for u in uses {
            if !graph.contains_key(&u.to) {
                problems.push(format!(
                    "{}:{}: `{}` uses `{}`, which is no module of a tier",
                    u.file.display(),
                    u.line,
                    from.name,
                    u.to.name
                ));
            } else if u.to.tier > from.tier {
                problems.push(format!(
                    "{}:{}: `{}` ({}) uses `{}` ({}), a tier above it",
                    u.file.display(),
                    u.line,
                    from.name,
                    TIERS[from.tier],
                    u.to.name,
                    TIERS[u.to.tier]
                ));
            }
        }
    }
    for cycle in cycles(&graph) {
        let mut text = String::from("cycle: ");
        for (i, node) in cycle.iter().enumerate() {
            let next = &cycle[(i + 1) % cycle.len()];
            let at = graph[node]
                .iter()
                .find(|u| &u.to == next)
                .expect("an edge of the cycle");
            text.push_str(&format!(
                "{} -> {} ({}:{}); ",
                node.name,
                next.name,
                at.file.display(),
                at.line
            ));
        }
        problems.push(text);
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

/// The checker itself: what it reads as a use, and what it leaves out.
#[test]
fn uses_are_read_from_paths_and_groups_but_not_from_comments_or_strings() {
    let code = r#"
        use crate::{atomic, state::{Recorded, StateStore}};
        use crate::logs::ServiceLog; // crate::metrics in a comment
        /// [`crate::listing`] in a doc comment
        fn f() { let _ = crate::process::launch::spawn(); let s = "crate::api"; }
        /* crate::daemon */
        mod inner { use super::super::watch::PathWatcher; }
    "#;
    // The file's own module is managers::checks::exec: from the inline `mod inner`,
    // `super::super` climbs to `checks`.
    let module = ["managers", "checks", "exec"].map(String::from);
    let targets: BTreeSet<String> = paths(&strip(code))
        .iter()
        .filter_map(|p| target(&module, p))
        .map(|n| n.name)
        .collect();
    assert_eq!(
        targets,
        ["atomic", "logs", "process", "state", "checks"]
            .map(String::from)
            .into_iter()
            .collect::<BTreeSet<_>>()
    );
    let lines: Vec<usize> = paths(&strip(code)).into_iter().map(|p| p.line).collect();
    assert_eq!(lines[..2], [2, 2]);
}

/// Every tier module and the modules it uses.
fn read_graph(src: &Path) -> BTreeMap<Node, Vec<Use>> {
    let mut graph: BTreeMap<Node, Vec<Use>> = BTreeMap::new();
    let mut files = Vec::new();
    collect_files(src, &mut files);
    for file in files {
        let relative = file.strip_prefix(src).unwrap();
        let module = module_path(relative);
        let Some(own) = node_of(&module) else {
            continue; // lib.rs and the tiers' own mod.rs declare modules, they use none.
        };
        let text = std::fs::read_to_string(&file).unwrap();
        let uses = graph.entry(own.clone()).or_default();
        for path in paths(&strip(&text)) {
            if let Some(to) = target(&module, &path)
                && to != own
            {
                uses.push(Use {
                    to,
                    file: relative.to_owned(),
                    line: path.line,
                });
            }
        }
    }
    graph
}

fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
}

/// The module a file holds, from its path under `src/`: `managers/services/actor.rs` is
/// `managers::services::actor`, `api/mod.rs` is `api`.
fn module_path(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_owned());
    }
    parts
}

/// The tier module that `module` (a full path from the crate root) belongs to.
fn node_of(module: &[String]) -> Option<Node> {
    let first = module.first()?;
    let tier = TIERS.iter().position(|t| first == t)?;
    match TIERS[tier] {
        "api" | "daemon" => Some(Node {
            tier,
            name: TIERS[tier].to_owned(),
        }),
        _ => module.get(1).map(|name| Node {
            tier,
            name: name.clone(),
        }),
    }
}

/// The tier module a path names, used from a file holding `module`. `crate::x` names the
/// module `x`, re-exported at the root, or `crate::<tier>::x`; `super::` climbs from the
/// inline module the path is in, then from `module`. Paths that name nothing outside the
/// crate root (`crate::VERSION`) give `None`.
fn target(module: &[String], path: &Path_) -> Option<Node> {
    let segments: Vec<&str> = path.text.split("::").collect();
    let absolute: Vec<String> = if segments[0] == "crate" {
        segments[1..].iter().map(|s| s.to_string()).collect()
    } else {
        let climbs = segments.iter().take_while(|s| **s == "super").count();
        if climbs <= path.inline {
            return None; // Within the file.
        }
        let keep = module.len().checked_sub(climbs - path.inline)?;
        let mut p: Vec<String> = module[..keep].to_vec();
        p.extend(segments[climbs..].iter().map(|s| s.to_string()));
        p
    };
    let first = absolute.first()?;
    if TIERS.contains(&first.as_str()) {
        return node_of(&absolute);
    }
    // A root re-export: find its tier by the folder that holds it.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for (tier, folder) in TIERS.iter().enumerate().take(3) {
        let dir = src.join(folder);
        if dir.join(format!("{first}.rs")).exists() || dir.join(first).is_dir() {
            return Some(Node {
                tier,
                name: first.clone(),
            });
        }
    }
    None
}

/// `source` with comments and the contents of string and character literals blanked out,
/// lines kept where they were.
fn strip(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    let keep_newlines = |text: &[char], out: &mut String| {
        for &c in text {
            out.push(if c == '\n' { '\n' } else { ' ' });
        }
    };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            let end = chars[i..]
                .iter()
                .position(|&c| c == '\n')
                .map_or(chars.len(), |n| i + n);
            keep_newlines(&chars[i..end], &mut out);
            i = end;
        } else if c == '/' && next == Some('*') {
            let (mut depth, mut j) = (1, i + 2);
            while j < chars.len() && depth > 0 {
                if chars[j] == '/' && chars.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 2;
                } else if chars[j] == '*' && chars.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            keep_newlines(&chars[i..j], &mut out);
            i = j;
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && !chars
                .get(i.wrapping_sub(1))
                .is_some_and(|p| p.is_alphanumeric() || *p == '_')
        {
            let hashes = chars[i + 1..].iter().take_while(|&&c| c == '#').count();
            if chars.get(i + 1 + hashes) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let close: String = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let body_start = i + 2 + hashes;
            let rest: String = chars[body_start..].iter().collect();
            let end = rest.find(&close).map_or(chars.len(), |n| {
                body_start + rest[..n].chars().count() + close.len()
            });
            keep_newlines(&chars[i..end], &mut out);
            i = end;
        } else if c == '"' {
            let mut j = i + 1;
            while j < chars.len() && chars[j] != '"' {
                j += if chars[j] == '\\' { 2 } else { 1 };
            }
            keep_newlines(&chars[i..(j + 1).min(chars.len())], &mut out);
            i = j + 1;
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{..}'), or a lifetime ('a).
            let end = if next == Some('\\') {
                chars[i + 2..]
                    .iter()
                    .position(|&c| c == '\'')
                    .map(|n| i + 3 + n)
            } else if chars.get(i + 2) == Some(&'\'') {
                Some(i + 3)
            } else {
                None
            };
            match end {
                Some(end) => {
                    keep_newlines(&chars[i..end], &mut out);
                    i = end;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// A path found in the source.
#[derive(Debug)]
struct Path_ {
    text: String,
    line: usize,
    /// How deep in inline modules (`mod tests { ... }`) of its file it is.
    inline: usize,
}

/// Every path in `code` that starts with `crate::` or `super::`, braced groups expanded
/// (`crate::{a, b::{c}}` gives `crate::a` and `crate::b::c`), with its line and how deep in
/// inline modules it is.
fn paths(code: &str) -> Vec<Path_> {
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    // The brace depth inside each inline module open here.
    let mut inline: Vec<usize> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if inline.last() == Some(&depth) {
                    inline.pop();
                }
            }
            _ => {}
        }
        let word_start = i == 0 || !ident(bytes[i - 1]) && bytes[i - 1] != b':';
        if word_start && code[i..].starts_with("mod ") {
            let rest = code[i + 4..].trim_start();
            let name_len = rest.bytes().take_while(|&b| ident(b)).count();
            if name_len > 0 && rest[name_len..].trim_start().starts_with('{') {
                inline.push(depth);
            }
        }
        let starts =
            word_start && (code[i..].starts_with("crate::") || code[i..].starts_with("super::"));
        if !starts {
            i += 1;
            continue;
        }
        let line = code[..i].matches('\n').count() + 1;
        let (end, expanded) = expand(code, i);
        for text in expanded {
            found.push(Path_ {
                text,
                line,
                inline: inline.len(),
            });
        }
        // Braces inside the path (a group) are balanced: skip past them.
        i = end.max(i + 1);
    }
    found
}

/// The paths of the path starting at `start`, and where it ends.
fn expand(code: &str, start: usize) -> (usize, Vec<String>) {
    let bytes = code.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut prefix = String::new();
    let mut i = start;
    loop {
        let from = i;
        while i < bytes.len() && ident(bytes[i]) {
            i += 1;
        }
        prefix.push_str(&code[from..i]);
        let rest = &code[i..];
        let trimmed = rest.trim_start();
        if let Some(after) = trimmed.strip_prefix("::") {
            let skipped = rest.len() - after.len();
            let after_trim = after.trim_start();
            i += skipped + (after.len() - after_trim.len());
            if after_trim.starts_with('{') {
                // A group: split its items at top-level commas.
                let (end, items) = group(code, i + 1);
                let mut out = Vec::new();
                for item in items {
                    let item_start = item.0
                        + (code[item.0..item.1].len() - code[item.0..item.1].trim_start().len());
                    let (_, sub) = expand(code, item_start);
                    for s in sub {
                        if s.is_empty() {
                            continue;
                        }
                        if s == "self" {
                            out.push(prefix.clone());
                        } else {
                            out.push(format!("{prefix}::{s}"));
                        }
                    }
                }
                return (end, out);
            }
            prefix.push_str("::");
            continue;
        }
        return (i, vec![prefix]);
    }
}

/// The items of a braced group whose contents start at `start`: their byte ranges, and
/// where the group ends.
fn group(code: &str, start: usize) -> (usize, Vec<(usize, usize)>) {
    let bytes = code.as_bytes();
    let (mut depth, mut i, mut item_start) = (0, start, start);
    let mut items = Vec::new();
    while i < bytes.len() {
        match bytes[i] {
            b'{' => depth += 1,
            b'}' if depth == 0 => {
                items.push((item_start, i));
                return (i + 1, items);
            }
            b'}' => depth -= 1,
            b',' if depth == 0 => {
                items.push((item_start, i));
                item_start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    (i, items)
}

/// The cycles of the graph: each strongly connected component with more than one module,
/// as one cycle through it.
fn cycles(graph: &BTreeMap<Node, Vec<Use>>) -> Vec<Vec<Node>> {
    let nodes: Vec<&Node> = graph.keys().collect();
    let index: BTreeMap<&Node, usize> = nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let edges: Vec<BTreeSet<usize>> = nodes
        .iter()
        .map(|n| {
            graph[*n]
                .iter()
                .filter_map(|u| index.get(&u.to).copied())
                .collect()
        })
        .collect();
    // Tarjan's strongly connected components.
    struct State {
        next: usize,
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        stack: Vec<usize>,
        on_stack: Vec<bool>,
        components: Vec<Vec<usize>>,
    }
    fn visit(v: usize, edges: &[BTreeSet<usize>], s: &mut State) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in &edges[v] {
            match s.index[w] {
                None => {
                    visit(w, edges, s);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on_stack[w] => s.low[v] = s.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut component = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            s.components.push(component);
        }
    }
    let n = nodes.len();
    let mut s = State {
        next: 0,
        index: vec![None; n],
        low: vec![0; n],
        stack: Vec::new(),
        on_stack: vec![false; n],
        components: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            visit(v, &edges, &mut s);
        }
    }
    let mut out = Vec::new();
    for component in s.components.into_iter().filter(|c| c.len() > 1) {
        // One cycle through the component: walk edges inside it back to the start.
        let inside: BTreeSet<usize> = component.iter().copied().collect();
        let start = *component.iter().min().unwrap();
        let mut path = vec![start];
        let mut seen = BTreeSet::from([start]);
        let cycle = loop {
            let here = *path.last().unwrap();
            if path.len() > 1 && edges[here].contains(&start) {
                break path.clone();
            }
            match edges[here]
                .iter()
                .find(|w| inside.contains(w) && !seen.contains(w))
            {
                Some(&w) => {
                    seen.insert(w);
                    path.push(w);
                }
                None if path.len() == 1 => break path.clone(),
                None => {
                    path.pop();
                }
            }
        };
        out.push(cycle.into_iter().map(|i| nodes[i].clone()).collect());
    }
    out
}
