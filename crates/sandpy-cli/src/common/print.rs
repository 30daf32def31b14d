//! How commands print a run: as Python would have, or as one JSON object.

use sandpy::Execution;
use std::io::Write;

/// Print an execution: as one JSON object, or the way Python would have printed.
pub(crate) fn print_execution(execution: &Execution, json: bool) -> anyhow::Result<()> {
    if json {
        super::outln!("{}", serde_json::to_string(execution)?)?;
        Ok(())
    } else {
        print_human(execution)
    }
}

fn print_human(execution: &Execution) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(execution.stdout.as_bytes())?;
    stdout.flush()?;
    std::io::stderr()
        .lock()
        .write_all(execution.stderr.as_bytes())?;
    print_displays(execution)?;
    print_error_line(execution)
}

/// What `display()` showed, as a terminal can: each display's `text/plain` on stdout,
/// after the program's own output (the final value is not printed, as Python does not
/// print a script's last expression).
fn print_displays(execution: &Execution) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    for output in &execution.outputs {
        if output.kind == sandpy::RichOutputKind::Display {
            writeln!(stdout, "{}", output.text())?;
        }
    }
    Ok(())
}

/// What follows a run whose output was streamed: the mark of a cut, and the error of a
/// run that ended without a traceback.
pub(crate) fn print_after_stream(execution: &Execution) -> anyhow::Result<()> {
    if execution.output_truncated {
        write!(
            std::io::stderr().lock(),
            "{}",
            sandpy::model_output::TRUNCATION_MARKER
        )?;
    }
    print_displays(execution)?;
    print_error_line(execution)
}

/// `sandpy: <status>: <message>` for an error without a traceback.
fn print_error_line(execution: &Execution) -> anyhow::Result<()> {
    let mut stderr = std::io::stderr().lock();
    if let Some(error) = &execution.error {
        if error.traceback.as_deref().is_none_or(str::is_empty) {
            writeln!(stderr, "sandpy: {}: {}", execution.status, error.message)?;
        }
    }
    Ok(())
}

/// What `sandpy run` and a single `sandpy call` do with a run that outlived its time on
/// code without interruption checks: print its `timeout` as they print any run, and exit
/// with the timeout's code.
pub(crate) fn print_and_exit(json: bool, streamed: bool) -> sandpy::OnOverrun {
    std::sync::Arc::new(move |execution: sandpy::Execution| {
        let printed = if streamed {
            print_after_stream(&execution)
        } else {
            print_execution(&execution, json)
        };
        match printed {
            Err(e) if !crate::exit::closed_pipe(&e) => {
                eprintln!("error: cannot print the run's result: {e}");
            }
            _ => {}
        }
        std::process::exit(i32::from(crate::exit::status_code(execution.status)));
    })
}
