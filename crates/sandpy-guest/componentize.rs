// Making a guest component with the vendored componentize-py, in this process: shared by
// build.rs (the built-in runtime) and src/lib.rs (`sandpy build`, through
// `sandpy::Guest::componentize`), so that both give a runtime the same C stack and the
// same inputs (vendor/README.md).

/// Pre-initialise CPython with `<guest>/app.py`, the guest's WIT (`<guest>/wit`, world
/// `sandbox`) and the packages in `site`, and write the component to `output`, with a C
/// stack of `stack_bytes`. Only `guest` and `site` are on the guest's path: not the
/// site-packages of the machine's own Python, nor of an active virtualenv, which
/// componentize-py's command line adds.
fn componentize_guest(
    guest: &std::path::Path,
    site: &std::path::Path,
    output: &std::path::Path,
    stack_bytes: u32,
) -> Result<(), String> {
    let wit = guest.join("wit");
    let (guest, site) = match (guest.to_str(), site.to_str()) {
        (Some(guest), Some(site)) => (guest, site),
        _ => return Err("the guest's folders need UTF-8 paths".into()),
    };
    // Its own runtime on its own thread: callers may be inside a tokio runtime already.
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let names = std::collections::HashMap::new();
                let generator = componentize_py::ComponentGenerator {
                    wit_paths: &[wit.as_path()],
                    worlds: &["sandbox"],
                    features: &[],
                    all_features: false,
                    world_module: None,
                    python_path: &[guest, site],
                    module_worlds: &[],
                    app_name: "app",
                    output_path: output,
                    add_to_linker: None,
                    stub_wasi: false,
                    import_interface_names: &names,
                    export_interface_names: &names,
                    full_names: false,
                    intersect_world: None,
                    stack_size: Some(stack_bytes),
                };
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("cannot start a runtime: {e}"))?;
                runtime
                    .block_on(generator.generate())
                    .map_err(|e| format!("{e:#}"))
            })
            .join()
            .unwrap_or_else(|_| Err("componentize-py panicked".into()))
    })
}
