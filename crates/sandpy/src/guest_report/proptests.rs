//! Arbitrary guest reports, in both tiers' shapes, through [`check`] and the verdict to an
//! [`Execution`] and what a model is shown of it. A report is what a hostile guest could
//! send: huge keys and values, thousands of mime types, outputs and violations, control
//! characters and newlines in every name, lone surrogates (the native channel's JSON
//! escapes), bogus images. Whatever it is, the host holds at most [`held_cap`] bytes of
//! it, the answer and the model's text stay within sizes that follow from the run's limits
//! and `model_output`, every name a model reads is plain, and the run's files are kept.
//! 96 cases each: a few seconds in CI.
//!
//! The WebAssembly tier's shape is the WIT `outcome` as wasmtime lifts it (Rust strings:
//! valid Unicode, as the canonical ABI checks); the native tier's is the channel's outcome
//! line, where a `\udc80` escape stands for a lone surrogate, parsed as `native::serve`
//! parses it.

use super::*;
use crate::bindings::{
    GuestRichOutput, GuestRichOutputKind, GuestViolation, Outcome, PythonError, Value,
};
use crate::execution::Execution;
use crate::files::OutputFile;
use crate::model_output::ModelOutput;
use crate::output::Captured;
use proptest::collection::vec;
use proptest::prelude::*;
use std::time::Duration;

/// Stands for a lone surrogate: in the native line it becomes `\udc80`.
const SURROGATE: char = '\u{E000}';

/// A string as a hostile guest sends it: plain names, the names sandpy uses, any text,
/// control characters, newlines and the surrogate stand-in, or a huge run of one byte.
fn hostile(huge: usize) -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z]{1,6}/[a-z.+-]{1,8}",
        3 => prop::sample::select(vec![
            "text/plain", "text/html", "image/png", "image/jpeg", "image/gif", "image/webp",
            "image/bmp", "*", "import", "ValueError", "a.b.C", "",
        ]).prop_map(String::from),
        2 => "\\PC{0,24}",
        2 => "[\\x00-\\x1f\\x7f\\u{85}\\u{2028}\\u{E000}a-z/ \n]{0,24}",
        1 => (1..huge).prop_map(|n| "k".repeat(n)),
        1 => (1..huge).prop_map(|n| "\n".repeat(n)),
    ]
}

/// Data for a mime type: text, a real PNG, a script posing as one, or base64 garbage.
fn data(huge: usize) -> impl Strategy<Value = String> {
    use base64::Engine;
    let encode = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    prop_oneof![
        3 => hostile(huge),
        1 => Just(encode(&super::tests::png())),
        1 => Just("<script>alert(1)</script>".to_string()),
        1 => vec(any::<u8>(), 0..64).prop_map(move |b| encode(&b)),
    ]
}

fn pairs(huge: usize) -> impl Strategy<Value = Vec<(String, String)>> {
    prop_oneof![
        4 => vec((hostile(huge), data(huge)), 0..6),
        1 => vec(("[a-z]{1,4}/[a-z]{1,6}", "[a-z]{0,4}"), 60..200),
    ]
}

fn output(huge: usize) -> impl Strategy<Value = GuestRichOutput> {
    (any::<bool>(), pairs(huge), pairs(huge)).prop_map(|(result, data, omitted)| GuestRichOutput {
        kind: if result {
            GuestRichOutputKind::ExecuteResult
        } else {
            GuestRichOutputKind::DisplayData
        },
        data,
        omitted,
    })
}

fn outputs(huge: usize) -> impl Strategy<Value = Vec<GuestRichOutput>> {
    let small = (
        prop::sample::select(vec!["text/plain", "text/html", "a/b"]),
        "[a-z]{0,8}",
    )
        .prop_map(|(mime, text)| GuestRichOutput {
            kind: GuestRichOutputKind::DisplayData,
            data: vec![(mime.to_string(), text)],
            omitted: Vec::new(),
        });
    prop_oneof![
        4 => vec(output(huge), 0..4),
        1 => vec(small, 90..140),
    ]
}

fn violations(huge: usize) -> impl Strategy<Value = Vec<GuestViolation>> {
    let one = (any::<u32>(), hostile(huge), hostile(huge)).prop_map(|(line, rule, message)| {
        GuestViolation {
            line,
            column: 0,
            rule,
            message,
        }
    });
    let many = (1_000..3_000usize).prop_map(|n| {
        (0..n)
            .map(|i| GuestViolation {
                line: i as u32,
                column: 0,
                rule: "import".into(),
                message: "m".into(),
            })
            .collect()
    });
    prop_oneof![4 => vec(one, 0..4), 1 => many]
}

fn value(huge: usize) -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        Just(None),
        hostile(huge).prop_map(|t| Some(Value::Repr(t))),
        hostile(huge)
            .prop_map(|t| Some(Value::Json(serde_json::to_string(&t).unwrap_or_default()))),
        Just(Some(Value::Json(r#""\udc80 and \ud83d""#.into()))),
        Just(Some(Value::Json("{not json".into()))),
    ]
}

fn outcome() -> impl Strategy<Value = Outcome> {
    let huge = 40_000;
    let error = (hostile(huge), hostile(huge), hostile(huge)).prop_map(|(t, m, tb)| PythonError {
        type_name: t,
        message: m,
        traceback: tb,
    });
    (
        value(huge),
        prop::option::of(error),
        violations(huge),
        outputs(huge),
        any::<u32>(),
    )
        .prop_map(
            |(value, error, violations, outputs, outputs_dropped)| Outcome {
                value,
                error,
                violations,
                outputs,
                outputs_dropped,
            },
        )
}

fn limits() -> impl Strategy<Value = Limits> {
    (64..8_192usize, 0..40_000u64).prop_map(|(output_bytes, output_files_bytes)| Limits {
        output_bytes,
        output_files_bytes,
        ..Limits::default()
    })
}

/// `outcome` as the native tier's run writes it on its channel, the stand-in character as
/// a lone surrogate escape, parsed as the host parses it.
fn through_channel(outcome: &Outcome) -> Outcome {
    use serde_json::json;
    let value = outcome.value.as_ref().map(|v| match v {
        Value::Json(t) => json!({ "Json": t }),
        Value::Repr(t) => json!({ "Repr": t }),
    });
    let error = outcome.error.as_ref().map(
        |e| json!({ "type_name": e.type_name, "message": e.message, "traceback": e.traceback }),
    );
    let violations: Vec<_> = outcome
        .violations
        .iter()
        .map(
            |v| json!({ "line": v.line, "column": v.column, "rule": v.rule, "message": v.message }),
        )
        .collect();
    let outputs: Vec<_> = outcome
        .outputs
        .iter()
        .map(|o| {
            let kind = match o.kind {
                GuestRichOutputKind::DisplayData => "Display",
                GuestRichOutputKind::ExecuteResult => "Result",
            };
            json!({ "kind": kind, "data": o.data, "omitted": o.omitted })
        })
        .collect();
    let line = json!({ "outcome": {
        "value": value, "error": error, "violations": violations, "outputs": outputs,
        "outputs_dropped": outcome.outputs_dropped,
    }})
    .to_string()
    .replace(SURROGATE, "\\udc80");
    let line = without_lone_surrogates(line.as_bytes());
    match serde_json::from_slice(&line) {
        Ok(crate::native::protocol::GuestMessage::Outcome(parsed)) => parsed.into(),
        other => panic!("the channel's line did not parse as an outcome: {other:?}"),
    }
}

fn files() -> Vec<OutputFile> {
    vec![OutputFile {
        name: "result.csv".into(),
        size: 4,
        mime_type: "text/csv".into(),
        content: b"a,b\n".to_vec(),
    }]
}

/// The report, the execution made of it (with the run's files set first, as a tier sets
/// them), and what a model is shown.
fn run(outcome: Outcome, limits: &Limits) -> (usize, Execution) {
    let report = check(outcome, limits);
    let held = held(&report);
    let captured = Captured {
        stdout: "printed\n".into(),
        stderr: String::new(),
        truncated: false,
    };
    let mut execution = crate::verdict::ran(captured, Duration::from_millis(1), 0, 0);
    execution.files = files();
    let (status, error) = crate::verdict::outcome_verdict(
        report,
        false,
        None,
        limits,
        limits.memory_bytes,
        &mut execution,
    );
    execution.status = status;
    execution.error = error;
    (held, execution)
}

/// Every name a model reads of `execution` is plain; each is checked by its rule.
fn assert_plain(execution: &Execution) {
    for output in &execution.outputs {
        for key in output.data.keys() {
            assert!(is_mime(key), "mime type {key:?}");
        }
        for (key, why) in &output.omitted {
            assert!(key == "*" || is_mime(key), "omitted {key:?}");
            assert!(!why.chars().any(char::is_control), "reason {why:?}");
            assert!(why.len() <= MAX_REASON + 3, "reason of {} bytes", why.len());
        }
        for (mime, data) in &output.data {
            if RichOutput::is_binary(mime) {
                assert_eq!(image(mime, data), Ok(()), "{mime}");
            }
        }
        assert!(output.data.len() <= MAX_MIME_TYPES + 1);
        assert!(output.omitted.len() <= MAX_MIME_TYPES + 1);
    }
    if let Some(error) = &execution.error {
        assert!(is_type_name(&error.kind), "error type {:?}", error.kind);
    }
    for v in &execution.violations {
        assert!(is_rule(&v.rule), "rule {:?}", v.rule);
        assert!(!v.message.chars().any(char::is_control));
    }
}

fn assert_within_caps(held: usize, execution: &Execution, limits: &Limits) {
    let cap = held_cap(limits);
    assert!(held <= cap, "held {held} bytes, over {cap}");
    assert_eq!(execution.files, files(), "the run's files are kept");
    assert!(execution.outputs.len() <= MAX_COUNT as usize);
    assert!(execution.violations.len() <= MAX_VIOLATIONS);
    assert_plain(execution);
    // JSON escapes a control character in six bytes.
    let answer = serde_json::to_vec(execution).map_or(0, |a| a.len());
    let answer_cap = 6 * cap + (64 << 10);
    assert!(
        answer <= answer_cap,
        "answer of {answer} bytes, over {answer_cap}"
    );
    let model = ModelOutput { text_bytes: 2_000 };
    let bounded = model.bound(execution);
    let shown = serde_json::to_vec(&bounded.to_json()).map_or(0, |a| a.len());
    let per_text = model.text_bytes + 32;
    let outputs = usize::try_from(limits.output_files_bytes).unwrap_or(usize::MAX)
        + MAX_COUNT as usize * (MAX_MIME_TYPES + 2) * 64;
    // Five texts (stdout, stderr, the error's three and the value share them), the
    // violations' messages together, and the rich outputs' (each cut, and together within
    // the run's rich-output budget), JSON-escaped; each kept violation's own fields.
    let model_cap = 6 * (6 * per_text + outputs) + MAX_VIOLATIONS * 160 + (16 << 10);
    assert!(
        shown <= model_cap,
        "the model is shown {shown} bytes, over {model_cap}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn a_webassembly_report_stays_within_its_caps(outcome in outcome(), limits in limits()) {
        let (held, execution) = run(outcome, &limits);
        assert_within_caps(held, &execution, &limits);
    }

    #[test]
    fn a_native_report_stays_within_its_caps(outcome in outcome(), limits in limits()) {
        let (held, execution) = run(through_channel(&outcome), &limits);
        assert_within_caps(held, &execution, &limits);
    }

    /// A value that fits is kept whatever else the report holds (names, images,
    /// counts): only the code's own error or violations replace it.
    #[test]
    fn a_value_that_fits_is_kept(mut outcome in outcome(), limits in limits(), text in "\\PC{0,15}") {
        outcome.error = None;
        outcome.violations.clear();
        outcome.value = Some(Value::Repr(text.clone()));
        let (_, execution) = run(outcome, &limits);
        prop_assert!(execution.is_ok());
        prop_assert_eq!(execution.return_value, Some(serde_json::Value::String(text)));
    }
}
