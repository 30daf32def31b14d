//! Named least-privilege policies, checked before the code runs and enforced while it runs.
//!
//! The WebAssembly boundary is the security boundary; a policy is least privilege and
//! predictability on top of it: an eval function that imports `socket` is refused with
//! line and column before it runs, and dynamic tricks (`importlib.import_module`,
//! `getattr(__builtins__, ...)`, `__subclasses__` walks) are refused at run time.

use crate::{LimitOverrides, Limits};
use serde::{Deserialize, Serialize};

/// A named set of rules for a run. Built-ins: [`Policy::strict`] and [`Policy::standard`]
/// (named `default`); configs add their own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// The name runs refer to.
    #[serde(default)]
    pub name: String,
    /// Modules (exact names, which include their submodules, or `pkg.*`) code may import;
    /// `None` allows every available module.
    #[serde(default)]
    pub allowed_modules: Option<Vec<String>>,
    /// Modules code may not import, even if allowed above.
    #[serde(default)]
    pub denied_modules: Vec<String>,
    /// Builtins code may not use (`eval`, `exec`, `open`, ...).
    #[serde(default)]
    pub denied_builtins: Vec<String>,
    /// Attributes code may not use (`__subclasses__`, `__globals__`, ...).
    #[serde(default)]
    pub denied_attributes: Vec<String>,
    /// Limits of runs under this policy, over the configured ones (a run's own limits,
    /// such as CLI flags, go over these). Written beside the rules: `"timeout_ms": 5000`.
    #[serde(flatten)]
    pub limits: LimitOverrides,
    /// Tools runs may call (names or globs); `Some([])` means none, `None` leaves the
    /// allowlist as configured.
    #[serde(default)]
    pub allowed_tools: Option<Vec<String>>,
    /// Tools (names or globs) whose calls need a person's approval under this policy,
    /// besides those the config and the run name.
    #[serde(default)]
    pub approve: Vec<String>,
    /// Requests runs under this policy may make (entries of `sandpy.network.allow`): a
    /// request must pass both lists, so a policy narrows the network and never widens it.
    /// `None` leaves the network as configured; `Some([])` allows no request.
    #[serde(default)]
    pub network_allow: Option<Vec<crate::network::AllowRule>>,
}

/// One place where code breaks its policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    /// 1-based line (0 when refused at run time without a known line).
    pub line: u32,
    /// 1-based column.
    pub column: u32,
    /// `import`, `builtin`, `attribute` or `syntax`.
    pub rule: String,
    /// What was refused and by which rule.
    pub message: String,
}

const INTROSPECTION: &[&str] = &[
    "__subclasses__",
    "__globals__",
    "__builtins__",
    "__code__",
    "__closure__",
    "__func__",
    "__getattribute__",
    "__dict__",
    "__mro__",
    "__bases__",
    "__base__",
    "__loader__",
    "__spec__",
    "__import__",
    "f_globals",
    "f_locals",
    "f_builtins",
    "f_back",
    "gi_frame",
    "cr_frame",
    "ag_frame",
    "tb_frame",
];

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

impl Policy {
    /// The eval profile: a handful of pure modules, no dynamic code (`eval`, `exec`,
    /// `compile`, `__import__`), no `open`, `input` or `breakpoint`, no namespace access
    /// (`vars`, `globals`, `locals`), no introspection attributes, no tools; 5 s, 64 MiB.
    pub fn strict() -> Policy {
        Policy {
            name: "strict".into(),
            allowed_modules: Some(strings(&[
                "json",
                "re",
                "typing",
                "math",
                "statistics",
                "collections",
                "itertools",
                "functools",
                "dataclasses",
                "datetime",
                "decimal",
                "fractions",
                "string",
                "textwrap",
                "difflib",
            ])),
            denied_modules: Vec::new(),
            denied_builtins: strings(&[
                "eval",
                "exec",
                "compile",
                "open",
                "__import__",
                "breakpoint",
                "input",
                "vars",
                "globals",
                "locals",
            ]),
            denied_attributes: strings(INTROSPECTION),
            limits: LimitOverrides {
                timeout_ms: Some(5_000),
                memory_mb: Some(64),
                ..LimitOverrides::default()
            },
            allowed_tools: Some(Vec::new()),
            approve: Vec::new(),
            network_allow: None,
        }
    }

    /// The agent profile (`default`): the whole available stdlib, tools per allowlist.
    pub fn standard() -> Policy {
        Policy {
            name: "default".into(),
            allowed_modules: None,
            denied_modules: Vec::new(),
            denied_builtins: Vec::new(),
            denied_attributes: Vec::new(),
            limits: LimitOverrides::default(),
            allowed_tools: None,
            approve: Vec::new(),
            network_allow: None,
        }
    }

    /// A built-in policy by name (`strict`, `default`).
    pub fn builtin(name: &str) -> Option<Policy> {
        match name {
            "strict" => Some(Policy::strict()),
            "default" => Some(Policy::standard()),
            _ => None,
        }
    }

    /// `limits` with this policy's limits put over them.
    pub fn limits(&self, limits: &Limits) -> Limits {
        self.limits.apply(limits)
    }

    /// Whether the guest has anything to check or enforce.
    pub(crate) fn restricts_code(&self) -> bool {
        self.allowed_modules.is_some()
            || !self.denied_modules.is_empty()
            || !self.denied_builtins.is_empty()
            || !self.denied_attributes.is_empty()
    }
}
