//! `completions` and `man`: generated from the clap definition, so they never drift.

use std::path::Path;

use clap::CommandFactory;
use clap_complete::Shell;

use super::{Cli, CliError, ShellArg};

pub(super) fn completions(shell: ShellArg) -> Result<(), CliError> {
    let shell = match shell {
        ShellArg::Bash => Shell::Bash,
        ShellArg::Zsh => Shell::Zsh,
        ShellArg::Fish => Shell::Fish,
    };
    let mut cmd = Cli::command();
    // Generated into memory: clap_complete panics when its writer fails, and a reader
    // that stops early (`| head`) is not an error.
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "proxypool", &mut out);
    to_stdout(&out, "the completion script")
}

/// Write `out` to stdout; a reader that closed the pipe early is not a failure.
fn to_stdout(out: &[u8], what: &str) -> Result<(), CliError> {
    super::output::bytes(out);
    if super::output::write_failed() {
        return Err(CliError::failed(format!("writing {what} failed")));
    }
    Ok(())
}

/// `proxypool.1` on stdout; with `dir`, it and one `proxypool-SUB.1` per subcommand are
/// written there (what a package installs under `share/man/man1`).
pub(super) fn man(dir: Option<&Path>) -> Result<(), CliError> {
    let cmd = Cli::command();
    let Some(dir) = dir else {
        let out = render(cmd)?;
        return to_stdout(&out, "the man page");
    };
    let mut pages = vec![("proxypool.1".to_string(), render(cmd.clone())?)];
    for sub in cmd.get_subcommands() {
        let name = format!("proxypool-{}", sub.get_name());
        pages.push((format!("{name}.1"), render(sub.clone().name(name))?));
    }
    let mut written = String::new();
    for (file, text) in pages {
        let path = dir.join(&file);
        std::fs::write(&path, text)
            .map_err(|e| CliError::failed(format!("writing {}: {e}", path.display())))?;
        written.push_str(&format!("{}\n", path.display()));
    }
    to_stdout(written.as_bytes(), "the list of pages written")
}

fn render(cmd: clap::Command) -> Result<Vec<u8>, CliError> {
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd)
        .render(&mut out)
        .map_err(|e| CliError::failed(format!("rendering the man page: {e}")))?;
    Ok(out)
}
