//! A batch's module compiled once (`Sandbox::compile_module`): each call is still a fresh
//! instance that runs the module's top level itself, answers as a plain call would, and
//! stays under its policy, checked again when the call's policy is not the compile's.

use crate::{block_on, sandbox};
use sandpy::{CompiledModule, Policy, RunOptions, Status};
use serde_json::{json, Value};

fn with_policy(policy: Policy) -> RunOptions {
    RunOptions {
        policy: Some(policy),
        ..RunOptions::default()
    }
}

fn compiled(code: &str, options: &RunOptions) -> CompiledModule {
    let module = block_on(sandbox().compile_module(code, options));
    assert!(module.is_compiled(), "{code}");
    module
}

fn call(
    module: &CompiledModule,
    function: &str,
    arguments: Value,
    options: &RunOptions,
) -> sandpy::Execution {
    block_on(sandbox().call_compiled(module, function, &arguments, options))
}

#[test]
fn a_compiled_modules_calls_answer_as_plain_calls() {
    let code = "import difflib\n\
                def score(a, b):\n    return round(difflib.SequenceMatcher(None, a, b).ratio(), 3)\n\
                def fails(x):\n    return 1 / x\n";
    let options = RunOptions {
        filename: Some("scorer.py".into()),
        ..with_policy(Policy::strict())
    };
    let module = compiled(code, &options);
    let e = call(&module, "score", json!(["abc", "abd"]), &options);
    assert_eq!(
        (e.status, e.return_value),
        (Status::Ok, Some(json!(0.667))),
        "{:?}",
        e.error
    );
    let e = call(&module, "fails", json!({"x": 0}), &options);
    let plain = block_on(sandbox().call_function(code, "fails", &json!({"x": 0}), &options));
    assert_eq!(e.status, Status::Error);
    let error = e.error.expect("an error");
    assert_eq!(
        Some(&error),
        plain.error.as_ref(),
        "the same error as a plain call"
    );
    let traceback = error.traceback.expect("a traceback");
    assert!(
        traceback.contains("File \"scorer.py\", line 5, in fails\n    return 1 / x"),
        "{traceback}"
    );
    let e = call(&module, "missing", json!([]), &options);
    assert_eq!(e.error.map(|e| e.kind), Some("NameError".to_string()));
}

/// Nothing of a compile's instance or an earlier call reaches a call: the module's top
/// level runs in each call's own fresh instance (a value it draws at random differs),
/// and what a call leaves in the module's globals is gone for the next.
#[test]
fn a_compiled_modules_top_level_runs_afresh_in_each_call() {
    let code = "import random\nTOKEN = random.random()\nCALLS = []\n\
                def f():\n    CALLS.append(1)\n    return [TOKEN, len(CALLS)]\n";
    let options = RunOptions::default();
    let module = compiled(code, &options);
    let mut tokens = Vec::new();
    for _ in 0..8 {
        let e = call(&module, "f", json!([]), &options);
        assert_eq!(e.status, Status::Ok, "{:?}", e.error);
        let value = e.return_value.expect("a value");
        assert_eq!(value[1], json!(1), "an earlier call's globals: {value}");
        tokens.push(value[0].to_string());
    }
    tokens.sort();
    tokens.dedup();
    assert_eq!(tokens.len(), 8, "the top level ran once for several calls");
}

#[test]
fn policy_a_module_compiled_without_a_policy_is_checked_again_under_one() {
    let code = "import socket\ndef f():\n    return 1\n";
    let module = compiled(code, &RunOptions::default());
    let e = call(&module, "f", json!([]), &with_policy(Policy::strict()));
    assert_eq!(e.status, Status::PolicyViolation, "{e:#?}");
    assert_eq!(e.violations[0].rule, "import");
}

#[test]
fn policy_a_module_that_breaks_its_policy_is_not_compiled_and_every_call_is_refused() {
    let code = "import socket\ndef f():\n    return 1\n";
    let options = with_policy(Policy::strict());
    let module = block_on(sandbox().compile_module(code, &options));
    assert!(!module.is_compiled());
    for _ in 0..2 {
        let e = call(&module, "f", json!([]), &options);
        assert_eq!(e.status, Status::PolicyViolation, "{e:#?}");
        assert_eq!(
            (e.violations[0].line, e.violations[0].rule.as_str()),
            (1, "import")
        );
    }
}

/// The compile skips the static check in each call, not the run-time guards: an import
/// the check cannot see is still refused.
#[test]
fn policy_a_compiled_modules_calls_keep_the_run_time_guards() {
    let policy = Policy {
        name: "no-os".into(),
        allowed_modules: Some(["importlib", "json"].map(String::from).to_vec()),
        ..Policy::standard()
    };
    let options = with_policy(policy);
    let code =
        "import importlib\ndef f(name):\n    return importlib.import_module(name).__name__\n";
    let module = compiled(code, &options);
    let e = call(&module, "f", json!(["json"]), &options);
    assert_eq!(
        (e.status, e.return_value),
        (Status::Ok, Some(json!("json"))),
        "{:?}",
        e.error
    );
    let e = call(&module, "f", json!(["os"]), &options);
    assert_eq!(e.status, Status::PolicyViolation, "{e:#?}");
    assert!(e.error.expect("an error").message.contains("'os'"));
}

/// The boundary between a batch's calls, attacked from inside one: a call under a policy
/// that filters modules (so its imports are views) changes everything it can reach (its
/// builtins by both names, a module's view, the real module behind it through a
/// function's globals, `sys.modules`, the module's globals, the policy's own guards);
/// the next call of the same compiled module sees none of it.
#[test]
fn policy_a_compiled_call_leaves_nothing_for_the_next_call() {
    let policy = Policy {
        name: "views".into(),
        allowed_modules: Some(
            ["builtins", "difflib", "re", "sys"]
                .map(String::from)
                .to_vec(),
        ),
        denied_builtins: vec!["eval".into()],
        denied_attributes: vec!["__subclasses__".into()],
        ..Policy::standard()
    };
    let options = with_policy(policy);
    let code = "import builtins, difflib, re, sys\n\
                SEEN = []\n\
                def poison():\n\
                \x20   builtins.len = lambda x: -1\n\
                \x20   __builtins__['abs'] = lambda x: -1\n\
                \x20   __builtins__['eval'] = lambda x: 'eval let through'\n\
                \x20   builtins.__import__ = lambda *a, **k: None\n\
                \x20   difflib.SequenceMatcher = None\n\
                \x20   difflib.get_close_matches.__globals__['SequenceMatcher'] = None\n\
                \x20   sys.modules['re'].compile = None\n\
                \x20   re.escape = None\n\
                \x20   SEEN.append('poisoned')\n\
                \x20   return 'poisoned'\n\
                def look():\n\
                \x20   guarded = __builtins__['eval'].__name__\n\
                \x20   import builtins as b\n\
                \x20   return [len('ab'), abs(-2), b.len('abc'), difflib.SequenceMatcher is not None,\n\
                \x20           difflib.get_close_matches('appel', ['ape', 'apple']),\n\
                \x20           sys.modules['re'].compile is not None, re.escape('a.b'), SEEN, guarded,\n\
                \x20           '_nlargest' in dir(difflib), hasattr(difflib, '_nlargest')]\n";
    let module = compiled(code, &options);
    let e = call(&module, "look", json!([]), &options);
    let clean = e.return_value.clone();
    assert_eq!(e.status, Status::Ok, "{:?}", e.error);
    assert_eq!(
        clean,
        Some(json!([
            2,
            2,
            3,
            true,
            ["apple", "ape"],
            true,
            "a\\.b",
            [],
            "eval",
            false,
            false
        ]))
    );
    for _ in 0..3 {
        let e = call(&module, "poison", json!([]), &options);
        assert_eq!(
            (e.status, e.return_value),
            (Status::Ok, Some(json!("poisoned"))),
            "{:?}",
            e.error
        );
        let e = call(&module, "look", json!([]), &options);
        assert_eq!(
            (e.status, &e.return_value),
            (Status::Ok, &clean),
            "a call saw what the call before it left: {:?}",
            e.error
        );
    }
}
