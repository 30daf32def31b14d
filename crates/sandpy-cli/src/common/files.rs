//! File flags of the commands that run code: input files, read-only mounts, and where
//! the files a program leaves under `/output` are saved.

use anyhow::{bail, Context};
use sandpy::files::{InputFile, Mount};
use sandpy::Execution;
use std::path::{Component, Path, PathBuf};

/// The file flags of `sandpy run` and `sandpy call`.
#[derive(clap::Args, Clone, Default)]
pub(crate) struct FileArgs {
    /// Copy a local file into the sandbox's working directory (/tmp), under its own name
    /// or at GUEST (relative to /tmp); repeatable.
    #[arg(long = "file", value_name = "LOCAL[:GUEST]")]
    pub(crate) files: Vec<String>,
    /// Let the program read a host folder at GUEST (read-only); repeatable.
    #[arg(long = "mount", value_name = "HOST:GUEST")]
    pub(crate) mounts: Vec<String>,
    /// Save the files the program leaves under /output into DIR.
    #[arg(long, value_name = "DIR")]
    pub(crate) output_dir: Option<PathBuf>,
}

impl FileArgs {
    /// The input files, read now.
    pub(crate) fn inputs(&self) -> anyhow::Result<Vec<InputFile>> {
        self.files
            .iter()
            .map(|spec| {
                let (local, guest) = match spec.split_once(':') {
                    Some((local, guest)) if !guest.is_empty() => (local, guest.to_string()),
                    _ => {
                        let local = spec.as_str();
                        let name = Path::new(local)
                            .file_name()
                            .with_context(|| format!("--file {spec}: names no file"))?;
                        (local, name.to_string_lossy().into_owned())
                    }
                };
                let local = sandpy::files::user_path(Path::new(local))
                    .with_context(|| format!("--file {spec}"))?;
                crate::common::regular_file(&local).with_context(|| format!("--file {spec}"))?;
                let content = std::fs::read(&local)
                    .with_context(|| format!("--file {spec}: cannot read `{}`", local.display()))?;
                Ok(InputFile {
                    path: guest,
                    content,
                })
            })
            .collect()
    }

    /// The config's mounts followed by the flags'.
    pub(crate) fn mounts(&self, config: &[Mount]) -> anyhow::Result<Vec<Mount>> {
        let mut mounts = config.to_vec();
        for spec in &self.mounts {
            let Some((host, guest)) = spec.rsplit_once(':') else {
                bail!("--mount {spec}: expected HOST:GUEST, e.g. ./data:/data")
            };
            mounts.push(Mount {
                host: host.into(),
                guest: guest.into(),
            });
        }
        Mount::validate(&mounts).context("--mount")?;
        Ok(mounts)
    }

    /// --output-dir, made if missing, once it is known that no other user controls it or
    /// a folder or link on the way (they could otherwise put a link where a file is
    /// written, and have this user write through it).
    fn checked_output_dir(&self) -> anyhow::Result<Option<&Path>> {
        let Some(dir) = &self.output_dir else {
            return Ok(None);
        };
        sandpy::files::output_folder(dir).context("--output-dir")?;
        Ok(Some(dir))
    }

    /// Save the execution's output files into --output-dir, or say on stderr that there
    /// are some to save; then its rich outputs. The files come first: they are the run's
    /// own, and a rich output (which the code's `_repr_*_` methods make) is not allowed to
    /// stand in their way.
    pub(crate) fn save_outputs(&self, execution: &Execution) -> anyhow::Result<()> {
        self.save_files(execution)?;
        self.save_rich_outputs(execution)
    }

    fn save_files(&self, execution: &Execution) -> anyhow::Result<()> {
        if execution.files.is_empty() {
            return Ok(());
        }
        let Some(dir) = self.checked_output_dir()? else {
            eprintln!("sandpy: the program left {} file(s) under /output; pass --output-dir DIR to save them", execution.files.len());
            return Ok(());
        };
        for file in &execution.files {
            let relative = Path::new(&file.name);
            if !relative
                .components()
                .all(|c| matches!(c, Component::Normal(_)))
            {
                bail!(
                    "output file name {:?} is not a plain relative path",
                    file.name
                );
            }
            let path = dir.join(relative);
            write_into(dir, &path, &file.content)?;
            eprintln!(
                "sandpy: saved {} ({} bytes, {})",
                path.display(),
                file.size,
                file.mime_type
            );
        }
        Ok(())
    }

    /// The formats of the rich outputs a terminal cannot show (a figure's PNG, a table's
    /// HTML): saved as `output-N.EXT` into --output-dir, or said on stderr in one line.
    fn save_rich_outputs(&self, execution: &Execution) -> anyhow::Result<()> {
        use base64::Engine;
        let rich: Vec<(usize, (&str, &str))> = execution
            .outputs
            .iter()
            .map(sandpy::RichOutput::richest)
            .enumerate()
            .filter(|(_, (mime, _))| *mime != "text/plain")
            .collect();
        let Some(dir) = self.checked_output_dir()? else {
            if !rich.is_empty() {
                let mut formats: Vec<&str> = rich.iter().map(|(_, (mime, _))| *mime).collect();
                formats.sort_unstable();
                formats.dedup();
                eprintln!(
                    "sandpy: {} output(s) have what a terminal cannot show ({}); pass \
                     --output-dir DIR to save them (`--json` holds them)",
                    rich.len(),
                    formats.join(", ")
                );
            }
            return Ok(());
        };
        for (i, (mime, data)) in rich {
            let extension = match mime {
                "image/png" => "png",
                "image/jpeg" => "jpg",
                "image/gif" => "gif",
                "image/webp" => "webp",
                "text/html" => "html",
                "text/markdown" => "md",
                "image/svg+xml" => "svg",
                "application/json" => "json",
                _ => "txt",
            };
            let bytes = if sandpy::RichOutput::is_binary(mime) {
                // The library keeps only images whose header it decoded; one that still
                // does not decode is skipped, said, and the rest saved.
                match base64::engine::general_purpose::STANDARD.decode(data) {
                    Ok(bytes) => bytes,
                    Err(_) => {
                        eprintln!("sandpy: output {}: {mime} is not base64; not saved", i + 1);
                        continue;
                    }
                }
            } else {
                data.as_bytes().to_vec()
            };
            let path = dir.join(format!("output-{}.{extension}", i + 1));
            write_into(dir, &path, &bytes)?;
            eprintln!(
                "sandpy: saved {} ({} bytes, {mime})",
                path.display(),
                bytes.len()
            );
        }
        Ok(())
    }
}

/// Write `bytes` at `path` inside `dir` (checked already): each folder between them made
/// or checked as the output folder is (another user's folder inside would let them put a
/// link where the file goes), and the file opened without following a link in its place.
fn write_into(dir: &Path, path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(parent) = path.parent().filter(|p| *p != dir) {
        sandpy::files::output_folder(parent)
            .with_context(|| format!("cannot write into `{}`", parent.display()))?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
        .with_context(|| {
            format!(
                "cannot write `{}` (a link in its place is not followed)",
                path.display()
            )
        })?;
    file.write_all(bytes)
        .with_context(|| format!("cannot write `{}`", path.display()))
}
