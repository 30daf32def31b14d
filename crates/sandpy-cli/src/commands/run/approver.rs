//! `sandpy run --approve`: a person at the terminal decides on each tool call that needs
//! approval (`sandpy.approve`, `--require-approval`). Without a terminal on stdin nobody
//! can be asked, and such calls are refused.

use sandpy::tools::{ApprovalFuture, ApprovalRequest, Approver, Decision};
use std::io::{BufRead, IsTerminal, Write};
use std::sync::{Arc, Mutex};

/// The arguments shown at most, in bytes; longer ones are cut and marked.
const SHOWN_ARGUMENTS: usize = 2000;

/// The approver of `--approve`: asks on this terminal, one call at a time.
pub(super) fn terminal() -> Arc<dyn Approver> {
    // One question at a time, even when runs ask at once.
    let asking = Arc::new(Mutex::new(()));
    Arc::new(move |request: ApprovalRequest| -> ApprovalFuture {
        let asking = asking.clone();
        Box::pin(async move {
            let asked = tokio::task::spawn_blocking(move || {
                let _one = asking.lock().unwrap_or_else(|e| e.into_inner());
                ask(&request)
            });
            asked.await.unwrap_or_else(|e| {
                Decision::decline(
                    "sandpy",
                    Some(format!("asking on the terminal failed: {e}")),
                )
            })
        })
    })
}

fn ask(request: &ApprovalRequest) -> Decision {
    let tool = &request.tool;
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Decision::decline(
            "sandpy",
            Some(format!(
                "{tool} needs approval and stdin is not a terminal to ask on, so the call was refused"
            )),
        );
    }
    let arguments = match request.shown_arguments(SHOWN_ARGUMENTS) {
        Ok(arguments) => arguments,
        Err(why) => return Decision::unshown(tool, &why),
    };
    let mut stderr = std::io::stderr().lock();
    let _ = write!(
        stderr,
        "sandpy: the program wants to call {tool} with\n{arguments}Allow? [y/N] "
    );
    let _ = stderr.flush();
    let mut answer = String::new();
    match stdin.lock().read_line(&mut answer) {
        Ok(_) if matches!(answer.trim(), "y" | "Y" | "yes" | "Yes") => {
            Decision::approve("terminal")
        }
        Ok(_) => Decision::decline("terminal", None),
        Err(e) => Decision::decline(
            "terminal",
            Some(format!("reading the answer for {tool} failed: {e}")),
        ),
    }
}
