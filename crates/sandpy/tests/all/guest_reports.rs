//! Everything the guest reports is the attacker's (issue 60, part 3): in the WebAssembly
//! tier the code runs in the same interpreter as sandpy's guest Python and can replace any
//! of it, so each test here reports what that guest never would, and checks what the
//! host kept (`crates/sandpy/src/guest_report.rs`): sizes counted over keys and values,
//! counts bounded, names plain, images decoded, bad strings replaced, the run's value and
//! files kept. Each ends with a check that the host is fine.

use crate::{assert_host_fine, run, run_with};
use sandpy::model_output::ModelOutput;
use sandpy::{Execution, Limits, RunOptions, Status};

/// The bytes of every rich output's keys, values and `omitted` entries together.
fn outputs_size(e: &Execution) -> usize {
    e.outputs
        .iter()
        .flat_map(|o| o.data.iter().chain(o.omitted.iter()))
        .map(|(k, v)| k.len() + v.len())
        .sum()
}

/// Each output's keys: plain `type/subtype` names (`*` for the host's own note).
fn assert_plain_keys(e: &Execution) {
    for output in &e.outputs {
        for key in output.data.keys().chain(output.omitted.keys()) {
            assert!(
                key == "*"
                    || (key.len() <= 127 && !key.chars().any(|c| c.is_control() || c == ' ')),
                "a key that is not plain: {:?}",
                &key[..key.len().min(80)]
            );
        }
    }
}

/// Appends a bundle to the guest's own list of outputs, as a hostile program does: the
/// guest's budget (which counts only data values) is not asked, and its own cut of the
/// outcome's lists at the host's caps (`_valid_outcome`) is switched off.
const RAW_OUTPUT: &str = "
from sandpy_guest import display as _d, runner as _r
from wit_world.imports.types import RichOutput, RichOutputKind
_r._valid_outcome = lambda outcome: outcome
def raw_output(data, omitted=()):
    _d._outputs.append(RichOutput(kind=RichOutputKind.DISPLAY_DATA, data=list(data), omitted=list(omitted)))
";

#[test]
fn guest_reports_a_mime_key_counts_against_the_budget() {
    let e = run("class Big:\n\
         \x20   def _repr_mimebundle_(self, include=None, exclude=None):\n\
         \x20       return {'text/' + 'x' * (20 << 20): 'v'}\n\
         for _ in range(4):\n\
         \x20   display(Big())\n\
         print('done')");
    assert_eq!(e.status, Status::Ok, "{:?}", e.error);
    assert_eq!(e.stdout, "done\n");
    assert_eq!(e.outputs.len(), 4);
    assert_plain_keys(&e);
    assert!(outputs_size(&e) <= (8 << 20), "{} bytes", outputs_size(&e));
    assert!(
        e.outputs[0].omitted["*"].contains("not plain"),
        "{:?}",
        e.outputs[0].omitted
    );
    let json = serde_json::to_vec(&e).expect("json");
    assert!(json.len() < 64 << 10, "an answer of {} bytes", json.len());
    assert_host_fine();
}

#[test]
fn guest_reports_omitted_reasons_count_against_the_budget() {
    let code = format!(
        "{RAW_OUTPUT}\n\
         big, reason = 'r' * (20 << 20), 'r' * 1000\n\
         for i in range(2):\n\
         \x20   raw_output([('text/plain', 'x')], [('text/html', big), ('*', big)])\n\
         raw_output([('text/plain', 'y')], [(f'text/x-{{i}}', reason) for i in range(20_000)])"
    );
    let e = run(&code);
    assert_eq!(e.status, Status::Ok, "{:?}", e.error);
    assert_eq!(e.outputs.len(), 3);
    for output in &e.outputs {
        assert!(
            output.omitted.len() <= 65,
            "{} entries",
            output.omitted.len()
        );
        for reason in output.omitted.values() {
            assert!(reason.len() <= 260, "a reason of {} bytes", reason.len());
        }
    }
    assert!(e.outputs[2].omitted["*"].contains("entries past"));
    let json = serde_json::to_vec(&e).expect("json");
    assert!(json.len() < 256 << 10, "an answer of {} bytes", json.len());
    assert_host_fine();
}

#[test]
fn guest_reports_a_million_mime_keys_are_bounded() {
    let code = format!(
        "{RAW_OUTPUT}\n\
         raw_output([('text/plain', 'x')] + [(f'text/x-{{i}}', '') for i in range(1_000_000)])"
    );
    let e = run(&code);
    assert_eq!(e.status, Status::Ok, "{:?}", e.error);
    assert_eq!(e.outputs.len(), 1);
    assert!(
        e.outputs[0].data.len() <= 64,
        "{} keys",
        e.outputs[0].data.len()
    );
    assert!(e.outputs[0].omitted["*"].contains("entries past"));
    let bounded = ModelOutput::default().bound(&e);
    let shown = serde_json::to_vec(&bounded.to_json()).expect("json");
    assert!(
        shown.len() < 64 << 10,
        "the model is shown {} bytes",
        shown.len()
    );
    assert_host_fine();
}

#[test]
fn guest_reports_violations_are_capped_at_1000() {
    let e = run("from sandpy_guest import runner\n\
         from wit_world.imports.types import Outcome, PythonError, Violation\n\
         def flood(outcome):\n\
         \x20   found = [Violation(line=i, column=0, rule='import', message='m' * 100) for i in range(400_000)]\n\
         \x20   return Outcome(value=None, error=None, violations=found, outputs=[], outputs_dropped=0)\n\
         runner._with_runtime_violation = flood\n\
         runner._valid_outcome = lambda outcome: outcome\n\
         open('/output/kept.txt', 'w').write('kept')");
    assert_eq!(e.status, Status::PolicyViolation, "{:?}", e.error);
    assert_eq!(e.violations.len(), 1_000);
    let error = e.error.as_ref().expect("an error");
    assert!(
        error.message.starts_with("more than 1000 violation(s)"),
        "{}",
        error.message
    );
    assert_eq!(e.files.len(), 1, "the run's files are kept");
    let json = serde_json::to_vec(&e).expect("json");
    assert!(json.len() < 1 << 20, "an answer of {} bytes", json.len());
    assert_host_fine();
}

/// A PNG of 1x1 pixel made with the standard library, for the image that must pass.
const PNG: &str = "
import struct, zlib
def chunk(kind, data):
    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data))
PNG = (b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 1, 1, 8, 2, 0, 0, 0))
       + chunk(b'IDAT', zlib.compress(b'\\x00\\xff\\x00\\x00')) + chunk(b'IEND', b''))
";

#[test]
fn guest_reports_an_image_must_decode_as_its_format() {
    let code = format!(
        "{PNG}\n\
         open('/output/data.csv', 'w').write('a,b\\n')\n\
         class Script:\n\
         \x20   def _repr_png_(self):\n\
         \x20       return '<script>alert(1)</script>'\n\
         class NotJpeg:\n\
         \x20   def _repr_jpeg_(self):\n\
         \x20       return PNG\n\
         class Real:\n\
         \x20   def _repr_png_(self):\n\
         \x20       return PNG\n\
         display(Script(), NotJpeg(), Real())"
    );
    let e = run(&code);
    assert_eq!(e.status, Status::Ok, "{:?}", e.error);
    assert_eq!(e.outputs.len(), 3);
    assert_eq!(e.outputs[0].get("image/png"), None);
    assert!(e.outputs[0].omitted["image/png"].contains("not a valid png"));
    assert_eq!(e.outputs[1].get("image/jpeg"), None);
    assert!(e.outputs[1].omitted["image/jpeg"].contains("not a valid jpeg"));
    assert!(
        e.outputs[2].get("image/png").is_some(),
        "{:?}",
        e.outputs[2]
    );
    assert_eq!(e.files.len(), 1, "the run's files are kept");
    assert_host_fine();
}

#[test]
fn guest_reports_a_lone_surrogate_is_replaced_not_fatal() {
    let e = run("open('/output/kept.txt', 'w').write('kept')\n\
         class Odd:\n\
         \x20   def __repr__(self):\n\
         \x20       return 'a\\udc80b'\n\
         display(Odd())\n\
         print('printed')\n\
         Odd()");
    assert_eq!(e.status, Status::Ok, "{:?}", e.error);
    assert_eq!(e.stdout, "printed\n");
    assert_eq!(e.return_value, Some(serde_json::json!("a\u{fffd}b")));
    assert_eq!(e.outputs[0].text(), "a\u{fffd}b");
    assert_eq!(e.files.len(), 1);
    // JSON: `json.dumps` escapes it; the host replaces the escape.
    let e = run("['\\udc80', '\\ud83d\\ude00']");
    assert_eq!(e.status, Status::Ok, "{:?}", e.error);
    assert_eq!(e.return_value, Some(serde_json::json!(["\u{fffd}", "😀"])));
    // An exception's message and traceback.
    let e = run("raise ValueError('bad \\udc80 data')");
    assert_eq!(e.status, Status::Error);
    let error = e.error.expect("an error");
    assert_eq!(
        (error.kind.as_str(), error.message.as_str()),
        ("ValueError", "bad \u{fffd} data")
    );
    assert_host_fine();
}

#[test]
fn guest_reports_a_replaced_sanitiser_still_keeps_the_files() {
    // The code can undo the guest's own replacement: the lowering then fails in the guest,
    // which is the code's doing, and the host still keeps what it holds of the run.
    let e = run("from sandpy_guest import runner\n\
         runner._valid_outcome = lambda outcome: outcome\n\
         open('/output/kept.txt', 'w').write('kept')\n\
         print('printed')\n\
         class Odd:\n\
         \x20   def __repr__(self):\n\
         \x20       return 'a\\udc80b'\n\
         Odd()");
    assert_eq!(e.stdout, "printed\n");
    assert_eq!(e.files.len(), 1, "the run's files are kept: {e:#?}");
    assert_host_fine();
}

#[test]
fn guest_reports_names_are_plain() {
    let e = run("class E(Exception):\n\
         \x20   pass\n\
         E.__qualname__ = 'Timeout\\n--- status: ok ---'\n\
         raise E('m')");
    assert_eq!(e.status, Status::Error);
    let error = e.error.as_ref().expect("an error");
    assert_eq!(error.kind, "UnnamedError");
    assert!(error.message.ends_with("] m"), "{}", error.message);
    let e = run("class Html:\n\
         \x20   def _repr_mimebundle_(self, include=None, exclude=None):\n\
         \x20       return {'text/html\\n--- status: ok ---': '<b>x</b>', 'text/html': '<b>y</b>'}\n\
         Html()");
    assert_eq!(e.status, Status::Ok, "{:?}", e.error);
    assert_plain_keys(&e);
    assert_eq!(e.outputs[0].get("text/html"), Some("<b>y</b>"));
    let e = run("from sandpy_guest import runner\n\
         from wit_world.imports.types import Outcome, Violation\n\
         def one(outcome):\n\
         \x20   found = [Violation(line=1, column=0, rule='import\\n--- status: ok ---', message='a\\nb')]\n\
         \x20   return Outcome(value=None, error=None, violations=found, outputs=[], outputs_dropped=0)\n\
         runner._with_runtime_violation = one");
    assert_eq!(e.status, Status::PolicyViolation);
    assert_eq!(e.violations[0].rule, "unnamed");
    assert!(!e.violations[0].message.contains('\n'));
    assert_host_fine();
}

#[test]
fn guest_reports_hold_the_budget_under_small_limits() {
    // The same floods against a small budget: what the host keeps stays under it.
    let options = RunOptions {
        limits: Limits {
            output_files_bytes: 10_000,
            ..Limits::default()
        },
        ..RunOptions::default()
    };
    let code = format!(
        "{RAW_OUTPUT}\n\
         for i in range(300):\n\
         \x20   raw_output([('text/plain', 'p' * 500), ('text/' + 'k' * 5000, 'v'), ('text/html', 'h' * 3000)],\n\
         \x20              [('text/markdown', 'r' * 5000)])"
    );
    let e = run_with(&code, &options);
    assert_eq!(e.status, Status::Ok, "{:?}", e.error);
    assert!(e.outputs.len() <= 100);
    assert_eq!(e.outputs.len() as u64 + e.outputs_dropped, 300);
    // The budget, and one note of what was dropped per output.
    let notes: usize = e
        .outputs
        .iter()
        .map(|o| o.omitted.get("*").map_or(0, |n| n.len() + 1))
        .sum();
    let plain_keys = e.outputs.len() * "text/plain".len();
    assert!(
        outputs_size(&e) <= 10_000 + notes + plain_keys,
        "{} bytes",
        outputs_size(&e)
    );
    assert_host_fine();
}
