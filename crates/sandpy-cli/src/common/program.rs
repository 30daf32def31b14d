//! The program a command was given: `-c CODE`, a file, or stdin.

use anyhow::{bail, Context};
use sandpy::{Execution, Status};
use std::io::Read;
use std::path::PathBuf;

/// The program a command was given.
pub(crate) enum Program {
    /// Its text, and the name its tracebacks show (`<string>`, `<stdin>` or the path).
    Text { code: String, name: String },
    /// Bytes that cannot be a program (not UTF-8): why. Commands report it as the
    /// program's result, an `invalid_input` execution (exit 8), not as a usage error.
    Refused(String),
}

impl Program {
    /// Read `-c CODE`, the file, or stdin for `-`. The error is a usage error: no program
    /// given, or a file or stdin that cannot be read.
    pub(crate) fn read(file: Option<&PathBuf>, code: Option<&String>) -> anyhow::Result<Program> {
        if let Some(code) = code {
            return Ok(Program::Text {
                code: code.clone(),
                name: "<string>".into(),
            });
        }
        let Some(file) = file else {
            bail!("give a FILE, `-` or -c CODE")
        };
        let from_stdin = file.as_os_str() == "-";
        let bytes = if from_stdin {
            let mut bytes = Vec::new();
            std::io::stdin()
                .read_to_end(&mut bytes)
                .context("cannot read the program from stdin")?;
            bytes
        } else {
            let real = sandpy::files::user_path(file)
                .with_context(|| format!("cannot read `{}`", file.display()))?;
            regular_file(&real).with_context(|| format!("cannot read `{}`", file.display()))?;
            std::fs::read(real).with_context(|| format!("cannot read `{}`", file.display()))?
        };
        let name = if from_stdin {
            "<stdin>".to_string()
        } else {
            file.display().to_string()
        };
        Ok(match String::from_utf8(bytes) {
            Ok(code) => Program::Text { code, name },
            Err(e) => Program::Refused(format!(
                "`{name}` is not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            )),
        })
    }

    /// The text and name, or the refusal as an `invalid_input` execution.
    pub(crate) fn into_text(self) -> Result<(String, String), Box<Execution>> {
        match self {
            Program::Text { code, name } => Ok((code, name)),
            Program::Refused(why) => Err(Box::new(Execution::refused(Status::InvalidInput, why))),
        }
    }
}

/// Refuse anything but a regular file where a file is read whole (a FIFO or a device would
/// block the command, or feed it without end).
pub(crate) fn regular_file(path: &std::path::Path) -> anyhow::Result<()> {
    let meta =
        std::fs::metadata(path).with_context(|| format!("cannot read `{}`", path.display()))?;
    if !meta.is_file() {
        bail!("`{}` is not a regular file", path.display());
    }
    Ok(())
}
