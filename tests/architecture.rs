//! docs/ARCHITECTURE.md's module map holds: every module under `src/` is on
//! it, every module imports only what its row allows, no two modules import
//! each other (directly or round a circle), and the rules the code cites
//! are stated inside the repository.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crate's modules (`replay::http::sse`) and their files, binaries and
/// `lib.rs` aside.
fn modules() -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut dirs = vec![src.clone()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                if p != src.join("bin") {
                    dirs.push(p);
                }
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") || p == src.join("lib.rs") {
                continue;
            }
            let rel = p.strip_prefix(&src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|l| l == "mod") {
                parts.pop();
            }
            out.insert(parts.join("::"), p);
        }
    }
    out
}

/// The code of a file without its tests and comments (doc links name
/// modules without importing them).
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let text = match text.find("#[cfg(test)]") {
        Some(i) => &text[..i],
        None => &text[..],
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first names of a `{a::X, b, self}` group, each as a path.
fn group(prefix: &str, body: &str) -> Vec<String> {
    let (mut depth, mut cur, mut items) = (0, String::new(), Vec::new());
    for ch in body.chars() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(ch);
    }
    items.push(cur);
    items
        .iter()
        .map(|i| i.trim())
        .filter(|i| !i.is_empty())
        .map(|i| {
            let first: String = i
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            match first.trim_end_matches(':') {
                "self" => prefix.to_string(),
                f => format!("{prefix}::{f}"),
            }
        })
        .collect()
}

/// Every path the code names through `crate::`, `super::` or `self::`,
/// made absolute.
fn paths(module: &str, code: &str) -> Vec<String> {
    let segs: Vec<&str> = module.split("::").collect();
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        let rest = &code[i..];
        let starts_word = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        let head = ["crate::", "super::", "self::"]
            .into_iter()
            .find(|h| rest.starts_with(h));
        let (Some(head), true) = (head, starts_word) else {
            i += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        };
        let mut j = i + head.len();
        // The module `self` and `super` count from: a `mod.rs` is its
        // folder's module, any other file its own.
        let mut base: Vec<&str> = match head {
            "crate::" => Vec::new(),
            _ => segs.clone(),
        };
        if head == "super::" {
            base.pop();
            while code[j..].starts_with("super::") {
                base.pop();
                j += "super::".len();
            }
        }
        let prefix = base.join("::");
        let join = |p: &str| {
            if prefix.is_empty() {
                p.to_string()
            } else if p.is_empty() {
                prefix.clone()
            } else {
                format!("{prefix}::{p}")
            }
        };
        if code[j..].starts_with('{') {
            let mut depth = 0;
            let mut end = j;
            for (k, ch) in code[j..].char_indices() {
                match ch {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = j + k;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            for p in group("", &code[j + 1..end]) {
                out.push(join(p.trim_start_matches("::")));
            }
            i = end + 1;
        } else {
            let p: String = code[j..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            out.push(join(p.trim_end_matches(':')));
            i = j + p.len().max(1);
        }
    }
    out
}

/// The module a path lands in: its longest prefix that is a module.
fn resolve<'a>(mods: &'a BTreeMap<String, PathBuf>, path: &str) -> Option<&'a str> {
    let segs: Vec<&str> = path.split("::").collect();
    (1..=segs.len())
        .rev()
        .map(|k| segs[..k].join("::"))
        .find_map(|m| mods.get_key_value(&m).map(|(k, _)| k.as_str()))
}

/// Which module imports which (a module's own ancestors, which declare it,
/// and its own descendants left out).
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let mods = modules();
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, file) in &mods {
        let entry = g.entry(m.clone()).or_default();
        for p in paths(m, &code(file)) {
            let Some(r) = resolve(&mods, &p) else {
                continue;
            };
            let related =
                r == m || m.starts_with(&format!("{r}::")) || r.starts_with(&format!("{m}::"));
            if !related {
                entry.insert(r.to_string());
            }
        }
    }
    g
}

fn top(m: &str) -> &str {
    m.split("::").next().unwrap_or(m)
}

#[test]
fn no_import_circle_among_modules() {
    let g = graph();
    // Iterative DFS with colours; a grey successor closes a circle.
    let mut colour: BTreeMap<&str, u8> = BTreeMap::new();
    let mut circles = Vec::new();
    for start in g.keys() {
        if colour.contains_key(start.as_str()) {
            continue;
        }
        let mut stack: Vec<(&str, Vec<&str>)> =
            vec![(start, g[start].iter().map(String::as_str).collect())];
        let mut path = vec![start.as_str()];
        colour.insert(start, 1);
        while let Some((_, next)) = stack.last_mut() {
            match next.pop() {
                Some(v) => match colour.get(v) {
                    Some(1) => {
                        let at = path.iter().position(|p| *p == v).unwrap_or(0);
                        circles.push(format!("{} -> {v}", path[at..].join(" -> ")));
                    }
                    Some(_) => {}
                    None => {
                        colour.insert(v, 1);
                        path.push(v);
                        let succ = g
                            .get(v)
                            .map_or(Vec::new(), |s| s.iter().map(String::as_str).collect());
                        stack.push((v, succ));
                    }
                },
                None => {
                    let (u, _) = stack.pop().unwrap();
                    colour.insert(u, 2);
                    path.pop();
                }
            }
        }
    }
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

/// The map's tables: each row's module (its top-level name), its text, and
/// the top-level modules it may import; `core` stands for every module of
/// the first table.
struct Map {
    rows: BTreeMap<String, (String, BTreeSet<String>)>,
    core: BTreeSet<String>,
}

fn map() -> Map {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/ARCHITECTURE.md"))
            .unwrap();
    let start = doc.find("## 3. Module map").expect("the map's heading");
    let section = &doc[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    let mut rows = BTreeMap::new();
    let mut core = BTreeSet::new();
    let mut in_core = false;
    for line in section.lines() {
        if line.starts_with("Shared core") {
            in_core = true;
        } else if line.starts_with("Tools") {
            in_core = false;
        }
        let Some(rest) = line.strip_prefix("| `") else {
            continue;
        };
        let cells: Vec<&str> = line.split(" | ").collect();
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let may: BTreeSet<String> = cells
            .last()
            .unwrap_or(&"")
            .trim_end_matches('|')
            .split(',')
            .map(|s| {
                let s = s.trim().trim_start_matches('`');
                s.split([':', ' ', '(', '`'])
                    .next()
                    .unwrap_or(s)
                    .to_string()
            })
            .filter(|s| !s.is_empty())
            .collect();
        if in_core {
            core.insert(name.clone());
        }
        rows.insert(name, (line.to_string(), may));
    }
    Map { rows, core }
}

#[test]
fn every_module_is_on_the_map() {
    let map = map();
    let mut missing = Vec::new();
    // Test-only modules (`engine/tests.rs`) are not part of the design.
    for m in modules().keys().filter(|m| !m.ends_with("::tests")) {
        let Some((row, _)) = map.rows.get(top(m)) else {
            missing.push(format!("{m}: no row for `{}`", top(m)));
            continue;
        };
        // A submodule is named in its tool's row (`sse`, `http::sse`).
        let last = m.rsplit("::").next().unwrap_or(m);
        let named = row.match_indices(last).any(|(i, _)| {
            let before = row[..i].chars().next_back();
            let after = row[i + last.len()..].chars().next();
            let edge = |c: Option<char>| c.is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
            edge(before) && edge(after)
        });
        if !named {
            missing.push(format!("{m}: not named in the row of `{}`", top(m)));
        }
    }
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md's module map misses:\n{}",
        missing.join("\n")
    );
}

#[test]
fn every_module_imports_only_what_the_map_allows() {
    let map = map();
    let mut bad = Vec::new();
    for (m, deps) in graph() {
        let Some((_, may)) = map.rows.get(top(&m)) else {
            continue;
        };
        for d in deps {
            let t = top(&d);
            if t == top(&m) {
                continue;
            }
            let allowed = may.contains(t) || (may.contains("core") && map.core.contains(t));
            if !allowed {
                bad.push(format!("{m} imports {d}"));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "imports the map's `may import` column does not allow:\n{}",
        bad.join("\n")
    );
}

/// Files under `src/` outside the given prefixes whose code names `needle`.
fn naming(needle: &str, allowed: &[&str]) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    modules()
        .values()
        .filter(|f| {
            let rel = f.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            !allowed.iter().any(|a| rel.starts_with(a)) && code(f).contains(needle)
        })
        .map(|f| f.display().to_string())
        .collect()
}

#[test]
fn only_mc_replay_reaches_into_the_replay() {
    let found = naming("crate::replay", &["src/replay/"]);
    assert!(found.is_empty(), "outside src/replay: {found:?}");
}

#[test]
fn only_binaries_use_cli() {
    let found = naming("crate::cli", &["src/cli.rs"]);
    assert!(
        found.is_empty(),
        "outside src/cli.rs and src/bin: {found:?}"
    );
}

#[test]
fn no_rule_is_cited_from_outside_the_repository() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<(PathBuf, &[&str])> = modules()
        .into_values()
        .map(|f| (f, &["DESIGN.md", "../shared/"][..]))
        .collect();
    files.push((root.join("src/lib.rs"), &["DESIGN.md", "../shared/"]));
    files.push((root.join("docs/ARCHITECTURE.md"), &["DESIGN.md"]));
    // The tests cite the rules they check (this file names the needles;
    // `../shared/` stays: MCTRACE_DATA points there).
    for e in std::fs::read_dir(root.join("tests")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "rs") && !p.ends_with("architecture.rs") {
            files.push((p, &["DESIGN.md"]));
        }
    }
    for (f, needles) in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for needle in needles {
            assert!(
                !text.contains(needle),
                "{} cites {needle}: state the rule in docs/ARCHITECTURE.md instead",
                f.display()
            );
        }
    }
}

/// mc-replay's rooms, top first: a module may import from its own room and
/// the rooms below it, never from one above, so calls go down. `replay`
/// itself (its `mod.rs`) is the tool's entry: `run` and the module list.
/// Every module of `replay` not named here is a part (the room below the
/// last), which imports no room above it.
const REPLAY_ROOMS: [&[&str]; 4] = [
    // The entry.
    &["replay"],
    // The modes: a sweep's runs, the job that runs every shard.
    &["replay::sweep", "replay::shard::emit"],
    // One run of the plan on its target, and its verdict.
    &["replay::drive"],
    // The checked plan (the options consumed).
    &["replay::plan", "replay::sweep::plan"],
];

/// A replay module's room: its index in [`REPLAY_ROOMS`], or the parts'.
fn replay_room(m: &str) -> usize {
    REPLAY_ROOMS
        .iter()
        .position(|room| room.contains(&m))
        .unwrap_or(REPLAY_ROOMS.len())
}

/// What each module of `replay` imports from `replay`, its ancestors
/// included (`super::X` naming an item of the parent's `mod.rs` lands on
/// the parent), its own descendants left out.
fn replay_imports() -> BTreeMap<String, BTreeSet<String>> {
    let mods = modules();
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, file) in mods
        .iter()
        .filter(|(m, _)| *m == "replay" || m.starts_with("replay::"))
    {
        let entry = out.entry(m.clone()).or_default();
        for p in paths(m, &code(file)) {
            let Some(r) = resolve(&mods, &p) else {
                continue;
            };
            let inside = r == m || r.starts_with(&format!("{m}::"));
            if !inside && (r == "replay" || r.starts_with("replay::")) {
                entry.insert(r.to_string());
            }
        }
    }
    out
}

/// The imports that go up a room: `module imports target`.
fn upward_arrows(imports: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut bad = Vec::new();
    for (m, deps) in imports {
        for d in deps {
            if replay_room(d) < replay_room(m) {
                bad.push(format!("{m} imports {d}"));
            }
        }
    }
    bad
}

#[test]
fn calls_inside_the_replay_go_down() {
    let bad = upward_arrows(&replay_imports());
    assert!(
        bad.is_empty(),
        "imports from a room above (see REPLAY_ROOMS):\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_rooms_check_finds_an_upward_arrow() {
    let imports = |pairs: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (m, d) in pairs {
            g.entry(m.to_string()).or_default().insert(d.to_string());
        }
        g
    };
    // A part reaching the entry's items, the plan reaching a run: up.
    let up = imports(&[
        ("replay::observe", "replay"),
        ("replay::sweep::plan", "replay::drive"),
        ("replay::http::connect", "replay::plan"),
    ]);
    assert_eq!(upward_arrows(&up).len(), 3);
    // The entry calling a run, a sweep its runs, a run the plan: down.
    let down = imports(&[
        ("replay", "replay::drive"),
        ("replay::sweep", "replay::drive"),
        ("replay::drive", "replay::plan"),
        ("replay::shard::emit", "replay::plan"),
        ("replay::plan", "replay::options"),
    ]);
    assert!(upward_arrows(&down).is_empty());
    // The modules the rooms name exist (a renamed one would pass unseen).
    let mods = modules();
    for room in REPLAY_ROOMS {
        for m in room {
            assert!(
                mods.contains_key(*m),
                "REPLAY_ROOMS names {m}: no such module"
            );
        }
    }
}
