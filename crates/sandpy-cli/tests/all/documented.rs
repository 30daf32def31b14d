//! Every whole command line the README and the guides show (`sandpy ...`, and the README's
//! `cargo run --release -- demo`) is run, in a folder holding the files those commands name,
//! and must succeed. The few that are not run here are listed with the reason, and the list
//! is checked against the docs so that it cannot outlive them.

#[path = "../../src/commands/documented/scan.rs"]
mod scan;

use crate::{native::native_venv, sandpy, FILESYSTEM_PKG};
use std::collections::BTreeSet;
use std::path::Path;

/// Documented commands not run by this test, and why.
const NOT_RUN: &[(&str, &str)] = &[
    (
        "warmup --keep",
        "leaves a runner for 15 minutes; warm::a_runner_that_is_up_serves_commands_without_the_flag_and_none_is_started_for_them runs it",
    ),
    (
        "run --warm script.py",
        "starts a background runner; warm.rs runs `--warm` with a short idle time",
    ),
    ("bench", "the whole bench takes about ten minutes; scripts/bench-compare runs its parts"),
    (
        "build --with toolz==1.0.0 -o my-runtime.wasm",
        "fetches from PyPI and builds a whole runtime (minutes); packages.rs fetches the same package into a folder (--folder)",
    ),
    (
        "build --native --with numpy --with pandas --with scikit-learn -o native-venv",
        "fetches scikit-learn; native.rs builds the same venv with numpy and pandas (native_venv)",
    ),
];

/// The subcommands `sandpy --help` lists.
fn subcommands() -> Vec<String> {
    let out = sandpy().arg("--help").output().expect("sandpy --help");
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    let listed = help.split("Commands:").nth(1).expect("a Commands: section");
    listed
        .lines()
        .skip(1)
        .take_while(|line| !line.trim().is_empty())
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(String::from)
        .collect()
}

/// The files the documented commands name, in `dir`: a script, a report program with its
/// input file and a folder to mount, a config with a filesystem upstream, and one for the
/// native tier.
fn fixtures(dir: &Path) {
    let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).expect(name);
    write("script.py", "print('hello from script.py')\n");
    write("data.csv", "a,b\n1,2\n");
    std::fs::create_dir_all(dir.join("ref")).expect("ref");
    write("ref/notes.txt", "reference\n");
    write(
        "report.py",
        "rows = open('data.csv').read().splitlines()\n\
         notes = open('/ref/notes.txt').read()\n\
         open('/output/report.txt', 'w').write(f'{len(rows)} rows, {notes}')\n",
    );
    let upstreams = serde_json::json!({
        "mcpServers": {"fs": {"command": "npx", "args": ["-y", FILESYSTEM_PKG, dir]}},
    });
    write("upstreams.json", &upstreams.to_string());
    let native = serde_json::json!({"sandpy": {"native": {"venv": native_venv()}}});
    write("native.json", &native.to_string());
}

#[test]
fn every_whole_documented_command_runs() {
    let subcommands = subcommands();
    let dir = tempfile::tempdir().expect("tempdir");
    fixtures(dir.path());
    let mut seen = BTreeSet::new();
    let (mut ran, mut problems) = (Vec::new(), Vec::new());
    let mut skipped = BTreeSet::new();
    for path in scan::documents() {
        let text = std::fs::read_to_string(&path).expect("read");
        for found in scan::uses(&path, &text, &subcommands) {
            let line = found.words.join(" ");
            if !found.whole || scan::has_placeholder(&found.words) || !seen.insert(line.clone()) {
                continue;
            }
            if NOT_RUN.iter().any(|(command, _)| *command == line) {
                skipped.insert(line);
                continue;
            }
            let out = sandpy()
                .args(&found.words)
                .current_dir(dir.path())
                .output()
                .expect("sandpy");
            if !out.status.success() {
                problems.push(format!(
                    "{}: `sandpy {line}` exited with {}: {}{}",
                    found.place,
                    out.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            ran.push(line);
        }
    }
    for (command, _) in NOT_RUN {
        if !skipped.contains(*command) {
            problems.push(format!(
                "`sandpy {command}` is listed as not run, and no document shows it"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // What the commands were to do, where they leave something to look at.
    let report =
        std::fs::read_to_string(dir.path().join("out/report.txt")).expect("out/report.txt");
    assert_eq!(report, "2 rows, reference\n");
    for expected in [
        "demo",
        "run -c print(6 * 7)",
        "check script.py --policy strict",
    ] {
        assert!(
            ran.iter().any(|l| l == expected),
            "`sandpy {expected}` was not run: {ran:?}"
        );
    }
}

/// The README's first command, `cargo run --release -- demo`, names no binary: cargo runs
/// it only when the workspace's default members have exactly one (it once had two, and
/// the command failed at once on a fresh clone). Asked of `cargo metadata`, not assumed.
#[test]
fn the_readmes_first_command_has_one_binary_to_run() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let first = readme
        .split("```sh\n")
        .nth(1)
        .and_then(|block| block.lines().next())
        .expect("a sh block in the README");
    let command = first.split('#').next().unwrap_or_default().trim();
    assert_eq!(
        command, "cargo run --release -- demo",
        "the README's first command"
    );
    let out = std::process::Command::new(std::env::var("CARGO").unwrap_or("cargo".into()))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(&root)
        .output()
        .expect("cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let defaults = metadata["workspace_default_members"]
        .as_array()
        .expect("default members");
    let binaries: Vec<&str> = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .filter(|package| defaults.contains(&package["id"]))
        .flat_map(|package| package["targets"].as_array().into_iter().flatten())
        .filter(|target| {
            target["kind"]
                .as_array()
                .is_some_and(|k| k.contains(&"bin".into()))
        })
        .filter_map(|target| target["name"].as_str())
        .collect();
    assert_eq!(binaries, ["sandpy"], "what `cargo run` can choose from");
}
