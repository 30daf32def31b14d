//! Argument checks against a tool's `inputSchema`: an upstream tool's before a call leaves
//! the sandbox, and sandpy's own tools' before they run.

use serde_json::Value;

/// A compiled `inputSchema`; a schema that does not compile checks nothing (the upstream
/// server still validates), and says so in the log.
pub struct ArgumentSchema(Option<jsonschema::Validator>);

impl ArgumentSchema {
    /// Compile `schema` for `tool`.
    pub fn compile(tool: &str, schema: &Value) -> ArgumentSchema {
        match jsonschema::validator_for(schema) {
            Ok(validator) => ArgumentSchema(Some(validator)),
            Err(e) => {
                tracing::warn!(
                    "inputSchema of {tool} does not compile ({e}); its arguments are not checked"
                );
                ArgumentSchema(None)
            }
        }
    }

    /// `Ok` when `arguments` fit; else every violation, one per line.
    pub fn check(&self, tool: &str, arguments: &Value) -> Result<(), String> {
        let Some(validator) = &self.0 else {
            return Ok(());
        };
        let violations: Vec<String> = validator
            .iter_errors(arguments)
            .map(|e| {
                let at = e.instance_path.to_string();
                if at.is_empty() {
                    format!("- {e}")
                } else {
                    format!("- at {at}: {e}")
                }
            })
            .collect();
        if violations.is_empty() {
            return Ok(());
        }
        Err(format!(
            "arguments of {tool} do not match its inputSchema:\n{}",
            violations.join("\n")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lists_every_violation() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "required": ["a", "b"]});
        let s = ArgumentSchema::compile("t", &schema);
        assert!(s.check("t", &json!({"a": 1, "b": "x"})).is_ok());
        let e = s.check("t", &json!({"a": "one"})).unwrap_err();
        assert!(
            e.contains("at /a") && e.contains("\"b\" is a required property"),
            "{e}"
        );
        assert_eq!(e.lines().count(), 3, "{e}");
    }
}
