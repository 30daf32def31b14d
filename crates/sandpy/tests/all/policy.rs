//! Policies: the static check (no substring matching) and run-time enforcement of the
//! same rules against dynamic tricks.

use crate::{block_on, run_with, sandbox};
use sandpy::{Policy, RunOptions, Status};
use serde_json::json;

fn strict() -> RunOptions {
    RunOptions {
        policy: Some(Policy::strict()),
        ..RunOptions::default()
    }
}

fn rules(code: &str, policy: &Policy) -> Vec<(u32, u32, String)> {
    block_on(sandbox().validate(code, policy))
        .expect("the check runs")
        .into_iter()
        .map(|v| (v.line, v.column, v.rule))
        .collect()
}

#[test]
fn strict_allows_the_eval_profile() {
    let code = "import json, re, math, statistics, difflib, textwrap, string, fractions, decimal, datetime, functools, itertools, typing\n\
                from collections import Counter\nfrom dataclasses import dataclass\n\
                @dataclass\nclass S:\n    v: float\n\
                def score(a, b):\n    return S(difflib.SequenceMatcher(None, a, b).ratio()).v\n\
                [score('abc', 'abd') > 0.5, Counter('aab')['a'], json.loads('[1]'), math.isqrt(17), statistics.mean([1, 3])]";
    let e = run_with(code, &strict());
    assert_eq!(e.status, Status::Ok, "{e:#?}");
    assert_eq!(e.return_value, Some(json!([true, 2, [1], 4, 2])));
}

#[test]
fn check_reports_every_violation_with_line_and_column() {
    let code = "import json\nimport os, socket\nfrom subprocess import run\nx = __import__('ctypes')\ny = eval('1')\nf = open\n().__class__.__subclasses__()\n";
    let found = rules(code, &Policy::strict());
    let expected: Vec<(u32, u32, String)> = vec![
        (2, 1, "import".into()),
        (2, 1, "import".into()),
        (3, 1, "import".into()),
        (4, 5, "import".into()),
        (4, 5, "builtin".into()),
        (5, 5, "builtin".into()),
        (6, 5, "builtin".into()),
        (7, 1, "attribute".into()),
    ];
    assert_eq!(found, expected);
}

#[test]
fn no_substring_false_positives() {
    let code = "# import os\ndef reopen(x):\n    return x\nreopen(1)\ns = 'os.system(\"rm -rf /\")'\nclass K:\n    def eval(self):\n        return 'fine'\nK().eval()\nopened = 1\n";
    assert_eq!(rules(code, &Policy::strict()), vec![]);
    let e = run_with(code, &strict());
    assert_eq!(e.status, Status::Ok, "{e:#?}");
}

#[test]
fn syntax_errors_are_violations_too() {
    let found = rules("def f(:\n    pass\n", &Policy::standard());
    assert_eq!(found.len(), 1);
    assert_eq!((found[0].0, found[0].2.as_str()), (1, "syntax"));
}

#[test]
fn a_run_that_fails_the_check_does_not_start() {
    let e = run_with("print('started')\nimport os\n", &strict());
    assert_eq!(e.status, Status::PolicyViolation);
    assert_eq!(e.stdout, "", "nothing ran");
    assert_eq!(e.violations.len(), 1);
    assert_eq!(
        (e.violations[0].line, e.violations[0].rule.as_str()),
        (2, "import")
    );
    assert!(e.error.unwrap().message.contains("'os'"));
}

/// A policy that lets the tricks past the static check, to prove run-time enforcement.
fn permissive_but_no_os() -> RunOptions {
    let policy = Policy {
        name: "no-os".into(),
        allowed_modules: Some(
            [
                "importlib",
                "sys",
                "json",
                "builtins",
                "collections",
                "typing",
            ]
            .map(String::from)
            .to_vec(),
        ),
        denied_builtins: vec!["eval".into()],
        denied_attributes: vec!["__subclasses__".into(), "__globals__".into()],
        ..Policy::standard()
    };
    RunOptions {
        policy: Some(policy),
        ..RunOptions::default()
    }
}

#[test]
fn dynamic_tricks_are_refused_at_run_time() {
    for (trick, rule_word) in [
        (
            "import importlib\nimportlib.import_module('o' + 's')",
            "'os'",
        ),
        (
            "import sys\nsys.modules['o' + 's'].system('id')",
            "KeyError",
        ),
        (
            "import builtins\ngetattr(builtins, 'ev' + 'al')('1')",
            "'eval'",
        ),
        (
            "getattr(object, '__subcl' + 'asses__')()",
            "'__subclasses__'",
        ),
        ("import collections\ncollections._sys.modules['os']", "_sys"),
        ("import typing\ntyping.sys.modules['os']", "'os'"),
        ("import json\njson.decoder.re.sys", "'re'"),
        ("m = __builtins__['__import__']\nm('o' + 's')", "'os'"),
    ] {
        let e = run_with(trick, &permissive_but_no_os());
        assert_ne!(e.status, Status::Ok, "{trick} got through: {e:#?}");
        let error = e.error.expect("an error");
        let text = format!("{} {}", error.kind, error.message);
        assert!(text.contains(rule_word), "{trick}: {text}");
    }
}

/// A module's view fills itself on use, yet lists and star-imports only what the policy
/// shows: no private names, no module the policy denies (`json.decoder.re`), and
/// `sys.modules` without the denied ones, for a module with `__all__` and one without.
#[test]
fn policy_views_list_and_star_import_only_what_the_policy_shows() {
    let code = "import json, sys\n\
                listed = dir(json.decoder)\n\
                from json import *\n\
                from sys import *\n\
                [('scanstring' in listed, 're' in listed, '_CONSTANTS' in listed,\n\
                 'dumps' in dir(), 'version' in dir(), '_getframe' in dir(),\n\
                 'os' in modules, 'json' in modules, hasattr(json.decoder, 're'))]";
    let e = run_with(code, &permissive_but_no_os());
    assert_eq!(e.status, Status::Ok, "{e:#?}");
    assert_eq!(
        e.return_value,
        Some(json!([[
            true, false, false, true, true, false, false, true, false
        ]]))
    );
}

#[test]
fn caught_violations_are_still_reported() {
    let code = "import importlib\ntry:\n    importlib.import_module('o' + 's')\nexcept BaseException:\n    pass\nprint('carried on')";
    let e = run_with(code, &permissive_but_no_os());
    assert_eq!(e.status, Status::PolicyViolation, "{e:#?}");
    assert_eq!(e.violations[0].rule, "import");
    let e = run_with("import importlib\ntry:\n    importlib.import_module('o' + 's')\nexcept Exception:\n    pass", &permissive_but_no_os());
    assert_eq!(
        e.status,
        Status::PolicyViolation,
        "`except Exception` does not catch a violation"
    );
}

#[test]
fn strict_policy_has_no_tools() {
    struct One;
    impl sandpy::tools::ToolHost for One {
        fn list_tools(&self) -> Vec<sandpy::tools::ToolInfo> {
            vec![sandpy::tools::ToolInfo {
                name: "t".into(),
                description: String::new(),
                input_schema: json!({}),
            }]
        }
        fn call_tool(&self, _: &str, _: serde_json::Value) -> sandpy::tools::ToolFuture {
            Box::pin(async { Ok(json!(1)) })
        }
    }
    let options = RunOptions {
        tools: Some(std::sync::Arc::new(One)),
        ..strict()
    };
    let e = run_with(
        "try:\n    r = call_mcp_tool('t')\nexcept ToolError as e:\n    r = str(e)\nr",
        &options,
    );
    assert!(e
        .return_value
        .unwrap()
        .as_str()
        .unwrap()
        .contains("not allowed"));
}

#[test]
fn policy_limit_defaults() {
    let limits = Policy::strict().limits(&sandpy::Limits::default());
    assert_eq!(limits.timeout, std::time::Duration::from_secs(5));
    assert_eq!(limits.memory_bytes, 64 << 20);
    let e = run_with(
        "x = bytearray(100 * 2**20)",
        &RunOptions { limits, ..strict() },
    );
    assert_eq!(e.status, Status::MemoryLimit);
}
