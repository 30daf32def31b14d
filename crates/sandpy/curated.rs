// The curated package set and how pip is asked for guest wheels, shared by build.rs
// (bundled into the built-in runtime) and src/packages.rs (`sandpy build` adds the set
// unless told not to). Pure Python, or pure with their optional compiled speedups left
// out (pyyaml, markupsafe).
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
/// `pip` arguments that install wheels for the guest's CPython 3.14 (followed by
/// `--target DIR` and the packages). Linux wheel tags are accepted too, so that a package
/// shipping only compiled wheels resolves and is then refused by name (rather than by
/// pip's "no matching distribution").
pub const GUEST_WHEEL_ARGS: &[&str] = &[
    "install",
    "--quiet",
    "--disable-pip-version-check",
    "--no-compile",
    "--only-binary=:all:",
    "--python-version",
    "3.14",
    "--implementation",
    "cp",
    "--abi",
    "cp314",
    "--abi",
    "abi3",
    "--abi",
    "none",
    "--platform",
    "manylinux2014_x86_64",
    "--platform",
    "manylinux_2_28_x86_64",
    "--platform",
    "any",
];
