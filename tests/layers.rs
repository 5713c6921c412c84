//! The code keeps its layers: a top-level module of `src/` imports only from the layers
//! left of it in docs/layout.md's layering line (never from its own), every top-level
//! module is on that line, and the files of one folder import each other without a cycle.
//!
//! It reads what the code names: `use` trees and `crate::`/`super::`/`self::` paths,
//! outside comments, strings and `#[cfg(test)]` modules (tests may reach anywhere). A path
//! to an item re-exported by a parent is not followed to the file that defines it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One source file: its module path (`["pool", "engine"]` for src/pool/engine.rs) and its
/// text.
struct Source {
    file: String,
    module: Vec<String>,
    text: String,
}

fn sources() -> Vec<Source> {
    let src = root().join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    files.sort();
    files
        .into_iter()
        .filter_map(|p| {
            let rel = p.strip_prefix(&src).unwrap().to_str().unwrap().to_string();
            let text = std::fs::read_to_string(&p).unwrap();
            (rel != "main.rs").then(|| Source {
                module: module_of(&rel),
                file: format!("src/{rel}"),
                text,
            })
        })
        .collect()
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            walk(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `pool/engine/writer.rs` → pool::engine::writer; `pool/mod.rs` → pool; `lib.rs` → the
/// crate root.
fn module_of(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The code of a file without comments, string and char literals (their contents could
/// look like paths or braces).
fn code_only(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < c.len() {
        if c[i] == '/' && at(&c, i + 1) == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && at(&c, i + 1) == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(&c, i + 1) == Some('*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(&c, i + 1) == Some('/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if let Some(hashes) = raw_string_start(&c, i) {
            // r"…", r#"…"#, br"…": ends at a quote followed by as many #.
            i += c[i..].iter().position(|&x| x == '"').unwrap() + 1;
            let end: Vec<char> = std::iter::once('"')
                .chain("#".repeat(hashes).chars())
                .collect();
            while i < c.len() && !c[i..].starts_with(&end) {
                i += 1;
            }
            i += end.len();
            out.push_str("\"\"");
        } else if c[i] == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c[i] == '\'' && (at(&c, i + 1) == Some('\\') || at(&c, i + 2) == Some('\'')) {
            // A char literal ('x', '\n', '\u{1F600}'); a lifetime ('a) has no closing quote.
            i += 1;
            while i < c.len() && c[i] != '\'' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("' '");
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

fn at(c: &[char], i: usize) -> Option<char> {
    c.get(i).copied()
}

/// At a raw string's `r` (or `br`) not inside an identifier: how many `#` it has.
fn raw_string_start(c: &[char], i: usize) -> Option<usize> {
    if i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_') {
        return None;
    }
    let mut j = i;
    if c.get(j) == Some(&'b') {
        j += 1;
    }
    if c.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let hashes = c[j..].iter().take_while(|&&x| x == '#').count();
    (c.get(j + hashes) == Some(&'"')).then_some(hashes)
}

/// The code without `#[cfg(test)] mod x { … }` blocks, and the names of the modules it
/// declares `#[cfg(test)] mod x;` (files that are tests).
fn without_tests(code: &str) -> (String, BTreeSet<String>) {
    let mut out = String::new();
    let mut test_files = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let item = after.trim_start();
        let item = item
            .strip_prefix("pub(crate)")
            .or_else(|| item.strip_prefix("pub(super)"))
            .or_else(|| item.strip_prefix("pub"))
            .unwrap_or(item)
            .trim_start();
        let Some(m) = item.strip_prefix("mod ") else {
            // Some other item under cfg(test): kept, its paths count.
            rest = after;
            continue;
        };
        let name: String = m
            .trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let after_name = m.trim_start()[name.len()..].trim_start();
        if let Some(after) = after_name.strip_prefix(';') {
            test_files.insert(name);
            rest = after;
        } else {
            let open = after_name.find('{').expect("a mod body");
            let mut depth = 0;
            let mut end = after_name.len();
            for (k, ch) in after_name[open..].char_indices() {
                match ch {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = open + k + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            rest = &after_name[end..];
        }
    }
    out.push_str(rest);
    (out, test_files)
}

/// Every path a file names that starts at `crate`, `super` or `self`: the leaves of its
/// `use` trees, and the paths written in its code.
fn named_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = find_word(rest, "use") {
        let tail = &rest[at + 3..];
        let end = tail.find(';').unwrap_or(tail.len());
        expand_use(&tail[..end], &mut Vec::new(), &mut out);
        rest = &tail[end..];
    }
    let words: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < words.len() {
        let start = i;
        if i > 0 && (words[i - 1].is_alphanumeric() || words[i - 1] == '_' || words[i - 1] == ':') {
            i += 1;
            continue;
        }
        let mut segs = Vec::new();
        loop {
            let w: String = words[i..]
                .iter()
                .take_while(|c| c.is_alphanumeric() || **c == '_')
                .collect();
            if w.is_empty() {
                break;
            }
            i += w.chars().count();
            segs.push(w);
            let sep: String = words[i..].iter().take(2).collect();
            if sep != "::" {
                break;
            }
            i += 2;
        }
        if segs.len() > 1 && matches!(segs[0].as_str(), "crate" | "super" | "self") {
            out.push(segs);
        }
        if i == start {
            i += 1;
        }
    }
    out
}

fn find_word(s: &str, w: &str) -> Option<usize> {
    let b = s.as_bytes();
    let mut from = 0;
    while let Some(k) = s[from..].find(w) {
        let at = from + k;
        let before = at.checked_sub(1).map(|j| b[j]);
        let after = b.get(at + w.len()).copied();
        let ident = |x: Option<u8>| x.is_some_and(|x| x.is_ascii_alphanumeric() || x == b'_');
        if !ident(before) && !ident(after) {
            return Some(at);
        }
        from = at + w.len();
    }
    None
}

/// The leaves of a use tree (`crate::a::{b, c::{d, e as f}, self}`), as paths.
fn expand_use(tree: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let head: Vec<String> = split_path(&tree[..open]);
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let n = prefix.len();
        prefix.extend(head);
        for part in split_top_level(inner) {
            expand_use(&part, prefix, out);
        }
        prefix.truncate(n);
    } else {
        let leaf = tree.split(" as ").next().unwrap_or(tree);
        let mut p = prefix.clone();
        let top = p.is_empty();
        p.extend(split_path(leaf).into_iter().filter(|s| s != "self" || top));
        if p.first()
            .is_some_and(|s| matches!(s.as_str(), "crate" | "super" | "self"))
        {
            out.push(p);
        }
    }
}

fn split_path(s: &str) -> Vec<String> {
    s.split("::")
        .map(|x| x.trim().to_string())
        .filter(|x| !x.is_empty() && x != "*")
        .collect()
}

fn split_top_level(s: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let (mut depth, mut cur) = (0, String::new());
    for ch in s.chars() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(ch);
    }
    parts.push(cur);
    parts.into_iter().filter(|p| !p.trim().is_empty()).collect()
}

/// A path as written in `module`, made absolute (`super::x` in pool::engine is pool::x).
fn absolute(module: &[String], path: &[String]) -> Vec<String> {
    let mut at: Vec<String> = match path[0].as_str() {
        "crate" => Vec::new(),
        _ => module.to_vec(),
    };
    let mut rest = &path[1..];
    if path[0] == "super" {
        at.pop();
    }
    while rest.first().is_some_and(|s| s == "super") {
        at.pop();
        rest = &rest[1..];
    }
    at.extend(rest.iter().cloned());
    at
}

/// One import between two modules of the same folder (`folder` empty: top-level modules).
#[derive(Debug, Clone)]
struct Edge {
    folder: Vec<String>,
    from: String,
    to: String,
    /// The file and the path that make it.
    why: String,
}

/// Every import between sibling modules, from files that are not tests.
fn edges(sources: &[Source]) -> Vec<Edge> {
    let modules: BTreeSet<Vec<String>> = sources.iter().map(|s| s.module.clone()).collect();
    let mut tests: BTreeSet<Vec<String>> = BTreeSet::new();
    let mut kept = Vec::new();
    for s in sources {
        let (code, test_files) = without_tests(&code_only(&s.text));
        for t in test_files {
            let mut m = s.module.clone();
            m.push(t);
            tests.insert(m);
        }
        kept.push((s, code));
    }
    // One edge per (folder, from, to): the first path that makes it explains it.
    let mut out: BTreeMap<(Vec<String>, String, String), Edge> = BTreeMap::new();
    for (s, code) in kept {
        if tests.iter().any(|t| s.module.starts_with(t)) {
            continue;
        }
        for path in named_paths(&code) {
            let to = absolute(&s.module, &path);
            let k = s.module.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if k >= s.module.len() || k >= to.len() {
                continue;
            }
            let sibling = to[..=k].to_vec();
            if !modules.contains(&sibling) {
                continue; // an item of the parent module, not a module
            }
            let (folder, from) = (s.module[..k].to_vec(), s.module[k].clone());
            out.entry((folder.clone(), from.clone(), to[k].clone()))
                .or_insert_with(|| Edge {
                    folder,
                    from,
                    to: to[k].clone(),
                    why: format!("{} names {}", s.file, path.join("::")),
                });
        }
    }
    out.into_values().collect()
}

/// The layering line of docs/layout.md: the first paragraph with an arrow, layers split
/// by `→`, modules by `,`.
fn layers(doc: &str) -> Vec<Vec<String>> {
    let para: Vec<&str> = doc
        .split("\n\n")
        .find(|p| p.contains('→'))
        .expect("docs/layout.md has a layering line (modules joined by →)")
        .lines()
        .collect();
    para.join(" ")
        .split('→')
        .map(|layer| {
            layer
                .split(',')
                .map(|m| m.trim().trim_matches('`').to_string())
                .filter(|m| !m.is_empty())
                .collect()
        })
        .collect()
}

/// What breaks the rules, one line each.
fn violations(sources: &[Source], layers: &[Vec<String>]) -> Vec<String> {
    let mut bad = Vec::new();
    let layer_of: BTreeMap<&str, usize> = layers
        .iter()
        .enumerate()
        .flat_map(|(i, l)| l.iter().map(move |m| (m.as_str(), i)))
        .collect();
    let top: BTreeSet<&str> = sources
        .iter()
        .filter_map(|s| s.module.first().map(String::as_str))
        .collect();
    for m in &top {
        if !layer_of.contains_key(m) {
            bad.push(format!(
                "module {m} is not on the layering line of docs/layout.md"
            ));
        }
    }
    for m in layer_of.keys() {
        if !top.contains(m) {
            bad.push(format!(
                "the layering line names {m}, which is no module of src/"
            ));
        }
    }
    let all = edges(sources);
    for e in all.iter().filter(|e| e.folder.is_empty()) {
        if let (Some(&f), Some(&t)) = (layer_of.get(e.from.as_str()), layer_of.get(e.to.as_str())) {
            if t >= f {
                bad.push(format!(
                    "{} imports {}, which is not in a layer left of it ({})",
                    e.from, e.to, e.why
                ));
            }
        }
    }
    let mut folders: BTreeMap<&[String], Vec<&Edge>> = BTreeMap::new();
    for e in all.iter().filter(|e| !e.folder.is_empty()) {
        folders.entry(&e.folder).or_default().push(e);
    }
    for (folder, es) in folders {
        if let Some(cycle) = find_cycle(&es) {
            let why: Vec<&str> = cycle.iter().map(|e| e.why.as_str()).collect();
            bad.push(format!(
                "cycle between the files of src/{}/: {}",
                folder.join("/"),
                why.join("; ")
            ));
        }
    }
    bad
}

/// A cycle among the edges of one folder, as the edges that make it.
fn find_cycle<'a>(es: &[&'a Edge]) -> Option<Vec<&'a Edge>> {
    let nodes: BTreeSet<&str> = es.iter().map(|e| e.from.as_str()).collect();
    for start in nodes {
        // Depth-first from `start`, looking for a way back to it.
        let mut stack: Vec<(&str, Vec<&Edge>)> = vec![(start, Vec::new())];
        let mut seen = BTreeSet::new();
        while let Some((at, trail)) = stack.pop() {
            for e in es.iter().filter(|e| e.from == at) {
                let mut t = trail.clone();
                t.push(e);
                if e.to == start {
                    return Some(t);
                }
                if seen.insert(e.to.as_str()) {
                    stack.push((e.to.as_str(), t));
                }
            }
        }
    }
    None
}

#[test]
fn top_level_modules_keep_their_layers_and_folders_have_no_cycle() {
    let doc = std::fs::read_to_string(root().join("docs/layout.md")).unwrap();
    let bad = violations(&sources(), &layers(&doc));
    assert!(bad.is_empty(), "\n{}", bad.join("\n"));
}

fn fake(files: &[(&str, &str)]) -> Vec<Source> {
    files
        .iter()
        .map(|(rel, text)| Source {
            file: format!("src/{rel}"),
            module: module_of(rel),
            text: text.to_string(),
        })
        .collect()
}

#[test]
fn the_checker_sees_layer_violations_cycles_and_missing_modules() {
    let line = layers("Intro.\n\n`a`, b → `c`\n→ d\n\nMore.");
    assert_eq!(line, [vec!["a", "b"], vec!["c"], vec!["d"]]);
    let ok = fake(&[
        ("lib.rs", "pub mod a; pub mod b; pub mod c; pub mod d;"),
        ("a.rs", "pub struct A;"),
        (
            "b.rs",
            "// crate::d::D in a comment\nconst S: &str = \"crate::d::D\";",
        ),
        ("c/mod.rs", "mod x; mod y; use crate::{a::A, b};"),
        ("c/x.rs", "use super::y::Y; fn f() -> super::C { todo!() }"),
        (
            "c/y.rs",
            "pub struct Y;\n#[cfg(test)]\nmod tests { use super::super::x; }",
        ),
        ("d.rs", "fn f() { let _ = crate::c::C; }"),
    ]);
    assert_eq!(violations(&ok, &line), Vec::<String>::new());
    let bad = fake(&[
        ("lib.rs", "pub mod a; pub mod c; pub mod e;"),
        ("a.rs", "use crate::c::{self, C};"),
        ("c/mod.rs", "mod x; mod y;"),
        ("c/x.rs", "use super::y::Y;"),
        ("c/y.rs", "pub(crate) use crate::c::x::{X as Z};"),
        ("e.rs", ""),
    ]);
    let found = violations(&bad, &line);
    let want = [
        "module e is not on the layering line",
        "names b, which is no module",
        "names d, which is no module",
        "a imports c, which is not in a layer left of it (src/a.rs names crate::c",
        "cycle between the files of src/c/: src/c/x.rs names super::y::Y; src/c/y.rs names crate::c::x::X",
    ];
    for w in want {
        assert!(
            found.iter().any(|f| f.contains(w)),
            "{w:?} not in {found:#?}"
        );
    }
    assert_eq!(found.len(), want.len(), "{found:#?}");
}

/// The components docs/layout.md lists under "The pool's components": (struct, file).
fn components(doc: &str) -> Vec<(String, String)> {
    let Some(at) = doc.find("## The pool's components") else {
        return Vec::new();
    };
    let section = &doc[at..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    section
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let tick = |c: &str| {
                c.strip_prefix('`')
                    .and_then(|c| c.strip_suffix('`'))
                    .map(str::to_string)
            };
            Some((tick(cells.get(1)?)?, tick(cells.get(2)?)?))
        })
        .collect()
}

/// The fields of `struct name` in `code` (comments and literals already stripped) that
/// are not private, by their text.
fn open_fields(code: &str, name: &str) -> Result<Vec<String>, String> {
    let key = format!("struct {name}");
    let start = find_word(code, &key).ok_or_else(|| format!("no {key}"))?;
    let mut rest = &code[start + key.len()..];
    // Its generics first: a `(` or `;` in them (`F: Fn(u8)`) is not the body.
    if rest.trim_start().starts_with('<') {
        let at = rest.find('<').unwrap_or(0);
        rest = &rest[at + close_of_angles(&rest[at..]).ok_or("unclosed generics")?..];
    }
    let open = rest
        .find(['{', '(', ';'])
        .ok_or_else(|| format!("{key} has no body"))?;
    if rest.as_bytes()[open] == b';' {
        return Ok(Vec::new());
    }
    let mut depth = 0;
    let mut end = open;
    for (i, c) in rest[open..].char_indices() {
        match c {
            '{' | '(' | '[' => depth += 1,
            '}' | ')' | ']' => {
                depth -= 1;
                if depth == 0 {
                    end = open + i;
                    break;
                }
            }
            _ => {}
        }
    }
    let body = &rest[open + 1..end];
    // Fields at the top level of the body, split on commas outside brackets (the `>` of
    // an `->` closes nothing).
    let mut fields = Vec::new();
    let (mut depth, mut from, mut prev) = (0, 0, ' ');
    for (i, c) in body.char_indices() {
        match c {
            '<' | '(' | '[' | '{' => depth += 1,
            '>' if prev == '-' => {}
            '>' | ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                fields.push(body[from..i].to_string());
                from = i + 1;
            }
            _ => {}
        }
        prev = c;
    }
    fields.push(body[from..].to_string());
    Ok(fields
        .iter()
        .map(|f| without_attributes(f).trim().to_string())
        .filter(|f| {
            f.strip_prefix("pub")
                .is_some_and(|r| !r.starts_with(|c: char| c.is_alphanumeric() || c == '_'))
        })
        .collect())
}

/// Where the `<…>` that `s` starts with closes (just past its `>`).
fn close_of_angles(s: &str) -> Option<usize> {
    let (mut depth, mut prev) = (0, ' ');
    for (i, c) in s.char_indices() {
        match c {
            '<' => depth += 1,
            '>' if prev == '-' => {}
            '>' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
        prev = c;
    }
    None
}

/// A field's text without its `#[…]` attributes.
fn without_attributes(f: &str) -> String {
    let mut out = String::new();
    let mut rest = f;
    while let Some(at) = rest.find("#[") {
        out.push_str(&rest[..at]);
        let mut depth = 0;
        let mut end = rest.len();
        for (i, c) in rest[at + 1..].char_indices() {
            match c {
                '[' => depth += 1,
                ']' => {
                    depth -= 1;
                    if depth == 0 {
                        end = at + 1 + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

#[test]
fn the_pools_components_keep_their_state_private() {
    let doc = std::fs::read_to_string(root().join("docs/layout.md")).unwrap();
    let list = components(&doc);
    assert!(list.len() >= 10, "the components table: {list:?}");
    let mut bad = Vec::new();
    for (name, file) in &list {
        let text = std::fs::read_to_string(root().join(file))
            .unwrap_or_else(|e| panic!("{file} (for {name}): {e}"));
        match open_fields(&code_only(&text), name) {
            Ok(open) if open.is_empty() => {}
            Ok(open) => bad.push(format!("{name} ({file}) opens {open:?}")),
            Err(e) => bad.push(format!("{file}: {e}")),
        }
    }
    assert!(bad.is_empty(), "\n{}", bad.join("\n"));
}

#[test]
fn the_field_checker_sees_open_fields() {
    let code = "pub(super) struct A {\n    a: Vec<(u32, u64)>,\n    pub(super) b: [u8; 2],\n}\n\
                struct B(pub Arc<X>);\nstruct C(Arc<X>);\nstruct D;";
    assert_eq!(open_fields(code, "A").unwrap(), ["pub(super) b: [u8; 2]"]);
    assert_eq!(open_fields(code, "B").unwrap(), ["pub Arc<X>"]);
    assert!(open_fields(code, "C").unwrap().is_empty());
    assert!(open_fields(code, "D").unwrap().is_empty());
    assert!(open_fields(code, "E").is_err());
    // Attributes, a field named `public`, an `->` in a type, generics with parentheses.
    let code = "struct F<G: Fn(u8) -> u8> {\n    public: u8,\n    f: Box<dyn Fn(u8) -> u8>,\n\
                #[cfg(test)]\n    pub(crate) g: G,\n}";
    assert_eq!(open_fields(code, "F").unwrap(), ["pub(crate) g: G"]);
    let doc = "# T\n\n## The pool's components\n\n| Component | File | Owns |\n|---|---|---|\n\
               | `A` | `src/a.rs` | it |\n\n## Next\n\n| `Z` | `src/z.rs` | no |\n";
    assert_eq!(components(doc), [("A".to_string(), "src/a.rs".to_string())]);
}

/// Where the pool's code names the store's PostgreSQL backend: a word `postgres`,
/// `Postgres` or `PgTarget` in code (not in comments or strings), whatever the path to it
/// (an import, a full path, a match on `Store::Postgres`), or a glob of the store, which
/// would bring the backend's names in unseen. A fleet's database is reached through
/// `store::FleetLink` only.
fn backend_reaches(sources: &[Source]) -> Vec<String> {
    const NAMES: [&str; 3] = ["postgres", "Postgres", "PgTarget"];
    let mut out = BTreeSet::new();
    for s in sources
        .iter()
        .filter(|s| s.module.first().is_some_and(|m| m == "pool"))
    {
        let code = code_only(&s.text);
        let words = code.split(|c: char| !(c.is_alphanumeric() || c == '_'));
        for w in words.filter(|w| NAMES.contains(w)) {
            out.insert(format!("{} names {w}", s.file));
        }
        let squeezed: String = code.chars().filter(|c| !c.is_whitespace()).collect();
        if squeezed.contains("store::*") || squeezed.contains("store::{*") {
            out.insert(format!("{} imports all of the store", s.file));
        }
    }
    out.into_iter().collect()
}

#[test]
fn the_pool_reaches_a_fleets_database_only_through_its_link() {
    let bad = backend_reaches(&sources());
    assert!(bad.is_empty(), "\n{}", bad.join("\n"));
    // The check itself: an import, a full path, a match on the store's variant, a glob
    // (one file each); a comment and a string are not code.
    let cases = [
        ("pool/a.rs", "use crate::store::postgres::Feed;"),
        ("pool/b.rs", "fn f(p: crate::store::PgTarget) {}"),
        (
            "pool/c.rs",
            "fn f(s: &Store) { if let Store::Postgres(pg) = s {} }",
        ),
        ("pool/d.rs", "use crate::store::*;"),
        ("pool/e.rs", "// Postgres\nconst A: &str = \"postgres\";"),
        ("server/f.rs", "use crate::store::Postgres;"),
    ];
    let found = backend_reaches(&fake(&cases));
    let files: BTreeSet<&str> = found.iter().map(|f| &f[4..10]).collect();
    assert_eq!(
        files,
        BTreeSet::from(["pool/a", "pool/b", "pool/c", "pool/d"]),
        "{found:?}"
    );
}
