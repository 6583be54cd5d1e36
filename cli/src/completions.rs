//! `subagents completions SHELL` and `subagents manpage`: the shell
//! completion scripts (clap_complete) and the roff man page (clap_mangen),
//! generated from the same command-line definition the parser uses, so
//! they cannot drift from it. `make install` writes both.

use std::io::Write;

use crate::CliResult;

/// A shell that completions are generated for.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum Shell {
    /// GNU bash (`bash-completion` loads it from `.../bash-completion/completions/subagents`).
    Bash,
    /// zsh (`_subagents` in a directory of `$fpath`).
    Zsh,
    /// fish (`.../fish/vendor_completions.d/subagents.fish`).
    Fish,
}

/// Writes the completion script of `shell` for `command` to `out`. The
/// script is generated in memory first: `clap_complete` panics on a failed
/// write, and a closed pipe or a full disk must end this as they end every
/// other command (`output`).
///
/// # Errors
/// A write failure of `out`.
pub(crate) fn write(shell: Shell, mut command: clap::Command, out: &mut impl Write) -> CliResult {
    let generator = match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    let name = command.get_name().to_owned();
    let mut script = Vec::new();
    clap_complete::generate(generator, &mut command, name, &mut script);
    out.write_all(&script)?;
    out.flush()?;
    Ok(())
}

/// Writes the man page (section 1, subcommands included) of `command` to
/// `out`. Its title line carries the package version alone (roff's `.TH`
/// is one line); the storage formats of `--version` follow as a section
/// of their own.
///
/// # Errors
/// A write failure of `out`.
pub(crate) fn manpage(command: clap::Command, formats: &str, out: &mut impl Write) -> CliResult {
    let command = command.version(env!("CARGO_PKG_VERSION"));
    clap_mangen::Man::new(command).render(out)?;
    writeln!(out, ".SH \"STORAGE FORMATS\"")?;
    for line in formats.lines() {
        writeln!(out, "{}", line.replace('\\', "\\\\").replace('-', "\\-"))?;
        writeln!(out, ".br")?;
    }
    out.flush()?;
    Ok(())
}
