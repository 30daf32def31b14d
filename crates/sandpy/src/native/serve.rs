//! Serving one native run: its channel (task, tool calls, outcome), its output read under
//! the cap as it is written, the zygote's report, and what the run is given (`Inputs`).
//!
//! The channel is written by the run, and so by its code: each line is hostile input,
//! checked before it is believed, and the outcome is only the code's value or error.
//! What the run left under `/output` and its memory peak come from the zygote, which
//! stops the answered run and reads them from the kernel (`collect`).

use super::protocol::{
    cell_limit, task_line, Collected, Ended, GuestMessage, Report, ReportFile, ANSWERED, CELL_ENDED,
};
use crate::access::Access;
use crate::bindings::{GuestOptions, Task, ToolCall};
use crate::execution::Execution;
use crate::files::OutputFile;
use crate::network::FetchError;
use crate::options::{OutputSink, Stream};
use crate::output::Capture;
use crate::plan::Deadline;
use crate::verdict::{self, NativeEnd};
use crate::Limits;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The host's ends of one run's descriptors.
pub(super) struct Launched {
    pub(super) channel: OwnedFd,
    pub(super) report: OwnedFd,
    pub(super) stdin: OwnedFd,
    pub(super) stdout: OwnedFd,
    pub(super) stderr: OwnedFd,
}

/// The host's ends of a run's channel, report socket and output pipes, as tokio reads
/// them (stdin is written on its own: a session's is closed at once).
pub(super) struct Streams {
    channel_read: tokio::net::unix::OwnedReadHalf,
    channel_write: tokio::net::unix::OwnedWriteHalf,
    pub(super) report: tokio::net::UnixStream,
    stdout: tokio::net::unix::pipe::Receiver,
    stderr: tokio::net::unix::pipe::Receiver,
}

impl Streams {
    /// A launched run's descriptors, opened, and its stdin; why not.
    pub(super) fn open(
        launched: Launched,
    ) -> Result<(Streams, tokio::net::unix::pipe::Sender), String> {
        let stream = |fd: OwnedFd| {
            let std = std::os::unix::net::UnixStream::from(fd);
            std.set_nonblocking(true)?;
            tokio::net::UnixStream::from_std(std)
        };
        let opened = (|| -> std::io::Result<_> {
            let (channel_read, channel_write) = stream(launched.channel)?.into_split();
            let streams = Streams {
                channel_read,
                channel_write,
                report: stream(launched.report)?,
                stdout: tokio::net::unix::pipe::Receiver::from_owned_fd(launched.stdout)?,
                stderr: tokio::net::unix::pipe::Receiver::from_owned_fd(launched.stderr)?,
            };
            let stdin = tokio::net::unix::pipe::Sender::from_owned_fd(launched.stdin)?;
            Ok((streams, stdin))
        })();
        opened.map_err(|e| format!("run descriptors: {e}"))
    }
}

/// What a run is given besides its code: stdin, input files (checked: paths under
/// `/tmp`, sizes within the disk quota) and read-only mounts (checked folders).
pub(crate) struct Inputs {
    pub(super) stdin: Vec<u8>,
    files: Vec<(String, Vec<u8>)>,
    pub(super) mounts: Vec<(PathBuf, String)>,
    /// Where the run's output goes as it is written, besides the capture.
    on_output: Option<OutputSink>,
    /// Cancelled: the run is killed at once.
    cancel: Option<tokio_util::sync::CancellationToken>,
}

impl Inputs {
    /// The run's stdin, files, mounts and output sink, or why they are refused (as the WebAssembly
    /// tier refuses them).
    pub(crate) fn check(options: &crate::RunOptions, limits: &Limits) -> Result<Inputs, String> {
        let adding: u64 = options
            .files
            .iter()
            .map(|f| f.content.len() as u64 + 4096)
            .sum();
        if adding > limits.disk_bytes {
            return Err(format!(
                "the input files need {adding} bytes, over the disk quota of {} bytes",
                limits.disk_bytes
            ));
        }
        let mut files = Vec::with_capacity(options.files.len());
        for file in &options.files {
            let relative = crate::files::scratch_relative(&file.path)?;
            files.push((
                relative.to_string_lossy().into_owned(),
                file.content.clone(),
            ));
        }
        let mounts = crate::files::check_mounts(&options.mounts)
            .map_err(|e| e.to_string())?
            .0;
        Ok(Inputs {
            stdin: options.stdin.clone().unwrap_or_default(),
            files,
            mounts,
            on_output: options.on_output.clone(),
            cancel: options.cancel.clone(),
        })
    }
}

/// How a served run ended, with what it left.
pub(super) struct RunEnd {
    pub(super) end: NativeEnd,
    pub(super) files: Vec<ReportFile>,
    pub(super) max_rss_bytes: u64,
    /// The run answered and the zygote stopped its whole process: a session's process
    /// may be kept for its next cell.
    pub(super) stopped: bool,
}

impl RunEnd {
    pub(super) fn without(end: NativeEnd) -> RunEnd {
        RunEnd {
            end,
            files: Vec::new(),
            max_rss_bytes: 0,
            stopped: false,
        }
    }
}

/// One run being served.
pub(super) struct Run<'a> {
    pub(super) access: Access,
    capture: Capture,
    limits: &'a Limits,
}

/// How long after its time limit a run's report may take before the host gives up.
const REPORT_GRACE: Duration = Duration::from_secs(2);

/// Bytes read at a time from each stream (four buffers per run, faulted in per run).
const CHUNK: usize = 16 << 10;

/// How long the zygote may take to stop a run that answered and read its `/output`.
const COLLECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether `name` may name a file of `/output`: relative, `/`-separated, no empty, `.` or
/// `..` part and no NUL (the zygote reads names from the run's folders, which cannot hold
/// others; checked again here, where the name leaves the host).
pub(super) fn output_name_ok(name: &str) -> bool {
    !name.is_empty()
        && name
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != ".." && !part.contains('\0'))
}

/// Ask the zygote to stop the run that answered and collect what it left (see
/// [`ANSWERED`]); `None` when the run ended first or the zygote did not answer in time.
async fn collect(report: &mut tokio::net::UnixStream, cap: usize) -> Option<Collected> {
    let asked = async {
        report.write_all(&cell_limit(ANSWERED)).await?;
        let mut kind = [0u8; 1];
        report.read_exact(&mut kind).await?;
        if kind[0] != CELL_ENDED {
            return Ok(None); // the run's final report: it ended before it was stopped
        }
        let mut length = [0u8; 8];
        report.read_exact(&mut length).await?;
        let length = u64::from_le_bytes(length);
        if length > cap as u64 {
            return Ok(None);
        }
        let mut json = vec![0u8; length as usize];
        report.read_exact(&mut json).await?;
        Ok::<_, std::io::Error>(serde_json::from_slice(&json).ok())
    };
    tokio::time::timeout(COLLECT_TIMEOUT, asked)
        .await
        .ok()?
        .ok()?
}

impl<'a> Run<'a> {
    pub(super) fn new(access: Access, limits: &'a Limits, inputs: &Inputs) -> Run<'a> {
        Run {
            access,
            capture: Capture::new(limits.output_bytes, inputs.on_output.clone()),
            limits,
        }
    }

    /// The execution of a run that ended so.
    pub(super) fn execution(&mut self, ended: RunEnd, started: Instant) -> Execution {
        let mut execution = verdict::native(
            ended.end,
            self.capture.finish(),
            self.limits,
            self.access.tools.calls as u64,
            ended.max_rss_bytes,
            started.elapsed(),
        );
        // The zygote read them under the run's `/output` size; the same checks again here.
        let mut left = self.limits.output_files_bytes;
        execution.files = ended
            .files
            .into_iter()
            .filter(|f| output_name_ok(&f.name))
            .filter(|f| {
                let size = f.content.len() as u64;
                let fits = size <= left;
                left = left.saturating_sub(if fits { size } else { 0 });
                fits
            })
            .map(|f| OutputFile::new(f.name, f.content))
            .collect();
        if let Some(network) = self.access.network.take() {
            execution.requests = network.made;
        }
        execution
    }

    /// The longest channel message the host holds: a batch of calls with arguments at
    /// their cap, or an outcome with texts at the output cap and rich outputs at their
    /// budget, each with room for JSON escapes (an outcome carries no files: the zygote
    /// reads them).
    fn max_message(&self) -> usize {
        let limits = self.limits;
        // A request's body and headers, base64 and JSON-escaped.
        let network_out = self
            .access
            .network
            .as_ref()
            .map_or(0, |n| n.max_bytes_out());
        limits
            .tool_result_bytes
            .saturating_mul(4)
            .saturating_add(limits.output_bytes.saturating_mul(4))
            .saturating_add(network_out.saturating_mul(2))
            .saturating_add(
                usize::try_from(limits.output_files_bytes)
                    .unwrap_or(usize::MAX)
                    .saturating_mul(6),
            )
            .saturating_add(1 << 20)
    }

    /// Send the task (and stdin), then serve the run until its outcome, its end or a
    /// limit; its descriptors are left open (dropping them ends the process).
    pub(super) async fn serve(
        &mut self,
        streams: &mut Streams,
        stdin: Option<(tokio::net::unix::pipe::Sender, Vec<u8>)>,
        task: &Task,
        options: &GuestOptions,
        inputs: &Inputs,
        deadline: Deadline,
    ) -> RunEnd {
        let Streams {
            channel_read,
            channel_write,
            report,
            stdout,
            stderr,
        } = streams;
        let first = task_line(task, options, &inputs.files);
        // The task and stdin are written beside the rest, so that a program that does not
        // read them cannot stall the host.
        let writes = async move {
            let task_sent = channel_write.write_all(&first).await;
            (channel_write, task_sent)
        };
        let stdin_task = async move {
            if let Some((mut pipe, bytes)) = stdin {
                let _ = pipe.write_all(&bytes).await;
            }
        };
        tokio::pin!(writes, stdin_task);
        let mut channel_write = None;
        let mut stdin_done = false;

        let run_deadline = deadline.tokio();
        let hard_deadline = tokio::time::Instant::from_std(deadline.after(REPORT_GRACE));
        let max_message = self.max_message();
        let mut message: Vec<u8> = Vec::new();
        let mut outcome: Option<crate::guest_report::Report> = None;
        let mut stopped: Option<NativeEnd> = None;
        let mut report_bytes: Vec<u8> = Vec::new();
        // The zygote's report is a few bytes (how the run ended, its peak size), and the
        // files of a run it ended at its deadline: base64 of at most the size of
        // `/output`, with their names.
        let report_cap =
            (64 << 10) + super::left_output::report_bytes(self.limits.output_files_bytes);
        let (mut channel_open, mut stdout_open, mut stderr_open, mut report_open) =
            (true, true, true, true);
        let mut out_buf = vec![0u8; CHUNK];
        let mut err_buf = vec![0u8; CHUNK];
        let mut channel_buf = vec![0u8; CHUNK];
        let mut report_buf = vec![0u8; CHUNK];

        while channel_open || stdout_open || stderr_open || report_open {
            tokio::select! {
                written = &mut writes, if channel_write.is_none() => {
                    let (writer, sent) = written;
                    channel_write = Some(writer);
                    if sent.is_err() {
                        // The child died before reading its task; its report says why.
                    }
                }
                _ = &mut stdin_task, if !stdin_done => stdin_done = true,
                n = stdout.read(&mut out_buf), if stdout_open => match n {
                    Ok(n) if n > 0 => {
                        if !self.capture.append(Stream::Stdout, &out_buf[..n]) {
                            stopped.get_or_insert(NativeEnd::Output);
                            break;
                        }
                    }
                    _ => stdout_open = false,
                },
                n = stderr.read(&mut err_buf), if stderr_open => match n {
                    Ok(n) if n > 0 => {
                        if !self.capture.append(Stream::Stderr, &err_buf[..n]) {
                            stopped.get_or_insert(NativeEnd::Output);
                            break;
                        }
                    }
                    _ => stderr_open = false,
                },
                n = report.read(&mut report_buf), if report_open => match n {
                    Ok(n) if n > 0 => {
                        if report_bytes.len() + n > report_cap {
                            stopped.get_or_insert(NativeEnd::Internal(
                                "the run's report is over its size limit".into(),
                            ));
                            break;
                        }
                        report_bytes.extend_from_slice(&report_buf[..n]);
                    }
                    _ => report_open = false,
                },
                n = channel_read.read(&mut channel_buf), if channel_open && channel_write.is_some() => match n {
                    Ok(n) if n > 0 => {
                        // Only the new bytes are searched for the end of a line.
                        let searched = message.len();
                        message.extend_from_slice(&channel_buf[..n]);
                        let mut from = searched;
                        while let Some(end) = message[from..]
                            .iter()
                            .position(|&b| b == b'\n')
                            .map(|at| from + at)
                        {
                            from = 0;
                            let line: Vec<u8> = message.drain(..=end).collect();
                            let Some(writer) = channel_write.as_mut() else { break };
                            let answered = tokio::time::timeout_at(
                                run_deadline,
                                self.answer(&line[..end], writer, &mut outcome),
                            );
                            let answered = tokio::select! {
                                answered = answered => Some(answered),
                                () = cancelled(inputs.cancel.as_ref()) => None,
                            };
                            match answered {
                                Some(Ok(Ok(()))) => {}
                                Some(Ok(Err(end))) => {
                                    stopped.get_or_insert(end);
                                    break;
                                }
                                Some(Err(_)) => {
                                    stopped.get_or_insert(NativeEnd::Timeout {
                                        waiting_for: self.access.tools.waiting_for(),
                                    });
                                    break;
                                }
                                None => {
                                    stopped.get_or_insert(NativeEnd::Cancelled {
                                        waiting_for: self.access.tools.waiting_for(),
                                    });
                                    break;
                                }
                            }
                        }
                        if stopped.is_some() || outcome.is_some() {
                            break;
                        }
                        if message.len() > max_message {
                            stopped.get_or_insert(NativeEnd::Message(max_message));
                            break;
                        }
                    }
                    _ => channel_open = false,
                },
                () = cancelled(inputs.cancel.as_ref()) => {
                    stopped.get_or_insert(NativeEnd::Cancelled {
                        waiting_for: self.access.tools.waiting_for(),
                    });
                    break;
                }
                _ = tokio::time::sleep_until(hard_deadline) => {
                    stopped.get_or_insert(NativeEnd::Timeout {
                        waiting_for: self.access.tools.waiting_for(),
                    });
                    break;
                }
            }
        }
        if let Some(outcome) = outcome {
            // The program flushed its output before it sent the outcome: what is left is
            // in the pipes now. The process's end is not waited for (the report socket is
            // dropped below, which makes the zygote end what is left of the run). Read
            // with read(2) itself: tokio's `try_read` answers "would block" without
            // asking the kernel while its reactor has not yet seen the pipe readable,
            // which lost the last output of a run on a loaded machine. The pipes are
            // non-blocking, so an empty one ends the loop.
            for (pipe, which, buffer) in [
                (&stdout, Stream::Stdout, &mut out_buf),
                (&stderr, Stream::Stderr, &mut err_buf),
            ] {
                while let Ok(n @ 1..) = nix::unistd::read(pipe, buffer) {
                    if !self.capture.append(which, &buffer[..n]) {
                        break;
                    }
                }
            }
            let end = stopped.unwrap_or(NativeEnd::Outcome(outcome));
            // What the run left and its peak, from the zygote: unless the run ended
            // already (its report came), it is stopped and read now.
            let answered = matches!(end, NativeEnd::Outcome(_));
            let collected = if answered && report_open && report_bytes.is_empty() {
                collect(report, report_cap).await
            } else {
                None
            };
            let collected = collected.unwrap_or_default();
            return RunEnd {
                end,
                files: collected.files,
                max_rss_bytes: collected.max_rss_bytes,
                stopped: collected.stopped,
            };
        }
        if let Some(end) = stopped {
            // The caller hangs up the report socket, which makes the zygote kill the run.
            return RunEnd::without(end);
        }
        let Ok(report) = serde_json::from_slice::<Report>(&report_bytes) else {
            let why = "the native tier's zygote ended the run without a report";
            return RunEnd::without(NativeEnd::Internal(why.into()));
        };
        let end = match report.ended {
            Ended::TimedOut => NativeEnd::Timeout {
                waiting_for: self.access.tools.waiting_for(),
            },
            Ended::Failed(why) => {
                NativeEnd::Internal(format!("the run could not be set up: {why}"))
            }
            Ended::Exited(super::child::CONFINEMENT_FAILED) => {
                NativeEnd::Internal("the run could not be confined (see stderr)".into())
            }
            Ended::Exited(code) => NativeEnd::Exited(code),
            Ended::Signaled(signal) => NativeEnd::Signaled(signal),
        };
        RunEnd {
            end,
            files: report.files,
            max_rss_bytes: report.max_rss_bytes,
            stopped: false,
        }
    }

    /// Answer one message of the child; the outcome is kept. An `Err` ends the run.
    async fn answer(
        &mut self,
        line: &[u8],
        writer: &mut tokio::net::unix::OwnedWriteHalf,
        outcome: &mut Option<crate::guest_report::Report>,
    ) -> Result<(), NativeEnd> {
        // A lone surrogate (`json.dumps` of a `str` that has one) is the code's data, not a
        // broken channel: replaced, as the WebAssembly tier's guest replaces it.
        let line = crate::guest_report::without_lone_surrogates(line);
        let message: GuestMessage =
            serde_json::from_slice(&line).map_err(|e| NativeEnd::Channel(format!("{e}")))?;
        let internal = |e: wasmtime::Error| NativeEnd::Internal(e.to_string());
        let answer = match message {
            GuestMessage::Outcome(reported) => {
                // Checked at once, as it is parsed: the report is the attacker's.
                *outcome = Some(crate::guest_report::check(reported.into(), self.limits));
                return Ok(());
            }
            GuestMessage::CallTools(calls) => {
                let calls = calls
                    .into_iter()
                    .map(|c| ToolCall {
                        name: c.name,
                        arguments: c.arguments,
                    })
                    .collect();
                match self.access.tools.call_tools(calls).await {
                    Ok(results) => serde_json::to_value(results),
                    Err(_) if self.access.tools.limit_hit => return Err(NativeEnd::ToolCalls),
                    Err(e) => return Err(internal(e)),
                }
            }
            GuestMessage::ListTools => {
                serde_json::to_value(self.access.tools.list_tools().await.map_err(internal)?)
            }
            GuestMessage::ToolNames => {
                serde_json::to_value(self.access.tools.tool_names().await.map_err(internal)?)
            }
            GuestMessage::ToolSchema(name) => serde_json::to_value(
                self.access
                    .tools
                    .tool_schema(name)
                    .await
                    .map_err(internal)?,
            ),
            GuestMessage::SearchTools { query, limit } => serde_json::to_value(
                self.access
                    .tools
                    .search_tools(query, limit)
                    .await
                    .map_err(internal)?,
            ),
            GuestMessage::Fetch(request) => serde_json::to_value(match &mut self.access.network {
                Some(network) => network.fetch(request).await,
                None => Err(FetchError::Refused(crate::network::NO_NETWORK.into())),
            }),
            GuestMessage::FetchMany(requests) => {
                serde_json::to_value(match &mut self.access.network {
                    Some(network) => network.fetch_many(requests).await,
                    None => requests
                        .iter()
                        .map(|_| Err(FetchError::Refused(crate::network::NO_NETWORK.into())))
                        .collect(),
                })
            }
        };
        let mut bytes = answer
            .map_err(|e| NativeEnd::Internal(e.to_string()))?
            .to_string()
            .into_bytes();
        bytes.push(b'\n');
        // A child that stopped reading only stalls itself: its time limit still runs.
        let _ = writer.write_all(&bytes).await;
        Ok(())
    }
}

/// Done when `cancel` is cancelled; never without one.
async fn cancelled(cancel: Option<&tokio_util::sync::CancellationToken>) {
    match cancel {
        Some(cancel) => cancel.cancelled().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::output_name_ok;

    #[test]
    fn output_names_stay_inside_output() {
        for name in ["a.txt", "charts/a.csv", "x..y", ".hidden"] {
            assert!(output_name_ok(name), "{name}");
        }
        for name in [
            "",
            "/etc/abs.txt",
            "../../etc/cron.d/x",
            "a/../../b",
            "a//b",
            "./a",
            "a/",
            "a\0b",
        ] {
            assert!(!output_name_ok(name), "{name:?}");
        }
    }
}
