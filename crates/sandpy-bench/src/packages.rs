//! Packages: the curated set bundled in the runtime's snapshot against the same packages
//! mounted from a folder.

use crate::measure::{median, timed_run};

/// Start-up of a run importing the curated packages: bundled in the built-in runtime's
/// snapshot, against the same packages mounted at /packages in a runtime built without
/// them; and `print('hello')` on both runtimes (what bundling costs a run that does not
/// use them).
pub(crate) fn packages_startup(
    rt: &tokio::runtime::Runtime,
    builtin: &sandpy::Sandbox,
    runs: usize,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let config = sandpy::Config {
        progress: Some(std::sync::Arc::new(|m: &str| eprintln!("{m}"))),
        ..crate::config()
    };
    // One tiny unrelated package: a runtime that has none of the curated set.
    let bare_runtime = dir.path().join("bare.wasm");
    sandpy::packages::build_runtime(&["iniconfig==2.1.0".to_string()], &bare_runtime, &config)?;
    let folder = dir.path().join("packages");
    let curated: Vec<String> = sandpy::packages::CURATED
        .iter()
        .map(|p| p.to_string())
        .collect();
    sandpy::packages::install(&curated, &folder, &config)?;
    let bare = crate::sandbox_with(sandpy::Config {
        runtime: Some(bare_runtime.clone()),
        ..crate::config()
    })?;
    let mounted = sandpy::RunOptions {
        mounts: vec![sandpy::files::Mount {
            host: folder,
            guest: "/packages".into(),
        }],
        ..sandpy::RunOptions::default()
    };
    let imports = "import attrs, dateutil.parser, yaml, tabulate, jinja2, markupsafe, idna, six\n\
                   print(jinja2.Template('{{ n }}').render(n=tabulate.tabulate([[1]])))";
    let plain = sandpy::RunOptions::default();
    let mut figures = [(); 4].map(|_| Vec::new());
    for _ in 0..runs {
        figures[0].push(timed_run(rt, builtin, imports, &plain)?);
        figures[1].push(timed_run(rt, &bare, imports, &mounted)?);
        figures[2].push(timed_run(rt, builtin, "print('hello')", &plain)?);
        figures[3].push(timed_run(rt, &bare, "print('hello')", &plain)?);
    }
    let [b, m, h, bh] = figures.map(|mut f| median(&mut f));
    println!("packages ({}; median of {runs}):", curated.join(", "));
    println!("  run importing them, bundled in the built-in runtime's snapshot: {b:.2} ms");
    println!("  the same from a folder mounted at /packages (`sandpy build --folder`): {m:.2} ms (ratio {:.1}x)", m / b);
    println!("  print('hello') on the built-in runtime {h:.3} ms vs a runtime without them {bh:.3} ms (ratio {:.2}x)", h / bh);
    Ok(())
}
