//! The user documentation stays self-contained and complete: no link leaves the
//! repository, and `docs/reference.md` names every command, flag, socket op, event kind,
//! reason and phase the code defines.

use std::path::{Path, PathBuf};

use clap::CommandFactory;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// `](target)` link targets of a markdown text.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        if let Some(j) = rest.find(')') {
            out.push(rest[..j].to_string());
            rest = &rest[j..];
        }
    }
    out
}

#[test]
fn every_link_of_the_readme_and_docs_stays_in_the_repository() {
    let root = root().canonicalize().unwrap();
    let mut pages = vec![PathBuf::from("README.md")];
    for e in std::fs::read_dir(root.join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            pages.push(p.strip_prefix(&root).unwrap().to_path_buf());
        }
    }
    for page in pages {
        let text = read(page.to_str().unwrap());
        let dir = root.join(&page).parent().unwrap().to_path_buf();
        for link in links(&text) {
            assert!(
                !link.contains("://"),
                "{}: link {link:?} leaves the repository",
                page.display()
            );
            let file = link.split('#').next().unwrap();
            if file.is_empty() {
                continue;
            }
            let target = dir.join(file);
            let target = target
                .canonicalize()
                .unwrap_or_else(|_| panic!("{}: link {link:?} points nowhere", page.display()));
            assert!(
                target.starts_with(&root),
                "{}: link {link:?} leaves the repository",
                page.display()
            );
        }
    }
}

#[test]
fn the_reference_names_every_command_flag_op_kind_reason_and_phase() {
    let reference = read("docs/reference.md");
    let has = |what: &str, name: &str| {
        assert!(
            ["`", " ", "["]
                .iter()
                .any(|before| reference.contains(&format!("{before}{name}"))),
            "docs/reference.md does not mention the {what} {name:?}"
        );
    };
    let cli = proxypool::cli::Cli::command();
    for arg in cli.get_arguments() {
        if let Some(l) = arg.get_long() {
            has("global flag", &format!("--{l}"));
        }
    }
    for sub in cli.get_subcommands() {
        has("command", sub.get_name());
        for arg in sub.get_arguments() {
            if let Some(l) = arg.get_long() {
                has(&format!("flag of {}", sub.get_name()), &format!("--{l}"));
            }
        }
    }
    for op in proxypool::protocol::OPS {
        has("socket op", op);
    }
    for k in proxypool::event_kind::EventKind::ALL {
        has("event kind", k.as_str());
    }
    for r in proxypool::health::Reason::ALL {
        has("reason", r.as_str());
    }
    for p in proxypool::health::Phase::ALL {
        has("phase", p.as_str());
    }
    assert!(Path::new(&root().join("contrib/proxypool.service")).is_file());
}

#[test]
fn the_readme_starts_with_the_two_commands_and_names_what_a_machine_needs() {
    let readme = read("README.md");
    let first_block = readme.split("```").nth(1).unwrap();
    assert!(
        first_block.contains("cargo run --release -- serve"),
        "{first_block}"
    );
    assert!(first_block.contains("cargo test"), "{first_block}");
    let version = read("Cargo.toml")
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .unwrap()
        .trim_matches('"')
        .to_string();
    assert!(
        readme.contains(&format!("Rust {version}")),
        "README does not name Rust {version}"
    );
    assert!(readme.contains("C compiler"));
    assert!(readme.contains("cargo install --path ."));
}
