//! Pieces of Python source made from untrusted text: names, literals, docstrings and
//! comments, each valid Python whatever the text holds.

use serde_json::Value;

/// Python's keywords (3.14): names that cannot be a parameter or an attribute in code.
const KEYWORDS: [&str; 35] = [
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield",
];

/// Whether `name` can be written as a parameter or attribute: an ASCII identifier that is
/// not a keyword. (Non-ASCII identifiers are valid Python, but are treated as not, so that
/// no normalisation question arises.)
pub(super) fn is_plain_name(name: &str) -> bool {
    let mut chars = name.chars();
    let starts = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    starts && chars.all(|c| c.is_ascii_alphanumeric() || c == '_') && !KEYWORDS.contains(&name)
}

/// The attribute an MCP server or tool name gets in the guest's `tools` namespace, as
/// `guest/sandpy_guest/tools.py`'s `python_name` makes it: every character that is not an
/// ASCII letter, digit or `_` becomes `_`, a leading digit gets a `_` before it; `None` for
/// a name starting with `_` (such tools are called by full name).
pub fn python_name(name: &str) -> Option<String> {
    if name.starts_with('_') {
        return None;
    }
    let ident: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    Some(if ident.starts_with(|c: char| c.is_ascii_digit()) {
        format!("_{ident}")
    } else {
        ident
    })
}

/// `text` as an identifier for a generated name: its ASCII letters and digits in
/// CamelCase (`get-tiny_image` is `GetTinyImage`), at most 40 bytes; `fallback` when
/// nothing is left.
pub(super) fn camel(text: &str, fallback: &str) -> String {
    let mut out = String::new();
    let mut upper = true;
    for c in text.chars() {
        if !c.is_ascii_alphanumeric() {
            upper = true;
            continue;
        }
        if out.len() == 40 {
            break;
        }
        if out.is_empty() && c.is_ascii_digit() {
            out.push('T');
        }
        out.push(if upper { c.to_ascii_uppercase() } else { c });
        upper = false;
    }
    if out.is_empty() {
        fallback.to_string()
    } else {
        out
    }
}

/// `value` as a Python literal (`None`, `True`, numbers, strings, lists, dicts), or `None`
/// when it takes more than `max` bytes. JSON's string escapes are all Python escapes too.
pub(super) fn literal(value: &Value, max: usize) -> Option<String> {
    let mut out = String::new();
    write_literal(value, &mut out, max).then_some(out)
}

fn write_literal(value: &Value, out: &mut String, max: usize) -> bool {
    match value {
        Value::Null => out.push_str("None"),
        Value::Bool(true) => out.push_str("True"),
        Value::Bool(false) => out.push_str("False"),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => out.push_str(&Value::String(s.clone()).to_string()),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                if out.len() > max || !write_literal(item, out, max) {
                    return false;
                }
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push_str(": ");
                if out.len() > max || !write_literal(item, out, max) {
                    return false;
                }
            }
            out.push('}');
        }
    }
    out.len() <= max
}

/// A value `Literal[...]` may hold: a string, an integer, a boolean or `None`.
pub(super) fn literal_member(value: &Value) -> Option<String> {
    match value {
        Value::Number(n) if n.is_i64() || n.is_u64() => Some(n.to_string()),
        Value::Number(_) | Value::Array(_) | Value::Object(_) => None,
        _ => literal(value, usize::MAX),
    }
}

/// `text` cut to at most `max` bytes on a character boundary, `...` added when cut.
pub(super) fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max.saturating_sub(3);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", text[..end].trim_end())
}

/// Whether Python or a reader could take `c` for the end of a line, or it is a control.
fn breaks_line(c: char) -> bool {
    c.is_control() || matches!(c, '\u{2028}' | '\u{2029}')
}

/// `text`'s first line, as a comment's text: one line, no controls, at most `max` bytes.
pub(super) fn comment(text: &str, max: usize) -> String {
    let line = text.trim().lines().next().unwrap_or_default();
    let line: String = line
        .chars()
        .map(|c| if breaks_line(c) { ' ' } else { c })
        .collect();
    cut(line.trim(), max)
}

/// `text` as the body of a `"""` string: backslashes doubled, no run of quotes that could
/// close it, no quote last, controls other than newlines as spaces, lines after the first
/// indented by `indent`.
pub(super) fn docstring(text: &str, indent: &str) -> String {
    let text = text.trim().replace("\r\n", "\n");
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len() + 8);
    for (i, &c) in chars.iter().enumerate() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' if chars.get(i + 1).is_none_or(|next| *next == '"') => out.push_str("\\\""),
            '\n' => {
                out.push('\n');
                if chars.get(i + 1).is_some_and(|next| *next != '\n') {
                    out.push_str(indent);
                }
            }
            c if breaks_line(c) => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_follow_the_guest() {
        assert!(is_plain_name("path") && is_plain_name("_x1") && is_plain_name("match"));
        assert!(!is_plain_name("class") && !is_plain_name("a-b") && !is_plain_name("1a"));
        assert!(!is_plain_name("") && !is_plain_name("é"));
        assert_eq!(python_name("get-sum").as_deref(), Some("get_sum"));
        assert_eq!(python_name("2fa.x").as_deref(), Some("_2fa_x"));
        assert_eq!(python_name("_hidden"), None);
        assert_eq!(camel("get-tiny_image", "X"), "GetTinyImage");
        assert_eq!(camel("9lives", "X"), "T9lives");
        assert_eq!(camel("--", "X"), "X");
    }

    #[test]
    fn literals_are_python() {
        let value = json!({"a": [1, 2.5, true, null, "q\"\n"]});
        assert_eq!(
            literal(&value, 100).as_deref(),
            Some(r#"{"a": [1, 2.5, True, None, "q\"\n"]}"#)
        );
        assert_eq!(literal(&json!("x".repeat(50)), 10), None);
        assert_eq!(literal_member(&json!(1.5)), None);
        assert_eq!(literal_member(&json!(7)).as_deref(), Some("7"));
    }

    #[test]
    fn docstrings_and_comments_cannot_break_out() {
        assert_eq!(
            docstring(r#"say """hi"" \n"#, "  "),
            r#"say \"\""hi\"" \\n"#
        );
        assert_eq!(docstring("a\nb\n\nc", "    "), "a\n    b\n\n    c");
        assert_eq!(docstring("x\u{0}y\u{2028}", ""), "x y");
        assert_eq!(comment("one\rtwo\nthree", 80), "one two");
        assert_eq!(comment(&"w".repeat(100), 10), "wwwwwww...");
    }
}
