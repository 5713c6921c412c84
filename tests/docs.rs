//! The user documentation stays self-contained and complete: no link leaves the
//! repository, and each name the code defines is documented where a reader looks it up
//! — a command in the command tables, a flag in its command's row, a config key in its
//! section's table, an op and its request fields in the ops table, an error code, event
//! kind, state, reason and phase in their tables, a metric in the metric lists, a stored
//! column in the storage table, a test file in docs/testing.md. A name that merely occurs
//! somewhere in a page does not count.
//!
//! The names come from the code itself: clap's command definition, the serde shapes'
//! own "expected one of" lists (the config file and the socket reject unknown keys, and
//! say which they know), the `ALL` lists of the enums, a registry with every metric
//! family, and the schema of a freshly migrated database.

mod common;

use std::path::PathBuf;

use clap::CommandFactory;
use common::markdown::{code_spans, has_flag, section, sections, serde_expected, table, Section};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

const REFERENCE: &str = "docs/reference.md";

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

fn pages() -> Vec<PathBuf> {
    let root = root().canonicalize().unwrap();
    let mut pages = vec![PathBuf::from("README.md"), PathBuf::from("BENCHMARKS.md")];
    for e in std::fs::read_dir(root.join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            pages.push(p.strip_prefix(&root).unwrap().to_path_buf());
        }
    }
    pages
}

#[test]
fn every_link_of_the_readme_and_docs_stays_in_the_repository() {
    let root = root().canonicalize().unwrap();
    for page in pages() {
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
fn no_file_points_at_a_document_outside_the_repository() {
    // Every text file of the repository (docs, code and its comments, migrations, clients,
    // scripts), this file aside: it names what it looks for.
    fn walk(dir: &std::path::Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if p.is_dir() {
                if !name.starts_with('.') && name != "target" && name != "node_modules" {
                    walk(&p, out);
                }
            } else {
                out.push(p);
            }
        }
    }
    let root = root().canonicalize().unwrap();
    let mut files = Vec::new();
    walk(&root, &mut files);
    let this = root.join(file!().trim_start_matches("./"));
    assert!(
        files.len() > 100,
        "only {} files under {}",
        files.len(),
        root.display()
    );
    for f in files.iter().filter(|f| **f != this) {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue; // not text
        };
        for (n, line) in text.lines().enumerate() {
            assert!(
                !line.contains("SPEC §")
                    && !line.contains("SPEC.md")
                    && !line.contains("../shared"),
                "{}:{}: points at a document outside the repository: {line}",
                f.strip_prefix(&root).unwrap().display(),
                n + 1
            );
        }
    }
}

#[test]
fn every_command_is_in_a_command_table_with_each_of_its_flags_in_its_row() {
    let reference = read(REFERENCE);
    let cli = proxypool::cli::Cli::command();

    let global = table(
        REFERENCE,
        &section(REFERENCE, &reference, "Global options"),
        "option",
    );
    for arg in cli.get_arguments() {
        if let Some(l) = arg.get_long() {
            let flag = format!("--{l}");
            assert!(
                global.rows.iter().any(|r| has_flag(&r[0], &flag)),
                "{REFERENCE}: the global option {flag} is not in the \"Global options\" table"
            );
        }
    }

    let commands = section(REFERENCE, &reference, "Command line");
    let command_tables: Vec<_> = common::markdown::tables(&commands.all)
        .into_iter()
        .filter(|t| t.header.first().is_some_and(|h| h == "command"))
        .collect();
    assert!(!command_tables.is_empty(), "{REFERENCE}: no command table");
    let mut seen = 0;
    for sub in cli.get_subcommands() {
        let name = sub.get_name();
        let row = command_tables
            .iter()
            .find_map(|t| t.row(name))
            .unwrap_or_else(|| {
                panic!("{REFERENCE}: no row of a command table under \"Command line\" starts with `{name}`")
            });
        seen += 1;
        for arg in sub.get_arguments() {
            if let Some(l) = arg.get_long() {
                let flag = format!("--{l}");
                assert!(
                    has_flag(&row[0], &flag),
                    "{REFERENCE}: the row of `{name}` does not list its flag {flag}: {:?}",
                    row[0]
                );
            }
        }
    }
    assert!(
        seen > 10,
        "only {seen} commands found: is this the right CLI?"
    );
}

/// The keys a section of the config file accepts, from the parser's own error for an
/// unknown key placed in it.
fn config_keys(toml_prefix: &str) -> Vec<String> {
    let text = format!("{toml_prefix}zz_not_a_key = 1\n");
    let err = proxypool::config::Config::parse(&text, "docs.toml", None)
        .err()
        .unwrap_or_else(|| panic!("an unknown key was accepted in {text:?}"))
        .to_string();
    let keys = serde_expected(err.lines().last().unwrap_or(""));
    assert!(
        !keys.is_empty(),
        "no list of known keys in the error for {text:?}: {err}"
    );
    keys
}

/// The section whose heading names the config table `name` (`` `[store]` ``, `` `[[pool]]` ``).
fn config_section(all: &[Section], name: &str) -> Option<Section> {
    all.iter()
        .find(|s| {
            s.title.contains(&format!("`[{name}]`")) || s.title.contains(&format!("`[[{name}]]`"))
        })
        .cloned()
}

#[test]
fn every_config_key_is_in_the_table_of_its_section() {
    let reference = read(REFERENCE);
    let all = sections(&reference);
    // (the table as the reference names it, TOML that opens it)
    let tables = [
        ("", ""),
        ("store", "[store]\n"),
        ("server", "[server]\n"),
        ("pool", "[[pool]]\nname = \"default\"\n"),
        ("pool.probe", "[[pool]]\nname = \"default\"\n[pool.probe]\n"),
        (
            "pool.cooldown",
            "[[pool]]\nname = \"default\"\n[pool.cooldown]\n",
        ),
        (
            "pool.cooldown.reasons.REASON",
            "[[pool]]\nname = \"default\"\n[pool.cooldown.reasons.operator]\n",
        ),
        (
            "pool.source",
            "[[pool]]\nname = \"default\"\nmode = \"sniffing\"\n[[pool.source]]\nkind = \"file\"\n",
        ),
        ("pool.pace", "[[pool]]\nname = \"default\"\n[pool.pace]\n"),
        ("pool.exit", "[[pool]]\nname = \"default\"\n[pool.exit]\n"),
        (
            "pool.pace.site",
            "[[pool]]\nname = \"default\"\n[[pool.pace.site]]\nhost = \"a\"\n",
        ),
        ("endpoint", "[[endpoint]]\n"),
        ("gateway", "[[gateway]]\n"),
        ("tls", "[tls]\n"),
        ("ban", "[[ban]]\n"),
    ];
    for (name, prefix) in tables {
        let keys = config_keys(prefix);
        let sec = (!name.is_empty()).then(|| {
            config_section(&all, name)
                .unwrap_or_else(|| panic!("{REFERENCE}: no heading names `[{name}]`"))
        });
        for key in keys {
            let dotted = if name.is_empty() {
                key.clone()
            } else {
                format!("{name}.{key}")
            };
            // A key that is a table of its own has its own heading.
            let own_heading = all.iter().any(|s| {
                let t = &s.title;
                t.contains(&format!("`[{dotted}]`"))
                    || t.contains(&format!("`[[{dotted}]]`"))
                    || t.contains(&format!("`[{dotted}."))
            });
            if own_heading {
                continue;
            }
            let sec = sec.as_ref().unwrap_or_else(|| {
                panic!("{REFERENCE}: the top-level table `{key}` has no heading")
            });
            let rows = common::markdown::tables(&sec.own)
                .into_iter()
                .filter(|t| t.header.first().is_some_and(|h| h == "key"))
                .collect::<Vec<_>>();
            assert!(
                rows.iter().any(|t| t.row_naming(&key).is_some()),
                "{REFERENCE}: the key `{key}` of `[{name}]` is not in the key table of section {:?}",
                sec.title
            );
        }
    }
}

#[test]
fn every_socket_op_and_request_field_is_in_the_ops_table() {
    let reference = read(REFERENCE);
    let ops = table(REFERENCE, &section(REFERENCE, &reference, "Ops"), "op");
    for op in proxypool::protocol::OPS {
        let row = ops
            .row(op)
            .unwrap_or_else(|| panic!("{REFERENCE}: the op `{op}` is not in the ops table"));
        let line = format!(r#"{{"op":"{op}","zz_not_a_field":1}}"#);
        let fields = match proxypool::protocol::parse_line(&line) {
            // An op without fields ignores extra ones.
            Ok(_) => Vec::new(),
            Err(resp) => {
                let text = serde_json::to_string(&*resp).unwrap();
                let v: serde_json::Value = serde_json::from_str(&text).unwrap();
                let msg = v["error"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                assert!(
                    msg.contains("zz_not_a_field"),
                    "{line}: not refused for its unknown field: {text}"
                );
                serde_expected(&msg)
            }
        };
        let documented = code_spans(&row[1]);
        for f in fields {
            assert!(
                documented.contains(&f),
                "{REFERENCE}: the request field `{f}` of `{op}` is not in its row of the ops table: {:?}",
                row[1]
            );
        }
    }
}

#[test]
fn every_error_code_is_in_the_error_table() {
    let reference = read(REFERENCE);
    let errors = table(REFERENCE, &section(REFERENCE, &reference, "Errors"), "code");
    let err = serde_json::from_str::<proxypool::protocol::ErrorCode>("\"zz_not_a_code\"")
        .unwrap_err()
        .to_string();
    let codes = serde_expected(&err);
    assert!(codes.len() > 5, "no list of error codes in {err:?}");
    for code in codes {
        assert!(
            errors.row(&code).is_some(),
            "{REFERENCE}: the error code `{code}` is not in the error table"
        );
    }
}

#[test]
fn every_event_kind_state_reason_and_phase_is_in_its_table() {
    let reference = read(REFERENCE);
    let kinds = table(REFERENCE, &section(REFERENCE, &reference, "Events"), "kind");
    for k in proxypool::event_kind::EventKind::ALL {
        assert!(
            kinds.row_naming(k.as_str()).is_some(),
            "{REFERENCE}: the event kind `{}` is not in the events table",
            k.as_str()
        );
    }
    let states = table(
        REFERENCE,
        &section(REFERENCE, &reference, "States"),
        "state",
    );
    for s in proxypool::health::State::ALL {
        assert!(
            states.row(s.as_str()).is_some(),
            "{REFERENCE}: the state `{}` is not in the states table",
            s.as_str()
        );
    }
    let reasons = table(
        REFERENCE,
        &section(REFERENCE, &reference, "Reasons"),
        "reason",
    );
    for r in proxypool::health::Reason::ALL {
        assert!(
            reasons.row(r.as_str()).is_some(),
            "{REFERENCE}: the reason `{}` is not in the reasons table",
            r.as_str()
        );
    }
    let phases = table(
        REFERENCE,
        &section(REFERENCE, &reference, "Phases"),
        "phase",
    );
    for p in proxypool::health::Phase::ALL {
        assert!(
            phases.row(p.as_str()).is_some(),
            "{REFERENCE}: the phase `{}` is not in the phases table",
            p.as_str()
        );
    }
}

/// Every metric family, by name, with a series in each: `Metrics::pool` and `gateway`
/// create their series at 0; transitions and failure reasons appear on first use.
fn metric_families() -> Vec<String> {
    use proxypool::health::{Reason, State};
    use proxypool::metrics::{GaugeSnapshot, Metrics};
    let m = Metrics::new();
    assert!(m.set_gauge_source(Box::new(|| {
        GaugeSnapshot::count_states(&["default".to_string()], [(0, State::Available)])
    })));
    let p = m.pool("default");
    p.transition(
        State::Available,
        State::Cooling,
        Some(Reason::ConnectRefused),
    );
    p.report_failure(Reason::ConnectRefused);
    let _gateway = m.gateway();
    let _bans = m.ban_rules(["rule"].into_iter());
    let text = m.encode();
    let names: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .map(str::to_string)
        .collect();
    assert!(names.len() > 10, "few metric families in\n{text}");
    names
}

/// Whether `text` has a code span that is `name` or `name{labels}`.
fn names_metric(text: &str, name: &str) -> bool {
    code_spans(text).iter().any(|c| {
        c == name
            || c.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{'))
    })
}

#[test]
fn every_metric_is_in_the_metric_lists_with_its_label_values() {
    use proxypool::metrics::{Direction, GatewayOutcome, GatewayProtocol, LeaseResult};
    let reference = read(REFERENCE);
    let listener = section(
        REFERENCE,
        &reference,
        "HTTP listener: metrics, status page, API",
    );
    let obs_page = "docs/observability.md";
    let observability = read(obs_page);
    let obs = table(
        obs_page,
        &section(obs_page, &observability, "Metrics"),
        "metric",
    );
    let gw_page = "docs/gateway.md";
    let gateway = read(gw_page);
    let gw = section(gw_page, &gateway, "Metrics");
    let states: Vec<&str> = proxypool::health::State::ALL
        .iter()
        .map(|s| s.as_str())
        .collect();
    let values: Vec<(&str, Vec<&str>)> = vec![
        ("proxypool_endpoints", states),
        (
            "proxypool_leases_total",
            LeaseResult::ALL.iter().map(|v| v.as_str()).collect(),
        ),
        (
            "proxypool_gateway_requests_total",
            GatewayProtocol::ALL
                .iter()
                .map(|v| v.as_str())
                .chain(GatewayOutcome::ALL.iter().map(|v| v.as_str()))
                .collect(),
        ),
        (
            "proxypool_gateway_bytes_total",
            Direction::ALL.iter().map(|v| v.as_str()).collect(),
        ),
    ];
    for name in metric_families() {
        assert!(
            names_metric(&listener.all, &name),
            "{REFERENCE}: the metric `{name}` is not in the metrics list of {:?}",
            listener.title
        );
        let row = obs.row(&name).unwrap_or_else(|| {
            panic!("{obs_page}: the metric `{name}` is not in the metrics table")
        });
        if let Some((_, vals)) = values.iter().find(|(n, _)| *n == name) {
            let spans = code_spans(&row.join(" | "));
            for v in vals {
                assert!(
                    spans.iter().any(|s| s == v),
                    "{obs_page}: the row of `{name}` does not list the label value `{v}`"
                );
            }
        }
        if name.starts_with("proxypool_gateway_") {
            assert!(
                names_metric(&gw.all, &name),
                "{gw_page}: the gateway metric `{name}` is not in its \"Metrics\" section"
            );
        }
    }
}

#[test]
fn every_stored_table_and_column_is_in_the_storage_table() {
    let reference = read(REFERENCE);
    let storage = table(
        REFERENCE,
        &section(REFERENCE, &reference, "Storage"),
        "table",
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("docs.db");
    drop(proxypool::store::Store::open(&path).unwrap());
    let db = rusqlite::Connection::open(&path).unwrap();
    let mut q = db
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        .unwrap();
    let tables: Vec<String> = q
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(tables.len() >= 4, "tables {tables:?}");
    for t in tables {
        let row = storage
            .row(&t)
            .unwrap_or_else(|| panic!("{REFERENCE}: the table `{t}` is not in the storage table"));
        let documented = code_spans(&row[1]);
        let mut q = db.prepare(&format!("PRAGMA table_info({t})")).unwrap();
        let columns: Vec<String> = q
            .query_map([], |r| r.get(1))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        for c in columns {
            assert!(
                documented.contains(&c),
                "{REFERENCE}: the column `{c}` of `{t}` is not in its row of the storage table"
            );
        }
    }
    assert!(root().join("contrib/proxypool.service").is_file());
}

#[test]
fn every_test_file_is_in_the_testing_page() {
    let page = "docs/testing.md";
    let text = read(page);
    let t = table(
        page,
        &section(page, &text, "How the tests are organised"),
        "where",
    );
    let named: Vec<String> = t.rows.iter().flat_map(|r| code_spans(&r[0])).collect();
    assert!(
        named.iter().any(|n| n == "tests/common/"),
        "{page}: the harness `tests/common/` is not in the table"
    );
    for e in std::fs::read_dir(root().join("tests")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "rs") {
            let rel = format!("tests/{}", p.file_name().unwrap().to_str().unwrap());
            assert!(
                named.contains(&rel),
                "{page}: `{rel}` is not in the table of \"How the tests are organised\""
            );
        }
    }
    // And every path named there exists.
    for n in named
        .iter()
        .filter(|n| n.starts_with("tests/") || n.starts_with("benches/"))
    {
        assert!(root().join(n).exists(), "{page}: `{n}` does not exist");
    }
}

#[test]
fn every_benchmark_command_names_a_bench_or_script_that_exists() {
    let cargo = read("Cargo.toml");
    let benches: Vec<String> = cargo
        .split("[[bench]]")
        .skip(1)
        .filter_map(|b| {
            b.lines()
                .find_map(|l| l.trim().strip_prefix("name = "))
                .map(|n| n.trim_matches('"').to_string())
        })
        .collect();
    for page in pages() {
        let text = read(page.to_str().unwrap());
        for (i, _) in text.match_indices("--bench ") {
            let name: String = text[i + 8..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '|')
                .collect();
            // An upper-case word is a placeholder (`--bench NAME`).
            for n in name
                .split('|')
                .filter(|n| !n.is_empty() && n.chars().any(|c| c.is_ascii_lowercase()))
            {
                assert!(
                    benches.iter().any(|b| b == n),
                    "{}: `cargo bench --bench {n}` names no [[bench]] of Cargo.toml",
                    page.display()
                );
            }
        }
        for span in code_spans(&text) {
            for word in span.split_whitespace() {
                let word = word.trim_end_matches([',', ')', ':', ';']);
                if word.starts_with("benches/") && !word.contains('*') {
                    assert!(
                        root().join(word).exists(),
                        "{}: `{word}` does not exist",
                        page.display()
                    );
                }
            }
        }
    }
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

#[test]
fn the_section_finder_and_table_reader_find_what_they_must() {
    let text = "# A\n\n## B\n\n| key | meaning |\n|---|---|\n| `x` | one \\| two |\n\n```sh\n# not a heading\n```\n\n### C\n\ntext\n\n## D\n";
    let all = sections(text);
    let titles: Vec<&str> = all.iter().map(|s| s.title.as_str()).collect();
    assert_eq!(titles, ["A", "B", "C", "D"]);
    let b = &all[1];
    assert!(b.all.contains("text") && !b.own.contains("text"));
    let t = table("t", b, "key");
    assert_eq!(
        t.rows,
        vec![vec!["`x`".to_string(), "one \\| two".to_string()]]
    );
    assert!(t.row("x").is_some() && t.row("y").is_none());
    assert!(has_flag("`--now` and `--pool P`", "--now"));
    assert!(!has_flag("`--nowhere`", "--now"));
    assert_eq!(
        serde_expected("unknown field `z`, expected one of `a`, `b`"),
        ["a", "b"]
    );
    assert_eq!(serde_expected("unknown field `z`, expected `a`"), ["a"]);
}
