// The curated package set and how pip is asked for guest wheels, shared by
// crates/sandpy-guest/build.rs (bundled into the built-in runtime) and src/packages.rs (`sandpy build` adds the set
// unless told not to). Pure Python, or pure with their optional compiled speedups left
// out (pyyaml, markupsafe, charset-normalizer).
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
    // HTTP clients, made by the host (guest/sandpy_guest/http_libraries.py), and what
    // they pull in; httpcore, h11 and anyio are installed as httpx requires them but not
    // imported (the host's transport replaces httpcore's).
    "requests==2.34.2",
    "urllib3==2.8.0",
    "charset-normalizer==3.5.3",
    "certifi==2026.10.19.post1",
    "httpx==0.28.1",
    "httpcore==1.0.9",
    "h11==0.16.0",
    "anyio==4.16.0",
    "typing-extensions==4.16.0",
];
/// Their top-level import names, pre-imported with all their submodules.
pub const CURATED_IMPORTS: &[&str] = &[
    "attr",
    "attrs",
    "certifi",
    "charset_normalizer",
    "dateutil",
    "httpx",
    "idna",
    "jinja2",
    "markupsafe",
    "requests",
    "six",
    "tabulate",
    "urllib3",
    "yaml",
];
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
