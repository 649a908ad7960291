use std::os::fd::{AsFd, AsRawFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use anyhow::Context;
use tracing::{info, warn};
use vmpls_control::Config;
use vmpls_dataplane::{Dataplane, DataplaneConfig, HostStack, Output, PacketPool, PortId};
use vmpls_fib::FibHandle;
use vmpls_ports::{AfPacketPort, Port};

use crate::config::load_config_to_start;
use crate::fastpath::{FastPathRuntime, FastPortInfo, PortNetns};
use crate::forward::{ForwardingLoop, POOL_SIZE, change_neighbor};
use crate::links::PortWatch;
use crate::offloads::with_overrides;
use crate::open::open_port;
use crate::protocol::{LoopHandle, NeighborChange, PortFaults};
use crate::signals::{RELOAD_FD, STOP_WAKE_FD, install_signal_handlers};
use crate::vrfs::VrfNetns;

/// Options of `vmpls run`.
pub struct RunOptions {
    /// The config file.
    pub config: PathBuf,
    /// `--stats-file`.
    pub stats_file: Option<PathBuf>,
    /// `--stats-file-mode`: the stats file's permissions
    /// ([`crate::stats::DEFAULT_STATS_FILE_MODE`] unless asked).
    pub stats_file_mode: u32,
    /// `--metrics`: where to serve Prometheus metrics.
    pub metrics: Option<std::net::SocketAddr>,
    /// `--socket`: overrides the config's control socket.
    pub socket: Option<PathBuf>,
}

/// Gives the memory freed since the start back to the system: parsing a config of a
/// million routes leaves hundreds of MB free in the allocator's heap, which would
/// otherwise stay in the router's resident size for good.
pub fn return_freed_memory() {
    vmpls_sys::process::trim_heap();
}

/// Runs a router until SIGINT or SIGTERM.
pub fn run(opts: RunOptions) -> anyhow::Result<()> {
    let mut cfg = load_config_to_start(&opts.config)?;
    // First: every thread the router starts from here on (the ports', the control
    // socket's) inherits the placement.
    if let Some(cpus) = &cfg.router.cpus {
        vmpls_sys::process::run_on_cpus(cpus.cpus()).with_context(|| format!("router.cpus = \"{cpus}\""))?;
        info!(cpus = %cpus, "the router's threads run on these CPUs");
    }
    let netns = open_port_namespaces(&cfg)?;
    let port_interfaces: Vec<crate::kernel::PortInterface> = cfg
        .ports
        .iter()
        .zip(&netns)
        .map(|(p, ns)| crate::kernel::PortInterface { name: p.interface.clone(), netns: ns.clone() })
        .collect();
    let mut fpm_listener = None;
    let mut pw_listener = None;
    let mut _pw_stand_ins = None;
    let kernel_addresses = match &cfg.frr {
        None => None,
        Some(frr) => {
            crate::kernel::check_forwarding_off(&port_interfaces)?;
            let allowed = crate::fpm::allowed_users(frr, &opts.config)?;
            fpm_listener = Some((crate::fpm::listen(frr)?, allowed));
            if let Some(addr) = frr.pw_channel {
                pw_listener = Some(crate::pw_channel::listen(addr)?);
            }
            // ldpd's `member pseudowire NAME` and zebra need an interface of that name
            // before they signal the pseudowire; removed when the router stops. Every
            // `[[pseudowire]]` (ldpd's in FRR mode) and each VPLS member ldpd signals.
            let vpls_members =
                cfg.vpls.iter().flat_map(|v| &v.pseudowires).filter(|m| m.static_spec.is_none());
            let names: Vec<String> = cfg
                .pseudowires
                .iter()
                .map(|p| p.name.clone())
                .chain(vpls_members.map(|m| m.name.clone()))
                .collect();
            _pw_stand_ins = Some(crate::pw_standin::StandIns::create(&names)?);
            let a = crate::kernel::read(&port_interfaces).context("reading the kernel's addresses")?;
            for (p, addrs) in cfg.ports.iter_mut().zip(&a.ports) {
                p.addresses.clone_from(addrs);
            }
            (cfg.router.v4, cfg.router.v6) = (a.router_v4, a.router_v6);
            info!(ports = ?a.ports, router_v4 = ?a.router_v4, router_v6 = ?a.router_v6, "the kernel owns the addresses (FRR mode)");
            Some(a)
        }
    };
    // The routes go to the tables; what the rest of the start reads is the ports and
    // settings, so a table of a million routes is not held twice.
    let (routes, labels) = (std::mem::take(&mut cfg.routes), std::mem::take(&mut cfg.labels));
    let (tables, fib) =
        vmpls_control::tables::Tables::built(vmpls_control::Config { routes, labels, ..cfg.clone() })?;
    return_freed_memory();
    let socket_path = opts
        .socket
        .clone()
        .or_else(|| cfg.router.control_socket.clone())
        .unwrap_or_else(|| crate::socket::default_path(&cfg.router.name));
    let control = crate::socket::bind(&socket_path)?;
    let _claims = claim_interfaces(&cfg, &netns, &socket_path)?;
    let metrics = match opts.metrics {
        Some(addr) => Some(
            std::net::TcpListener::bind(addr).with_context(|| format!("cannot serve metrics on {addr}"))?,
        ),
        None => None,
    };
    let mut ports: Vec<Box<dyn Port>> = Vec::new();
    let mut watch: Vec<PortWatch> = Vec::new();
    for (i, p) in cfg.ports.iter().enumerate() {
        let id = PortId::try_from(i).context("too many ports")?;
        // A pseudowire's or a VPLS's attachment circuit (raw Ethernet mode) takes every frame.
        let attachment = cfg.pseudowires.iter().any(|pw| pw.attachment == id)
            || cfg.vpls.iter().any(|v| v.attachments.contains(&id));
        let (port, relink) = open_port(id, p, netns[i].as_ref(), attachment)
            .with_context(|| format!("opening port {:?} ({} {})", p.name, p.kind.name(), p.interface))?;
        let port = with_overrides(port, p.offloads);
        let info = port.info();
        match &p.netns {
            None => {
                info!(port = %p.name, kind = p.kind.name(), interface = %p.interface, vrf = %p.vrf, mtu = info.mtu, caps = ?info.caps, "port up")
            }
            Some(ns) => {
                info!(port = %p.name, kind = p.kind.name(), interface = %p.interface, vrf = %p.vrf, netns = %ns, mtu = info.mtu, caps = ?info.caps, "port up in the VRF's network namespace")
            }
        }
        ports.push(port);
        watch.push(PortWatch::new(relink));
    }
    let infos: Vec<_> = ports.iter().map(|p| p.info().clone()).collect();
    let fib = FibHandle::new(fib);
    let mut dp = Dataplane::new(fib.clone(), infos.clone(), dataplane_config(&cfg));
    set_static_neighbors(&mut dp, &cfg, ports.len())?;
    for p in ports.iter().filter(|p| p.point_to_point()) {
        dp.set_point_to_point(p.info().id);
    }
    let (handle, requests, wake) = LoopHandle::new().context("creating an eventfd")?;
    let reload = vmpls_sys::EventFd::new().context("creating an eventfd")?;
    RELOAD_FD.store(reload.as_fd().as_raw_fd(), Ordering::Relaxed);
    STOP_WAKE_FD.store(wake.as_fd().as_raw_fd(), Ordering::Relaxed);
    install_signal_handlers()?;
    let server = crate::server::Server::new(tables, fib, handle, opts.config.clone(), infos);
    let listener = control.listener.try_clone().context("cloning the control socket")?;
    crate::server::spawn(server.clone(), listener, reload)?;
    if let (Some(frr), Some(addrs), Some((listener, allowed))) =
        (cfg.frr.clone(), kernel_addresses, fpm_listener)
    {
        let vrfs = Arc::new(crate::vrfs::Vrfs::default());
        let (kernel, specs) = (crate::vrfs::System::default(), crate::vrfs::PortSpec::of_config(&cfg));
        crate::vrfs::rescan(&vrfs, &kernel, &specs);
        server.set_vrfs(vrfs.clone());
        crate::vrfs::spawn_rescan(vrfs.clone(), kernel, specs, server.clone())
            .context("starting the VRF scan")?;
        crate::kernel::spawn_watch(server.clone(), port_interfaces, addrs)?;
        if let Some(pw) = pw_listener {
            let channel = crate::pw_channel::spawn(server.clone(), pw, allowed.clone(), frr.hold, frr.stale)
                .context("starting the pseudowire channel")?;
            server.set_pw_channel_status(channel);
        }
        server.set_frr_status(crate::fpm::spawn(server.clone(), frr, listener, allowed, vrfs)?);
    }
    if let Some(m) = metrics {
        let addr = m.local_addr().ok();
        crate::metrics::spawn(m, server)?;
        info!(address = ?addr, "serving metrics at /metrics");
    }
    info!(router = %cfg.router.name, ports = ports.len(), socket = %control.path().display(), poll = cfg.router.poll.name(), "forwarding");
    let mut fast = start_fast_path(&cfg, &ports, &netns)?;
    let stats_file = match &opts.stats_file {
        Some(path) => Some(
            crate::stats::StatsFileWriter::spawn(path.clone(), opts.stats_file_mode)
                .context("starting the stats file writer")?,
        ),
        None => None,
    };
    let result = {
        let mut forwarding =
            ForwardingLoop::new(&mut dp, &mut ports, &mut watch, fast.as_mut(), stats_file, cfg.router.poll);
        let result = forwarding.run(&requests, &wake);
        // `wake` is closed when this returns: no signal may write to its number then.
        STOP_WAKE_FD.store(-1, Ordering::Relaxed);
        forwarding.finish_stats();
        result
    };
    for (port, w) in ports.iter().zip(&watch).filter(|(_, w)| w.faults != PortFaults::default()) {
        let f = w.faults;
        info!(port = %port.info().name, errors = f.errors, reopened = f.reopened, detached = f.detached, "port faults");
    }
    for (name, n) in dp.counters().drop_list() {
        info!(reason = name, count = n, "dropped");
    }
    for (name, n) in dp.counters().event_list() {
        info!(event = name, count = n, "counted");
    }
    // Its own counters too (how many frames it took, passed, recalled, sent a second
    // time...), as last read: the events above hold only its swaps, pushes and pops.
    if let Some(f) = &fast {
        for (name, n) in f.named_counters().into_iter().filter(|&(_, n)| n > 0) {
            info!(counter = name, count = n, "fast path counted");
        }
    }
    drop(control);
    info!(router = %cfg.router.name, "stopped");
    result
}

/// Why the in-kernel fast path cannot serve a port, or `None` if it can: the programs
/// attach to interfaces the router reads with AF_PACKET (TAP and vhost-user ports' frames
/// never pass TC ingress), Ethernet ones (`delivery`: [`vmpls_fastpath::delivery_to`]). An
/// MPLS-in-UDP port is served when its socket is in the router's own namespace
/// (`own_netns`): a TC program redirects only to interfaces of its namespace, and sits on
/// the underlay interface there to take the tunnel's datagrams.
pub(crate) fn fast_path_refuses(
    kind: &vmpls_control::PortKind,
    delivery: Result<vmpls_fastpath::Delivery, &'static str>,
    own_netns: bool,
) -> Option<&'static str> {
    match kind {
        vmpls_control::PortKind::AfPacket => delivery.err(),
        vmpls_control::PortKind::Udp { .. } if own_netns => None,
        vmpls_control::PortKind::Udp { .. } => {
            Some("the tunnel's socket is in another network namespace (netns)")
        }
        _ => Some("not an AF_PACKET port"),
    }
}

/// Why the fast path leaves a port whose VRF has no VRF interface to the pipeline.
const NO_VRF_INTERFACE: &str = "its VRF has no VRF interface (a veth named like the VRF, one end in the router's namespace and its peer in the VRF's) for the programs to cross by";

/// Why the fast path leaves a port whose ifindex another attached interface has.
const IFINDEX_TAKEN: &str =
    "another namespace has an attached interface with its ifindex, and the programs tell ports by ifindex";

/// The fast path's view of port `p` whose interface is in VRF namespace `ns`: a veth
/// there, served across the VRF's interface (named like the VRF, a veth with an end in
/// each namespace). `numbers`: the namespaces numbered so far (number = position + 1).
fn vrf_namespace_port(
    p: &vmpls_control::PortConfig,
    info: &vmpls_dataplane::PortInfo,
    ns: &VrfNetns,
    numbers: &mut Vec<String>,
) -> Result<FastPortInfo, &'static str> {
    if p.kind != vmpls_control::PortKind::AfPacket {
        return Err("not an AF_PACKET port");
    }
    let vrf_interface = p.vrf.clone();
    let there = ns
        .run(|| {
            (
                vmpls_fastpath::is_veth(&p.interface),
                AfPacketPort::interface_index(&p.interface),
                vmpls_fastpath::is_veth(&vrf_interface),
                vmpls_sys::if_nametoindex(&vrf_interface),
            )
        })
        .map_err(|_| "its VRF's namespace cannot be entered")?;
    let (veth, ifindex, vrf_end_veth, vrf_end) = there;
    let ifindex = ifindex.ok_or("no such interface")?;
    if !veth {
        return Err(
            "not a veth (a VRF namespace's ports are served by veth only: frames cross into it by veth peers)",
        );
    }
    let root_end =
        vmpls_sys::if_nametoindex(&vrf_interface).filter(|_| vmpls_fastpath::is_veth(&vrf_interface));
    let (Some(root_ifindex), Some(vrf_ifindex), true) = (root_end, vrf_end, vrf_end_veth) else {
        return Err(NO_VRF_INTERFACE);
    };
    let number = match numbers.iter().position(|n| *n == ns.name) {
        Some(i) => i + 1,
        None => {
            numbers.push(ns.name.clone());
            numbers.len()
        }
    };
    let number = u8::try_from(number).map_err(|_| "the fast path serves at most 255 VRF namespaces")?;
    Ok(FastPortInfo {
        ifname: p.interface.clone(),
        ifindex,
        mac: info.mac,
        mtu: info.mtu,
        tunnel: None,
        netns: Some(PortNetns {
            ns: ns.clone(),
            number,
            vrf_interface,
            crossing: vmpls_fastpath::Crossing { root_ifindex, vrf_ifindex },
        }),
        delivery: vmpls_fastpath::Delivery::VethPeer,
    })
}

/// The served ports (by index) whose ifindex is taken in another namespace by another
/// served port or a VRF interface's end: the programs know ports by ifindex alone (a
/// program cannot tell an interface's namespace), so such a VRF namespace's port is left
/// to the pipeline. The router's own namespace keeps its ports.
fn ifindex_collisions(served: &[Option<FastPortInfo>]) -> Vec<usize> {
    let ns_of = |p: &FastPortInfo| p.netns.as_ref().map_or(0, |n| n.number);
    let mut taken: Vec<(u32, u8)> = Vec::new();
    for p in served.iter().flatten().filter(|p| p.tunnel.is_none()) {
        taken.push((p.ifindex, ns_of(p)));
        if let Some(n) = &p.netns {
            taken.push((n.crossing.root_ifindex, 0));
            taken.push((n.crossing.vrf_ifindex, n.number));
        }
    }
    served
        .iter()
        .enumerate()
        .filter_map(|(i, p)| Some((i, p.as_ref()?)))
        .filter(|(_, p)| p.netns.is_some())
        .filter(|(_, p)| taken.iter().any(|&(ifindex, ns)| ifindex == p.ifindex && ns != ns_of(p)))
        .map(|(i, _)| i)
        .collect()
}

/// Why the fast path leaves a pseudowire's attachment circuit to the pipeline.
const PW_ATTACHMENT: &str = "it is an attachment circuit of a pseudowire or a VPLS: the kernel's helper that makes room for headers (bpf_skb_adjust_room) takes only IPv4 and IPv6 packets, so a circuit's VLAN-tagged and non-IP frames (ARP, LLDP, IS-IS) could not ride the pseudowire there and would overtake or trail its IP frames through the pipeline; pseudowires (control word, super-frames kept whole) and VPLS bridging run in the pipeline";

/// Whether `netns` (a name under `/run/netns`, or `None`: the router's) is the namespace
/// the router runs in.
fn is_own_netns(netns: Option<&str>) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Some(name) = netns else { return true };
    let (Ok(theirs), Ok(ours)) =
        (std::fs::metadata(format!("/run/netns/{name}")), std::fs::metadata("/proc/thread-self/ns/net"))
    else {
        return false;
    };
    (theirs.dev(), theirs.ino()) == (ours.dev(), ours.ino())
}

/// The fast path's view of MPLS-in-UDP port `id`: its underlay interface is the one that
/// holds the local address (the kernel routes the tunnel's datagrams from it); the
/// programs decapsulate, and encapsulate where [`encapsulates_in_the_kernel`] says.
fn tunnel_port(
    id: usize,
    local: std::net::IpAddr,
    remote: std::net::IpAddr,
    udp_port: u16,
    mtu: u32,
    mode: vmpls_control::FastPathMode,
) -> Result<FastPortInfo, &'static str> {
    let port = u16::try_from(id).map_err(|_| "too many ports")?;
    let underlay = crate::kernel::interface_with_address(local)
        .ok()
        .flatten()
        .ok_or("no interface of the router's namespace holds the tunnel's local address")?;
    let ifname = vmpls_sys::if_indextoname(underlay).ok_or("the underlay interface is gone")?;
    Ok(FastPortInfo {
        ifname,
        ifindex: vmpls_fastpath::tunnel_key(port),
        mac: [0; 6],
        mtu,
        tunnel: Some(vmpls_fastpath::Tunnel {
            local,
            remote,
            port: udp_port,
            underlay_ifindex: underlay,
            encap: encapsulates_in_the_kernel(local, mode),
        }),
        netns: None,
        delivery: vmpls_fastpath::Delivery::VethPeer,
    })
}

/// Whether the programs encapsulate into a tunnel from `local`: over IPv4 only (see
/// `vmpls_fastpath`), and only under `"tc"`. Under `"auto"` they only decapsulate and the
/// pipeline encapsulates: encapsulation in the kernel is safe only where the remote end
/// also decapsulates in the kernel, since over a virtual underlay (veth) its datagrams
/// keep the sender's partial checksums and whole super-frames, which a socket at the
/// remote end cannot complete. `"tc"` asks for it on both ends.
fn encapsulates_in_the_kernel(local: std::net::IpAddr, mode: vmpls_control::FastPathMode) -> bool {
    local.is_ipv4() && mode == vmpls_control::FastPathMode::Tc
}

/// Starts the in-kernel fast path as `[router] fast-path` asks and logs, port by port,
/// what forwards its frames:
/// - `"off"`: nothing to start, the pipeline serves every port;
/// - `"tc"`: loads the TC programs and attaches them to the AF_PACKET ports over veth;
///   an error stops the router;
/// - `"auto"` (the default): the same where some port is a veth, but a failure to load
///   or attach (a vmpls built without clang, no CAP_BPF, an old kernel) is one warning,
///   and the pipeline serves every port.
///
/// The ports the programs cannot serve stay with the pipeline alone in both modes.
fn start_fast_path(
    cfg: &Config,
    ports: &[Box<dyn Port>],
    netns: &[Option<VrfNetns>],
) -> anyhow::Result<Option<FastPathRuntime>> {
    use vmpls_control::FastPathMode;
    let mode = cfg.router.fast_path;
    if mode == FastPathMode::Off {
        info!("fast-path = \"off\": the pipeline serves every port");
        return Ok(None);
    }
    let mut served = Vec::new();
    let mut sockets = Vec::new();
    let mut refused = Vec::new();
    let mut numbers = Vec::new();
    for (i, (p, port)) in cfg.ports.iter().zip(ports).enumerate() {
        if let vmpls_control::PortKind::Udp { local, remote, port: udp_port, netns } = &p.kind {
            let served_port =
                match fast_path_refuses(&p.kind, Err("a tunnel"), is_own_netns(netns.as_deref())) {
                    Some(why) => Err(why),
                    None => tunnel_port(i, *local, *remote, *udp_port, port.info().mtu, mode),
                };
            sockets.push(None);
            match served_port {
                Ok(info) => {
                    served.push(Some(info));
                    refused.push(None);
                }
                Err(why) => {
                    served.push(None);
                    refused.push(Some(why));
                }
            }
            continue;
        }
        let vpls_attachment = cfg.vpls.iter().any(|v| v.attachments.iter().any(|&a| usize::from(a) == i));
        if vpls_attachment || cfg.pseudowires.iter().any(|pw| usize::from(pw.attachment) == i) {
            served.push(None);
            sockets.push(None);
            refused.push(Some(PW_ATTACHMENT));
            continue;
        }
        if let Some(ns) = netns.get(i).and_then(Option::as_ref) {
            match vrf_namespace_port(p, port.info(), ns, &mut numbers) {
                Ok(info) => {
                    served.push(Some(info));
                    sockets.push(Some(port.as_fd()));
                    refused.push(None);
                }
                Err(why) => {
                    served.push(None);
                    sockets.push(None);
                    refused.push(Some(why));
                }
            }
            continue;
        }
        let delivery = vmpls_fastpath::delivery_to(&p.interface);
        let ifindex = AfPacketPort::interface_index(&p.interface);
        let why =
            fast_path_refuses(&p.kind, delivery, true).or(ifindex.is_none().then_some("no such interface"));
        match (why, ifindex, delivery) {
            (None, Some(ifindex), Ok(delivery)) => {
                let info = port.info();
                served.push(Some(FastPortInfo {
                    ifname: p.interface.clone(),
                    ifindex,
                    mac: info.mac,
                    mtu: info.mtu,
                    tunnel: None,
                    netns: None,
                    delivery,
                }));
                sockets.push(Some(port.as_fd()));
                refused.push(None);
            }
            (why, _, _) => {
                served.push(None);
                sockets.push(None);
                refused.push(Some(why.unwrap_or("no such interface")));
            }
        }
    }
    for i in ifindex_collisions(&served) {
        served[i] = None;
        sockets[i] = None;
        refused[i] = Some(IFINDEX_TAKEN);
    }
    let transmits: Vec<bool> = served
        .iter()
        .map(|s| s.as_ref().is_some_and(|p| p.delivery == vmpls_fastpath::Delivery::Transmit))
        .collect();
    let fast = if mode == FastPathMode::Auto && served.iter().all(Option::is_none) {
        info!(
            "fast-path = \"auto\": no port is an AF_PACKET port on an Ethernet interface of the router's namespace or an MPLS-in-UDP port whose socket is there; the pipeline serves every port"
        );
        None
    } else {
        match FastPathRuntime::start(served, &sockets, dataplane_config(cfg).default_ttl) {
            Ok(f) => Some(f),
            Err(e) if mode == FastPathMode::Auto => {
                warn!(
                    error = %format!("{e:#}"),
                    "fast-path = \"auto\": the in-kernel fast path cannot run here, the pipeline serves every port (\"tc\" requires it, \"off\" does not try)"
                );
                None
            }
            Err(e) => return Err(e),
        }
    };
    let tunnels: Vec<Option<(String, bool)>> = match &fast {
        Some(f) => (0..cfg.ports.len()).map(|i| f.tunnel_of(i)).collect(),
        None => vec![None; cfg.ports.len()],
    };
    for (((p, why), tunnel), &transmit) in cfg.ports.iter().zip(&refused).zip(&tunnels).zip(&transmits) {
        match (why, &fast) {
            (None, Some(_)) if let Some((underlay, encap)) = tunnel => {
                let how = if *encap {
                    "forwarding: the in-kernel fast path (MPLS-in-UDP: it encapsulates, and decapsulates on the underlay's ingress), the pipeline for what it leaves"
                } else {
                    "forwarding: the in-kernel fast path decapsulates on the underlay's ingress; the pipeline encapsulates (in the kernel only with fast-path = \"tc\" at both ends, and over IPv4) and forwards what it leaves"
                };
                info!(port = %p.name, kind = p.kind.name(), interface = %p.interface, underlay = %underlay, "{how}")
            }
            (None, Some(_)) if p.netns.is_some() => {
                info!(port = %p.name, kind = p.kind.name(), interface = %p.interface, vrf = %p.vrf, netns = p.netns.as_deref().unwrap_or_default(), vrf_interface = %p.vrf, "forwarding: the in-kernel fast path, across the VRF interface between the VRF's namespace and the router's; the pipeline for what it leaves")
            }
            (None, Some(_)) if transmit => {
                info!(port = %p.name, kind = p.kind.name(), interface = %p.interface, "forwarding: the in-kernel fast path, out by the device's transmit (not a veth); the pipeline for what it leaves, for labelled super-frames to this port other than pushes through a push chain (the kernel cuts those with its MPLS GSO) and for the TCP segments of their flows")
            }
            (None, Some(_)) => {
                info!(port = %p.name, kind = p.kind.name(), interface = %p.interface, "forwarding: the in-kernel fast path, the pipeline for what it leaves")
            }
            (None, None) => {
                info!(port = %p.name, kind = p.kind.name(), interface = %p.interface, "forwarding: the pipeline (the fast path did not start)")
            }
            (Some(why), _) if p.netns.is_some() => {
                info!(port = %p.name, kind = p.kind.name(), interface = %p.interface, vrf = %p.vrf, why, "forwarding: the pipeline (the fast path serves a VRF namespace's veth ports across the VRF's interface)")
            }
            (Some(why), _) => {
                info!(port = %p.name, kind = p.kind.name(), interface = %p.interface, why, "forwarding: the pipeline (the fast path serves AF_PACKET ports on Ethernet interfaces and MPLS-in-UDP ports whose socket is in the router's namespace)")
            }
        }
    }
    if let Some(f) = &fast {
        let any_transmit = transmits.iter().any(|t| *t);
        for (i, p) in cfg.ports.iter().enumerate() {
            match f.act_chain_of(i) {
                Some(Ok(())) => {
                    info!(port = %p.name, interface = %p.interface, "the kernel's MPLS action (act_mpls) after the programs: TCP super-frames from this port pushed into a transmitting port leave whole (the out device's MPLS GSO cuts them), and labelled frames a device sent are popped in one pass")
                }
                Some(Err(why)) if any_transmit => {
                    info!(port = %p.name, interface = %p.interface, why, "no MPLS action after the programs: TCP super-frames from this port pushed into a transmitting port are the pipeline's, which cuts them (a NIC with receive aggregation off, ethtool -K IF gro off rx-gro-hw off, delivers none), and labelled frames a device sent take a second pass through the port to be popped")
                }
                _ => {}
            }
        }
    }
    Ok(fast)
}

/// Per port, its VRF's network namespace held open (FRR mode's ports whose interface is
/// in a VRF's namespace), each namespace opened once.
fn open_port_namespaces(cfg: &Config) -> anyhow::Result<Vec<Option<VrfNetns>>> {
    let mut opened: Vec<VrfNetns> = Vec::new();
    let mut out = Vec::with_capacity(cfg.ports.len());
    for p in &cfg.ports {
        let Some(name) = &p.netns else {
            out.push(None);
            continue;
        };
        if let Some(ns) = opened.iter().find(|ns| &ns.name == name) {
            out.push(Some(ns.clone()));
            continue;
        }
        let ns = VrfNetns::open(name)
            .with_context(|| format!("opening VRF {}'s network namespace for port {:?}", p.vrf, p.name))?;
        opened.push(ns.clone());
        out.push(Some(ns));
    }
    Ok(out)
}

/// Claims the interfaces of the ports the router attaches to ([`crate::claim`]), each in
/// the namespace it is in (claims are per namespace).
fn claim_interfaces(
    cfg: &Config,
    netns: &[Option<VrfNetns>],
    socket_path: &std::path::Path,
) -> anyhow::Result<Vec<crate::claim::Claims>> {
    let attached = |p: &&vmpls_control::PortConfig| {
        !matches!(
            p.kind,
            vmpls_control::PortKind::VhostUser { .. }
                | vmpls_control::PortKind::Udp { .. }
                | vmpls_control::PortKind::Memif { .. }
        )
    };
    let mut groups: Vec<(Option<&VrfNetns>, Vec<&str>)> = Vec::new();
    for (p, ns) in cfg.ports.iter().zip(netns).filter(|(p, _)| attached(p)) {
        let ns = ns.as_ref();
        match groups.iter_mut().find(|(g, _)| g.map(|g| &g.name) == ns.map(|n| &n.name)) {
            Some((_, names)) => names.push(&p.interface),
            None => groups.push((ns, vec![&p.interface])),
        }
    }
    if groups.is_empty() {
        groups.push((None, Vec::new()));
    }
    groups
        .into_iter()
        .map(|(ns, names)| {
            crate::vrfs::run_in(ns, || crate::claim::Claims::take(&cfg.router.name, socket_path, &names))
                .context("entering a VRF's network namespace")?
        })
        .collect()
}

/// The config's `[[neighbor]]`s into a new router's neighbour table.
fn set_static_neighbors(dp: &mut Dataplane, cfg: &Config, n_ports: usize) -> anyhow::Result<()> {
    // Nothing is held yet, so nothing is released into these.
    let (mut pool, mut out) = (PacketPool::new(0), Output::new(n_ports));
    for n in &cfg.neighbors {
        let change = NeighborChange::Set { port: n.port, addr: n.address, mac: n.lladdr, replace: false };
        change_neighbor(dp, change, Instant::now(), &mut pool, &mut out)
            .map_err(|e| anyhow::anyhow!("{}:{}: neighbor: {e}", cfg.path.display(), n.line))?;
    }
    if !cfg.neighbors.is_empty() {
        info!(count = cfg.neighbors.len(), "static neighbours set");
    }
    Ok(())
}

/// The pipeline's settings from the config's `[limits]` and `[frr]` (with FRR, the
/// kernel owns the host stack), the rest the dataplane's defaults.
fn dataplane_config(cfg: &Config) -> DataplaneConfig {
    let limits = &cfg.limits;
    // Held frames keep their buffers: the config's bound leaves half the pool free.
    const _: () = assert!(vmpls_control::MAX_HELD_TOTAL as usize <= POOL_SIZE / 2);
    let d = DataplaneConfig::default();
    DataplaneConfig {
        icmp_rate: limits.icmp_rate,
        icmp_burst: Some(limits.icmp_burst),
        neighbor_request_rate: limits.neighbor_request_rate,
        neighbor_request_burst: Some(limits.neighbor_request_burst),
        neighbor: vmpls_dataplane::neighbor::NeighborConfig {
            max_entries: limits.neighbor_entries as usize,
            max_entries_per_port: limits.neighbor_entries_per_port.map(|n| n as usize),
            max_held: limits.neighbor_held_per_address as usize,
            max_held_total: limits.neighbor_held_total as usize,
            ..d.neighbor
        },
        host_stack: if cfg.frr.is_some() { HostStack::Kernel } else { HostStack::Own },
        ..d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fast_path_serves_af_packet_ports_on_ethernet_interfaces() {
        use vmpls_control::PortKind;
        use vmpls_fastpath::Delivery;
        assert_eq!(fast_path_refuses(&PortKind::AfPacket, Ok(Delivery::VethPeer), true), None);
        assert_eq!(fast_path_refuses(&PortKind::AfPacket, Ok(Delivery::Transmit), true), None);
        let not_ethernet = Err("not an Ethernet interface");
        assert_eq!(
            fast_path_refuses(&PortKind::AfPacket, not_ethernet, true),
            Some("not an Ethernet interface")
        );
        assert_eq!(
            fast_path_refuses(&PortKind::Tap { mac: None }, Ok(Delivery::Transmit), true),
            Some("not an AF_PACKET port")
        );
        let vhost = PortKind::VhostUser { socket: "/run/x.sock".into(), mac: None, socket_group: None };
        assert_eq!(fast_path_refuses(&vhost, Ok(Delivery::VethPeer), true), Some("not an AF_PACKET port"));
        // The loopback interface has no Ethernet header to rewrite.
        assert_eq!(vmpls_fastpath::delivery_to("lo"), Err("not an Ethernet interface"));
        assert_eq!(vmpls_fastpath::delivery_to("vmpls-no-if"), Err("no such interface"));
    }

    #[test]
    fn auto_leaves_a_tunnels_encapsulation_to_the_pipeline_and_tc_does_it_in_the_kernel() {
        use vmpls_control::FastPathMode;
        let v4: std::net::IpAddr = "198.18.100.1".parse().unwrap();
        assert!(!encapsulates_in_the_kernel(v4, FastPathMode::Auto));
        assert!(encapsulates_in_the_kernel(v4, FastPathMode::Tc));
        // Over IPv6 the pipeline encapsulates in either mode.
        assert!(!encapsulates_in_the_kernel("2001:db8:100::1".parse().unwrap(), FastPathMode::Tc));
    }

    #[test]
    fn the_fast_path_serves_mpls_in_udp_ports_whose_socket_is_in_the_routers_namespace() {
        use vmpls_control::PortKind;
        let udp = |netns: Option<&str>| PortKind::Udp {
            local: "198.18.0.1".parse().unwrap(),
            remote: "198.18.0.2".parse().unwrap(),
            port: 6635,
            netns: netns.map(str::to_owned),
        };
        assert_eq!(fast_path_refuses(&udp(None), Err("a tunnel"), true), None);
        let why = fast_path_refuses(&udp(Some("h1")), Err("a tunnel"), false).unwrap();
        assert!(why.contains("another network namespace"), "{why}");
        assert!(is_own_netns(None));
        assert!(!is_own_netns(Some("vmpls-no-such-netns")));
    }
}
