//! Just enough Markdown to find where the documentation defines a name: sections by
//! heading, the tables in them, their cells, and the code spans of a cell. Fenced code
//! blocks are skipped, so a `# comment` in a shell example is not a heading.

/// One heading and what follows it.
#[derive(Debug, Clone)]
pub struct Section {
    /// Number of `#`.
    pub level: usize,
    /// The heading's text, without the `#`s.
    pub title: String,
    /// The lines up to the first heading of any level (the section's own text).
    pub own: String,
    /// The lines up to the next heading of the same or a higher level (subsections too).
    pub all: String,
}

/// A run of `|` lines: the header's cells and the body rows' cells.
#[derive(Debug, Clone)]
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// The body row whose first cell's first code span is `name`, or starts with `name`
    /// followed by a blank (a command's synopsis: `add URL...`).
    pub fn row(&self, name: &str) -> Option<&Vec<String>> {
        self.rows.iter().find(|r| {
            code_spans(&r[0]).first().is_some_and(|c| {
                c == name
                    || c.strip_prefix(name)
                        .is_some_and(|rest| rest.starts_with(' '))
            })
        })
    }

    /// The body row one of whose first cell's code spans is exactly `name` (a row that
    /// defines two names: `` `probe_success`, `probe_failure` ``).
    pub fn row_naming(&self, name: &str) -> Option<&Vec<String>> {
        self.rows
            .iter()
            .find(|r| code_spans(&r[0]).iter().any(|c| c == name))
    }
}

/// Every heading of `text`, in order.
pub fn sections(text: &str) -> Vec<Section> {
    let mut heads: Vec<(usize, usize, String)> = Vec::new(); // (line index, level, title)
    let lines: Vec<&str> = text.lines().collect();
    let mut fence = false;
    for (i, l) in lines.iter().enumerate() {
        if l.trim_start().starts_with("```") {
            fence = !fence;
            continue;
        }
        if fence {
            continue;
        }
        let level = l.chars().take_while(|&c| c == '#').count();
        if level > 0 && l[level..].starts_with(' ') {
            heads.push((i, level, l[level..].trim().to_string()));
        }
    }
    let mut out = Vec::new();
    for (k, (i, level, title)) in heads.iter().enumerate() {
        let next_any = heads.get(k + 1).map_or(lines.len(), |h| h.0);
        let next_same = heads[k + 1..]
            .iter()
            .find(|h| h.1 <= *level)
            .map_or(lines.len(), |h| h.0);
        out.push(Section {
            level: *level,
            title: title.clone(),
            own: lines[i + 1..next_any].join("\n"),
            all: lines[i + 1..next_same].join("\n"),
        });
    }
    out
}

/// The first section whose title is `title`; panics naming `page` when there is none.
pub fn section(page: &str, text: &str, title: &str) -> Section {
    sections(text)
        .into_iter()
        .find(|s| s.title == title)
        .unwrap_or_else(|| panic!("{page} has no section {title:?}"))
}

/// The cells of a table line; `\|` stays inside its cell.
pub fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|');
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut prev = ' ';
    for c in inner.chars() {
        if c == '|' && prev != '\\' {
            out.push(cur.trim().to_string());
            cur.clear();
        } else {
            cur.push(c);
        }
        prev = c;
    }
    out.push(cur.trim().to_string());
    out
}

/// Every table of `text` (outside code blocks).
pub fn tables(text: &str) -> Vec<Table> {
    let mut out = Vec::new();
    let mut cur: Vec<Vec<String>> = Vec::new();
    let mut fence = false;
    let flush = |cur: &mut Vec<Vec<String>>, out: &mut Vec<Table>| {
        if !cur.is_empty() {
            let header = cur.remove(0);
            let rows = cur
                .drain(..)
                .filter(|r| {
                    !r.iter()
                        .all(|c| !c.is_empty() && c.chars().all(|ch| matches!(ch, '-' | ':')))
                })
                .collect();
            out.push(Table { header, rows });
        }
    };
    for l in text.lines() {
        if l.trim_start().starts_with("```") {
            fence = !fence;
        }
        if !fence && l.trim_start().starts_with('|') {
            cur.push(cells(l));
        } else {
            flush(&mut cur, &mut out);
        }
    }
    flush(&mut cur, &mut out);
    out
}

/// The one table of `section` whose header starts with the cell `first`; panics naming
/// `page` when there is none.
pub fn table(page: &str, section: &Section, first: &str) -> Table {
    let found: Vec<Table> = tables(&section.all)
        .into_iter()
        .filter(|t| t.header.first().is_some_and(|h| h == first))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "{page}, section {:?}: expected one table whose first column is {first:?}",
        section.title
    );
    found.into_iter().next().unwrap()
}

/// The contents of the `` `code` `` spans of `text`, in order.
pub fn code_spans(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(|s| s.replace("\\|", "|"))
        .collect()
}

/// Whether `text` holds the flag `--name` as a whole word (`--now` is not `--nowhere`).
pub fn has_flag(text: &str, flag: &str) -> bool {
    text.match_indices(flag).any(|(i, _)| {
        let after = text[i + flag.len()..].chars().next();
        let before = text[..i].chars().next_back();
        !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            && !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
    })
}

/// The backquoted names after "expected" in a serde error ("unknown field `x`, expected
/// one of `a`, `b`" / "expected `a`"): what the code accepts. Empty for "there are no
/// fields".
pub fn serde_expected(message: &str) -> Vec<String> {
    match message.split_once("expected") {
        Some((_, rest)) => code_spans(rest.lines().next().unwrap_or("")),
        None => Vec::new(),
    }
}
