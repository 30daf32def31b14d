//! What the guest gets of a tool call: an upstream's `CallToolResult` as a JSON value, an
//! error result, a refused answer or a failed connection as an error text, and the size
//! limit (`max_tool_result_bytes`) on both.

use super::bounded::Refusal;
use super::schema;
use super::upstream::Upstream;
use super::Hub;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::ServiceError;
use serde_json::Value;
use std::sync::Arc;

fn is_connection_error(error: &ServiceError) -> bool {
    matches!(
        error,
        ServiceError::TransportClosed | ServiceError::TransportSend(_)
    )
}

/// The value Python sees: structured content, else the text content (decoded as JSON when
/// it is JSON), else the raw content blocks; an error result becomes the error text. A
/// value or error text over `limit` bytes is refused, naming `tool`, its size and the limit.
fn result_value(tool: &str, result: CallToolResult, limit: usize) -> Result<Value, String> {
    let texts: Vec<&str> = result
        .content
        .iter()
        .filter_map(ContentBlock::as_text)
        .map(|t| t.text.as_str())
        .collect();
    if result.is_error == Some(true) {
        let bytes = match &result.structured_content {
            Some(v) if texts.is_empty() => schema::json_len(v),
            _ => texts.iter().map(|t| t.len() + 1).sum(),
        };
        if bytes > limit {
            return Err(format!(
                "the error message of {tool} is {bytes} bytes, over the limit of {limit} bytes (max_tool_result_bytes)"
            ));
        }
        let message = if texts.is_empty() {
            result
                .structured_content
                .map(|v| v.to_string())
                .unwrap_or_else(|| "the tool reported an error".into())
        } else {
            texts.join("\n")
        };
        return Err(message);
    }
    let value = plain_value(result)?;
    if schema::holds_depth_marker(&value) {
        return Err(format!(
            "the result of {tool} is nested more than {} levels deep",
            super::bounded::MAX_DEPTH
        ));
    }
    let bytes = schema::json_len(&value);
    if bytes > limit {
        return Err(format!(
            "the result of {tool} is {bytes} bytes, over the limit of {limit} bytes (max_tool_result_bytes)"
        ));
    }
    Ok(value)
}

fn plain_value(result: CallToolResult) -> Result<Value, String> {
    if let Some(structured) = result.structured_content {
        return Ok(structured);
    }
    let decode =
        |text: &str| serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()));
    let mut values: Vec<Value> = result
        .content
        .iter()
        .map(|block| match block.as_text() {
            Some(text) => decode(&text.text),
            None => serde_json::to_value(block).unwrap_or(Value::Null),
        })
        .collect();
    Ok(match values.len() {
        0 => Value::Null,
        1 => values.remove(0),
        _ => Value::Array(values),
    })
}

impl Hub {
    /// A tool call's answer as the guest gets it: its value, or why not.
    pub(super) async fn outcome(
        &self,
        name: &str,
        upstream: &Arc<Upstream>,
        answer: Result<CallToolResult, ServiceError>,
    ) -> Result<Value, String> {
        match answer {
            Ok(result) => result_value(name, result, self.0.result_bytes),
            Err(error) if is_connection_error(&error) => {
                upstream.forget().await;
                let why = upstream
                    .explain(&error)
                    .unwrap_or_else(|| error.to_string());
                let why = upstream.spec.hide(&why);
                upstream.set_status(format!("crashed ({why}); restarts on the next call"));
                Err(format!("server {} failed during the call ({why}); it will be restarted on the next call", upstream.name))
            }
            Err(ServiceError::McpError(error)) => {
                let limit = self.0.result_bytes;
                if let Some(refusal) = Refusal::from_data(error.data.as_ref()) {
                    let size = match refusal.exact {
                        true => format!("{} bytes, over", refusal.bytes),
                        false => "over".into(),
                    };
                    Err(format!(
                        "the answer of {name} is {size} the limit of {} bytes on a message from an upstream (twice max_tool_result_bytes, plus 64 KiB); nothing of it was kept",
                        refusal.limit
                    ))
                } else if error.message.len() > limit {
                    Err(format!(
                        "the error message of {name} is {} bytes, over the limit of {limit} bytes (max_tool_result_bytes)",
                        error.message.len()
                    ))
                } else {
                    // The tool's own answer: passed on as the tool gave it.
                    Err(error.message.to_string())
                }
            }
            Err(error) => Err(upstream.spec.hide(&format!("tool {name} failed: {error}"))),
        }
    }
}
