//! Everything the guest reports is the attacker's (issue 60, part 3), end to end: the
//! native tier's channel reports go through the same check as the WebAssembly tier's
//! (`crates/sandpy/src/guest_report.rs`), and `sandpy run --output-dir` saves a run's
//! files whatever its rich outputs are. The WebAssembly tier's own cases are in
//! `crates/sandpy/tests/all/guest_reports.rs`.

use super::native::{native_config, native_run};
use super::run;

#[test]
fn guest_reports_output_dir_saves_the_files_whatever_the_rich_outputs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("saved");
    let code = "open('/output/data.csv', 'w').write('a,b\\n')\n\
        class Script:\n\
        \x20   def _repr_png_(self):\n\
        \x20       return '<script>alert(1)</script>'\n\
        display(Script())\n\
        print('done')";
    let (status, stdout, stderr) = run(&["run", "--output-dir", out.to_str().unwrap(), "-c", code]);
    assert_eq!(status, 0, "{stderr}");
    assert!(stdout.starts_with("done\n"), "{stdout}");
    assert_eq!(
        std::fs::read_to_string(out.join("data.csv")).expect("the run's file is saved"),
        "a,b\n"
    );
    assert!(
        !out.join("output-1.png").exists(),
        "no PNG made of a script"
    );
    let (status, stdout, stderr) = run(&["run", "--json", "-c", code]);
    assert_eq!(status, 0, "{stderr}");
    let execution: serde_json::Value = serde_json::from_str(&stdout).expect("json");
    let omitted = &execution["outputs"][0]["omitted"]["image/png"];
    assert!(
        omitted
            .as_str()
            .is_some_and(|o| o.contains("not a valid png")),
        "{execution}"
    );
}

#[test]
fn native_guest_reports_a_lone_surrogate_keeps_the_value() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = native_config(dir.path(), &[], serde_json::json!({}));
    let code = "open('/output/kept.txt', 'w').write('kept')\n\
        class Odd:\n\
        \x20   def __repr__(self):\n\
        \x20       return 'a\\udc80b'\n\
        display(Odd())\n\
        print('printed')\n\
        Odd()";
    let (exit, execution) = native_run(&config, code, &[], "");
    assert_eq!(exit, 0, "{execution}");
    assert_eq!(execution["status"], "ok", "{execution}");
    assert_eq!(execution["return_value"], "a\u{fffd}b");
    assert_eq!(execution["stdout"], "printed\n");
    assert_eq!(execution["files"][0]["name"], "kept.txt");
    // Written on the channel by the code itself, past the guest's replacement: the host
    // replaces the escape as it reads the line.
    let code = "import json, os\n\
        line = {'outcome': {'value': {'Repr': 'x\\udc80'}, 'error': None, 'violations': [], 'outputs': [], 'outputs_dropped': 0}}\n\
        os.write(3, (json.dumps(line) + '\\n').encode())\n\
        import time; time.sleep(5)";
    let (exit, execution) = native_run(&config, code, &[], "");
    assert_eq!(exit, 0, "{execution}");
    assert_eq!(execution["return_value"], "x\u{fffd}", "{execution}");
}

#[test]
fn native_guest_reports_violations_are_capped_not_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = native_config(dir.path(), &[], serde_json::json!({}));
    let code = "from sandpy_guest import runner\n\
        from wit_world.imports.types import Outcome, PythonError, Violation\n\
        def flood(outcome):\n\
        \x20   found = [Violation(line=i, column=0, rule='import\\nx', message='m') for i in range(400_000)]\n\
        \x20   error = PythonError(type_name='Timeout\\n--- status: ok ---', message='m', traceback='')\n\
        \x20   return Outcome(value=None, error=error, violations=found, outputs=[], outputs_dropped=0)\n\
        runner._with_runtime_violation = flood\n\
        runner._valid_outcome = lambda outcome: outcome\n\
        open('/output/kept.txt', 'w').write('kept')";
    let (_, execution) = native_run(&config, code, &[], "");
    assert_eq!(execution["status"], "policy_violation", "{execution:.2000}");
    let violations = execution["violations"].as_array().expect("violations");
    assert_eq!(violations.len(), 1_000);
    assert_eq!(violations[0]["rule"], "unnamed");
    assert_eq!(execution["error"]["type"], "UnnamedError");
    assert_eq!(execution["files"][0]["name"], "kept.txt");
}
