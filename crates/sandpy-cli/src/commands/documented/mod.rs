//! A test that the `sandpy` commands the README and the guides show are commands this
//! binary takes: every flag they name exists on its subcommand, and every whole command
//! line in a code block parses. `sandpy bench` hands its arguments to the `sandpy-bench`
//! program, so its uses (and those of `sandpy-bench` itself) are checked against that
//! program's command line.

mod scan;

use clap::{CommandFactory, Parser};
use scan::{documents, has_placeholder, uses};

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
            // A whole line without placeholders must parse as it stands.
            if found.whole && !has_placeholder(&found.words) {
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
