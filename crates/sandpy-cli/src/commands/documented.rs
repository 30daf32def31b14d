//! A test that the `sandpy` commands the README and the guides show are commands this
//! binary takes: every flag they name exists on its subcommand, and every whole command
//! line in a code block parses. `sandpy bench` hands its arguments to the `sandpy-bench`
//! program, so its uses (and those of `sandpy-bench` itself) are checked against that
//! program's command line.

use clap::{CommandFactory, Parser};
use std::path::{Path, PathBuf};

/// The Markdown files users read: the README and everything under `docs/`.
fn documents() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = vec![root.join("README.md")];
    let mut folders = vec![root.join("docs")];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).expect("docs folder").flatten() {
            let path = entry.path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    files
}

/// A documented use of a subcommand: where it is, its words after `sandpy`, and whether
/// it is a whole line of a code block (else a piece of prose, which may leave words out).
struct Use {
    place: String,
    words: Vec<String>,
    whole: bool,
}

/// Split like a shell: whitespace outside quotes, quotes removed.
fn words(text: &str) -> Vec<String> {
    let (mut words, mut word, mut quote, mut any) = (Vec::new(), String::new(), None, false);
    for c in text.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true;
            }
            (None, c) if c.is_whitespace() => {
                if any || !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                    any = false;
                }
            }
            (None, c) => word.push(c),
        }
    }
    if any || !word.is_empty() {
        words.push(word);
    }
    words
}

/// Every `sandpy SUBCOMMAND ...` in `text`: in code blocks (a line, up to a `#` comment),
/// and in inline code spans.
fn uses(path: &Path, text: &str, subcommands: &[String]) -> Vec<Use> {
    let mut found = Vec::new();
    let mut in_block = false;
    for (n, line) in text.lines().enumerate() {
        let place = format!("{}:{}", path.display(), n + 1);
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        let mut pieces: Vec<(&str, bool)> = Vec::new();
        if in_block {
            let command = line.trim_start().trim_start_matches("$ ");
            let command = command.split(" # ").next().unwrap_or(command);
            pieces.push((command, true));
        } else {
            pieces.extend(line.split('`').skip(1).step_by(2).map(|span| (span, false)));
        }
        for (piece, whole) in pieces {
            let mut words = words(piece);
            if words.first().is_some_and(|w| w == "sandpy-bench") {
                words.splice(0..1, ["sandpy".to_string(), "bench".to_string()]);
            }
            let is_use = words.first().is_some_and(|w| w == "sandpy")
                && words.get(1).is_some_and(|w| subcommands.contains(w));
            if is_use {
                found.push(Use {
                    place: place.clone(),
                    words: words[1..].to_vec(),
                    whole,
                });
            }
        }
    }
    found
}

#[test]
fn documented_commands_are_commands_this_binary_takes() {
    let cli = super::Cli::command();
    let subcommands: Vec<String> = cli
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    let mut checked = 0;
    let mut problems = Vec::new();
    for path in documents() {
        let text = std::fs::read_to_string(&path).expect("read");
        for found in uses(&path, &text, &subcommands) {
            checked += 1;
            let bench = found.words[0] == "bench";
            let sub = if bench {
                sandpy_bench::Args::command()
            } else {
                cli.find_subcommand(&found.words[0])
                    .expect("a subcommand")
                    .clone()
            };
            for word in &found.words[1..] {
                let flag = word.split('=').next().unwrap_or(word);
                let known = match flag.strip_prefix("--") {
                    Some("help" | "") => true,
                    Some(long) => sub.get_arguments().any(|a| a.get_long() == Some(long)),
                    None => match flag
                        .strip_prefix('-')
                        .map(|s| s.chars().collect::<Vec<_>>())
                    {
                        Some(short) if short.len() == 1 => {
                            sub.get_arguments().any(|a| a.get_short() == Some(short[0]))
                        }
                        _ => true, // a value or a positional argument
                    },
                };
                if !known {
                    problems.push(format!(
                        "{}: `{flag}` is not a flag of `sandpy {}`",
                        found.place, found.words[0]
                    ));
                }
            }
            // A whole line without placeholders (`...`, `[--flag X]`, `<x>`, `FILE`) must
            // parse as it stands; one with a parenthesis is a program's output, not a
            // command.
            let placeholder = found.words.iter().any(|w| {
                w == "..."
                    || w.starts_with(['[', '<', '('])
                    || (w.chars().any(|c| c.is_ascii_uppercase()) && !w.contains('.'))
            });
            if found.whole && !placeholder {
                let parsed = if bench {
                    let line = std::iter::once("sandpy-bench")
                        .chain(found.words[1..].iter().map(String::as_str));
                    sandpy_bench::Args::try_parse_from(line).map(drop)
                } else {
                    let line =
                        std::iter::once("sandpy").chain(found.words.iter().map(String::as_str));
                    super::Cli::try_parse_from(line).map(drop)
                };
                if let Err(e) = parsed {
                    problems.push(format!(
                        "{}: `sandpy {}` does not parse: {}",
                        found.place,
                        found.words.join(" "),
                        e.kind()
                    ));
                }
            }
        }
    }
    assert!(checked > 40, "only {checked} documented commands found");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
