//! The flags that choose a command's settings: the config file, the policy, the tools
//! and hosts a run may reach, the runtime and the tier.

/// The config file, and the policy and tools a run may use.
#[derive(clap::Args, Clone)]
pub(crate) struct ConfigArgs {
    /// Config file (`mcpServers` + `sandpy` settings) [default: $SANDPY_CONFIG, else ./.mcp.json].
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<std::path::PathBuf>,
    /// Policy: `strict`, `default`, or one defined in the config [default: the config's].
    #[arg(long, value_name = "NAME")]
    pub(crate) policy: Option<String>,
    /// Tool names or globs the code may call (repeatable; narrows the config's allowlist).
    #[arg(long = "allow-tool", value_name = "PATTERN")]
    pub(crate) allow_tool: Vec<String>,
    /// Runtime component from `sandpy build` [default: $SANDPY_RUNTIME, else the config's, else built-in].
    #[arg(long, value_name = "FILE")]
    pub(crate) runtime: Option<std::path::PathBuf>,
    /// Where code runs: `wasm` (CPython 3.14 in WebAssembly) or `native` (the machine's
    /// CPython with compiled packages, confined by the kernel) [default: the config's, else wasm].
    #[arg(long, value_enum, value_name = "TIER")]
    pub(crate) tier: Option<TierArg>,
    /// Hosts the code may reach over HTTP(S) (repeatable; adds to the config's
    /// `sandpy.network.allow`): `host`, `host:port`, `*.domain`, an IP literal, or
    /// `"GET https://host/path/*"` [default: no network].
    #[arg(long = "allow-host", value_name = "ENTRY", value_parser = sandpy::network::AllowRule::parse)]
    pub(crate) allow_host: Vec<sandpy::network::AllowRule>,
}

/// The `--tier` values.
#[derive(clap::ValueEnum, Clone, Copy)]
pub(crate) enum TierArg {
    Wasm,
    Native,
}

impl ConfigArgs {
    /// The config's settings with the flags' policy and runtime, resolved once; for the
    /// commands that call no upstream servers.
    pub(crate) fn resolve(&self) -> anyhow::Result<sandpy::settings::Resolved> {
        let file = sandpy::settings::ConfigFile::discover(self.config.as_deref())?;
        self.choose(file.settings)
    }

    /// [`ConfigArgs::resolve`] with the config's upstream servers, for the commands whose
    /// code may call their tools.
    pub(crate) fn resolve_with_servers(
        &self,
    ) -> anyhow::Result<(sandpy_mcp::ConfigFile, sandpy::settings::Resolved)> {
        let config = sandpy_mcp::ConfigFile::discover(self.config.as_deref())?;
        crate::log::hide(config.expansions());
        let resolved = self.choose(config.settings.clone())?;
        Ok((config, resolved))
    }

    fn choose(
        &self,
        mut settings: sandpy::settings::Settings,
    ) -> anyhow::Result<sandpy::settings::Resolved> {
        if self.runtime.is_some() {
            settings.runtime = self.runtime.clone();
        }
        sandpy::network::Network::allow_also(&mut settings.network, &self.allow_host)?;
        match self.tier {
            Some(TierArg::Wasm) => settings.tier = sandpy::Tier::Wasm,
            Some(TierArg::Native) => settings.tier = sandpy::Tier::Native,
            None => {}
        }
        if cfg!(debug_assertions) {
            // Test builds only: switch confinement layers off to show what each stops.
            if let Ok(names) = std::env::var("SANDPY_TEST_NATIVE_LAYERS_OFF") {
                let native = settings.native.get_or_insert_with(Default::default);
                native.layers_off = names
                    .split(',')
                    .filter_map(|name| serde_json::from_value(name.into()).ok())
                    .collect();
            }
        }
        Ok(settings.resolve(self.policy.as_deref())?)
    }

    /// The flags that choose the settings (not the per-run tool allowlist), to start
    /// another `sandpy` process with the same ones.
    pub(crate) fn to_flags(&self) -> Vec<std::ffi::OsString> {
        let mut flags = Vec::new();
        for (flag, value) in [("--config", &self.config), ("--runtime", &self.runtime)] {
            if let Some(value) = value {
                flags.extend([flag.into(), value.clone().into_os_string()]);
            }
        }
        if let Some(policy) = &self.policy {
            flags.extend(["--policy".into(), policy.into()]);
        }
        match self.tier {
            Some(TierArg::Wasm) => flags.extend(["--tier".into(), "wasm".into()]),
            Some(TierArg::Native) => flags.extend(["--tier".into(), "native".into()]),
            None => {}
        }
        for entry in &self.allow_host {
            flags.extend(["--allow-host".into(), entry.to_string().into()]);
        }
        flags
    }

    /// The `--allow-tool` patterns, when some were given.
    pub(crate) fn allowed(&self) -> Option<Vec<String>> {
        (!self.allow_tool.is_empty()).then(|| self.allow_tool.clone())
    }
}
