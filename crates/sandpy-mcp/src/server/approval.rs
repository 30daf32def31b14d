//! Approval of tool calls over MCP: a call that needs approval (`sandpy.approve`) is put
//! to the client's user through elicitation (`elicitation/create`, naming the tool and
//! showing its arguments), and waits for the answer within the run's time limit. A client
//! that cannot be asked gets the call refused, never silently allowed.

use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema};
use rmcp::service::{ElicitationMode, Peer};
use rmcp::RoleServer;
use sandpy::tools::{ApprovalFuture, ApprovalRequest, Approver, Decision, Unshowable};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The arguments shown to the user at most, in bytes; longer ones are cut and marked.
const SHOWN_ARGUMENTS: usize = 2000;

/// The approver of one request's run: asks `peer`'s user.
pub(super) fn approver(peer: Peer<RoleServer>) -> Arc<dyn Approver> {
    Arc::new(move |request: ApprovalRequest| -> ApprovalFuture {
        let peer = peer.clone();
        Box::pin(async move { ask(&peer, &request).await })
    })
}

async fn ask(peer: &Peer<RoleServer>, request: &ApprovalRequest) -> Decision {
    let tool = &request.tool;
    if !peer
        .supported_elicitation_modes()
        .contains(&ElicitationMode::Form)
    {
        return Decision::decline(
            "sandpy",
            Some(format!(
                "{tool} needs approval (sandpy.approve) and this MCP client cannot ask its \
                 user (it does not support elicitation), so the call was refused"
            )),
        );
    }
    let message = match message(request) {
        Ok(message) => message,
        Err(unshowable) => return Decision::unshown(tool, &unshowable),
    };
    let params = ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema: ElicitationSchema::new(BTreeMap::new()),
    };
    match peer.create_elicitation(params).await {
        Ok(answer) => match answer.action {
            ElicitationAction::Accept => Decision::approve("elicitation"),
            ElicitationAction::Decline => Decision::decline("elicitation", None),
            // Cancel, or an answer newer than this server: not a yes.
            _ => Decision::decline(
                "elicitation",
                Some(format!("the user cancelled the approval of {tool}")),
            ),
        },
        Err(e) => Decision::decline(
            "sandpy",
            Some(format!(
                "asking the user to approve {tool} failed ({e}), so the call was refused"
            )),
        ),
    }
}

/// What the user reads: the tool and every argument, each value cut to a readable size;
/// arguments that cannot all be shown are not asked about.
fn message(request: &ApprovalRequest) -> Result<String, Unshowable> {
    let arguments = request.shown_arguments(SHOWN_ARGUMENTS)?;
    Ok(format!(
        "The sandboxed program wants to call {}. Allow it?\nArguments:\n{arguments}",
        request.tool
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_arguments_are_cut_and_marked() {
        let request = ApprovalRequest {
            tool: "mcp__fs__write_file".into(),
            arguments: serde_json::json!({"content": "é".repeat(3000)}),
        };
        let text = message(&request).expect("shown");
        assert!(text.contains("mcp__fs__write_file"));
        assert!(text.len() < SHOWN_ARGUMENTS + 200, "{}", text.len());
        assert!(text.ends_with("more bytes]\n"));
    }
}
