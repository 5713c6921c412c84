//! Source comments point at the project's own docs: every `docs/NAME.md` a file under
//! `src/`, `tests/` or `benches/` names exists, and so does every section it names
//! (`docs/destinations.md, "Pairs"` is a heading of that page); no comment points at the
//! product specification by section number, which is not in the repository.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs" || x == "sh") {
            out.push(p);
        }
    }
}

/// The file's text with comment markers gone, so a reference that wraps onto the next
/// comment line reads as one.
fn joined(text: &str) -> String {
    text.lines()
        .map(|l| {
            let t = l.trim_start();
            ["//!", "///", "//", "#"]
                .iter()
                .find_map(|m| t.strip_prefix(m))
                .unwrap_or(t)
                .trim()
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `(page, section)` for each `docs/PAGE.md` named, with the `"Section"` after it if any.
fn references(text: &str) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("docs/") {
        rest = &rest[at + 5..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_' || *c == '.')
            .collect();
        let Some(page) = name
            .strip_suffix(".md")
            .or_else(|| name.strip_suffix(".md."))
        else {
            continue;
        };
        let after = rest[name.len()..].trim_start();
        let section = after
            .strip_prefix(',')
            .map(str::trim_start)
            .and_then(|a| a.strip_prefix('"'))
            .and_then(|a| a.split_once('"'))
            .map(|(s, _)| s.to_string());
        out.push((page.to_string(), section));
    }
    out
}

fn headings(page: &str) -> BTreeSet<String> {
    page.lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|h| h.trim_start_matches('#').trim().to_string())
        .collect()
}

#[test]
fn every_docs_page_and_section_a_comment_names_exists() {
    let mut all = Vec::new();
    for dir in ["src", "tests", "benches"] {
        files(&root().join(dir), &mut all);
    }
    let mut bad = Vec::new();
    let mut seen = 0;
    for f in &all {
        let shown = f.strip_prefix(root()).unwrap().display().to_string();
        if shown == "tests/source_refs.rs" {
            continue; // its examples are not references
        }
        let text = std::fs::read_to_string(f).unwrap();
        let mut comments = text
            .lines()
            .map(str::trim_start)
            .filter(|l| l.starts_with("//") || l.starts_with('#'));
        if comments.any(|l| l.contains(concat!("SP", "EC §"))) {
            bad.push(format!(
                "{shown} names a section of the product specification: name a docs/*.md \
                 section instead"
            ));
        }
        for (page, section) in references(&joined(&text)) {
            seen += 1;
            let path = root().join("docs").join(format!("{page}.md"));
            let Ok(doc) = std::fs::read_to_string(&path) else {
                bad.push(format!(
                    "{shown} names docs/{page}.md, which does not exist"
                ));
                continue;
            };
            if let Some(s) = section {
                if !headings(&doc).contains(&s) {
                    bad.push(format!(
                        "{shown} names docs/{page}.md, \"{s}\": no such heading"
                    ));
                }
            }
        }
    }
    assert!(bad.is_empty(), "\n{}", bad.join("\n"));
    assert!(
        seen > 20,
        "only {seen} references found: is the reader broken?"
    );
}

#[test]
fn references_are_read_across_comment_lines() {
    let text =
        "/// Scoped as one (docs/destinations.md,\n/// \"The scoping rule\"); see docs/probe.md.";
    assert_eq!(
        references(&joined(text)),
        [
            (
                "destinations".to_string(),
                Some("The scoping rule".to_string())
            ),
            ("probe".to_string(), None),
        ]
    );
}
