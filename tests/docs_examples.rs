//! Every socket answer the README and docs/ show in full comes from a running daemon: the
//! request beside it is sent to a real one and its answer must have the same shape (the
//! same keys, all the way down) and the same values where a value does not vary (states,
//! blame, flags). An answer shown in part is an excerpt and says so with `...` or `…`.
//!
//! A full answer is a line `{"ok":…}` in a code block, after the line that sends its
//! request: `$ printf 'REQUEST\n' | nc -U SOCKET`.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::daemon::Home;
use serde_json::Value;

/// The endpoint the examples lease (they show its URL).
const EXAMPLE_ENDPOINT: &str = "socks5h://alice:secret@10.0.0.5:1080";

/// Fields whose values differ from run to run (ids, times): their presence is checked,
/// not their value.
const VARYING: &[&str] = &["lease", "expires_in_ms", "id"];

fn pages() -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// One example: where it is, the request sent and the answer shown.
struct Example {
    at: String,
    request: Value,
    answer: Value,
}

/// The (request, answer) pairs of a page, and the answer lines that are neither a full
/// example nor marked as an excerpt.
fn examples(page: &PathBuf) -> (Vec<Example>, Vec<String>) {
    let text = std::fs::read_to_string(page).unwrap();
    let name = page.file_name().unwrap().to_string_lossy().to_string();
    let (mut found, mut unmarked) = (Vec::new(), Vec::new());
    let mut request: Option<Value> = None;
    for (n, line) in text.lines().enumerate() {
        let at = format!("{name}:{}", n + 1);
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("$ printf '") {
            let sent = rest.split("\\n'").next().unwrap();
            request = Some(serde_json::from_str(sent).unwrap_or_else(|e| panic!("{at}: {e}")));
            continue;
        }
        let shows_answer = line.contains("{\"ok\":") || line.contains("{\"ok\": ");
        if !shows_answer {
            continue;
        }
        if line.contains("...") || line.contains('…') {
            // An excerpt, marked as one.
            continue;
        }
        match (line.starts_with('{'), request.take()) {
            (true, Some(request)) => {
                let answer = serde_json::from_str(line).unwrap_or_else(|e| panic!("{at}: {e}"));
                found.push(Example {
                    at,
                    request,
                    answer,
                });
            }
            _ => unmarked.push(format!("{at}: {line}")),
        }
    }
    (found, unmarked)
}

/// Where `shown` and `real` differ in shape, or in a value that does not vary.
fn differences(path: &str, shown: &Value, real: &Value, out: &mut Vec<String>) {
    match (shown, real) {
        (Value::Object(s), Value::Object(r)) => {
            let keys = |m: &serde_json::Map<String, Value>| {
                m.keys().cloned().collect::<std::collections::BTreeSet<_>>()
            };
            if keys(s) != keys(r) {
                out.push(format!(
                    "{path}: keys {:?}, the daemon's {:?}",
                    keys(s),
                    keys(r)
                ));
                return;
            }
            for (k, v) in s {
                differences(&format!("{path}.{k}"), v, &r[k], out);
            }
        }
        _ if VARYING.iter().any(|v| path.ends_with(&format!(".{v}"))) => {
            // A value that varies: only its type must match.
            if std::mem::discriminant(shown) != std::mem::discriminant(real) {
                out.push(format!("{path}: {shown}, the daemon's {real}"));
            }
        }
        _ => {
            if shown != real {
                out.push(format!("{path}: {shown}, the daemon's {real}"));
            }
        }
    }
}

#[test]
fn every_full_socket_answer_in_the_docs_is_the_daemons() {
    let mut all = Vec::new();
    let mut unmarked = Vec::new();
    for page in pages() {
        let (found, loose) = examples(&page);
        all.extend(found);
        unmarked.extend(loose);
    }
    assert!(
        unmarked.is_empty(),
        "answers shown without their request and not marked as excerpts (`...`):\n{}",
        unmarked.join("\n")
    );
    assert!(all.len() >= 4, "the examples were not found: {}", all.len());
    let mut wrong = Vec::new();
    for group in by_page(all) {
        // Each page's examples run in order against a daemon of their own, whose one
        // endpoint is the one they show; a lease id shown is the one the daemon gave.
        let h = Home::new(None);
        let d = h.serve();
        h.add(&[EXAMPLE_ENDPOINT]);
        let mut leases: BTreeMap<String, String> = BTreeMap::new();
        for ex in group {
            let mut request = ex.request.clone();
            if let Some(shown) = request["lease"].as_str() {
                let real = leases
                    .get(shown)
                    .unwrap_or_else(|| panic!("{}: lease {shown} was not granted", ex.at));
                request["lease"] = Value::from(real.as_str());
            }
            let real = d.req(request);
            if let (Some(shown), Some(got)) = (ex.answer["lease"].as_str(), real["lease"].as_str())
            {
                leases.insert(shown.to_string(), got.to_string());
            }
            let mut diff = Vec::new();
            differences("answer", &ex.answer, &real, &mut diff);
            if !diff.is_empty() {
                wrong.push(format!("{}: {}\n  real: {real}", ex.at, diff.join("; ")));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The examples of each page together, in order.
fn by_page(all: Vec<Example>) -> Vec<Vec<Example>> {
    let mut pages: BTreeMap<String, Vec<Example>> = BTreeMap::new();
    for ex in all {
        let page = ex.at.split(':').next().unwrap().to_string();
        pages.entry(page).or_default().push(ex);
    }
    pages.into_values().collect()
}
