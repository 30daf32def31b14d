//! What collecting rich outputs costs a run: a fresh run with none against one
//! `display()` of an object with `_repr_html_` and `_repr_png_` (WebAssembly tier), and
//! against one matplotlib figure left open (native tier, where its venv has matplotlib).

use crate::measure::{median, timed_run};
use crate::Bench;
use std::process::Command;

/// One `display()` of an object with an HTML and a (small, valid) PNG representation.
const DISPLAY: &str = "import base64\nclass Chart:\n    def _repr_html_(self):\n        return '<b>chart</b>'\n    def _repr_png_(self):\n        return base64.b64decode('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==')\ndisplay(Chart())";

/// One figure left open at the end: collected as a PNG, as `plt.show()` would show it.
const FIGURE: &str = "import matplotlib.pyplot as plt\n_ = plt.plot([1, 3, 2])";

impl Bench {
    /// Fresh runs with and without rich outputs, alternating, each with its ratio to the
    /// plain `print('hello')` of the same tier measured in the same run.
    pub(crate) fn outputs(&self) -> anyhow::Result<()> {
        let (rt, runs) = (&self.rt, self.args.runs.max(1));
        let wasm = sandpy::RunOptions::default();
        let mut tiers = vec![("WebAssembly tier", self.sandbox.clone(), wasm, DISPLAY)];
        if let Some(venv) = self.args.native_venv.as_ref().filter(|venv| {
            let python = venv.join("bin").join("python");
            let probe = Command::new(python)
                .args(["-c", "import matplotlib"])
                .output();
            probe.is_ok_and(|out| out.status.success())
        }) {
            let sandbox = sandpy::Sandbox::new(sandpy::Config {
                native: Some(sandpy::native::NativeConfig {
                    venv: Some(venv.clone()),
                    preimport: vec!["numpy".into(), "matplotlib.pyplot".into()],
                    ..Default::default()
                }),
                ..crate::config()
            })?;
            let native = sandpy::RunOptions {
                tier: sandpy::Tier::Native,
                ..sandpy::RunOptions::default()
            };
            tiers.push(("native tier", sandbox, native, FIGURE));
        } else {
            println!("outputs: native tier skipped (pass --native-venv DIR with matplotlib)");
        }
        for (tier, sandbox, options, with_output) in &tiers {
            let e = rt.block_on(sandbox.run_with(with_output, options));
            anyhow::ensure!(
                e.outputs.len() == 1,
                "{tier}: {with_output:?} gave {} rich outputs, not 1: {e:?}",
                e.outputs.len()
            );
            let (mut plain, mut collected) = (Vec::new(), Vec::new());
            // Alternating blocks, as `hello` does, so that drift falls on both alike.
            while plain.len() < runs {
                for _ in 0..runs.min(10) {
                    plain.push(timed_run(rt, sandbox, "print('hello')", options)?);
                }
                for _ in 0..runs.min(10) {
                    collected.push(timed_run(rt, sandbox, with_output, options)?);
                }
            }
            let (p, c) = (median(&mut plain), median(&mut collected));
            let what = if *with_output == DISPLAY {
                "one display() of an object with _repr_html_ and _repr_png_"
            } else {
                "one matplotlib figure (numpy, matplotlib.pyplot pre-imported)"
            };
            println!(
                "outputs, {tier}: fresh print('hello') (no outputs) p50 {p:.3} ms;  {what} \
                 p50 {c:.3} ms ({:.2}x; n={} each)",
                c / p,
                plain.len()
            );
        }
        Ok(())
    }
}
