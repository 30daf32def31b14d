//! Snapshots of every command's `--help` and of the main error messages: a change to what
//! users read shows in review as a change to a `.snap` file (`INSTA_UPDATE=always cargo
//! test -p sandpy-cli --test cli help` writes the new ones).

use std::process::Command;

/// `sandpy ARGS` with help wrapped at a fixed width: its stdout, stderr and exit code.
fn sandpy(args: &[&str]) -> (String, String, i32) {
    let out = Command::new(env!("CARGO_BIN_EXE_sandpy"))
        .args(args)
        .env("COLUMNS", "100")
        .env_remove("SANDPY_CONFIG")
        .env_remove("SANDPY_WARM")
        .env_remove("SANDPY_COLD")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("sandpy");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.code().unwrap_or(-1),
    )
}

#[test]
fn help_of_every_command() {
    let commands = [
        "", "run", "check", "call", "serve", "demo", "warmup", "build",
    ];
    for command in commands {
        let args: Vec<&str> = command.split_whitespace().chain(["--help"]).collect();
        let (stdout, stderr, code) = sandpy(&args);
        assert_eq!(code, 0, "{command} --help: {stderr}");
        let name = if command.is_empty() {
            "sandpy"
        } else {
            command
        };
        insta::assert_snapshot!(format!("help_{name}"), stdout);
    }
    // `sandpy bench --help` is the help of the `sandpy-bench` program it hands over to.
    let mut bench = <sandpy_bench::Args as clap::CommandFactory>::command().term_width(100);
    insta::assert_snapshot!("help_bench", bench.render_help().to_string());
}

#[test]
fn main_error_messages() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad_key = dir.path().join("bad.json");
    std::fs::write(&bad_key, r#"{"sandpy": {"limits": {"timeout": 5}}}"#).expect("config");
    let cases: [(&str, Vec<String>); 4] = [
        (
            "missing_config",
            vec![
                "run".into(),
                "--config".into(),
                "/nonexistent/sandpy.json".into(),
                "-c".into(),
                "1".into(),
            ],
        ),
        (
            "unknown_config_key",
            vec![
                "run".into(),
                "--config".into(),
                bad_key.display().to_string(),
                "-c".into(),
                "1".into(),
            ],
        ),
        ("no_program", vec!["run".into()]),
        (
            "warm_and_cold",
            vec![
                "run".into(),
                "--warm".into(),
                "--cold".into(),
                "-c".into(),
                "1".into(),
            ],
        ),
    ];
    for (name, args) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (_, stderr, code) = sandpy(&args);
        assert_ne!(code, 0, "{name}: {stderr}");
        let stderr = stderr.replace(&dir.path().display().to_string(), "[DIR]");
        insta::assert_snapshot!(format!("error_{name}"), format!("exit {code}\n{stderr}"));
    }
}
