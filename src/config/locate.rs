//! Where a key is written in a config file, so that an error names its line: the dotted
//! keys of `ConfigError` (`server.http`, `pool.eu.cooldown`, `gateway[0].token`) looked up
//! in the file's spans, and the key written at a position (for toml's own errors).

use std::ops::Range;

use toml::de::{DeTable, DeValue};

/// The 1-based line and column of byte `offset` of `text`.
pub(super) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// The line of the deepest part of `key` written in `text`: the key itself, else the
/// table it belongs to. `pool.NAME` is the `[[pool]]` whose `name` is NAME.
pub(super) fn line_of(text: &str, key: &str) -> Option<usize> {
    let root = DeTable::parse(text).ok()?;
    let mut span: Option<Range<usize>> = None;
    let mut table: &DeTable<'_> = root.get_ref();
    let mut segments = key.split('.').peekable();
    while let Some(seg) = segments.next() {
        let (name, index) = match seg.split_once('[') {
            Some((n, i)) => (n, i.trim_end_matches(']').parse::<usize>().ok()),
            None => (seg, None),
        };
        let Some(v) = get(table, name) else { break };
        let item = match (v.get_ref(), index) {
            (DeValue::Array(a), Some(i)) => a.get(i),
            // `pool.NAME`: the pool of that name.
            (DeValue::Array(a), None) => {
                let Some(&wanted) = segments.peek() else {
                    span = Some(v.span());
                    break;
                };
                segments.next();
                a.iter().find(|t| match t.get_ref() {
                    DeValue::Table(t) => get(t, "name")
                        .is_some_and(|n| matches!(n.get_ref(), DeValue::String(s) if s == wanted)),
                    _ => false,
                })
            }
            _ => Some(v),
        };
        let Some(item) = item else { break };
        span = Some(item.span());
        match item.get_ref() {
            DeValue::Table(t) => table = t,
            _ => break,
        }
    }
    span.map(|s| line_col(text, s.start).0)
}

/// The dotted key written at byte `offset` (`server.max_connections`,
/// `gateway[1].retries`), when `text` parses as TOML. (A table's span is its header only,
/// so every table is searched for the value there.)
pub(super) fn key_at(text: &str, offset: usize) -> Option<String> {
    let root = DeTable::parse(text).ok()?;
    let mut path = Vec::new();
    find(root.get_ref(), offset, &mut path).then(|| path.join("."))
}

fn find(t: &DeTable<'_>, offset: usize, path: &mut Vec<String>) -> bool {
    let within = |r: Range<usize>| r.start <= offset && offset < r.end.max(r.start + 1);
    for (k, v) in t.iter() {
        let name: &str = k.get_ref();
        match v.get_ref() {
            DeValue::Table(inner) => {
                path.push(name.to_string());
                if find(inner, offset, path) {
                    return true;
                }
                path.pop();
            }
            DeValue::Array(a) if a.iter().any(|x| matches!(x.get_ref(), DeValue::Table(_))) => {
                for (i, x) in a.iter().enumerate() {
                    if let DeValue::Table(inner) = x.get_ref() {
                        path.push(format!("{name}[{i}]"));
                        if find(inner, offset, path) {
                            return true;
                        }
                        path.pop();
                    }
                }
            }
            _ if within(v.span()) || within(k.span()) => {
                path.push(name.to_string());
                return true;
            }
            _ => {}
        }
    }
    false
}

fn get<'a, 'i>(t: &'a DeTable<'i>, name: &str) -> Option<&'a toml::Spanned<DeValue<'i>>> {
    t.iter().find(|(k, _)| k.get_ref() == name).map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"# a config
[store]
path = "pp.db"

[server]
max_connections = 0
http = "127.0.0.1:9464"

[[pool]]
name = "default"

[[pool]]
name = "eu"
mode = "static"

[pool.cooldown]
base = "1s"

[[pool.source]]
kind = "file"
path = "eu.txt"

[[gateway]]
listen = "127.0.0.1:8899"

[[gateway]]
listen = "0.0.0.0:8900"
retries = 3
"#;

    #[test]
    fn keys_to_lines() {
        let cases = [
            ("server.max_connections", Some(6)),
            ("server.http", Some(7)),
            ("server", Some(5)),
            ("store.path", Some(3)),
            ("pool.eu", Some(12)),
            ("pool.eu.mode", Some(14)),
            ("pool.eu.cooldown.base", Some(17)),
            ("pool.eu.source[0].path", Some(21)),
            ("pool[0].name", Some(10)),
            ("gateway[1].retries", Some(28)),
            // Not written: the deepest part that is.
            ("gateway[1].token", Some(26)),
            ("pool.eu.probe.url", Some(12)),
            ("nothing.here", None),
        ];
        for (key, want) in cases {
            assert_eq!(line_of(FILE, key), want, "{key}");
        }
        assert_eq!(line_of("not = [toml", "x"), None);
    }

    #[test]
    fn positions_to_keys() {
        let at = |needle: &str| FILE.find(needle).unwrap();
        let cases = [
            (at("0\nhttp"), Some("server.max_connections")),
            (at("\"127.0.0.1:9464"), Some("server.http")),
            (at("3\n"), Some("gateway[1].retries")),
            (at("\"eu.txt"), Some("pool[1].source[0].path")),
            (0, None),
        ];
        for (offset, want) in cases {
            assert_eq!(key_at(FILE, offset).as_deref(), want, "{offset}");
        }
        assert_eq!(line_col("a\nbc\n", 3), (2, 2));
        assert_eq!(line_col("a", 0), (1, 1));
    }
}
