//! The sandbox's network: an HTTP request made by the host for the guest against the same
//! request from native Python.

use crate::measure::median;
use crate::Bench;
use anyhow::Context;

impl Bench {
    /// An HTTP request through the sandbox's network (`urllib.request`, made by the host)
    /// against the same request from native Python, both timed inside the program, to a
    /// minimal local server (a connection per request on both sides).
    pub(crate) fn network(&self) -> anyhow::Result<()> {
        const REQUESTS: usize = 200;
        let (rt, sandbox) = (&self.rt, &self.sandbox);
        let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
        let port = listener.local_addr()?.port();
        rt.spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buffer = [0u8; 4096];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buffer).await {
                            Ok(n) if n > 0 => request.extend_from_slice(&buffer[..n]),
                            _ => return,
                        }
                    }
                    let answer =
                        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
                    let _ = stream.write_all(answer).await;
                });
            }
        });
        let program = format!(
            "import time, urllib.request\nt = time.perf_counter()\nfor _ in range({REQUESTS}):\n    \
             urllib.request.urlopen('http://127.0.0.1:{port}/').read()\n\
             ms = (time.perf_counter() - t) * 1000 / {REQUESTS}\n"
        );
        let rules = sandpy::network::NetworkRules {
            allow: vec![sandpy::network::AllowRule::parse(&format!(
                "127.0.0.1:{port}"
            ))?],
            limits: sandpy::network::NetworkLimits {
                max_requests: REQUESTS,
                ..sandpy::network::NetworkLimits::default()
            },
            ..sandpy::network::NetworkRules::default()
        };
        let options = sandpy::RunOptions {
            network: Some(sandpy::network::Network::new(rules)?),
            ..sandpy::RunOptions::default()
        };
        let (mut inside, mut native) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            let e = rt.block_on(sandbox.run_with(&format!("{program}ms"), &options));
            inside.push(
                e.return_value
                    .as_ref()
                    .and_then(|v| v.as_f64())
                    .with_context(|| format!("the request loop failed: {e:?}"))?,
            );
            let out = std::process::Command::new(&self.args.python)
                .args(["-c", &format!("{program}print(ms)")])
                .output()
                .with_context(|| format!("running {}", self.args.python))?;
            let text = String::from_utf8_lossy(&out.stdout);
            native.push(text.trim().parse::<f64>().with_context(|| {
                format!(
                    "native loop: {text}{}",
                    String::from_utf8_lossy(&out.stderr)
                )
            })?);
        }
        let (s, n) = (median(&mut inside), median(&mut native));
        println!(
            "\nnetwork: an HTTP GET to a local server, per request (timed inside the program, {REQUESTS} requests x 5 rounds):\n  \
             through the sandbox (urllib.request, made by the host): {s:.3} ms; native {} (urllib.request): {n:.3} ms; ratio {:.2}x",
            self.args.python,
            s / n
        );
        Ok(())
    }
}
