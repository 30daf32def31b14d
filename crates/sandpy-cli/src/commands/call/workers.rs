//! `sandpy call --args-file` in worker processes: each worker (`sandpy call ... --worker`)
//! runs one call at a time on guest code compiled without interruption checks (a few
//! percent faster on CPU-bound code, see docs/dev/performance.md). A call still busy past its
//! time limit ends its worker, which answers that line's `timeout` first; the next line
//! that needs a worker starts a new one. A worker that ends without answering its line
//! (killed, crashed) makes that line `internal_error`: no line goes unanswered. Each worker
//! is sent its next line while it runs one ([`LINES_AHEAD`]); a line sent to a worker that
//! ended before it started it is sent to another.
//!
//! The protocol is JSON Lines over the worker's stdin and stdout: `{"line": N, "args":
//! ...}` in, the line's result (as `--args-file` prints it) out; the answer of a worker
//! that is ending carries `"worker_ends": true` (removed before it is printed), so no
//! line is sent to it any more.

use super::lines::{line_error, line_result, next_line, parse_line, InOrder};
use super::LINES_AHEAD;
use crate::common;
use anyhow::Context;
use sandpy::Status;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{BufRead, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};

/// One request to a worker.
#[derive(serde::Deserialize)]
struct Request {
    line: usize,
    args: Value,
}

/// Be a worker: answer each request on stdin with its result line on stdout, the program
/// checked and compiled once, at the first request (in every request unless
/// `compile_once`). A run that outlives its time (the
/// compile's included) ends the process through the sandbox's overrun handler, which
/// answers `current` first (see [`overrun_answer`]).
pub(super) fn serve(
    sandbox: &sandpy::Sandbox,
    code: &str,
    function: &str,
    options: &sandpy::RunOptions,
    current: &AtomicUsize,
    compile_once: bool,
) -> anyhow::Result<()> {
    let rt = common::one_shot_runtime()?;
    let mut module = (!compile_once).then(|| sandpy::CompiledModule::uncompiled(code));
    for request in std::io::stdin().lock().lines() {
        let request: Request =
            serde_json::from_str(&request?).context("a worker request is not valid")?;
        current.store(request.line, Ordering::SeqCst);
        let execution = rt.block_on(async {
            let module = match &module {
                Some(module) => module,
                None => module.insert(sandbox.compile_module(code, options).await),
            };
            sandbox
                .call_compiled(module, function, &request.args, options)
                .await
        });
        // Locked only to write: the overrun handler writes from the watchdog thread.
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{}", line_result(request.line, &execution))?;
        stdout.flush()?;
    }
    Ok(())
}

/// A worker's sandbox: guest code without interruption checks, one pooled instance slot
/// (reused by its calls), one run at a time; `overrun` ends the process.
pub(super) fn sandbox(
    resolved: &sandpy::settings::Resolved,
    overrun: sandpy::OnOverrun,
) -> anyhow::Result<sandpy::Sandbox> {
    common::sandbox_with(resolved.sandbox_config(sandpy::Config {
        pooled_instances: Some(1),
        max_concurrent_runs: Some(1),
        interruption: sandpy::Interruption::EndProcess(overrun),
        ..sandpy::Config::default()
    }))
}

/// Marks the answer of a worker that ends after it.
const WORKER_ENDS: &str = "worker_ends";

/// A worker's overrun handler: print the timeout as the answer to the line in `current`,
/// marked as its last, then exit.
pub(super) fn overrun_answer(current: Arc<AtomicUsize>) -> sandpy::OnOverrun {
    Arc::new(move |execution: sandpy::Execution| {
        let line = current.load(Ordering::SeqCst);
        let mut answer = line_result(line, &execution);
        answer[WORKER_ENDS] = Value::Bool(true);
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{answer}");
        let _ = stdout.flush();
        std::process::exit(i32::from(crate::exit::status_code(execution.status)));
    })
}

/// A running worker: its stdin, the lines sent to it and not answered yet (the first is
/// the one it works on; it reads the next only when that is answered), whether it said it
/// is ending, and which start it is (answers of an earlier start in the same slot are
/// stale).
struct Worker {
    child: Child,
    stdin: ChildStdin,
    sent: VecDeque<Sent>,
    ending: bool,
    start: u64,
}

/// A line sent to a worker, kept until answered: one its worker never started (it ended
/// first) is sent to another.
struct Sent {
    line: usize,
    request: String,
}

/// What a worker's stdout reader reports: the slot, the start, and a result line (None:
/// the worker ended).
type Report = (usize, u64, Option<String>);

/// Run every line of `reader` in `jobs` workers started with `command` (this binary's
/// `call` arguments with `--worker`), printing results in input order; whether all were
/// `ok`.
pub(super) fn batch(
    command: &[OsString],
    mut reader: Box<dyn BufRead + Send>,
    jobs: usize,
) -> anyhow::Result<bool> {
    let exe = std::env::current_exe().context("cannot find the sandpy binary for the workers")?;
    let (reports, received) = mpsc::channel::<Report>();
    let mut workers: Vec<Option<Worker>> = (0..jobs).map(|_| None).collect();
    let mut starts = 0u64;
    let mut in_order = InOrder::new();
    // Lines sent to a worker that ended before it started them, to send again first.
    let mut unstarted: VecDeque<Sent> = VecDeque::new();
    let (mut total, mut input_done) = (0, false);
    loop {
        while !(input_done && unstarted.is_empty()) {
            // The worker with the fewest lines (one not started yet counts none).
            let Some(slot) = (0..jobs)
                .filter(|&slot| {
                    workers[slot]
                        .as_ref()
                        .is_none_or(|w| w.sent.len() < LINES_AHEAD && !w.ending)
                })
                .min_by_key(|&slot| workers[slot].as_ref().map_or(0, |w| w.sent.len()))
            else {
                break;
            };
            let next = match unstarted.pop_front() {
                Some(again) => again,
                None => {
                    let Some(bytes) = next_line(&mut reader)
                        .with_context(|| format!("cannot read line {}", total + 1))?
                    else {
                        input_done = true;
                        break;
                    };
                    total += 1;
                    let arguments = match parse_line(&bytes) {
                        Ok(arguments) => arguments,
                        Err(message) => {
                            in_order
                                .add(total, line_error(total, Status::InvalidInput, &message))?;
                            continue;
                        }
                    };
                    Sent {
                        line: total,
                        request: json!({"line": total, "args": arguments}).to_string(),
                    }
                }
            };
            if workers[slot].is_none() {
                starts += 1;
                workers[slot] = Some(start(&exe, command, slot, starts, reports.clone())?);
            }
            let worker = workers[slot]
                .as_mut()
                .context("a worker was just started")?;
            match writeln!(worker.stdin, "{}", next.request).and_then(|()| worker.stdin.flush()) {
                Ok(()) => worker.sent.push_back(next),
                Err(e) => {
                    // It ended already: its end is reported by its reader, then replaced.
                    worker.ending = true;
                    let why = format!("cannot send it to a worker process: {e}");
                    in_order.add(next.line, lost(next.line, &why))?;
                }
            }
        }
        // Lines sent and not answered yet.
        let outstanding: usize = workers.iter().flatten().map(|w| w.sent.len()).sum();
        if input_done && unstarted.is_empty() && outstanding == 0 {
            break;
        }
        let (slot, start, report) = received.recv().context("every worker's reader stopped")?;
        let Some(worker) = workers[slot].as_mut().filter(|w| w.start == start) else {
            continue;
        };
        match report {
            Some(text) => {
                if let Some(Sent { line, .. }) = worker.sent.pop_front() {
                    let mut value = serde_json::from_str::<Value>(&text)
                        .unwrap_or_else(|e| lost(line, &format!("its worker answered: {e}")));
                    if let Some(answer) = value.as_object_mut() {
                        worker.ending |= answer.remove(WORKER_ENDS).is_some();
                    }
                    in_order.add(line, value)?;
                    if worker.ending {
                        // It ends after this answer: the lines sent after it go to others.
                        unstarted.extend(worker.sent.drain(..));
                    }
                }
            }
            None => {
                let mut ended = workers[slot].take().context("the worker is there")?;
                let status = ended.child.wait();
                if let Some(Sent { line, .. }) = ended.sent.pop_front() {
                    let how = match status {
                        Ok(status) => status.to_string(),
                        Err(e) => e.to_string(),
                    };
                    in_order.add(
                        line,
                        lost(
                            line,
                            &format!("its worker process ended without an answer ({how})"),
                        ),
                    )?;
                }
                // Those after the one it worked on were never started.
                unstarted.extend(ended.sent.drain(..));
            }
        }
    }
    for worker in workers.into_iter().flatten() {
        let Worker {
            mut child, stdin, ..
        } = worker;
        drop(stdin);
        let _ = child.wait();
    }
    in_order.finish(total, "the run of this line ended without an answer")?;
    Ok(in_order.all_ok)
}

/// The result of a line whose run got no answer.
fn lost(line: usize, why: &str) -> Value {
    line_error(line, Status::InternalError, &format!("line {line}: {why}"))
}

/// Start a worker in `slot`, with a thread that reports each line it prints, then its end.
fn start(
    exe: &std::path::Path,
    command: &[OsString],
    slot: usize,
    start: u64,
    reports: mpsc::Sender<Report>,
) -> anyhow::Result<Worker> {
    let mut child = Command::new(exe)
        .args(command)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("cannot start a worker process")?;
    let stdin = child.stdin.take().context("a worker's stdin")?;
    let stdout = child.stdout.take().context("a worker's stdout")?;
    std::thread::Builder::new()
        .name("sandpy-worker-reader".into())
        .spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if reports.send((slot, start, Some(line))).is_err() {
                    return;
                }
            }
            let _ = reports.send((slot, start, None));
        })
        .context("cannot start a worker's reader thread")?;
    Ok(Worker {
        child,
        stdin,
        sent: VecDeque::new(),
        ending: false,
        start,
    })
}

/// This process's `call` arguments for a worker: without `--args-file`, `--jobs` and
/// `--in-process` (and their values), with `--worker`.
pub(super) fn worker_command() -> Vec<OsString> {
    let mut command = Vec::new();
    let mut args = std::env::args_os().skip(1);
    while let Some(arg) = args.next() {
        let text = arg.to_string_lossy();
        match text.as_ref() {
            "--args-file" | "--jobs" => {
                args.next();
            }
            "--in-process" => {}
            _ if text.starts_with("--args-file=") || text.starts_with("--jobs=") => {}
            _ => command.push(arg),
        }
    }
    command.push("--worker".into());
    command
}
