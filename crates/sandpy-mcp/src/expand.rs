//! `${VAR}` and `${VAR:-default}` in the `mcpServers` entries, as Claude Code's `.mcp.json`
//! has them, so one config file can be shared while each person's tokens stay in their
//! environment.
//!
//! Exactly those two forms are expanded, in `command`, `args`, `env` values, `url` and
//! `headers` values. A variable that is set (even to the empty string) gives its value; an
//! unset one gives the default, and without a default the config is refused. The default
//! runs to the first `}` and is not expanded itself. Any other `$` text (`$VAR`, `$$`,
//! `${VAR-x}`, an unclosed `${`) is kept as written; there is no escape.
//!
//! Values taken from the environment may be secrets: [`Expansions`] remembers those of the
//! fields that messages can show (`command`, `url`, `headers`), so that every message
//! shows the `${VAR}` text instead.

use std::env::VarError;

/// Why one config string could not be expanded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ExpandError {
    /// `${NAME}` without a default, and `NAME` is not set.
    Unset(String),
    /// `NAME` is set to something that is not Unicode.
    NotUnicode(String),
}

impl std::fmt::Display for ExpandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExpandError::Unset(name) => write!(
                f,
                "environment variable `{name}` is not set (write `${{{name}:-default}}` to give a default)"
            ),
            ExpandError::NotUnicode(name) => {
                write!(f, "environment variable `{name}` is not valid Unicode")
            }
        }
    }
}

/// Where an expansion may look variables up: the process environment, or a map in tests.
pub(crate) type Lookup<'a> = &'a dyn Fn(&str) -> Result<String, VarError>;

/// Values a server entry took from the environment, each with the `${...}` text it was
/// written as, so that messages about the server show the text, never the value.
/// Defaults: none (a spec built in code has nothing to hide).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expansions {
    /// (value, text as written), longest value first.
    values: Vec<(String, String)>,
}

impl Expansions {
    /// True when nothing came from the environment, so there is nothing to hide.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Remember `other`'s values too (for text about several servers, such as a log).
    pub fn extend(&mut self, other: &Expansions) {
        for (value, written) in &other.values {
            self.remember(value, written);
        }
    }

    /// `text` with every remembered value replaced by the `${...}` text it came from.
    pub fn hide(&self, text: &str) -> String {
        if self.values.is_empty() {
            return text.to_string();
        }
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        'scan: while !rest.is_empty() {
            for (value, written) in &self.values {
                if let Some(after) = rest.strip_prefix(value.as_str()) {
                    out.push_str(written);
                    rest = after;
                    continue 'scan;
                }
            }
            let mut chars = rest.chars();
            out.extend(chars.next());
            rest = chars.as_str();
        }
        out
    }

    /// Remember `value` (from the environment) as written `written`, and the forms a URL
    /// parser or an HTTP library may print it in (percent-encoded), so that a value that
    /// went into a URL is hidden however a message shows it.
    fn remember(&mut self, value: &str, written: &str) {
        for encoded in [
            percent_encode(value, |b| {
                !b.is_ascii_alphanumeric() && !b"-._~".contains(&b)
            }),
            percent_encode(value, |b| b <= b' ' || b >= 0x7f || b"\"#<>'`".contains(&b)),
        ] {
            if encoded != value {
                self.remember_form(&encoded, written);
            }
        }
        self.remember_form(value, written);
    }

    fn remember_form(&mut self, value: &str, written: &str) {
        if value.is_empty() || self.values.iter().any(|(v, _)| v == value) {
            return;
        }
        let at = self
            .values
            .iter()
            .position(|(v, _)| v.len() < value.len())
            .unwrap_or(self.values.len());
        self.values.insert(at, (value.into(), written.into()));
    }
}

/// `text` with the bytes `encode` picks written as `%XX`.
fn percent_encode(text: &str, encode: impl Fn(u8) -> bool) -> String {
    let mut out = String::with_capacity(text.len());
    for &byte in text.as_bytes() {
        if encode(byte) {
            out.push_str(&format!("%{byte:02X}"));
        } else {
            out.push(char::from(byte));
        }
    }
    out
}

/// One `${NAME}` or `${NAME:-default}` at the start of `text` (just after the `${`): the
/// name, the default, and how many bytes it takes up to and including the `}`.
fn reference(text: &str) -> Option<(&str, Option<&str>, usize)> {
    let name_len = text
        .char_indices()
        .find(|&(i, c)| !(c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit())))
        .map_or(text.len(), |(i, _)| i);
    if name_len == 0 {
        return None;
    }
    let (name, rest) = text.split_at(name_len);
    if rest.starts_with('}') {
        return Some((name, None, name_len + 1));
    }
    let default = rest.strip_prefix(":-")?;
    let end = default.find('}')?;
    Some((name, Some(&default[..end]), name_len + 2 + end + 1))
}

/// Expand `text`; values from the environment are remembered in `hide` when given.
pub(crate) fn expand(
    text: &str,
    lookup: Lookup<'_>,
    mut hide: Option<&mut Expansions>,
) -> Result<String, ExpandError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some((name, default, len)) = reference(after) else {
            out.push_str("${");
            rest = after;
            continue;
        };
        match (lookup(name), default) {
            (Ok(value), _) => {
                if let Some(hide) = hide.as_deref_mut() {
                    hide.remember(&value, &rest[start..start + 2 + len]);
                }
                out.push_str(&value);
            }
            (Err(VarError::NotPresent), Some(default)) => out.push_str(default),
            (Err(VarError::NotPresent), None) => return Err(ExpandError::Unset(name.into())),
            (Err(VarError::NotUnicode(_)), _) => return Err(ExpandError::NotUnicode(name.into())),
        }
        rest = &after[len..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;

    fn env(name: &str) -> Result<String, VarError> {
        match name {
            "TOKEN" => Ok("s3cr3t".into()),
            "HOST" => Ok("example.test".into()),
            "EMPTY" => Ok(String::new()),
            "BINARY" => Err(VarError::NotUnicode(OsString::from_vec(vec![0xff]))),
            _ => Err(VarError::NotPresent),
        }
    }

    fn x(text: &str) -> Result<String, ExpandError> {
        expand(text, &env, None)
    }

    #[test]
    fn set_unset_and_default() {
        assert_eq!(x("${TOKEN}").as_deref(), Ok("s3cr3t"));
        assert_eq!(x("${TOKEN:-other}").as_deref(), Ok("s3cr3t"));
        assert_eq!(x("${NOPE:-fallback}").as_deref(), Ok("fallback"));
        assert_eq!(x("${NOPE:-}").as_deref(), Ok(""), "an empty default");
        assert_eq!(
            x("${EMPTY:-fallback}").as_deref(),
            Ok(""),
            "a variable set to the empty string is set"
        );
        assert_eq!(x("${NOPE}"), Err(ExpandError::Unset("NOPE".into())));
        assert_eq!(
            x("a ${HOST} b ${NOPE}"),
            Err(ExpandError::Unset("NOPE".into()))
        );
        assert_eq!(
            x("${BINARY:-x}"),
            Err(ExpandError::NotUnicode("BINARY".into()))
        );
    }

    #[test]
    fn text_around_and_several_in_one_string() {
        assert_eq!(
            x("Bearer ${TOKEN}").as_deref(),
            Ok("Bearer s3cr3t"),
            "text before"
        );
        assert_eq!(
            x("http://${HOST}:${PORT:-3001}/mcp?k=${TOKEN}&v=1").as_deref(),
            Ok("http://example.test:3001/mcp?k=s3cr3t&v=1")
        );
        assert_eq!(x("${TOKEN}${TOKEN}").as_deref(), Ok("s3cr3ts3cr3t"));
        assert_eq!(
            x("${NOPE:-a:-b}c}").as_deref(),
            Ok("a:-bc}"),
            "the default runs to the first `}}`"
        );
        assert_eq!(
            x("${NOPE:-${TOKEN}}").as_deref(),
            Ok("${TOKEN}"),
            "a default is not expanded itself"
        );
    }

    #[test]
    fn other_dollar_text_is_kept() {
        for text in [
            "$",
            "a $ b",
            "$TOKEN",
            "$$",
            "$${",
            "${",
            "${TOKEN",
            "${TOKEN:-x",
            "${}",
            "${1X}",
            "${TOKEN-x}",
            "${TOKEN:=x}",
            "${a b}",
            "price: 5$",
            "naïve ${ é",
        ] {
            assert_eq!(x(text).as_deref(), Ok(text), "{text:?}");
        }
        assert_eq!(
            x("$${TOKEN}").as_deref(),
            Ok("$s3cr3t"),
            "no escape: `$$` is not special"
        );
        assert_eq!(x("${${TOKEN}}").as_deref(), Ok("${s3cr3t}"));
    }

    #[test]
    fn values_from_the_environment_are_hidden_as_written() {
        let mut hide = Expansions::default();
        let url = expand(
            "http://${HOST}/mcp?key=${TOKEN}&p=${PORT:-80}",
            &env,
            Some(&mut hide),
        )
        .expect("expands");
        assert_eq!(url, "http://example.test/mcp?key=s3cr3t&p=80");
        expand("${EMPTY}", &env, Some(&mut hide)).expect("expands");
        assert_eq!(
            hide.hide(&format!("cannot connect to {url}: refused (s3cr3t)")),
            "cannot connect to http://${HOST}/mcp?key=${TOKEN}&p=80: refused (${TOKEN})",
            "defaults are config text, not secrets; empty values hide nothing"
        );
        assert_eq!(Expansions::default().hide("s3cr3t"), "s3cr3t");
    }

    #[test]
    fn the_longest_value_is_hidden_first() {
        let lookup = |name: &str| match name {
            "SHORT" => Ok("abc".to_string()),
            "LONG" => Ok("abcdef".to_string()),
            _ => Err(VarError::NotPresent),
        };
        let mut hide = Expansions::default();
        expand("${SHORT} ${LONG}", &lookup, Some(&mut hide)).expect("expands");
        assert_eq!(hide.hide("abcdefabc"), "${LONG}${SHORT}");
        let mut both = Expansions::default();
        let mut other = Expansions::default();
        expand("${SHORT}", &lookup, Some(&mut both)).expect("expands");
        expand("${LONG:-x}", &lookup, Some(&mut other)).expect("expands");
        both.extend(&other);
        assert_eq!(both.hide("abcdefabc"), "${LONG:-x}${SHORT}");
    }

    #[test]
    fn a_value_shown_percent_encoded_by_a_url_parser_is_hidden_too() {
        let lookup = |name: &str| match name {
            "KEY" => Ok("k y#é/+".to_string()),
            _ => Err(VarError::NotPresent),
        };
        let mut hide = Expansions::default();
        expand("${KEY}", &lookup, Some(&mut hide)).expect("expands");
        for shown in [
            "k y#é/+",
            "k%20y%23%C3%A9%2F%2B", // every byte but the unreserved ones
            "k%20y%23%C3%A9/+",     // a URL query as the WHATWG parser writes it
        ] {
            assert_eq!(
                hide.hide(&format!("url ?key={shown} failed")),
                "url ?key=${KEY} failed"
            );
        }
    }
}
