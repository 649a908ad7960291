//! Topologies of network namespaces joined by veth links.
//!
//! A [`Topology`] names its namespaces `vl<pid>-<n>-<host>`, so topologies of several
//! processes and threads never collide and tests can run concurrently. Each operation
//! takes effect at once (there is no separate "apply" step); whatever was created is
//! removed by [`Topology::cleanup`] or on drop, also when the caller returns early or
//! panics: child processes are stopped, namespaces are deleted, and their veth
//! interfaces go with them.
//!
//! Interfaces are created directly inside their namespaces (the veth request carries
//! the peer's namespace), so their friendly names (`pe1-ce1`) only need to be unique
//! within one namespace and nothing ever appears in the root namespace.

use std::fs::File;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};

use crate::process::{SignalTarget, Supervised};
use crate::{IpPrefix, netns, nl};

/// The longest interface name Linux accepts (`IFNAMSIZ - 1`).
pub const MAX_IFNAME: usize = 15;

/// How a new host's IPv6 starts out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostOptions {
    /// Whether interfaces added to the host have IPv6 enabled. Hosts where a userspace
    /// router owns the interfaces set this to `false`, so the kernel sends no router or
    /// neighbour solicitations of its own (`disable_ipv6=1`); enable it per interface
    /// later with [`Topology::set_ipv6`].
    pub ipv6: bool,
}

impl Default for HostOptions {
    fn default() -> Self {
        Self { ipv6: true }
    }
}

#[derive(Debug)]
struct Host {
    name: String,
    ns: String,
    interfaces: Vec<String>,
}

#[derive(Debug)]
struct ChildProcess {
    host: String,
    label: String,
    child: Supervised,
    log: Option<PathBuf>,
}

/// A child process that exited while the topology expected it to run.
#[derive(Debug, Clone)]
pub struct ExitedChild {
    /// The host it ran on.
    pub host: String,
    /// The label given to [`Topology::spawn`].
    pub label: String,
    /// Its exit status.
    pub status: ExitStatus,
    /// Its log file, if one was given.
    pub log: Option<PathBuf>,
}

/// A set of network namespaces ("hosts"), veth links between them, and processes
/// running inside them. See the [module documentation](self).
#[derive(Debug)]
pub struct Topology {
    prefix: String,
    hosts: Vec<Host>,
    children: Vec<ChildProcess>,
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

fn validate_host_name(name: &str) -> anyhow::Result<()> {
    if name.is_empty()
        || name.len() > 32
        || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        bail!("host name {name:?} must be 1 to 32 characters of [A-Za-z0-9_-]");
    }
    Ok(())
}

fn validate_ifname(name: &str) -> anyhow::Result<()> {
    if name.is_empty()
        || name.len() > MAX_IFNAME
        || name == "."
        || name == ".."
        || name.bytes().any(|b| b == b'/' || b == b':' || b.is_ascii_whitespace() || b == 0)
    {
        bail!("interface name {name:?} must be 1 to {MAX_IFNAME} characters without '/', ':' or spaces");
    }
    Ok(())
}

fn validate_sysctl_key(key: &str) -> anyhow::Result<()> {
    if key.is_empty() || key.starts_with('/') || key.split('/').any(|c| c.is_empty() || c == "..") {
        bail!("sysctl {key:?} must be a relative path under /proc/sys, like net/ipv4/ip_forward");
    }
    Ok(())
}

impl Default for Topology {
    fn default() -> Self {
        Self::new()
    }
}

impl Topology {
    /// An empty topology with a unique name prefix (`vl<pid>-<n>`).
    pub fn new() -> Self {
        Self::with_prefix("vl")
    }

    /// An empty topology whose namespaces are named `<tag><pid>-<n>-HOST` (a test's own
    /// tag, so what it leaves behind after a crash tells whose it is).
    pub fn with_prefix(tag: &str) -> Self {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        Self { prefix: format!("{tag}{}-{n}", std::process::id()), hosts: Vec::new(), children: Vec::new() }
    }

    /// The prefix of this topology's namespace names.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn host(&self, name: &str) -> anyhow::Result<&Host> {
        self.hosts.iter().find(|h| h.name == name).ok_or_else(|| anyhow!("no host {name:?} in this topology"))
    }

    fn host_mut(&mut self, name: &str) -> anyhow::Result<&mut Host> {
        self.hosts
            .iter_mut()
            .find(|h| h.name == name)
            .ok_or_else(|| anyhow!("no host {name:?} in this topology"))
    }

    /// The namespace name of `host` (for `ip netns exec NAME ...`).
    pub fn ns(&self, host: &str) -> anyhow::Result<&str> {
        Ok(&self.host(host)?.ns)
    }

    /// The hosts, in creation order.
    pub fn hosts(&self) -> impl Iterator<Item = &str> {
        self.hosts.iter().map(|h| h.name.as_str())
    }

    /// The names of all namespaces this topology created and has not deleted yet.
    pub fn namespaces(&self) -> Vec<String> {
        self.hosts.iter().map(|h| h.ns.clone()).collect()
    }

    /// The interfaces created on `host` by [`Topology::add_link`].
    pub fn interfaces(&self, host: &str) -> anyhow::Result<&[String]> {
        Ok(&self.host(host)?.interfaces)
    }

    /// Adds a host with IPv6 enabled: a new namespace with `lo` up and IPv6 duplicate
    /// address detection off (addresses are usable at once).
    pub fn add_host(&mut self, name: &str) -> anyhow::Result<()> {
        self.add_host_with(name, HostOptions::default())
    }

    /// Adds a host with the given options. See [`Topology::add_host`].
    pub fn add_host_with(&mut self, name: &str, options: HostOptions) -> anyhow::Result<()> {
        validate_host_name(name)?;
        if self.hosts.iter().any(|h| h.name == name) {
            bail!("host {name:?} exists already");
        }
        let ns = format!("{}-{name}", self.prefix);
        netns::create(&ns)?;
        // Registered before anything else can fail, so cleanup removes it.
        self.hosts.push(Host { name: name.to_string(), ns, interfaces: Vec::new() });
        let disable = if options.ipv6 { "0" } else { "1" };
        for conf in ["all", "default"] {
            self.set_sysctl(name, &format!("net/ipv6/conf/{conf}/accept_dad"), "0")?;
            self.set_sysctl(name, &format!("net/ipv6/conf/{conf}/dad_transmits"), "0")?;
            self.set_sysctl(name, &format!("net/ipv6/conf/{conf}/accept_ra"), "0")?;
        }
        self.set_sysctl(name, "net/ipv6/conf/default/disable_ipv6", disable)?;
        self.set_up(name, "lo", true)?;
        Ok(())
    }

    /// Links `a_host`'s interface `a_if` to `b_host`'s interface `b_if` with a veth
    /// pair, sets `mtu` on both ends and brings them up.
    pub fn add_link(
        &mut self,
        a_host: &str,
        a_if: &str,
        b_host: &str,
        b_if: &str,
        mtu: u32,
    ) -> anyhow::Result<()> {
        validate_ifname(a_if)?;
        validate_ifname(b_if)?;
        if a_host == b_host && a_if == b_if {
            bail!("both ends of a link are {a_host}:{a_if}");
        }
        for (host, ifname) in [(a_host, a_if), (b_host, b_if)] {
            if self.host(host)?.interfaces.iter().any(|i| i == ifname) {
                bail!("host {host} already has an interface {ifname}");
            }
        }
        let a_ns = self.ns(a_host)?.to_string();
        let b_ns = self.ns(b_host)?.to_string();
        let b_file: Option<File> = if a_ns == b_ns { None } else { Some(netns::open(&b_ns)?) };
        let b_fd = b_file.as_ref().map(|f| f.as_raw_fd());
        nl::session(&a_ns, |h| async move { nl::add_veth(&h, a_if, mtu, b_if, mtu, b_fd).await })
            .with_context(|| format!("linking {a_host}:{a_if} -- {b_host}:{b_if}"))?;
        drop(b_file);
        self.host_mut(a_host)?.interfaces.push(a_if.to_string());
        self.host_mut(b_host)?.interfaces.push(b_if.to_string());
        self.set_up(a_host, a_if, true)?;
        self.set_up(b_host, b_if, true)?;
        Ok(())
    }

    /// Sets the interface `ifname` of `host` up or down.
    pub fn set_up(&self, host: &str, ifname: &str, up: bool) -> anyhow::Result<()> {
        let ns = self.ns(host)?;
        nl::session(ns, |h| async move { nl::set_up(&h, ifname, up).await })
            .with_context(|| format!("on host {host}"))
    }

    /// Sets the MTU of `host`'s interface `ifname`.
    pub fn set_mtu(&self, host: &str, ifname: &str, mtu: u32) -> anyhow::Result<()> {
        let ns = self.ns(host)?;
        nl::session(ns, |h| async move { nl::set_mtu(&h, ifname, mtu).await })
            .with_context(|| format!("on host {host}"))
    }

    /// The MTU of `host`'s interface `ifname`.
    pub fn mtu(&self, host: &str, ifname: &str) -> anyhow::Result<u32> {
        let ns = self.ns(host)?;
        nl::session(ns, |h| async move { nl::mtu(&h, ifname).await })
            .with_context(|| format!("on host {host}"))
    }

    /// Adds a kernel address to `host`'s interface `ifname`.
    pub fn add_address(&self, host: &str, ifname: &str, addr: IpPrefix) -> anyhow::Result<()> {
        let ns = self.ns(host)?;
        nl::session(ns, |h| async move { nl::add_address(&h, ifname, addr).await })
            .with_context(|| format!("on host {host}"))
    }

    /// The kernel addresses on `host`'s interface `ifname` (IPv6 link-local included).
    pub fn addresses(&self, host: &str, ifname: &str) -> anyhow::Result<Vec<IpPrefix>> {
        let ns = self.ns(host)?;
        nl::session(ns, |h| async move { nl::addresses(&h, ifname).await })
            .with_context(|| format!("on host {host}"))
    }

    /// Removes the kernel addresses from `host`'s interface `ifname`, except IPv6
    /// link-local ones (disable IPv6 with [`Topology::set_ipv6`] to remove those).
    pub fn flush_addresses(&self, host: &str, ifname: &str) -> anyhow::Result<()> {
        let ns = self.ns(host)?;
        nl::session(ns, |h| async move { nl::flush_addresses(&h, ifname).await })
            .with_context(|| format!("on host {host}"))
    }

    /// Adds (or replaces) a kernel route on `host` to `dest` via the gateway `via`.
    pub fn add_route(&self, host: &str, dest: IpPrefix, via: IpAddr) -> anyhow::Result<()> {
        let ns = self.ns(host)?;
        nl::session(ns, |h| async move { nl::add_route(&h, dest, Some(via), None).await })
            .with_context(|| format!("on host {host}"))
    }

    /// Adds (or replaces) the default route of `via`'s address family on `host`.
    pub fn add_default_route(&self, host: &str, via: IpAddr) -> anyhow::Result<()> {
        self.add_route(host, IpPrefix::default_for(via), via)
    }

    /// Deletes the kernel route to `dest` on `host`; returns whether there was one.
    pub fn del_route(&self, host: &str, dest: IpPrefix) -> anyhow::Result<bool> {
        let ns = self.ns(host)?;
        nl::session(ns, |h| async move { nl::del_route(&h, dest).await })
            .with_context(|| format!("on host {host}"))
    }

    /// Writes `value` to the sysctl `key` (a path under `/proc/sys`, like
    /// `net/ipv4/ip_forward`) inside `host`'s namespace.
    pub fn set_sysctl(&self, host: &str, key: &str, value: &str) -> anyhow::Result<()> {
        validate_sysctl_key(key)?;
        let ns = self.ns(host)?;
        let path = format!("/proc/sys/{key}");
        netns::in_netns(ns, || std::fs::write(&path, value))?
            .with_context(|| format!("writing {value} to {path} on host {host}"))
    }

    /// Reads the sysctl `key` (see [`Topology::set_sysctl`]) inside `host`'s namespace,
    /// without the trailing newline.
    pub fn sysctl(&self, host: &str, key: &str) -> anyhow::Result<String> {
        validate_sysctl_key(key)?;
        let ns = self.ns(host)?;
        let path = format!("/proc/sys/{key}");
        let value = netns::in_netns(ns, || std::fs::read_to_string(&path))?
            .with_context(|| format!("reading {path} on host {host}"))?;
        Ok(value.trim_end().to_string())
    }

    /// Turns kernel IPv4 and IPv6 forwarding on or off on `host`.
    pub fn set_forwarding(&self, host: &str, on: bool) -> anyhow::Result<()> {
        let v = if on { "1" } else { "0" };
        self.set_sysctl(host, "net/ipv4/ip_forward", v)?;
        self.set_sysctl(host, "net/ipv6/conf/all/forwarding", v)
    }

    /// Enables or disables IPv6 on `host`'s interface `ifname` (`disable_ipv6`).
    /// Disabling removes the interface's IPv6 addresses and routes.
    pub fn set_ipv6(&self, host: &str, ifname: &str, enabled: bool) -> anyhow::Result<()> {
        validate_ifname(ifname)?;
        let key = format!("net/ipv6/conf/{ifname}/disable_ipv6");
        self.set_sysctl(host, &key, if enabled { "0" } else { "1" })
    }

    /// Switches offload features of `host`'s interface `ifname` with `ethtool -K`
    /// (feature names as ethtool spells them: `tso`, `gso`, `gro`, `tx`, `rx`, ...).
    pub fn set_offloads(&self, host: &str, ifname: &str, features: &[(&str, bool)]) -> anyhow::Result<()> {
        validate_ifname(ifname)?;
        if features.is_empty() {
            return Ok(());
        }
        let mut cmd = Command::new("ethtool");
        cmd.arg("-K").arg(ifname);
        for (feature, on) in features {
            cmd.arg(feature).arg(if *on { "on" } else { "off" });
        }
        let out = self.run(host, cmd).context("running ethtool (is it installed?)")?;
        if !out.status.success() {
            bail!(
                "ethtool -K {ifname} on host {host} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    /// Runs `cmd` to completion inside `host`'s namespace and returns its output.
    /// Use it for short commands only: it waits without a timeout.
    pub fn run(&self, host: &str, mut cmd: Command) -> anyhow::Result<Output> {
        netns::command_in_netns(self.ns(host)?, &mut cmd)?;
        cmd.stdin(Stdio::null());
        cmd.output().with_context(|| format!("running {:?} on host {host}", cmd.get_program()))
    }

    /// Runs `cmd` inside `host`'s namespace with stdout and stderr captured, killing it
    /// if it runs longer than `timeout` (see [`crate::process::run_timeout`]).
    pub fn run_timeout(&self, host: &str, cmd: Command, timeout: Duration) -> anyhow::Result<Output> {
        crate::process::run_timeout(self.ns(host)?, cmd, timeout).with_context(|| format!("on host {host}"))
    }

    /// Runs `f` on a thread inside `host`'s namespace (see [`netns::in_netns`]).
    pub fn in_host<R: Send>(&self, host: &str, f: impl FnOnce() -> R + Send) -> anyhow::Result<R> {
        netns::in_netns(self.ns(host)?, f)
    }

    /// Starts `cmd` inside `host`'s namespace and keeps it until [`Topology::stop`],
    /// [`Topology::stop_all`] or cleanup. `label` names it in errors; `log` is the file
    /// its output goes to, if the caller redirected it (for [`Topology::log_tail`]).
    ///
    /// The child runs in its own process group (a terminal's Ctrl-C reaches only us,
    /// and we stop it in order) and is killed if the thread that spawned it exits
    /// (`PR_SET_PDEATHSIG`), so it cannot outlive a crashed lab: spawn from a thread
    /// that lives as long as the topology. Returns the child's pid.
    pub fn spawn(
        &mut self,
        host: &str,
        label: &str,
        mut cmd: Command,
        log: Option<PathBuf>,
    ) -> anyhow::Result<u32> {
        netns::lab_child_in_netns(self.ns(host)?, &mut cmd)?;
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {label} ({:?}) on host {host}", cmd.get_program()))?;
        let pid = child.id();
        let child = Supervised::new(format!("{label} on host {host}"), child, SignalTarget::Process);
        self.children.push(ChildProcess { host: host.to_string(), label: label.to_string(), child, log });
        Ok(pid)
    }

    /// The first child process (from [`Topology::spawn`]) that has exited, if any. It
    /// stays registered, so a second call reports it again.
    pub fn exited_child(&mut self) -> Option<ExitedChild> {
        for c in &mut self.children {
            if let Ok(Some(status)) = c.child.try_wait() {
                return Some(ExitedChild {
                    host: c.host.clone(),
                    label: c.label.clone(),
                    status,
                    log: c.log.clone(),
                });
            }
        }
        None
    }

    /// Stops the child `pid`: SIGTERM, then SIGKILL after `grace`. Returns its exit
    /// status.
    pub fn stop(&mut self, pid: u32, grace: Duration) -> anyhow::Result<ExitStatus> {
        let i = self
            .children
            .iter()
            .position(|c| c.child.id() == pid)
            .ok_or_else(|| anyhow!("process {pid} is not a child of this topology"))?;
        self.children.remove(i).child.stop(grace)
    }

    /// Stops every child process (see [`Topology::stop`]); returns the first error.
    pub fn stop_all(&mut self, grace: Duration) -> anyhow::Result<()> {
        let mut first_err = None;
        // Signal all first so they shut down in parallel.
        for c in &self.children {
            c.child.signal(libc::SIGTERM);
        }
        let deadline = Instant::now() + grace;
        for mut c in std::mem::take(&mut self.children) {
            let left = deadline.saturating_duration_since(Instant::now());
            if let Err(e) = c.child.stop(left) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// The last `lines` lines of a child's log file, or an empty string if unknown.
    pub fn log_tail(path: &std::path::Path, lines: usize) -> String {
        let Ok(mut f) = File::open(path) else {
            return String::new();
        };
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        let start = len.saturating_sub(16 * 1024);
        let mut buf = Vec::new();
        if f.seek(SeekFrom::Start(start)).is_err() || f.read_to_end(&mut buf).is_err() {
            return String::new();
        }
        let text = String::from_utf8_lossy(&buf);
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Stops all child processes and deletes all namespaces (which removes the veth
    /// links). Safe to call more than once; returns the first error but tries
    /// everything.
    pub fn cleanup(&mut self) -> anyhow::Result<()> {
        let mut first_err = self.stop_all(Duration::from_secs(2)).err();
        for host in std::mem::take(&mut self.hosts) {
            if let Err(e) = netns::delete(&host.ns) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        if let Err(e) = self.cleanup() {
            tracing::warn!("cleaning up lab {}: {e:#}", self.prefix);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_names() {
        assert!(validate_ifname("pe1-ce1").is_ok());
        assert!(validate_ifname("a-very-long-name").is_err());
        assert!(validate_ifname("a/b").is_err());
        assert!(validate_ifname("").is_err());
        assert!(validate_host_name("ce1").is_ok());
        assert!(validate_host_name("ce 1").is_err());
        assert!(validate_sysctl_key("net/ipv4/ip_forward").is_ok());
        assert!(validate_sysctl_key("/etc/passwd").is_err());
        assert!(validate_sysctl_key("net/../../etc").is_err());
    }

    #[test]
    fn prefixes_are_unique() {
        let a = Topology::new();
        let b = Topology::new();
        assert_ne!(a.prefix(), b.prefix());
        assert!(a.namespaces().is_empty());
    }
}
