//! The log on stderr, with every value the config took from the environment shown as its
//! `${VAR}` text. sandpy's own messages already do that; libraries log as they like (rmcp
//! logs a failed connection with its URL), and those values may be tokens.

use std::io::Write;
use std::sync::OnceLock;

static HIDDEN: OnceLock<sandpy_mcp::Expansions> = OnceLock::new();

/// Hide `values` in every log line from now on (once per process: one config per command).
pub(crate) fn hide(values: sandpy_mcp::Expansions) {
    let _ = HIDDEN.set(values);
}

/// Stderr, with the values hidden; the fmt layer writes each event in one `write`.
pub(crate) struct Stderr;

impl Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut stderr = std::io::stderr().lock();
        match HIDDEN.get().filter(|values| !values.is_empty()) {
            Some(values) => {
                stderr.write_all(values.hide(&String::from_utf8_lossy(buf)).as_bytes())?
            }
            None => stderr.write_all(buf)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}
