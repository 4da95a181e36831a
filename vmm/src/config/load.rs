//! Reading a config file and checking it, in order: the file (regular,
//! capped, UTF-8), serde into the raw structs ([`super::raw`]), `[host]`
//! ([`super::host`]), each `[[vm]]` ([`super::vm`]), then what no single
//! VM decides: the reservations' sum and the host's resources. Every
//! problem found is reported, sorted by position.

use super::check::Checker;
use super::raw::RawConfig;
use super::sched::Reservations;
use super::{host, vm, Config, ConfigError, Overrides};
use crate::config::errors::SpanIndex;
use crate::config::host_resources::HostResources;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use vcpu_engine::host_cpus::HostCpuSet;

/// Facts about the host that validation checks against.
#[derive(Debug, Clone)]
pub struct HostInfo {
    /// The online CPUs.
    pub online: HostCpuSet,
    /// Memory, vCPU, file and thread limits (`None`: not checked).
    pub resources: HostResources,
}

impl HostInfo {
    /// Read `/sys/devices/system/cpu/online`.
    pub fn detect() -> Result<HostInfo, ConfigError> {
        let online =
            vcpu_engine::host_cpus::online_cpus().map_err(|reason| ConfigError::HostCpus {
                path: PathBuf::from("/sys/devices/system/cpu/online"),
                reason,
            })?;
        Ok(HostInfo {
            online,
            resources: HostResources::detect(),
        })
    }
}

impl Config {
    /// Read and validate a config file against the running host.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Self::load_overridden(path, &Overrides::default())
    }

    /// [`Config::load`] with command-line overrides.
    pub fn load_overridden(path: &Path, overrides: &Overrides) -> Result<Config, ConfigError> {
        let host = HostInfo::detect()?;
        Self::load_with(path, &host, overrides)
    }

    /// Read and validate a config file against the given host facts.
    pub fn load_with(
        path: &Path,
        host: &HostInfo,
        overrides: &Overrides,
    ) -> Result<Config, ConfigError> {
        let bytes =
            crate::input::read_regular_file(path, crate::input::MAX_CONFIG_BYTES, "a config file")
                .map_err(|source| ConfigError::Read {
                    path: path.to_path_buf(),
                    source,
                })?;
        // Not UTF-8: the bad byte's line and column, like any other error.
        let text = String::from_utf8(bytes).map_err(|e| ConfigError::Invalid {
            path: path.to_path_buf(),
            diagnostics: vec![crate::config::errors::utf8_error(
                e.as_bytes(),
                &e.utf8_error(),
            )],
        })?;
        Self::parse_overridden(&text, path, host, overrides)
    }

    /// Validate `text` as if read from `path` (relative paths inside are
    /// resolved against `path`'s directory).
    pub fn parse(text: &str, path: &Path, host: &HostInfo) -> Result<Config, ConfigError> {
        Self::parse_overridden(text, path, host, &Overrides::default())
    }

    /// [`Config::parse`] with command-line overrides.
    pub fn parse_overridden(
        text: &str,
        path: &Path,
        host: &HostInfo,
        overrides: &Overrides,
    ) -> Result<Config, ConfigError> {
        let invalid = |diagnostics| ConfigError::Invalid {
            path: path.to_path_buf(),
            diagnostics,
        };
        let raw: RawConfig = match toml::from_str(text) {
            Ok(r) => r,
            Err(e) => return Err(invalid(vec![crate::config::errors::explain(text, &e)])),
        };
        let base = path
            .parent()
            .map(|p| {
                if p.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    p
                }
            })
            .unwrap_or(Path::new("."))
            .to_path_buf();
        let mut c = Checker {
            text,
            index: SpanIndex::new(text),
            diags: Vec::new(),
        };
        let mut h = host::check(&mut c, raw.host.unwrap_or_default(), host, overrides, &base);

        // [[vm]]
        if raw.vm.is_empty() {
            c.err(0..0, "vm", "expected at least one [[vm]] table, found none");
        }
        let mut names: HashMap<String, usize> = HashMap::new();
        let mut vms = Vec::new();
        let mut reservations = Reservations::default();
        for (i, v) in raw.vm.iter().enumerate() {
            vms.push(vm::check(
                &mut c,
                i,
                v,
                &base,
                &h,
                &mut names,
                &mut reservations,
            ));
        }

        reservations.check_fit(&mut c, &h.config.cpus);
        super::bounds::check_admission(&mut c, &raw.vm, &vms);
        // The host's memory, KVM's vCPU limit, open files and threads.
        let demand: Vec<_> = vms
            .iter()
            .map(|v| crate::config::host_resources::VmDemand {
                vcpus: v.vcpus,
                memory_mib: v.memory_mib,
            })
            .collect();
        for s in crate::config::host_resources::check(&host.resources, &demand) {
            let raw_vm = &raw.vm[s.vm];
            let span = match s.field {
                "memory_mib" => raw_vm.memory_mib.span(),
                _ => raw_vm.vcpus.span(),
            };
            c.err(span, format!("vm[{}].{}", s.vm, s.field), s.message);
        }

        if !c.diags.is_empty() {
            c.diags.sort_by_key(|d| (d.line, d.column));
            return Err(invalid(c.diags));
        }
        // The command line's own values, once the file holds.
        if let Some(mode) = overrides.mode {
            if !h.config.policy.uses_mode() {
                return Err(ConfigError::ModeWithoutModes {
                    path: path.to_path_buf(),
                    mode,
                    policy: h.config.policy,
                });
            }
        }
        if let Some(dir) = &overrides.log_dir {
            crate::input::check_dir_writable(dir).map_err(|why| ConfigError::LogDirOverride {
                dir: dir.clone(),
                why,
            })?;
        }
        if !h.config.dispatch_explicit {
            h.config.dispatch =
                super::default_dispatch(h.config.smt_isolation, &h.config.tunables, &vms);
        }
        Ok(Config {
            path: path.to_path_buf(),
            host: h.config,
            vms,
        })
    }
}
