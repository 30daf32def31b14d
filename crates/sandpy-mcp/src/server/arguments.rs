//! Checking a tool's arguments before it runs: each tool's [`Check`] parses them as its
//! parameter struct would, so a malformed call is answered with the field at fault (as a
//! tool error the model can correct) instead of reaching the router.

use serde::de::DeserializeOwned;
use serde_json::Value;

/// Parses a tool's arguments as its parameter struct would be; the message names the
/// field at fault.
pub(super) type Check = fn(&Value) -> Result<(), String>;

/// `arguments` parse as a `T`; else where and why not, the place as a JSON pointer
/// (`at /files/0: missing field `path``).
pub(super) fn parses_as<T: DeserializeOwned>(arguments: &Value) -> Result<(), String> {
    match serde_path_to_error::deserialize::<_, T>(arguments) {
        Ok(_) => Ok(()),
        Err(e) => {
            let mut at = String::new();
            for segment in e.path().iter() {
                use serde_path_to_error::Segment;
                at.push('/');
                match segment {
                    Segment::Seq { index } => at.push_str(&index.to_string()),
                    Segment::Map { key } => at.push_str(key),
                    Segment::Enum { variant } => at.push_str(variant),
                    Segment::Unknown => at.push('?'),
                }
            }
            let why = e.into_inner();
            Err(if at.is_empty() {
                why.to_string()
            } else {
                format!("at {at}: {why}")
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::ServerState;
    use super::*;

    /// A tool with arguments but no check would take malformed requests to the router,
    /// which answers them as `isError` results instead of protocol errors.
    #[test]
    fn every_tool_with_arguments_has_a_check_and_no_check_is_stray() {
        let (tools, checks) = ServerState::tools_and_checks();
        let listed = tools.list_all();
        for tool in &listed {
            let has_arguments = tool
                .input_schema
                .get("properties")
                .and_then(Value::as_object)
                .is_some_and(|properties| !properties.is_empty());
            assert_eq!(
                checks.contains_key(tool.name.as_ref()),
                has_arguments,
                "{}",
                tool.name
            );
        }
        assert!(checks
            .keys()
            .all(|name| listed.iter().any(|tool| tool.name == *name)));
    }
}
