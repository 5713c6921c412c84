//! Log output on stderr (docs/observability.md, "Logging"): `serve` at info by default,
//! other commands at warn; colours only on a terminal; `--log-format json` for machines.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// The level when `RUST_LOG` is not set. A daemon's log is its only voice, so `serve`
/// starts one step louder than the one-shot commands; `-v` adds, `-q` silences all but
/// errors.
pub fn default_level(serve: bool, verbose: u8, quiet: u8) -> &'static str {
    const LEVELS: [&str; 4] = ["warn", "info", "debug", "trace"];
    if quiet > 0 {
        return "error";
    }
    let i = usize::from(verbose) + usize::from(serve);
    LEVELS[i.min(LEVELS.len() - 1)]
}

/// Colours only when a person is reading stderr, and never with `NO_COLOR` set.
pub fn use_ansi() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Install the global subscriber. `RUST_LOG`, when set, overrides the level.
pub fn init(format: LogFormat, level: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_ansi(use_ansi()).init(),
        LogFormat::Json => builder.json().with_ansi(false).init(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels() {
        // (serve, -v count, -q count, level)
        let cases = [
            (false, 0, 0, "warn"),
            (false, 1, 0, "info"),
            (false, 2, 0, "debug"),
            (false, 9, 0, "trace"),
            (true, 0, 0, "info"),
            (true, 1, 0, "debug"),
            (true, 2, 0, "trace"),
            (true, 0, 1, "error"),
            (false, 3, 1, "error"),
        ];
        for (serve, v, q, want) in cases {
            assert_eq!(default_level(serve, v, q), want, "{serve} -v{v} -q{q}");
        }
    }
}
