//! Which runner may serve a run: its [`Key`], a hash of everything that decides how the
//! run's command would have run it, and the socket path that key has.

use super::Error;
use sandpy::settings::Resolved;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

/// Variables of sandpy's that do not change how a run is served.
const NOT_SETTINGS: [&str; 4] = [
    "SANDPY_LOG",
    "SANDPY_WARM",
    "SANDPY_COLD",
    "SANDPY_WARM_IDLE_SECS",
];

/// Variables beside sandpy's own that change how a run is served (where the cache and the
/// scratch folders are, which programs a native run finds).
const OTHER_SETTINGS: [&str; 4] = ["HOME", "XDG_CACHE_HOME", "TMPDIR", "PATH"];

/// The longest path a Unix socket may have (`sun_path` holds 108 bytes with its NUL).
const MAX_SOCKET_PATH: usize = 107;

/// Which runner may serve a run: equal keys mean equal binaries, working folders,
/// settings and environments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Key(String);

/// What a key is made of.
struct Inputs<'a> {
    /// The binary's [`identity`].
    exe: String,
    /// The working folder.
    cwd: PathBuf,
    /// The command's resolved settings.
    resolved: &'a Resolved,
    /// The environment (only the variables that are settings count).
    vars: Vec<(OsString, OsString)>,
    /// `$SANDPY_RUNTIME`, which a runtime named by the settings replaces.
    runtime_var: Option<PathBuf>,
}

impl Key {
    /// The key of a command run in this process with `resolved`.
    pub(crate) fn of(resolved: &Resolved) -> Result<Key, Error> {
        let exe = std::env::current_exe().map_err(|source| Error::Io {
            path: "/proc/self/exe".into(),
            source,
        })?;
        let cwd = std::env::current_dir().map_err(|source| Error::Io {
            path: ".".into(),
            source,
        })?;
        Ok(Key::from_inputs(&Inputs {
            exe: identity(&exe),
            cwd,
            resolved,
            vars: std::env::vars_os().collect(),
            runtime_var: std::env::var_os("SANDPY_RUNTIME").map(PathBuf::from),
        }))
    }

    fn from_inputs(inputs: &Inputs<'_>) -> Key {
        let mut hash = Sha256::new();
        hash.update(inputs.exe.as_bytes());
        hash.update(inputs.cwd.as_os_str().as_encoded_bytes());
        // Resolved settings hold only ordered maps: their debug form is stable. It never
        // shows a secret's value, which the network's fingerprint covers.
        let resolved = inputs.resolved;
        hash.update(format!("\0{resolved:?}\0").as_bytes());
        if let Some(network) = &resolved.settings.network {
            hash.update(network.fingerprint());
        }
        let mut vars: Vec<_> = inputs
            .vars
            .iter()
            .filter(|(name, _)| {
                let name = name.to_string_lossy();
                (name.starts_with("SANDPY_") && !NOT_SETTINGS.contains(&&*name))
                    || OTHER_SETTINGS.contains(&&*name)
            })
            .collect();
        vars.sort();
        for (name, value) in vars {
            hash.update(name.as_encoded_bytes());
            hash.update(b"=");
            hash.update(value.as_encoded_bytes());
            hash.update(b"\0");
        }
        let runtime = resolved
            .settings
            .runtime
            .as_ref()
            .or(inputs.runtime_var.as_ref());
        if let Some(runtime) = runtime {
            hash.update(identity(runtime).as_bytes());
        }
        let digest = hash.finalize();
        Key(digest[..16].iter().map(|b| format!("{b:02x}")).collect())
    }

    /// A key with this text (tests of the wire, which need no real one).
    #[cfg(test)]
    pub(crate) fn from_text(text: &str) -> Key {
        Key(text.to_string())
    }

    /// The key's text, as `sandpy` passes it to the runner it starts.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// The path of this key's socket in `folder`; refused when no socket can have it.
    pub(crate) fn socket_in(&self, folder: &Path) -> Result<PathBuf, Error> {
        let path = folder.join(format!("{}.sock", self.0));
        // Refused here, not by every runner started for it after loading its sandbox.
        if path.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(Error::Io {
                path,
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "longer than a socket's path may be",
                ),
            });
        }
        Ok(path)
    }
}

/// A file's path, size and modification time: it changed when any of them did.
fn identity(path: &Path) -> String {
    let (size, modified) = std::fs::metadata(path)
        .map(|m| {
            let modified = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .unwrap_or_default();
            (m.len(), modified.as_nanos())
        })
        .unwrap_or_default();
    format!("{}\0{size}\0{modified}\0", path.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(name, value)| (name.into(), value.into()))
            .collect()
    }

    fn inputs(resolved: &Resolved) -> Inputs<'_> {
        Inputs {
            exe: "/usr/bin/sandpy\0size 12\0mtime 34\0".into(),
            cwd: "/work".into(),
            resolved,
            vars: vars(&[("HOME", "/home/a"), ("SANDPY_CONFIG", "a.json")]),
            runtime_var: None,
        }
    }

    #[test]
    fn the_same_inputs_give_the_same_key() {
        let resolved = Resolved::default();
        let key = Key::from_inputs(&inputs(&resolved));
        assert_eq!(key, Key::from_inputs(&inputs(&resolved)));
        assert_eq!(key.as_str().len(), 32);
        assert!(key.as_str().bytes().all(|b| b.is_ascii_hexdigit()));
        // The order of the environment is not an input.
        let mut reordered = inputs(&resolved);
        reordered.vars.reverse();
        assert_eq!(key, Key::from_inputs(&reordered));
    }

    #[test]
    fn each_input_changes_the_key() {
        let resolved = Resolved::default();
        let key = Key::from_inputs(&inputs(&resolved));
        let mut other = Resolved::default();
        other.settings.tier = sandpy::Tier::Native;
        let runtime = tempfile::NamedTempFile::new().expect("a runtime file");
        let changes: Vec<(&str, Inputs<'_>)> = vec![
            (
                "binary",
                Inputs {
                    exe: "/usr/bin/sandpy\0size 12\0mtime 35\0".into(),
                    ..inputs(&resolved)
                },
            ),
            (
                "working folder",
                Inputs {
                    cwd: "/work/other".into(),
                    ..inputs(&resolved)
                },
            ),
            ("settings", inputs(&other)),
            (
                "a sandpy variable",
                Inputs {
                    vars: vars(&[("HOME", "/home/a"), ("SANDPY_CONFIG", "b.json")]),
                    ..inputs(&resolved)
                },
            ),
            (
                "another sandpy variable",
                Inputs {
                    vars: vars(&[
                        ("HOME", "/home/a"),
                        ("SANDPY_CONFIG", "a.json"),
                        ("SANDPY_CACHE_DIR", "/c"),
                    ]),
                    ..inputs(&resolved)
                },
            ),
            (
                "HOME",
                Inputs {
                    vars: vars(&[("HOME", "/home/b"), ("SANDPY_CONFIG", "a.json")]),
                    ..inputs(&resolved)
                },
            ),
            (
                "PATH",
                Inputs {
                    vars: vars(&[
                        ("HOME", "/home/a"),
                        ("SANDPY_CONFIG", "a.json"),
                        ("PATH", "/bin"),
                    ]),
                    ..inputs(&resolved)
                },
            ),
            (
                "runtime variable",
                Inputs {
                    runtime_var: Some(runtime.path().into()),
                    ..inputs(&resolved)
                },
            ),
        ];
        for (what, changed) in changes {
            assert_ne!(key, Key::from_inputs(&changed), "{what}");
        }
    }

    /// Variables that say how the command logs or whether it uses a runner, and variables
    /// sandpy does not read, leave the key as it is: such a command uses the same runner.
    #[test]
    fn other_variables_leave_the_key_alone() {
        let resolved = Resolved::default();
        let key = Key::from_inputs(&inputs(&resolved));
        let mut more = inputs(&resolved);
        more.vars.extend(vars(&[
            ("SANDPY_LOG", "debug"),
            ("SANDPY_WARM", "1"),
            ("SANDPY_COLD", "0"),
            ("SANDPY_WARM_IDLE_SECS", "5"),
            ("EDITOR", "vi"),
        ]));
        assert_eq!(key, Key::from_inputs(&more));
    }

    /// A runtime file is known by its path, size and modification time: rewriting it
    /// changes the key; the settings' runtime wins over `$SANDPY_RUNTIME`.
    #[test]
    fn a_rewritten_runtime_changes_the_key() {
        let folder = tempfile::tempdir().expect("a temp folder");
        let path = folder.path().join("runtime.wasm");
        std::fs::write(&path, b"one").expect("write");
        let mut resolved = Resolved::default();
        resolved.settings.runtime = Some(path.clone());
        let key = Key::from_inputs(&inputs(&resolved));
        std::fs::write(&path, b"other bytes").expect("rewrite");
        let rewritten = Key::from_inputs(&inputs(&resolved));
        assert_ne!(key, rewritten);
        let beside = Inputs {
            runtime_var: Some(folder.path().join("unused.wasm")),
            ..inputs(&resolved)
        };
        assert_eq!(rewritten, Key::from_inputs(&beside));
    }

    #[test]
    fn a_socket_path_longer_than_a_socket_may_have_is_refused() {
        let key = Key::from_text("0123456789abcdef0123456789abcdef");
        let path = key
            .socket_in(Path::new("/run/user/1000/sandpy"))
            .expect("short");
        assert_eq!(
            path,
            Path::new("/run/user/1000/sandpy/0123456789abcdef0123456789abcdef.sock")
        );
        let deep = format!("/{}", "d".repeat(80));
        let refused = key.socket_in(Path::new(&deep));
        assert!(matches!(refused, Err(Error::Io { .. })), "{refused:?}");
    }
}
