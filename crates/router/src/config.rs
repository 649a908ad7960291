//! Loading a config file to start or reload a router: the file's checks
//! ([`vmpls_control::Config`]) and the interfaces' (they exist, and are as the ports need
//! them).

use std::path::Path;

use vmpls_control::Config;

/// Loads and validates a config, including that its interfaces and the groups its
/// vhost-user sockets are given exist.
pub fn load_config(path: &Path) -> anyhow::Result<Config> {
    let cfg = Config::from_file(path)?;
    vmpls_control::check_interfaces(&cfg, vmpls_ports::interface_exists)?;
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
    vmpls_control::check_ports(&cfg, |ifname, mtu| {
        vmpls_ports::check_af_packet(ifname, mtu).map_err(|e| e.to_string())
    })?;
    Ok(cfg)
}
