//! The official MCP Python SDK as the client of `sandpy bench --only served`
//! (`client.py`, a process of its own per measure): against sandpy, against the
//! test server's no-op `echo` on the same HTTP stack, and against the SDK's own server
//! with a no-op tool (`noop_server.py`, the SDK's `MCPServer` under uvicorn).

use super::{arguments_text, Call, Figures, NO_OP, RUN, SHAPE};
use anyhow::{bail, Context};
use std::io::BufRead;
use std::process::{Command, Stdio};

/// The official SDK's client program
/// (`python client.py URL CLIENTS CALLS TOOL ARGUMENTS`).
const PYTHON_CLIENT: &str = include_str!("client.py");

/// The SDK's own server with a `run_python` that runs nothing; prints its port.
const PYTHON_NO_OP_SERVER: &str = include_str!("noop_server.py");

/// What the SDK's client measured.
pub(crate) struct SdkFigures {
    /// Against sandpy's `run_python`.
    served: Figures,
    /// Against the test server's `echo` (sandpy's HTTP stack, no run).
    no_op: anyhow::Result<Figures>,
    /// Against the SDK's own server, its `run_python` a no-op.
    own_server: anyhow::Result<Figures>,
}

impl SdkFigures {
    /// The SDK's lines of the part: its figures against sandpy (`line`), its ceilings
    /// (`ceiling`), and the ratios of the calls/s.
    /// `in_process`: the CPU ms of a run in process, beside which the server's own CPU
    /// per call is printed (the SDK's client is a process of its own, so this process's CPU
    /// is the server's).
    pub(crate) fn print(
        &self,
        line: &dyn Fn(&str, &Figures),
        ceiling: &dyn Fn(&str, &Figures),
        in_process: Option<f64>,
    ) {
        line("official Python SDK (httpx):", &self.served);
        let no_op = self.no_op.as_ref().ok().and_then(|f| f.cpu_ms);
        super::cpu_line(
            "the server's CPU",
            SHAPE.1,
            self.served.cpu_ms,
            in_process,
            no_op,
        );
        let ceilings = [
            ("its ceiling, a no-op tool:", "the no-op tool", &self.no_op),
            (
                "the SDK's own no-op server:",
                "the SDK against its own no-op server",
                &self.own_server,
            ),
        ];
        let mut ratios = Vec::new();
        for (label, named, figures) in ceilings {
            match figures {
                Ok(figures) => {
                    ceiling(label, figures);
                    ratios.push(format!("{:.2}x {named}", self.served.per_s / figures.per_s));
                }
                Err(e) => println!("    {label} failed: {e:#}"),
            }
        }
        if !ratios.is_empty() {
            println!("    served = {}, in calls/s", ratios.join("; "));
        }
    }
}

/// The official Python SDK's figures against sandpy at `url`, beside its ceilings: the
/// no-op tool at `no_op_url` and the SDK's own no-op server; `None` when `python` has no
/// SDK.
pub(crate) fn sdk_figures(
    python: &str,
    url: &str,
    no_op_url: &str,
) -> anyhow::Result<Option<SdkFigures>> {
    let has_sdk = Command::new(python)
        .args(["-c", "import mcp, httpx2, uvicorn"])
        .output()
        .is_ok_and(|out| out.status.success());
    if !has_sdk {
        return Ok(None);
    }
    let served = figures(python, url, RUN, true)?;
    let no_op = figures(python, no_op_url, NO_OP, true);
    let own_server = own_server_figures(python);
    Ok(Some(SdkFigures {
        served,
        no_op,
        own_server,
    }))
}

/// The SDK's client calling `call` at `url`: one client's latencies, then the clients
/// at once; with `served_here` (the server is in this process), this process's CPU per
/// call meanwhile.
fn figures(python: &str, url: &str, call: Call, served_here: bool) -> anyhow::Result<Figures> {
    let (latency_calls, clients, calls_per_client) = SHAPE;
    let run = |clients: usize, calls: usize| -> anyhow::Result<(Vec<f64>, f64)> {
        let out = Command::new(python)
            .args(["-c", PYTHON_CLIENT, url])
            .args([clients.to_string(), calls.to_string()])
            .args([call.tool.to_string(), arguments_text(call)])
            .output()?;
        if !out.status.success() {
            bail!("{}", String::from_utf8_lossy(&out.stderr));
        }
        let report: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        let mut ms: Vec<f64> = report["ms"]
            .as_array()
            .context("no times")?
            .iter()
            .filter_map(serde_json::Value::as_f64)
            .collect();
        ms.sort_by(f64::total_cmp);
        let seconds = report["seconds"].as_f64().context("no seconds")?;
        Ok((ms, (clients * calls) as f64 / seconds))
    };
    let (one, _) = run(1, latency_calls)?;
    let cpu_before = super::cpu_seconds().filter(|_| served_here);
    let (_, per_s) = run(clients, calls_per_client)?;
    let cpu_ms = super::cpu_ms_per_call(cpu_before, clients * calls_per_client);
    Ok(Figures {
        one,
        per_s,
        cpu_ms,
        made_ahead: None,
    })
}

/// The SDK's client against the SDK's own server, whose `run_python` runs nothing (the
/// server a process of its own, ended by closing its stdin).
fn own_server_figures(python: &str) -> anyhow::Result<Figures> {
    let mut server = Command::new(python)
        .args(["-c", PYTHON_NO_OP_SERVER])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting the SDK's no-op server")?;
    let port = server
        .stdout
        .take()
        .map(std::io::BufReader::new)
        .and_then(|mut out| {
            let mut line = String::new();
            out.read_line(&mut line).ok()?;
            line.trim().parse::<u16>().ok()
        });
    let measured = match port {
        Some(port) => figures(python, &format!("http://127.0.0.1:{port}/mcp"), RUN, false),
        None => Err(anyhow::anyhow!("the SDK's no-op server told no port")),
    };
    drop(server.stdin.take());
    if server.wait().is_err() {
        let _ = server.kill();
    }
    measured
}
