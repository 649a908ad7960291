//! The control plane of a vmpls router: the TOML config file, validated in full before
//! anything starts and turned into forwarding tables ([`vmpls_fib::Fib`]); the running
//! routes with their runtime changes and reloads ([`tables`]); the messages of the control
//! socket ([`api`]); the iproute2-style route grammar of the CLI ([`cli`]) and its text
//! output ([`show`]). No sockets here: the `vmpls` binary serves and uses the API.
//!
//! ```toml
//! [router]
//! name = "p"
//! # control-socket = "/run/vmpls/p.sock"   # the default
//! # fast-path = "auto"                     # the default: the in-kernel fast path on veth
//! #                                        # ports where it loads; "tc" requires it, "off"
//! # poll = "adaptive"                      # the default: busy-poll the ports while frames
//! #                                        # come, sleep when idle; "interrupt": always sleep
//! addresses = ["198.18.255.2", "2001:db8:ff::2"]
//!
//! [[port]]
//! name = "east"
//! interface = "p-pe2"
//! addresses = ["198.18.20.1/24", "2001:db8:20::1/64"]
//!
//! [[label]]
//! in = 1002
//! action = "swap"
//! out = [2002]
//! via = "198.18.20.2"
//! port = "east"
//!
//! [limits]                         # optional; see LimitsConfig
//! icmp-rate = 100
//! ```
//!
//! Every error names the file, the line and the key, and says what was expected; see
//! [`ConfigError`].

pub mod api;
pub mod batch;
pub mod cli;
mod error;
mod nexthop;
mod parse;
pub mod show;
pub mod tables;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use vmpls_fib::{
    Fib, FibBuilder, Label, LabelAcceptance, LabelAction, LabelRoute, Nexthop, NexthopGroup, PortId,
    PrefixRoute, Reject, RouteTarget, TtlModel,
};

pub use error::{ConfigError, LabelStackError, PrefixError};
pub use parse::MAX_SOCKET_PATH;
pub use parse::TAP_MEMIF_MAX_MTU;

/// The `[router]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterConfig {
    /// The router's name.
    pub name: String,
    /// Its IPv4 address: source of the ICMP it originates, answers ping.
    pub v4: Option<Ipv4Addr>,
    /// Its IPv6 address.
    pub v6: Option<Ipv6Addr>,
    /// `control-socket`: where the runtime API listens; `None`: the default
    /// (`/run/vmpls/NAME.sock`, see the `vmpls` binary).
    pub control_socket: Option<PathBuf>,
    /// `fast-path`: whether the router also programs the kernel's in-kernel fast path.
    pub fast_path: FastPathMode,
    /// `poll`: how the forwarding loop waits for frames.
    pub poll: PollMode,
    /// `cpus`: the CPUs the router's threads run on; `None`: wherever the scheduler
    /// puts them.
    pub cpus: Option<CpuList>,
}

/// `cpus` in `[router]`: a set of CPU numbers, written as the kernel lists them
/// (`/sys/devices/system/cpu/online`, `taskset -c`, `isolcpus=`): `"1"`, `"0,2-3"`. A
/// router that polls while frames come keeps a core busy; pinning it to a core of its own
/// (as a DPDK or VPP poller is given one) keeps it from sharing that core's caches and
/// time with other busy threads, and them from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuList(Vec<u16>);

impl CpuList {
    /// CPU numbers go up to this, excluded: the kernel's affinity masks as glibc sizes
    /// them (`CPU_SETSIZE`).
    pub const LIMIT: u16 = 1024;

    /// Reads a CPU list (`"1"`, `"0,2-3"`): numbers and ranges separated by commas, each
    /// below [`CpuList::LIMIT`], at least one CPU.
    pub fn parse(text: &str) -> Result<CpuList, String> {
        let mut cpus = Vec::new();
        for part in text.split(',') {
            let part = part.trim();
            let number = |t: &str| -> Result<u16, String> {
                let t = t.trim();
                match t.parse::<u16>() {
                    Ok(n) if n < Self::LIMIT => Ok(n),
                    Ok(n) => Err(format!("CPU {n} is beyond the largest CPU number, {}", Self::LIMIT - 1)),
                    Err(_) => Err(format!("\"{t}\" is not a CPU number")),
                }
            };
            match part.split_once('-') {
                Some((first, last)) => {
                    let (first, last) = (number(first)?, number(last)?);
                    if first > last {
                        return Err(format!("the range {first}-{last} runs backwards"));
                    }
                    cpus.extend(first..=last);
                }
                None => cpus.push(number(part)?),
            }
        }
        cpus.sort_unstable();
        cpus.dedup();
        Ok(CpuList(cpus))
    }

    /// The CPU numbers, ascending, each once.
    pub fn cpus(&self) -> &[u16] {
        &self.0
    }
}

impl std::fmt::Display for CpuList {
    /// The kernel's form: ascending, runs of three or more as ranges (`0,2-4`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut rest = self.0.as_slice();
        let mut first = true;
        while let Some(&start) = rest.first() {
            let run = rest.iter().enumerate().take_while(|&(i, &c)| usize::from(c - start) == i).count();
            let end = rest[run - 1];
            if !first {
                f.write_str(",")?;
            }
            first = false;
            match run {
                1 => write!(f, "{start}")?,
                2 => write!(f, "{start},{end}")?,
                _ => write!(f, "{start}-{end}")?,
            }
            rest = &rest[run..];
        }
        Ok(())
    }
}

/// `poll` in `[router]`: how the forwarding loop waits for frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PollMode {
    /// `"adaptive"` (the default): while frames keep coming the loop polls the ports
    /// without sleeping, the vhost-user guests' kicks off; after a short idle spell it
    /// turns the kicks back on and sleeps on the descriptors, so an idle router costs
    /// no CPU.
    #[default]
    Adaptive,
    /// `"interrupt"`: the loop always sleeps on the descriptors (a guest kick or a
    /// readable socket wakes it), at the price of a wake-up per batch under load.
    Interrupt,
}

impl PollMode {
    /// The word the config uses.
    pub fn name(self) -> &'static str {
        match self {
            PollMode::Adaptive => "adaptive",
            PollMode::Interrupt => "interrupt",
        }
    }
}

/// `fast-path` in `[router]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FastPathMode {
    /// `"auto"` (the default): the in-kernel fast path of [`FastPathMode::Tc`] on the
    /// ports it can serve (AF_PACKET over veth), the pipeline alone on the others; where
    /// the programs cannot be loaded or attached (a vmpls built without clang, no BPF
    /// permission, an old kernel) the router says so once and forwards with the pipeline.
    #[default]
    Auto,
    /// `"off"`: every frame goes through the router's own pipeline.
    Off,
    /// `"tc"`: TC eBPF programs on the router's veth ports push, swap, pop and forward
    /// the common cases inside the kernel, handing each frame to the next veth with
    /// `bpf_redirect_peer`; whatever they do not handle reaches the pipeline as before.
    /// The router does not start if the programs cannot be loaded or attached.
    Tc,
}

impl FastPathMode {
    /// The word the config uses.
    pub fn name(self) -> &'static str {
        match self {
            FastPathMode::Auto => "auto",
            FastPathMode::Off => "off",
            FastPathMode::Tc => "tc",
        }
    }
}

/// How a port attaches to the system (`kind` in the config).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum PortKind {
    /// A Linux interface through an AF_PACKET socket (`kind = "af-packet"`, the default):
    /// [`PortConfig::interface`] must exist.
    #[default]
    AfPacket,
    /// A TAP device the router creates (`kind = "tap"`), named
    /// [`PortConfig::interface`]; the kernel stack of the router's namespace is the
    /// other end.
    Tap {
        /// `mac`: the router's MAC on the port; `None`: derived from the TAP's.
        mac: Option<[u8; 6]>,
    },
    /// A QEMU/KVM guest's virtio-net device (`kind = "vhost-user"`): the router listens
    /// on `socket` and QEMU connects (`-netdev vhost-user`).
    VhostUser {
        /// `socket`: the Unix socket path (absolute).
        socket: PathBuf,
        /// `mac`: the router's MAC on the port; `None`: derived from the socket path.
        mac: Option<[u8; 6]>,
        /// `socket-group`: the group (QEMU's) whose members may connect: the socket is
        /// mode 0660 in it. `None`: mode 0600, the router's user only.
        socket_group: Option<SocketGroup>,
    },
    /// An MPLS-in-UDP tunnel to one remote router (`kind = "udp"`, RFC 7510): labelled
    /// packets travel as UDP datagrams over an IP underlay the kernel routes.
    Udp {
        /// `local`: the underlay address the tunnel's sockets bind to.
        local: IpAddr,
        /// `remote`: the other end's underlay address (same family as `local`).
        remote: IpAddr,
        /// `udp-port`: the destination port of every datagram and the port the router
        /// listens on (6635, RFC 7510, unless given).
        port: u16,
        /// `netns`: the network namespace (a name under `/run/netns`) whose stack carries
        /// the underlay; `None`: the router's own.
        netns: Option<String>,
    },
    /// A memif (`kind = "memif"`): shared memory with another process on this host
    /// (VPP, a DPDK application with `net_memif`, another vmpls router), set up over the
    /// Unix socket `socket`.
    Memif {
        /// `socket`: the control socket's path (absolute).
        socket: PathBuf,
        /// `role`: `"client"` (the default, as DPDK's `net_memif`: connects, creates the
        /// shared memory) or `"server"` (listens: VPP's default, DPDK's `role=server`).
        role: MemifRole,
        /// `id`: the interface id both ends give (0 unless given).
        id: u32,
        /// `mac`: the router's MAC on the port; `None`: derived from the socket, id and role.
        mac: Option<[u8; 6]>,
    },
}

/// `role` of a memif port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MemifRole {
    /// Connects to the socket and creates the shared memory.
    #[default]
    Client,
    /// Listens on the socket.
    Server,
}

/// The UDP port of MPLS-in-UDP (RFC 7510, IANA).
pub const MPLS_UDP_PORT: u16 = 6635;

impl PortKind {
    /// The name the config file uses: `af-packet`, `tap`, `vhost-user`, `udp` or `memif`.
    pub fn name(&self) -> &'static str {
        match self {
            PortKind::AfPacket => "af-packet",
            PortKind::Tap { .. } => "tap",
            PortKind::VhostUser { .. } => "vhost-user",
            PortKind::Udp { .. } => "udp",
            PortKind::Memif { .. } => "memif",
        }
    }

    /// Whether the router creates what the port attaches to (a TAP, a vhost-user
    /// socket), rather than attaching to an interface that must exist.
    pub fn is_created_by_router(&self) -> bool {
        !matches!(self, PortKind::AfPacket)
    }
}

/// `socket-group = "NAME"` of a vhost-user port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketGroup {
    /// The group's name.
    pub name: String,
    /// The line of the key, for errors ([`check_socket_groups`]).
    pub line: usize,
}

/// A `[[port]]`. Its [`PortId`] is its index in [`Config::ports`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortConfig {
    /// How routes refer to the port.
    pub name: String,
    /// What it attaches to, for messages and `link show`: the Linux interface
    /// (`af-packet`), the TAP's name (`tap`), or the socket path (`vhost-user`).
    pub interface: String,
    /// MTU to use; `None`: the interface's (vhost-user: 1500).
    pub mtu: Option<u32>,
    /// The VRF of the port ("default" unless given; in FRR mode, the VRF the kernel has
    /// its interface in, see [`place_ports_in_vrfs`]).
    pub vrf: String,
    /// The line of its `vrf` key, if the file gives one.
    pub vrf_line: Option<usize>,
    /// The network namespace (a name under `/run/netns`) its interface is in: FRR mode's
    /// VRF namespace ([`place_ports_in_vrfs`]); `None`: the router's. Not a file key.
    pub netns: Option<String>,
    /// Addresses with prefix lengths.
    pub addresses: Vec<(IpAddr, u8)>,
    /// How it attaches.
    pub kind: PortKind,
    /// Line of the `interface` key (`socket` for vhost-user), for errors about what the
    /// port attaches to ([`check_interfaces`]).
    pub interface_line: usize,
    /// The line of its `mtu` key (its `name` line without one), for messages.
    pub mtu_line: usize,
    /// Offloads forced on or off at output, over what the port reports (`offloads`).
    pub offloads: OffloadOverrides,
    /// `mpls`: whether labelled frames from the port are switched, as the file says;
    /// `None`: the default ([`Config::port_label_acceptance`] decides).
    pub mpls: Option<bool>,
}

/// `[[port]] offloads = { tso = false, csum = true, mpls-gso = true, uso = false }`: what
/// the router may hand the port, forced over what the port kind reports. Turning an
/// offload off makes the router do that work in software (segment, complete checksums);
/// turning one on that the kernel refuses makes its frames fail at send (counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OffloadOverrides {
    /// TCP super-frames over IPv4 (`tso` sets both).
    pub tso4: Option<bool>,
    /// TCP super-frames over IPv6.
    pub tso6: Option<bool>,
    /// UDP super-frames (`GSO_UDP_L4`).
    pub uso: Option<bool>,
    /// Partial checksums.
    pub csum: Option<bool>,
    /// Labelled super-frames marked GSO.
    pub mpls_gso: Option<bool>,
}

/// One next hop of a route or label route, resolved against the ports.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NexthopConfig {
    /// The port (index in [`Config::ports`]).
    pub port: PortId,
    /// The gateway; `None` for a prefix directly on `port`.
    pub via: Option<IpAddr>,
    /// Routes: labels pushed (`push`), first = top. Label routes: labels replacing the
    /// received one (`out`); empty = pop (`[3]` in the file).
    pub labels: Vec<Label>,
    /// Relative share of flows.
    pub weight: u32,
}

/// What a `[[route]]` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteAction {
    /// Forward through these next hops.
    Forward(Vec<NexthopConfig>),
    /// Drop (`blackhole = true`).
    Blackhole,
    /// Drop and answer with an ICMP unreachable (`reject = "unreachable" | "prohibit"`).
    Reject(Reject),
}

/// A `[[route]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteConfig {
    /// Its VRF.
    pub vrf: String,
    /// The prefix address (no host bits set).
    pub prefix: IpAddr,
    /// The prefix length.
    pub len: u8,
    /// What to do.
    pub action: RouteAction,
    /// `ttl-model`.
    pub ttl_model: TtlModel,
    /// Line of `prefix`.
    pub line: usize,
}

/// What a `[[label]]` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabelConfigAction {
    /// Swap (or pop, with empty labels) and send to one of the next hops.
    Forward(Vec<NexthopConfig>),
    /// Pop, then continue with the next label or route the IP packet in `vrf`.
    PopAndLookup {
        /// The VRF for the IP packet.
        vrf: String,
    },
}

/// A `[[label]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelConfig {
    /// The incoming label (`in`).
    pub label: Label,
    /// What to do.
    pub action: LabelConfigAction,
    /// `ttl-model`.
    pub ttl_model: TtlModel,
    /// Line of `in`.
    pub line: usize,
}

/// The `[limits]` table: bounds on what the router sends on its own initiative and on
/// what it keeps while it resolves next hops. Every key is optional; the defaults are
/// [`LimitsConfig::default`]. They apply when the router starts: a reload that changes
/// them is refused with a message saying to restart.
///
/// ```toml
/// [limits]
/// icmp-rate = 1000                 # ICMP errors a second; 0: never send any
/// icmp-burst = 1000                # back to back before the rate applies (default: icmp-rate)
/// neighbor-request-rate = 100      # ARP requests + neighbour solicitations a second
/// neighbor-request-burst = 100     # (default: neighbor-request-rate)
/// neighbor-entries = 4096          # neighbour table size
/// neighbor-entries-per-port = 1024 # one port's share (default: neighbor-entries / ports)
/// neighbor-held-per-address = 16   # frames held while one address resolves
/// neighbor-held-total = 256        # frames held for all addresses together
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitsConfig {
    /// `icmp-rate`: ICMP errors (time exceeded, unreachable, too big) the router sends
    /// per second at most, 0 to [`MAX_RATE`]; 0 means it never sends any (an operator's
    /// choice: traceroute and path MTU discovery through the router stop working).
    pub icmp_rate: u32,
    /// `icmp-burst`: ICMP errors sent back to back before the rate applies, 1 to
    /// [`MAX_RATE`]; defaults to `icmp_rate`. 0 when `icmp_rate` is 0.
    pub icmp_burst: u32,
    /// `neighbor-request-rate`: ARP requests and neighbour solicitations the router sends
    /// per second at most, all ports together, 1 to [`MAX_RATE`]. Requests over it are not
    /// sent (counted as `neighbor_request_suppressed`); the frames waiting stay held
    /// until the next retransmission (1 s) or until they expire (3 tries).
    pub neighbor_request_rate: u32,
    /// `neighbor-request-burst`: requests sent back to back before the rate applies, 1
    /// to [`MAX_RATE`]; defaults to `neighbor_request_rate`.
    pub neighbor_request_burst: u32,
    /// `neighbor-entries`: neighbour table entries (resolved and being resolved), 16 to
    /// [`MAX_NEIGHBOR_ENTRIES`]. When full, frames to new addresses are dropped
    /// (`neighbor_queue_full`); entries being resolved that hold no frame leave after
    /// one retransmission interval.
    pub neighbor_entries: u32,
    /// `neighbor-entries-per-port`: entries of one port, 16 to `neighbor_entries`;
    /// `None`: `neighbor_entries` shared equally between the ports. Whatever the hosts on
    /// one port do fills only that port's share, and at most half of it (and half of
    /// `neighbor_entries`) goes to entries learned from hosts' requests: the rest is kept
    /// for the next hops the router resolves. Entries refused are counted as
    /// `neighbor_entry_refused`.
    pub neighbor_entries_per_port: Option<u32>,
    /// `neighbor-held-per-address`: frames held while one address is resolved, 1 to
    /// `neighbor_held_total`.
    pub neighbor_held_per_address: u32,
    /// `neighbor-held-total`: frames held for all addresses together, 1 to
    /// [`MAX_HELD_TOTAL`]. Held frames keep their packet buffers.
    pub neighbor_held_total: u32,
}

/// The largest rate or burst `[limits]` accepts (a million a second).
pub const MAX_RATE: u32 = 1_000_000;
/// The largest `neighbor-entries` (2^20).
pub const MAX_NEIGHBOR_ENTRIES: u32 = 1 << 20;
/// The largest `neighbor-held-total`: half the packet buffers of the router's forwarding
/// loop (1024), so that frames held for silent hosts can never starve forwarding.
pub const MAX_HELD_TOTAL: u32 = 512;

impl Default for LimitsConfig {
    /// The dataplane's own defaults (`vmpls_dataplane::DataplaneConfig::default`).
    fn default() -> Self {
        LimitsConfig {
            icmp_rate: 1000,
            icmp_burst: 1000,
            neighbor_request_rate: 100,
            neighbor_request_burst: 100,
            neighbor_entries: 4096,
            neighbor_entries_per_port: None,
            neighbor_held_per_address: 16,
            neighbor_held_total: 256,
        }
    }
}

impl LimitsConfig {
    /// The keys whose values differ between `self` and `other`, as `key (old -> new)`,
    /// in file order; empty when they are the same.
    pub fn changes(&self, other: &LimitsConfig) -> Vec<String> {
        let per_port = |l: &LimitsConfig| {
            l.neighbor_entries_per_port.map_or_else(|| "default".to_string(), |n| n.to_string())
        };
        let fields = |l: &LimitsConfig| {
            [
                ("icmp-rate", l.icmp_rate.to_string()),
                ("icmp-burst", l.icmp_burst.to_string()),
                ("neighbor-request-rate", l.neighbor_request_rate.to_string()),
                ("neighbor-request-burst", l.neighbor_request_burst.to_string()),
                ("neighbor-entries", l.neighbor_entries.to_string()),
                ("neighbor-entries-per-port", per_port(l)),
                ("neighbor-held-per-address", l.neighbor_held_per_address.to_string()),
                ("neighbor-held-total", l.neighbor_held_total.to_string()),
            ]
        };
        fields(self)
            .into_iter()
            .zip(fields(other))
            .filter(|((_, a), (_, b))| a != b)
            .map(|((k, a), (_, b))| format!("{k} ({a} -> {b})"))
            .collect()
    }
}

/// A validated config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The file it came from (for messages).
    pub path: PathBuf,
    /// `[router]`.
    pub router: RouterConfig,
    /// `[[port]]`s, in file order: index = [`PortId`].
    pub ports: Vec<PortConfig>,
    /// VRF names: index = [`vmpls_fib::VrfId`]; `vrfs[0]` is "default".
    pub vrfs: Vec<String>,
    /// `[[route]]`s, in file order.
    pub routes: Vec<RouteConfig>,
    /// `[[label]]`s, in file order.
    pub labels: Vec<LabelConfig>,
    /// `[limits]` (all defaults when the table is absent).
    pub limits: LimitsConfig,
    /// `[frr]`: routes and labels also come from FRRouting's zebra over FPM, and the
    /// kernel owns the ports' and the router's addresses.
    pub frr: Option<FrrConfig>,
    /// `[[neighbor]]`s: static neighbours, in file order.
    pub neighbors: Vec<StaticNeighborConfig>,
    /// `[[pseudowire]]`s, in file order.
    pub pseudowires: Vec<PseudowireConfig>,
    /// `[[vpls]]`s, in file order: index = the FIB's VPLS instance index.
    pub vpls: Vec<VplsConfig>,
}

/// A `[[pseudowire]]`: a point-to-point Ethernet pseudowire (VPWS, RFC 4448).
///
/// ```toml
/// [[pseudowire]]
/// name = "mpw0"            # ldpd's `member pseudowire mpw0` with [frr]
/// attachment = "ce1"       # a [[port]] without addresses: raw Ethernet mode
/// local-label = 1000       # static only (without [frr]): the label the far PE pushes
/// remote-label = 2000      # pushed under the transport labels toward the far PE
/// peer = "198.18.255.3"    # the far PE; the transport is the route to it
/// control-word = true      # RFC 4385 control word (default true)
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PseudowireConfig {
    /// Its name.
    pub name: String,
    /// The attachment circuit.
    pub attachment: PortId,
    /// The static pseudowire (without `[frr]`); `None`: ldpd signals it.
    pub static_spec: Option<api::PwSpec>,
    /// `control-word`.
    pub control_word: bool,
    /// Line of `name`.
    pub line: usize,
}

/// A `[[vpls]]`: a VPLS instance (RFC 4762), a bridge over its attachment circuits and
/// its static pseudowires to the other PEs (a full mesh: split horizon).
///
/// ```toml
/// [[vpls]]
/// name = "blue"
/// attachments = ["ce1", "ce2"]   # [[port]]s without addresses: raw Ethernet mode
/// mac-limit = 4096               # MACs learned at most (default 4096)
/// flood-rate = 1000              # frames/s flooded at most (default 0: no limit)
/// mac-aging = 300                # seconds (default 300)
///
/// [[vpls.pseudowire]]            # one per other PE, as [[pseudowire]] has them
/// name = "blue-pe2"              # with [frr] and no labels: ldpd's `member pseudowire`
/// local-label = 1002             # static only: the label the far PE pushes
/// remote-label = 2001
/// peer = "198.18.255.2"
/// control-word = true            # default true
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VplsConfig {
    /// Its name.
    pub name: String,
    /// The attachment circuits.
    pub attachments: Vec<PortId>,
    /// The pseudowires to the other PEs of the instance, in file order.
    pub pseudowires: Vec<VplsPseudowireConfig>,
    /// `mac-limit`.
    pub mac_limit: u32,
    /// `flood-rate` (frames a second; 0: no limit).
    pub flood_rate: u32,
    /// `mac-aging` (seconds).
    pub mac_aging_s: u32,
    /// Line of `name`.
    pub line: usize,
}

/// A `[[vpls.pseudowire]]`: a member pseudowire of a VPLS instance, static (labels and
/// peer in the file) or, with `[frr]` and neither, signalled by ldpd (its name is ldpd's
/// `member pseudowire NAME` of `l2vpn NAME type vpls`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VplsPseudowireConfig {
    /// Its name, unique among all pseudowires.
    pub name: String,
    /// The static pseudowire; `None`: ldpd signals it (FRR mode).
    pub static_spec: Option<api::PwSpec>,
    /// `control-word`.
    pub control_word: bool,
    /// Line of `name`.
    pub line: usize,
}

/// A `[[neighbor]]`: a static neighbour, as `ip neigh add ADDR lladdr MAC dev PORT` has
/// it. Never aged or asked for (ARP, neighbour discovery); wins over what the port hears.
///
/// ```toml
/// [[neighbor]]
/// address = "198.18.1.2"
/// lladdr = "02:00:00:00:01:02"
/// port = "ce1"
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticNeighborConfig {
    /// The port it is on.
    pub port: PortId,
    /// Its address.
    pub address: IpAddr,
    /// Its MAC: unicast, not all zeros.
    pub lladdr: [u8; 6],
    /// Line in the config file.
    pub line: usize,
}

/// The `[frr]` table.
///
/// ```toml
/// [frr]
/// fpm = "127.0.0.1:2620"   # where zebra's dplane_fpm_nl connects; loopback only
/// hold-time = 120          # seconds zebra's routes stay in force while it is away
/// stale-time = 30          # seconds, after zebra reconnects, that routes it has not sent
///                          # again keep forwarding
/// fpm-users = ["frr"]      # who may connect besides root: the users zebra runs as
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrrConfig {
    /// The FPM listener: a loopback address of the router's network namespace.
    pub fpm: std::net::SocketAddr,
    /// How long the routes from zebra keep forwarding after its connection is lost.
    pub hold: std::time::Duration,
    /// After zebra reconnects, how long the routes it has not sent again keep
    /// forwarding. zebra restarted alone replays only what its daemons have given it so
    /// far, and they come back over several seconds (FRR's clients retry every 10 s).
    pub stale: std::time::Duration,
    /// `fpm-users`: the users (besides root) whose sockets may connect as zebra, and the
    /// line of the key; `None`: the `frr` user if the system has one. Resolved to user ids
    /// when the router starts (the passwd database is the system's, not the file's).
    pub fpm_users: Option<(Vec<String>, usize)>,
    /// `pw-channel`: where the zebra module's pseudowire channel connects (a loopback
    /// address and port); `None`: `"off"`, zebra's pseudowires are not taken.
    pub pw_channel: Option<std::net::SocketAddr>,
}

impl FrrConfig {
    /// zebra's user on Debian and in FRR's own packages.
    pub const DEFAULT_FPM_USER: &str = "frr";
    /// zebra's default FPM server address.
    pub const DEFAULT_FPM: std::net::SocketAddr =
        std::net::SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 2620);
    /// The zebra module's default pseudowire channel (its `pw=127.0.0.1:2621`).
    pub const DEFAULT_PW_CHANNEL: std::net::SocketAddr = std::net::SocketAddr::new(
        std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        vmpls_frr::pw::DEFAULT_PORT,
    );
    /// The default hold time.
    pub const DEFAULT_HOLD: std::time::Duration = std::time::Duration::from_secs(120);
    /// The default stale time.
    pub const DEFAULT_STALE: std::time::Duration = std::time::Duration::from_secs(30);
}

impl Config {
    /// Reads and validates a config file.
    ///
    /// # Errors
    /// The file cannot be read or is not a valid config; see [`ConfigError`].
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        Self::from_str(&text, path)
    }

    /// Validates config text; `path` is only used in messages.
    ///
    /// # Errors
    /// The text is not a valid config; see [`ConfigError`].
    pub fn from_str(text: &str, path: &Path) -> Result<Config, ConfigError> {
        parse::parse(text, path)
    }

    /// When labelled frames arriving on `port` are switched: its `mpls` key, else the
    /// default, decided here and nowhere else. The label table is global, so a port that
    /// accepts labels reaches into every VRF a label pops into: by default only the core
    /// accepts them. Without FRR the core is the default VRF's ports and MPLS-in-UDP
    /// tunnels (which carry nothing else). In FRR mode a default-VRF port accepts them
    /// while zebra's labels leave by it, that is where LDP or segment routing runs (they
    /// exchange labels per adjacency, both ways): a customer of the default VRF (a plain
    /// IP customer, a peer) cannot send labels in, a VPN label least of all.
    pub fn port_label_acceptance(&self, port: &PortConfig) -> LabelAcceptance {
        match port.mpls {
            Some(true) => LabelAcceptance::Always,
            Some(false) => LabelAcceptance::Never,
            None if matches!(port.kind, PortKind::Udp { .. }) => LabelAcceptance::Always,
            None if port.vrf != vmpls_fib::DEFAULT_VRF_NAME => LabelAcceptance::Never,
            None if self.frr.is_some() => LabelAcceptance::WhileLabelsLeave,
            None => LabelAcceptance::Always,
        }
    }

    /// The port named `name` and its id.
    pub fn port(&self, name: &str) -> Option<(PortId, &PortConfig)> {
        self.ports.iter().enumerate().find(|(_, p)| p.name == name).map(|(i, p)| (i as PortId, p))
    }

    /// The forwarding tables the config describes; ports get `PortId` = their index in
    /// [`ports`](Config::ports), VRFs their index in [`vrfs`](Config::vrfs).
    ///
    /// # Errors
    /// [`ConfigError::Build`] if the tables reject an entry (validation catches these
    /// first, so this points at an inconsistency in a hand-made `Config`).
    pub fn build_fib(&self) -> Result<Fib, ConfigError> {
        self.build_fib_with(&self.routes, &self.labels)
    }

    /// Builds the forwarding tables of this config's ports, VRFs and router addresses
    /// with the given routes instead of the file's (the running routes, without copying
    /// them into a config first).
    ///
    /// # Errors
    /// As [`Config::build_fib`].
    pub fn build_fib_with<'a>(
        &self,
        routes: impl IntoIterator<Item = &'a RouteConfig>,
        labels: impl IntoIterator<Item = &'a LabelConfig>,
    ) -> Result<Fib, ConfigError> {
        let err =
            |line: Option<usize>| move |source| ConfigError::Build { path: self.path.clone(), line, source };
        let mut b = FibBuilder::new();
        for name in self.vrfs.iter().skip(1) {
            b.add_vrf(name).map_err(err(None))?;
        }
        let vrf_id = |b: &FibBuilder, name: &str, line| {
            b.vrf_id(name).ok_or_else(|| ConfigError::Invalid {
                path: self.path.clone(),
                line,
                field: "vrf".into(),
                message: format!("VRF \"{name}\" is not defined"),
            })
        };
        for p in &self.ports {
            let vrf = vrf_id(&b, &p.vrf, p.interface_line)?;
            let id = b.add_port(&p.name, vrf, &p.addresses).map_err(err(Some(p.interface_line)))?;
            b.set_port_label_acceptance(id, self.port_label_acceptance(p))
                .map_err(err(Some(p.interface_line)))?;
        }
        if let Some(a) = self.router.v4 {
            b.router_v4(a);
        }
        if let Some(a) = self.router.v6 {
            b.router_v6(a);
        }
        let mut groups = NexthopGroups::default();
        for r in routes {
            let route = groups.prefix_route(r).map_err(err(Some(r.line)))?;
            let vrf = vrf_id(&b, &r.vrf, r.line)?;
            b.add_prefix_route(vrf, r.prefix, r.len, route).map_err(err(Some(r.line)))?;
        }
        for l in labels {
            let action = match &l.action {
                LabelConfigAction::Forward(nhs) => {
                    LabelAction::Forward(groups.get(nhs).map_err(err(Some(l.line)))?)
                }
                LabelConfigAction::PopAndLookup { vrf } => {
                    LabelAction::PopAndLookup { vrf: vrf_id(&b, vrf, l.line)? }
                }
            };
            b.add_label_route(l.label, LabelRoute::new(action, l.ttl_model)).map_err(err(Some(l.line)))?;
        }
        b.build().map_err(err(None))
    }
}

/// The next-hop groups of one build of the forwarding tables, one per distinct list of
/// next hops: the routes of a VRF learned from one remote PE (a VPN label per VRF, as
/// `label vpn export auto` gives) all have the same next hops, and sharing their group
/// saves about 200 bytes per route (the group, its next hops, their labels, its buckets)
/// and as many allocations.
#[derive(Default)]
pub(crate) struct NexthopGroups<'a> {
    groups: std::collections::HashMap<&'a [NexthopConfig], NexthopGroup>,
}

impl<'a> NexthopGroups<'a> {
    /// The group of `nhs`, shared with the routes of this build that have the same.
    pub(crate) fn get(&mut self, nhs: &'a [NexthopConfig]) -> Result<NexthopGroup, vmpls_fib::FibError> {
        if let Some(g) = self.groups.get(nhs) {
            return Ok(g.clone());
        }
        let g = nexthop_group(nhs)?;
        self.groups.insert(nhs, g.clone());
        Ok(g)
    }

    /// A route's entry in the forwarding tables, its group shared.
    pub(crate) fn prefix_route(&mut self, r: &'a RouteConfig) -> Result<PrefixRoute, vmpls_fib::FibError> {
        let target = match &r.action {
            RouteAction::Blackhole => RouteTarget::Blackhole,
            RouteAction::Reject(r) => RouteTarget::Reject(*r),
            RouteAction::Forward(nhs) => RouteTarget::Forward(self.get(nhs)?),
        };
        Ok(PrefixRoute::new(target).with_ttl_model(r.ttl_model))
    }
}

/// The next-hop group of a route's or a label route's next hops.
pub(crate) fn nexthop_group(nhs: &[NexthopConfig]) -> Result<NexthopGroup, vmpls_fib::FibError> {
    NexthopGroup::new(
        nhs.iter()
            .map(|n| Nexthop { port: n.port, via: n.via, labels: n.labels.clone(), weight: n.weight })
            .collect(),
    )
}

/// Checks that the interface of every `af-packet` port exists, with `exists` asking the
/// system (for example through `if_nametoindex`). TAP and vhost-user ports are skipped:
/// the router creates those. The error points at the port's `interface` key.
///
/// # Errors
/// [`ConfigError::Invalid`] for the first port whose interface does not exist.
pub fn check_interfaces(cfg: &Config, exists: impl Fn(&str) -> bool) -> Result<(), ConfigError> {
    match cfg.ports.iter().find(|p| !p.kind.is_created_by_router() && !exists(&p.interface)) {
        None => Ok(()),
        Some(p) => Err(ConfigError::Invalid {
            path: cfg.path.clone(),
            line: p.interface_line,
            field: "port.interface".into(),
            message: format!(
                "there is no network interface \"{}\" on this system (port \"{}\"); create it first or fix the name (see `ip link show`)",
                p.interface, p.name
            ),
        }),
    }
}

/// Where FRR mode found a port's interface outside the default VRF.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundInVrf {
    /// The VRF.
    pub vrf: String,
    /// The interface is in the VRF's network namespace (named like the VRF); `false`: in
    /// the router's namespace, enslaved to the VRF's device.
    pub netns: bool,
}

/// FRR mode: the VRFs are the kernel's (`kernel_vrfs`, added to [`Config::vrfs`] where
/// the file has not named them), and each `af-packet` port whose interface `found` places
/// in one of them belongs to it: its `vrf` is that VRF (a `vrf` key that says otherwise is
/// an error naming both) and, for a VRF namespace, its [`PortConfig::netns`] is set.
///
/// # Errors
/// [`ConfigError::Invalid`] at the `vrf` key of the first port the file puts in another
/// VRF than the kernel does.
pub fn place_ports_in_vrfs(
    cfg: &mut Config,
    kernel_vrfs: &[String],
    found: impl Fn(&str) -> Option<FoundInVrf>,
) -> Result<(), ConfigError> {
    for v in kernel_vrfs {
        if !cfg.vrfs.contains(v) {
            cfg.vrfs.push(v.clone());
        }
    }
    for p in cfg.ports.iter_mut().filter(|p| p.kind == PortKind::AfPacket) {
        let Some(at) = found(&p.interface) else { continue };
        if let Some(line) = p.vrf_line
            && p.vrf != at.vrf
        {
            let place = if at.netns { "network namespace" } else { "device" };
            return Err(ConfigError::Invalid {
                path: cfg.path.clone(),
                line,
                field: "port.vrf".into(),
                message: format!(
                    "port \"{}\" says vrf \"{}\", but the kernel has its interface {} in VRF \"{}\" (its {place}); remove the key or move the interface",
                    p.name, p.vrf, p.interface, at.vrf
                ),
            });
        }
        p.netns = at.netns.then(|| at.vrf.clone());
        p.vrf = at.vrf;
    }
    Ok(())
}

/// Checks that the `socket-group` of every vhost-user port names a group on this system,
/// with `exists` asking it (for example through `getgrnam`). The error points at the key.
///
/// # Errors
/// [`ConfigError::Invalid`] for the first group that does not exist.
pub fn check_socket_groups(cfg: &Config, exists: impl Fn(&str) -> bool) -> Result<(), ConfigError> {
    for p in &cfg.ports {
        if let PortKind::VhostUser { socket_group: Some(g), .. } = &p.kind
            && !exists(&g.name)
        {
            return Err(ConfigError::Invalid {
                path: cfg.path.clone(),
                line: g.line,
                field: "port.socket-group".into(),
                message: format!(
                    "there is no group \"{}\" on this system (port \"{}\"; see `getent group`): name the group QEMU runs in, e.g. \"kvm\"",
                    g.name, p.name
                ),
            });
        }
    }
    Ok(())
}

/// Checks every `af-packet` port against its interface as `run` will open it: `probe`
/// gets the interface name and the configured MTU and says what is wrong (it is down, not
/// Ethernet, smaller than `mtu`, missing). The error points at the port's `interface`
/// key, or at `mtu` when that is what the interface cannot carry.
///
/// # Errors
/// [`ConfigError::Invalid`] for the first port `probe` refuses.
pub fn check_ports(
    cfg: &Config,
    probe: impl Fn(&str, Option<u32>) -> Result<(), String>,
) -> Result<(), ConfigError> {
    for p in cfg.ports.iter().filter(|p| !p.kind.is_created_by_router()) {
        if let Err(message) = probe(&p.interface, p.mtu) {
            let mtu_problem = p.mtu.is_some() && probe(&p.interface, None).is_ok();
            return Err(ConfigError::Invalid {
                path: cfg.path.clone(),
                line: if mtu_problem { p.mtu_line } else { p.interface_line },
                field: if mtu_problem { "port.mtu" } else { "port.interface" }.into(),
                message: format!("port \"{}\": {message}", p.name),
            });
        }
    }
    Ok(())
}

/// What reserved label `l` (0-15) is, for messages.
fn reserved_label_name(l: Label) -> &'static str {
    match l {
        0 => "IPv4 explicit null",
        1 => "router alert",
        2 => "IPv6 explicit null",
        3 => "implicit null",
        7 => "entropy label indicator",
        13 => "GAL",
        14 => "OAM alert",
        _ => "unassigned",
    }
}

/// Checks an outgoing label stack (a route's `push`, a label's `out`; outermost first)
/// against what the router and the RFCs allow on the wire: labels of 20 bits; implicit
/// null (3) only alone (penultimate-hop popping, or push nothing); explicit null only
/// at the bottom, and for a push onto IP the one of the packet's family (0 IPv4, 2 IPv6;
/// `ipv4_payload` is `None` for a swap, whose payload the router does not know); no other
/// reserved label (router alert, OAM alert, GAL, entropy label indicator and the
/// unassigned ones carry meanings a configured stack cannot give them); at most
/// [`vmpls_fib::MAX_STACK_DEPTH`] labels, the deepest stack a router forwards.
pub(crate) fn check_out_stack(labels: &[Label], ipv4_payload: Option<bool>) -> Result<(), LabelStackError> {
    use vmpls_fib::{IMPLICIT_NULL, IPV4_EXPLICIT_NULL, IPV6_EXPLICIT_NULL, MAX_LABEL, MAX_STACK_DEPTH};
    if let Some(&label) = labels.iter().find(|&&l| l > MAX_LABEL) {
        return Err(LabelStackError::OutOfRange { label });
    }
    if labels.len() > MAX_STACK_DEPTH {
        return Err(LabelStackError::TooDeep { depth: labels.len() });
    }
    if labels.len() > 1 && labels.contains(&IMPLICIT_NULL) {
        return Err(LabelStackError::ImplicitNullInStack);
    }
    let last = labels.len().saturating_sub(1);
    for (i, &l) in labels.iter().enumerate() {
        match l {
            IMPLICIT_NULL => {}
            IPV4_EXPLICIT_NULL | IPV6_EXPLICIT_NULL if i != last => {
                return Err(LabelStackError::ExplicitNullNotAtBottom {
                    label: l,
                    name: reserved_label_name(l),
                });
            }
            IPV4_EXPLICIT_NULL | IPV6_EXPLICIT_NULL => {
                if let Some(v4) = ipv4_payload
                    && v4 != (l == IPV4_EXPLICIT_NULL)
                {
                    let (family, right) =
                        if v4 { ("IPv4", IPV4_EXPLICIT_NULL) } else { ("IPv6", IPV6_EXPLICIT_NULL) };
                    return Err(LabelStackError::WrongExplicitNull {
                        label: l,
                        name: reserved_label_name(l),
                        family,
                        right,
                    });
                }
            }
            l if l < vmpls_fib::FIRST_UNRESERVED => {
                return Err(LabelStackError::Reserved { label: l, name: reserved_label_name(l) });
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
