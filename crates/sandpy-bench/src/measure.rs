//! Timing and memory readings shared by the parts.

use anyhow::{bail, Context};
use sandpy::Status;
use std::process::Command;
use std::time::Instant;

/// Milliseconds of one run, which must end `ok`.
pub(crate) fn timed_run(
    rt: &tokio::runtime::Runtime,
    sandbox: &sandpy::Sandbox,
    code: &str,
    options: &sandpy::RunOptions,
) -> anyhow::Result<f64> {
    let t = Instant::now();
    let e = rt.block_on(sandbox.run_with(code, options));
    let ms = t.elapsed().as_secs_f64() * 1e3;
    if e.status != Status::Ok {
        bail!("{code:?} failed: {e:?}");
    }
    Ok(ms)
}

pub(crate) fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

pub(crate) fn private_bytes() -> anyhow::Result<u64> {
    let text = std::fs::read_to_string("/proc/self/smaps_rollup")
        .context("reading /proc/self/smaps_rollup")?;
    let kib: u64 = text
        .lines()
        .filter(|l| l.starts_with("Private_Clean:") || l.starts_with("Private_Dirty:"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum();
    Ok(kib * 1024)
}

/// The private (written) KiB of each pooled slot's snapshot mapping, averaged over the
/// slots that hold any, and how many do: what a fresh run leaves for the pool to copy back
/// from the snapshot when the slot is reused. `None` where `/proc/self/smaps` is not.
pub(crate) fn snapshot_pages_written() -> Option<(u64, usize)> {
    let text = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut in_snapshot = false;
    let mut written = Vec::new();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        match fields.next() {
            // A mapping's first line: address range, permissions, offset, ..., path.
            Some(first) if first.contains('-') && !first.ends_with(':') => {
                let perms = fields.next().unwrap_or("");
                in_snapshot = perms == "rw-p" && line.trim_end().ends_with(".cwasm");
            }
            Some("Anonymous:") if in_snapshot => {
                let kib = fields.next().and_then(|n| n.parse::<u64>().ok())?;
                if kib > 0 {
                    written.push(kib);
                }
            }
            _ => {}
        }
    }
    let slots = written.len();
    (slots > 0).then(|| (written.iter().sum::<u64>() / slots as u64, slots))
}

/// Run `command` to its end (its output discarded): milliseconds from spawn to exit.
pub(crate) fn whole_process_ms(command: &[&str]) -> anyhow::Result<f64> {
    let started = Instant::now();
    let status = Command::new(command[0])
        .args(&command[1..])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .with_context(|| format!("cannot run `{}`", command[0]))?;
    let ms = started.elapsed().as_secs_f64() * 1e3;
    if !status.success() {
        bail!("`{}` failed ({status})", command.join(" "));
    }
    Ok(ms)
}

/// Forks, execs its arguments and prints the child's peak RSS and its own, in KiB.
pub(crate) const PEAK_RSS_PY: &str = "import os, resource, sys
pid = os.fork()
if pid == 0:
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print(usage.ru_maxrss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, os.waitstatus_to_exitcode(status))
";

/// The peak RSS of `command`, measured through a small Python process that forks it: a
/// child's peak counts the pages it shared with its parent before its exec (the kernel
/// takes the old address space's high-water mark at exec), so it is measured from a
/// parent smaller than this one, and a peak at or under that parent's own reads "<=".
pub(crate) fn peak_rss(python: &str, command: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(python)
        .args(["-I", "-S", "-c", PEAK_RSS_PY])
        .args(command)
        .output()
        .with_context(|| format!("cannot run `{python}`"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let fields: Vec<u64> = text
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    let [peak, floor, code] = fields[..] else {
        bail!(
            "measuring the peak RSS of `{}` failed: {text}",
            command.join(" ")
        );
    };
    if code != 0 {
        bail!("`{}` failed (exit code {code})", command.join(" "));
    }
    let mib = |kib: u64| kib as f64 / 1024.0;
    Ok(if peak <= floor {
        format!("<= {:.1} MiB", mib(floor))
    } else {
        format!("{:.1} MiB", mib(peak))
    })
}
