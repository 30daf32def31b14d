// The curated package set, shared by build.rs (bundled into the built-in runtime) and
// src/packages.rs (`sandpy build` adds it unless told not to). Pure Python, or pure with
// their optional compiled speedups left out (pyyaml, markupsafe).
/// The curated set, pinned: widely used pure-Python packages useful to agents and evals.
pub const CURATED: &[&str] = &[
    "attrs==26.1.0",
    "python-dateutil==4.0.0",
    "pyyaml==6.0.3",
    "tabulate==0.10.0",
    "jinja2==3.1.6",
    "markupsafe==3.0.4",
    "idna==3.20",
    "six==1.17.0",
];
/// Their top-level import names, pre-imported with all their submodules.
pub const CURATED_IMPORTS: &[&str] = &["attr", "attrs", "dateutil", "idna", "jinja2", "markupsafe", "six", "tabulate", "yaml"];
