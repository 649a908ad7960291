//! Loading a config file to start or reload a router: the file's checks
//! ([`vmpls_control::Config`]) and the interfaces' (they exist, and are as the ports need
//! them).

use anyhow::Context;
use std::collections::HashMap;
use std::path::Path;
use vmpls_control::Config;

/// Loads and validates a config, including that its interfaces and the groups its
/// vhost-user sockets are given exist. In FRR mode the kernel's VRFs join the config's and
/// each port is put in the VRF the kernel has its interface in
/// ([`crate::vrfs::place_ports`]); its interface is then looked for there.
pub fn load_config(path: &Path) -> anyhow::Result<Config> {
    let mut cfg = Config::from_file(path)?;
    if cfg.frr.is_some() {
        crate::vrfs::place_ports(&crate::vrfs::System::default(), &mut cfg)?;
    }
    let netns = port_namespaces(&cfg);
    vmpls_control::check_interfaces(&cfg, |ifname| {
        in_namespace_of(&netns, ifname, || vmpls_ports::interface_exists(ifname)).unwrap_or(false)
    })?;
    vmpls_control::check_socket_groups(&cfg, |g| {
        vmpls_sys::process::group_id(g).is_ok_and(|id| id.is_some())
    })?;
    Ok(cfg)
}

/// Loads and validates a config for starting a router (`run`, `check`): also that every
/// interface is as the ports need it now (up, Ethernet, MTU within the interface's), so
/// that what `run` would refuse, `check` finds, with file and line.
pub fn load_config_to_start(path: &Path) -> anyhow::Result<Config> {
    let cfg = load_config(path)?;
    let netns = port_namespaces(&cfg);
    vmpls_control::check_ports(&cfg, |ifname, mtu| {
        in_namespace_of(&netns, ifname, || {
            vmpls_ports::check_af_packet(ifname, mtu).map_err(|e| e.to_string())
        })
        .unwrap_or_else(|e| Err(e.to_string()))
    })?;
    if let Some(cpus) = &cfg.router.cpus {
        vmpls_sys::process::check_cpus(cpus.cpus())
            .with_context(|| format!("{}: router.cpus = \"{cpus}\"", path.display()))?;
    }
    Ok(cfg)
}

/// The interfaces of ports in a VRF's namespace, with that namespace's name.
fn port_namespaces(cfg: &Config) -> HashMap<String, String> {
    cfg.ports.iter().filter_map(|p| Some((p.interface.clone(), p.netns.clone()?))).collect()
}

/// Runs `f` in the namespace `netns` has for interface `ifname` (the router's if none).
fn in_namespace_of<R: Send>(
    netns: &HashMap<String, String>,
    ifname: &str,
    f: impl FnOnce() -> R + Send,
) -> std::io::Result<R> {
    match netns.get(ifname) {
        None => Ok(f()),
        Some(ns) => crate::vrfs::VrfNetns::open(ns)
            .map_err(|e| std::io::Error::new(e.kind(), format!("network namespace {ns}: {e}")))?
            .run(f),
    }
}
