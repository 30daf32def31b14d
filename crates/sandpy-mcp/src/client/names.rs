//! Upstream tool names: which the hub accepts, and the Python attribute each gets in the
//! guest's `tools.<server>.<tool>` namespace (`guest/sandpy_guest/tools.py` maps them the
//! same way; the hub only logs what it finds).
//!
//! A name is 1 to 128 characters of `A-Z a-z 0-9 _ - .`, the set the MCP specification
//! recommends; anything else (an empty name, a newline, 5,000 characters) is refused with a
//! logged reason and the tool skipped. Names that map to one attribute (`a-b` and `a.b`
//! both give `a_b`) are a collision: neither gets the attribute, both stay callable by
//! full name. Names starting with `_` get no attribute, so that no tool can stand for a
//! Python internal (`__class__`, `__dict__`).

/// The longest tool name accepted.
pub(crate) const MAX_NAME_CHARS: usize = 128;

/// Why `name` is not accepted as a tool name.
pub(crate) fn check(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("its name is empty".into());
    }
    let chars = name.chars().count();
    if chars > MAX_NAME_CHARS {
        return Err(format!(
            "its name is {chars} characters long, over the limit of {MAX_NAME_CHARS}"
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
    {
        return Err(format!(
            "its name holds {bad:?}; tool names may hold only A-Z, a-z, 0-9, _, - and ."
        ));
    }
    Ok(())
}

/// The Python attribute of a tool or server name (`-` and `.` become `_`; a leading digit
/// gets a `_`), or `None` when the name gets none (it starts with `_`).
pub(crate) fn python_name(name: &str) -> Option<String> {
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

/// Groups of names (of one server) that map to the same attribute.
pub(crate) fn collisions<'a>(
    names: impl IntoIterator<Item = &'a str>,
) -> Vec<(String, Vec<&'a str>)> {
    let mut by_attribute: std::collections::BTreeMap<String, Vec<&str>> = Default::default();
    for name in names {
        if let Some(attribute) = python_name(name) {
            by_attribute.entry(attribute).or_default().push(name);
        }
    }
    by_attribute
        .into_iter()
        .filter(|(_, names)| names.len() > 1)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_names_are_refused_with_the_reason() {
        assert_eq!(check(""), Err("its name is empty".into()));
        assert!(check("a\nb").unwrap_err().contains("'\\n'"));
        assert!(check(&"x".repeat(5000))
            .unwrap_err()
            .contains("5000 characters long, over the limit of 128"));
        for good in [
            "echo",
            "get-sum",
            "admin.tools.list",
            "__class__",
            "x".repeat(128).as_str(),
        ] {
            assert_eq!(check(good), Ok(()), "{good}");
        }
    }

    #[test]
    fn python_names_and_collisions() {
        assert_eq!(python_name("get-sum").as_deref(), Some("get_sum"));
        assert_eq!(python_name("3d").as_deref(), Some("_3d"));
        assert_eq!(python_name("__class__"), None);
        assert_eq!(python_name("_private"), None);
        assert_eq!(
            collisions(["a-b", "a.b", "c", "_a_b"]),
            vec![("a_b".to_string(), vec!["a-b", "a.b"])]
        );
    }
}
