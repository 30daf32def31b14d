//! Finding the `sandpy` commands the README and the guides show: shared by the unit test
//! that checks their flags against the command line (`documented/mod.rs`) and the
//! integration test that runs them (`tests/all/documented.rs`).

use std::path::{Path, PathBuf};

/// The Markdown files users read: the README and everything under `docs/`.
pub(crate) fn documents() -> Vec<PathBuf> {
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
pub(crate) struct Use {
    /// `file:line`.
    pub(crate) place: String,
    /// The words after `sandpy`, quotes removed.
    pub(crate) words: Vec<String>,
    /// A whole line of a code block (else a piece of prose).
    pub(crate) whole: bool,
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
pub(crate) fn uses(path: &Path, text: &str, subcommands: &[String]) -> Vec<Use> {
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
            // `sandpy-bench ...` is `sandpy bench ...`; `cargo run --release -- ...` (the
            // README's first command) is `sandpy ...` built from the checkout.
            if words.first().is_some_and(|w| w == "sandpy-bench") {
                words.splice(0..1, ["sandpy".to_string(), "bench".to_string()]);
            }
            if words.starts_with(&["cargo", "run", "--release", "--"].map(String::from)) {
                words.splice(0..4, ["sandpy".to_string()]);
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

/// Whether a use stands for commands rather than being one: `...`, `[--flag X]`, `<x>`,
/// `FILE`; or a program's output (a parenthesis).
pub(crate) fn has_placeholder(words: &[String]) -> bool {
    words.iter().any(|w| {
        w == "..."
            || w.starts_with(['[', '<', '('])
            || (w.chars().any(|c| c.is_ascii_uppercase()) && !w.contains('.'))
    })
}
