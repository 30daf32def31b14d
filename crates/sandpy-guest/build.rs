//! Builds the guest component from `guest/` with the vendored componentize-py.
//!
//! componentize-py (`vendor/componentize-py`: 0.25.1 with a C-stack option and a
//! deterministic pre-initialisation, see `vendor/README.md`) is a build-dependency, run in
//! this process: it shares the workspace's wasmtime and Cranelift, built once for both.
//! It pre-initialises CPython 3.14 with `guest/app.py` and the curated packages (from
//! PyPI, through a venv under `OUT_DIR`) and writes the component, which this crate
//! embeds (the `sandpy` library does not: it compiles while this runs). Set
//! `SANDPY_COMPONENT` to a prebuilt `.wasm` to skip the Python build, `SANDPY_PYTHON` to
//! choose the interpreter for the venv, and `SANDPY_C_STACK_KIB` to size the guest's C
//! stack (default 4096).

use sha2::{Digest, Sha256};
use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The guest's C stack, KiB of linear memory: CPython's recursion through C functions
/// (`functools.lru_cache`, `map`, key functions) goes as deep as it allows (~2,300
/// levels per MiB). componentize-py's own default is 1 MiB. The host sizes each run's
/// WebAssembly stack from it (`wasm_stack_bytes` in crates/sandpy/src/wasm/runtime.rs).
const DEFAULT_C_STACK_KIB: u32 = 4096;

include!("../sandpy/curated.rs");
include!("componentize.rs");

fn main() {
    if let Err(message) = run() {
        eprintln!("error: could not build the sandpy guest component\n  {message}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").map_err(|e| e.to_string())?);
    let out = PathBuf::from(env::var("OUT_DIR").map_err(|e| e.to_string())?);
    let guest = manifest
        .join("../../guest")
        .canonicalize()
        .map_err(|e| format!("guest/ not found: {e}"))?;
    println!("cargo:rerun-if-changed={}", guest.join("app.py").display());
    println!("cargo:rerun-if-changed={}", guest.join("wit").display());
    println!(
        "cargo:rerun-if-changed={}",
        guest.join("sandpy_guest").display()
    );
    println!("cargo:rerun-if-env-changed=SANDPY_COMPONENT");
    println!("cargo:rerun-if-env-changed=SANDPY_PYTHON");
    println!("cargo:rerun-if-env-changed=SANDPY_C_STACK_KIB");
    println!("cargo:rerun-if-changed=../sandpy/curated.rs");
    println!("cargo:rerun-if-changed=componentize.rs");

    // With SANDPY_COMPONENT, the C stack that component was built with.
    let c_stack_kib = match env::var("SANDPY_C_STACK_KIB") {
        Err(_) => DEFAULT_C_STACK_KIB,
        Ok(text) => text
            .parse::<u32>()
            .ok()
            .filter(|kib| (64..=16384).contains(kib) && kib % 64 == 0)
            .ok_or(format!(
                "SANDPY_C_STACK_KIB={text}: not a whole number of 64 KiB pages from 64 to 16384"
            ))?,
    };
    fs::write(
        out.join("c_stack.rs"),
        format!(
            "/// The guest's C stack: the linear memory CPython recurses in (`SANDPY_C_STACK_KIB`\n\
             /// when the component was built, see build.rs).\n\
             const C_STACK_BYTES: usize = {};\n",
            c_stack_kib * 1024
        ),
    )
    .map_err(|e| e.to_string())?;
    let component = out.join("sandpy.wasm");
    match env::var_os("SANDPY_COMPONENT") {
        Some(prebuilt) => {
            fs::copy(&prebuilt, &component)
                .map_err(|e| format!("SANDPY_COMPONENT={}: {e}", Path::new(&prebuilt).display()))?;
        }
        None => componentize(&guest, &out, &component, c_stack_kib)?,
    }
    let bytes = fs::read(&component).map_err(|e| format!("{}: {e}", component.display()))?;
    let hash = Sha256::digest(&bytes);
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    println!(
        "cargo:rustc-env=SANDPY_COMPONENT_PATH={}",
        component.display()
    );
    println!("cargo:rustc-env=SANDPY_COMPONENT_SHA256={hex}");
    embed_guest_sources(&guest, &out)
}

/// Write `guest_files.rs`: the guest's sources, for `sandpy build` to rebuild the
/// component with extra packages on a machine without this repository.
fn embed_guest_sources(guest: &Path, out: &Path) -> Result<(), String> {
    let mut files = vec![guest.join("app.py")];
    for dir in ["wit", "sandpy_guest"] {
        let mut found: Vec<PathBuf> = fs::read_dir(guest.join(dir))
            .map_err(|e| format!("guest/{dir}: {e}"))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "py" || x == "wit"))
            .collect();
        found.sort();
        files.extend(found);
    }
    let mut source = String::from("/// The guest's sources by path relative to `guest/`.\nstatic GUEST_FILES: &[(&str, &[u8])] = &[\n");
    for file in &files {
        let relative = file.strip_prefix(guest).map_err(|e| e.to_string())?;
        source.push_str(&format!(
            "    ({:?}, include_bytes!({:?})),\n",
            relative.to_string_lossy(),
            file.display().to_string()
        ));
    }
    source.push_str("];\n");
    fs::write(out.join("guest_files.rs"), source).map_err(|e| e.to_string())
}

fn componentize(
    guest: &Path,
    out: &Path,
    component: &Path,
    c_stack_kib: u32,
) -> Result<(), String> {
    let venv = out.join("venv");
    if !venv.join("bin/pip").exists() {
        let python = env::var("SANDPY_PYTHON").unwrap_or_else(|_| "python3".into());
        run_step(
            Command::new(&python).args(["-m", "venv"]).arg(&venv),
            &format!(
                "`{python} -m venv` (install Python 3 with the venv module, or set SANDPY_PYTHON)"
            ),
        )?;
    }
    let site = curated_site(&venv.join("bin"), out)?;
    componentize_guest(guest, &site, component, c_stack_kib * 1024)
        .map_err(|e| format!("componentize-py of guest/app.py: {e}"))
}

/// The curated packages for the guest's Python 3.14, without their optional compiled
/// speedups, and the `sandpy_packages` module that tells the guest to pre-import them.
fn curated_site(bin: &Path, out: &Path) -> Result<PathBuf, String> {
    let site = out.join("site");
    let marker = site.join(".sandpy-curated");
    let wanted = CURATED.join(" ");
    if fs::read_to_string(&marker).ok().as_deref() == Some(wanted.as_str()) {
        return Ok(site);
    }
    let _ = fs::remove_dir_all(&site);
    run_step(
        Command::new(bin.join("pip"))
            .args(GUEST_WHEEL_ARGS)
            .arg("--target")
            .arg(&site)
            .args(CURATED),
        "`pip install` of the curated packages (needs access to PyPI)",
    )?;
    let mut pending = vec![site.clone()];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir).map_err(|e| e.to_string())?.flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|x| x == "so") {
                fs::remove_file(&path).map_err(|e| e.to_string())?;
            }
        }
    }
    fs::write(
        site.join("sandpy_packages.py"),
        format!("PACKAGES = {CURATED_IMPORTS:?}\n"),
    )
    .map_err(|e| e.to_string())?;
    fs::write(&marker, wanted).map_err(|e| e.to_string())?;
    Ok(site)
}

fn run_step(command: &mut Command, what: &str) -> Result<(), String> {
    let output = command
        .output()
        .map_err(|e| format!("{what}: cannot start: {e}"))?;
    if output.status.success() {
        return Ok(());
    }
    Err(format!(
        "{what} failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    ))
}
