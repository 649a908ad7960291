//! The runtime API of a running router: the messages of its control socket.
//!
//! # Protocol
//!
//! A router listens on a Unix stream socket (default `/run/vmpls/ROUTER.sock`, created
//! with mode 0600, so only the user running the router, and root, can connect). The
//! protocol is line-delimited JSON: the client writes one [`Request`] as one line of JSON
//! ending in `\n`; the router answers with one [`Reply`] line:
//!
//! ```text
//! -> {"cmd":"route-show","family":"inet"}
//! <- {"ok":true,"data":[{"dst":"198.18.2.0/24","vrf":"default","type":"unicast",...}]}
//! -> {"cmd":"route-add","route":{"family":"inet","dst":"198.18.3.0/24","type":"blackhole"}}
//! <- {"ok":true}
//! -> {"cmd":"route-del","route":{"family":"inet","dst":"198.18.9.0/24"}}
//! <- {"ok":false,"error":"no route 198.18.9.0/24 in VRF \"default\""}
//! ```
//!
//! A connection may carry any number of request/reply pairs, one after the other. Lines
//! are at most [`MAX_REQUEST_LINE`] bytes. Requests (the `cmd` tag):
//!
//! | `cmd` | fields | `data` of the reply |
//! |---|---|---|
//! | `route-show` | `family`: `inet`, `inet6` or `mpls`; `vrf` (optional, default `default`); `dst` (optional) | `[`[`IpRoute`]`]` or `[`[`MplsRoute`]`]` |
//! | `route-show-stream` | as `route-show` | the same list in chunks, one reply line each, `"more":true` on all but the last |
//! | `route-batch` | `force` (optional); then one [`BatchOp`](crate::batch::BatchOp) line per change and `{"op":"commit"}` | [`BatchSummary`] |
//! | `route-add`, `route-replace` | `route`: a [`RouteSpec`] | none |
//! | `route-del` | `route`: a [`RouteSpec`]; only `dst`/`label` and `vrf` are needed, next hops if given must match | none |
//! | `link-show` | | `[`[`Link`]`]` |
//! | `neigh-show` | | `[`[`Neighbor`]`]` |
//! | `neigh-add` | `dst`, `lladdr`, `dev`; `replace` (optional) | none |
//! | `neigh-del` | `dst`, `dev` | none |
//! | `stats` | | [`Stats`] |
//! | `reload` | | [`ReloadSummary`] |
//! | `capture` | `port`; `label` (optional: only frames with this label in their stack); `count` (optional) | [`CaptureStart`], then a stream |
//!
//! Route changes are atomic: the router builds complete new forwarding tables and swaps
//! them in; the forwarding thread picks them up at its next batch.
//!
//! `route-show-stream` answers with a sequence of reply lines, each a chunk of the list,
//! so that neither end holds a table of a million routes as one reply:
//!
//! ```text
//! -> {"cmd":"route-show-stream","family":"inet"}
//! <- {"ok":true,"data":[{"dst":"198.18.0.0/24",...},...],"more":true}
//! <- {"ok":true,"data":[{"dst":"198.18.4.0/24",...}]}
//! ```
//!
//! `route-batch` is the other way round: the client streams the changes, one line each,
//! and the router answers once, after applying them all as one table change (the data
//! plane swaps from the tables before the batch to the tables after it). As with
//! `ip -batch`, the changes apply in order, each seeing the ones before; without `force`
//! the first change that fails ends the batch (the ones before it stay applied), with
//! `force` every other change applies. The summary says which failed and why:
//!
//! ```text
//! -> {"cmd":"route-batch"}
//! -> {"op":"add","route":{"family":"inet","dst":"198.18.3.0/24","type":"blackhole"}}
//! -> {"op":"del","route":{"family":"inet","dst":"198.18.9.0/24"}}
//! -> {"op":"commit"}
//! <- {"ok":true,"data":{"applied":1,"failed":[{"index":1,"error":"no route to 198.18.9.0/24 in VRF \"default\""}]}}
//! ```
//!
//! `capture` turns the connection into a stream: after the reply, the router writes one
//! [`CapturedFrame`] line per frame received or sent on the port, until `count` frames
//! were sent or the client closes the connection. Frames are copied into a bounded queue;
//! when the client reads too slowly, frames are lost (and counted in `lost`), the router
//! never waits for it.
//!
//! Every reply carries the router's [`PROTOCOL_VERSION`] (`"version":1`, left out of the
//! examples above); clients send theirs in each request line. Errors are
//! `{"ok":false,"error":{"kind":"invalid","message":"..."}}`: a [`ErrorKind`] a program
//! can act on (`restart-needed` after a `reload` that changed the ports, ...) and a
//! message for a person, written so that the CLI can print it as `Error: MESSAGE`.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};
/// A MAC address; on the socket the text `02:00:5e:10:00:01` ([`mac_text`]).
pub use vmpls_wire::ethernet::Address as Mac;

mod text;

/// The longest request line the router reads.
pub const MAX_REQUEST_LINE: usize = 64 * 1024;

/// Address family of a route request, as iproute2's `-4`, `-6`, `-f mpls`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// IPv4 prefixes.
    #[default]
    Inet,
    /// IPv6 prefixes.
    Inet6,
    /// Incoming labels.
    Mpls,
}

impl Family {
    /// iproute2's name: `inet`, `inet6`, `mpls`.
    pub fn name(self) -> &'static str {
        match self {
            Family::Inet => "inet",
            Family::Inet6 => "inet6",
            Family::Mpls => "mpls",
        }
    }
}

/// One request to the router.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "kebab-case")]
pub enum Request {
    /// List a table.
    RouteShow {
        /// Which table.
        family: Family,
        /// The VRF (prefix tables only); `None`: "default".
        #[serde(default, skip_serializing_if = "Option::is_none")]
        vrf: Option<String>,
        /// Only the route for this destination (`route show PREFIX`): a prefix as
        /// `ADDRESS/LENGTH`, or a label.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dst: Option<String>,
    },
    /// The route a packet to `addr` would take (`route get ADDR`): the longest match.
    RouteGet {
        /// The destination.
        addr: std::net::IpAddr,
        /// The VRF; `None`: "default".
        #[serde(default, skip_serializing_if = "Option::is_none")]
        vrf: Option<String>,
    },
    /// Add a route; fails if one exists for the destination.
    RouteAdd {
        /// The route.
        route: RouteSpec,
    },
    /// Delete a route.
    RouteDel {
        /// The route (destination, and next hops to match if given).
        route: RouteSpec,
    },
    /// Add a route or replace the one for the destination.
    RouteReplace {
        /// The route.
        route: RouteSpec,
    },
    /// Remove the routes of one table that match a filter (`route flush`): the file's and
    /// the CLI's; connected subnets and routes from FRR stay.
    RouteFlush {
        /// Which table.
        family: Family,
        /// Which of its routes.
        filter: RouteFilter,
    },
    /// List a table as a stream of chunks (`route show`): the first reply line and each
    /// one after it carries up to [`crate::batch::SHOW_CHUNK`] routes in `data`, all but
    /// the last with `"more":true`. The router reads the tables one chunk at a time and
    /// writes without holding them, so a slow reader delays no one; a route changed
    /// while the stream runs may be seen as it was or as it is, never twice.
    RouteShowStream {
        /// Which table.
        family: Family,
        /// The VRF (prefix tables only); `None`: "default".
        #[serde(default, skip_serializing_if = "Option::is_none")]
        vrf: Option<String>,
        /// Only the route for this destination, as in `route-show`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dst: Option<String>,
    },
    /// Many route changes as one table change (`vmpls -batch FILE`). After this line the
    /// client writes one [`crate::batch::BatchOp`] line per change and a `commit` line;
    /// the router then applies them in order, builds the tables once, and answers with
    /// one reply whose `data` is a [`BatchSummary`].
    RouteBatch {
        /// Go on past a change that fails (`-force`); without it the changes after the
        /// first failure are not applied.
        #[serde(default)]
        force: bool,
    },
    /// List ports.
    LinkShow,
    /// List the VRFs (`vrf show`).
    VrfShow,
    /// List the neighbour table.
    NeighShow,
    /// Set a static neighbour (`neigh add`, `neigh replace`): never aged or asked for,
    /// wins over what the port hears. Without `replace`, a static entry with another MAC
    /// is an error.
    NeighAdd {
        /// Its address.
        dst: IpAddr,
        /// Its MAC, `02:00:00:00:00:01`; the router refuses a multicast or zero one
        /// ([`check_neighbor_mac`]).
        #[serde(with = "mac_text")]
        lladdr: Mac,
        /// The port's name.
        dev: String,
        /// Change an existing static entry.
        #[serde(default)]
        replace: bool,
    },
    /// Remove a neighbour entry, static or learned (`neigh del`).
    NeighDel {
        /// Its address.
        dst: IpAddr,
        /// The port's name.
        dev: String,
    },
    /// List the pseudowires with their status (`pw show`): [`PwStatus`]es.
    PwShow,
    /// Add or change a static pseudowire (`pw add`), origin "cli". Its attachment is
    /// `attachment`, or that of the config's `[[pseudowire]]` of the same name.
    PwReplace {
        /// The pseudowire.
        pw: PwSpec,
        /// The attachment port's name; `None`: the config's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attachment: Option<String>,
    },
    /// Remove a pseudowire the CLI or the file made (`pw del`).
    PwDel {
        /// Its name.
        name: String,
    },
    /// List the VPLS instances with their members' state (`vpls show`): [`VplsStatus`]es.
    VplsShow,
    /// List the VPLS instances' MAC tables (`bridge fdb show`): [`FdbEntry`]s.
    FdbShow {
        /// Only this instance's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        vpls: Option<String>,
    },
    /// Counters.
    Stats,
    /// Read the config file again and apply the difference.
    Reload,
    /// Stream copies of the frames received and sent on a port.
    Capture {
        /// The port's name.
        port: String,
        /// Only frames whose label stack holds this label.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        label: Option<u32>,
        /// Stop after this many frames.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        count: Option<u64>,
    },
}

/// The control protocol's version. A client sends it in every request line
/// (`"version":1`); a router refuses a request of another version with
/// [`ErrorKind::Version`], and writes its own in every reply. A request without one is
/// taken as this version (`socat` and scripts).
pub const PROTOCOL_VERSION: u32 = 1;

/// One request line: a [`Request`] and the protocol version the client speaks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestLine {
    /// The client's [`PROTOCOL_VERSION`]; absent: the router's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u32>,
    /// The request.
    #[serde(flatten)]
    pub request: Request,
}

impl RequestLine {
    /// `request` in this version of the protocol.
    pub fn new(request: Request) -> RequestLine {
        RequestLine { version: Some(PROTOCOL_VERSION), request }
    }
}

/// What kind of failure a reply reports: what a client may act on without reading the
/// message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorKind {
    /// The request is malformed, or what it asks does not fit the router: an unknown
    /// port, a route that does not resolve, a route that does not exist, a label out of
    /// range.
    Invalid,
    /// `reload`: the config file is not valid (the message is the one a start would
    /// print, with file and line); the running config stays.
    Config,
    /// `reload`: the file changes what only a restart can (ports, the router's name or
    /// socket, the fast path); the running config stays.
    RestartNeeded,
    /// The forwarding loop did not answer (stopping, or stuck).
    Unavailable,
    /// The request is of another [`PROTOCOL_VERSION`].
    Version,
}

/// Why the router refused a request: its kind, and a message for a person (printed by
/// the CLI as `Error: MESSAGE`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct ControlError {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// What went wrong, in words.
    pub message: String,
}

impl ControlError {
    /// A failure of kind `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> ControlError {
        ControlError { kind, message: message.into() }
    }

    /// An [`ErrorKind::Invalid`] request.
    pub fn invalid(message: impl Into<String>) -> ControlError {
        ControlError::new(ErrorKind::Invalid, message)
    }
}

impl From<String> for ControlError {
    fn from(message: String) -> ControlError {
        ControlError::invalid(message)
    }
}

impl From<&str> for ControlError {
    fn from(message: &str) -> ControlError {
        ControlError::invalid(message)
    }
}

/// The router's answer to one request, its data of type `T` (each request's is named
/// in [`Request`]: `Vec<Link>` for `link-show`, [`Stats`] for `stats`, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply<T = serde_json::Value> {
    /// The router's [`PROTOCOL_VERSION`].
    #[serde(default)]
    pub version: u32,
    /// Whether the request was carried out.
    pub ok: bool,
    /// What was wrong, when `ok` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ControlError>,
    /// The answer, for requests that have one.
    #[serde(default = "none", skip_serializing_if = "Option::is_none")]
    pub data: Option<T>,
    /// Another reply line follows with more of the answer (`route-show-stream`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub more: bool,
}

fn none<T>() -> Option<T> {
    None
}

impl<T> Reply<T> {
    /// Success without data.
    pub fn done() -> Reply<T> {
        Reply { version: PROTOCOL_VERSION, ok: true, error: None, data: None, more: false }
    }

    /// Success with data.
    pub fn data(data: T) -> Reply<T> {
        Reply { version: PROTOCOL_VERSION, ok: true, error: None, data: Some(data), more: false }
    }

    /// Failure.
    pub fn error(error: impl Into<ControlError>) -> Reply<T> {
        Reply { version: PROTOCOL_VERSION, ok: false, error: Some(error.into()), data: None, more: false }
    }

    /// The outcome: the data (if any) or the refusal.
    ///
    /// # Errors
    /// The router refused the request.
    pub fn into_result(self) -> Result<Option<T>, ControlError> {
        match (self.ok, self.error) {
            (true, _) => Ok(self.data),
            (false, Some(e)) => Err(e),
            (false, None) => Err(ControlError::invalid("the router refused")),
        }
    }

    /// Success or failure from `result`.
    pub fn from_result(result: Result<T, ControlError>) -> Reply<T> {
        match result {
            Ok(data) => Reply::data(data),
            Err(e) => Reply::error(e),
        }
    }
}

/// The data of a reply, typed: each request's answer (serialized as the answer itself,
/// so the JSON on the socket is the same as each type's).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Answer {
    /// `route-show`: routes of one family.
    Routes(ShowRows),
    /// `route-get`.
    Route(IpRoute),
    /// `route-flush`.
    Flushed(FlushSummary),
    /// `link-show`.
    Links(Vec<Link>),
    /// `vrf-show`.
    Vrfs(Vec<Vrf>),
    /// `pw-show`.
    Pseudowires(Vec<PwStatus>),
    /// `vpls-show`.
    Vpls(Vec<VplsStatus>),
    /// `fdb-show`.
    Fdb(Vec<FdbEntry>),
    /// `neigh-show`.
    Neighbors(Vec<Neighbor>),
    /// `stats`.
    Stats(Box<Stats>),
    /// `reload`.
    Reloaded(ReloadSummary),
    /// `capture`: the first reply, before the frames.
    CaptureStarted(CaptureStart),
}

/// A route to add, replace or delete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "family", rename_all = "lowercase")]
pub enum RouteSpec {
    /// An IPv4 prefix route.
    Inet(IpRoute),
    /// An IPv6 prefix route.
    Inet6(IpRoute),
    /// A label route.
    Mpls(MplsRoute),
}

/// Which routes `route flush` removes, as iproute2's selectors: every field given must
/// match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteFilter {
    /// The VRF (prefix routes); `None`: "default", `"all"`: every VRF.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vrf: Option<String>,
    /// Destinations: a prefix `ADDRESS/LENGTH` (prefix routes) or a label (label routes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst: Option<String>,
    /// How `dst` selects prefixes: iproute2's `root`, `match` or `exact` (the default).
    #[serde(default)]
    pub dst_match: PrefixMatch,
    /// Routes with a next hop on this port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dev: Option<String>,
    /// Routes with a next hop through this gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<IpAddr>,
    /// Routes shown with this protocol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proto: Option<Protocol>,
}

/// How a prefix selects routes (iproute2's `root`, `match`, `exact`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PrefixMatch {
    /// This prefix only.
    #[default]
    Exact,
    /// This prefix and the longer ones inside it.
    Root,
    /// This prefix and the shorter ones that hold it.
    Match,
}

/// What `route flush` did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlushSummary {
    /// Routes removed.
    pub flushed: u64,
    /// Of those, routes from the config file (a reload brings them back).
    pub from_file: u64,
    /// Routes from FRR that matched and were left alone: zebra owns them and would not
    /// know they were gone (flush them in FRR).
    pub frr_kept: u64,
}

/// What a prefix route does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum RouteType {
    /// Forward through next hops.
    #[default]
    Unicast,
    /// Drop.
    Blackhole,
    /// Drop and answer with ICMP host unreachable (IPv6: no route).
    Unreachable,
    /// Drop and answer with ICMP administratively prohibited.
    Prohibit,
}

impl RouteType {
    /// Whether routes of this type have next hops.
    pub fn forwards(self) -> bool {
        self == RouteType::Unicast
    }

    /// The type named `word` in `ip route` lines ([`RouteType::name`]).
    pub fn from_name(word: &str) -> Option<RouteType> {
        [RouteType::Unicast, RouteType::Blackhole, RouteType::Unreachable, RouteType::Prohibit]
            .into_iter()
            .find(|t| t.name() == word)
    }

    /// What a route of this type rejects with, if it rejects.
    pub fn reject(self) -> Option<vmpls_fib::Reject> {
        match self {
            RouteType::Unreachable => Some(vmpls_fib::Reject::Unreachable),
            RouteType::Prohibit => Some(vmpls_fib::Reject::Prohibit),
            RouteType::Unicast | RouteType::Blackhole => None,
        }
    }

    /// The type's word in `ip route` lines.
    pub fn name(self) -> &'static str {
        match self {
            RouteType::Unicast => "unicast",
            RouteType::Blackhole => "blackhole",
            RouteType::Unreachable => "unreachable",
            RouteType::Prohibit => "prohibit",
        }
    }
}

impl From<vmpls_fib::Reject> for RouteType {
    fn from(r: vmpls_fib::Reject) -> Self {
        match r {
            vmpls_fib::Reject::Unreachable => RouteType::Unreachable,
            vmpls_fib::Reject::Prohibit => RouteType::Prohibit,
        }
    }
}

/// Where a route came from (iproute2's `proto`, with FRR's names for its daemons).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// Added at runtime (`vmpls route add`); iproute2's default, not printed.
    #[default]
    Boot,
    /// From the config file.
    Static,
    /// A port's connected subnet.
    Kernel,
    /// From zebra itself (`mpls lsp` static LSPs).
    Zebra,
    /// From FRR's bgpd.
    Bgp,
    /// From FRR's isisd (with segment routing: prefix SIDs).
    Isis,
    /// From FRR's ospfd (with segment routing: prefix SIDs).
    Ospf,
    /// From FRR's ripd.
    Rip,
    /// From FRR's ripngd.
    Ripng,
    /// From FRR's eigrpd.
    Eigrp,
    /// From FRR's ldpd.
    Ldp,
    /// From FRR's sharpd.
    Sharp,
    /// From FRR's staticd. Shown as `static`, as `ip route` shows it with FRR's names.
    #[serde(rename(serialize = "static", deserialize = "frr-static"))]
    FrrStatic,
    /// From FRR's fabricd.
    Openfabric,
    /// From FRR's pathd (segment routing traffic engineering).
    Srte,
    /// From FRR's babeld.
    Babel,
    /// Any other `rtm_protocol` zebra sends.
    Other,
}

impl Protocol {
    /// iproute2's name.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Boot => "boot",
            Protocol::Static | Protocol::FrrStatic => "static",
            Protocol::Kernel => "kernel",
            Protocol::Zebra => "zebra",
            Protocol::Bgp => "bgp",
            Protocol::Isis => "isis",
            Protocol::Ospf => "ospf",
            Protocol::Rip => "rip",
            Protocol::Ripng => "ripng",
            Protocol::Eigrp => "eigrp",
            Protocol::Ldp => "ldp",
            Protocol::Sharp => "sharp",
            Protocol::Openfabric => "openfabric",
            Protocol::Srte => "srte",
            Protocol::Babel => "babel",
            Protocol::Other => "other",
        }
    }

    /// The protocol of a route zebra sends with this `rtm_protocol` (FRR's
    /// `zebra/rt_netlink.h` numbers).
    pub fn from_zebra(rtm_protocol: u8) -> Protocol {
        match rtm_protocol {
            11 => Protocol::Zebra,
            42 => Protocol::Babel,
            186 => Protocol::Bgp,
            187 => Protocol::Isis,
            188 => Protocol::Ospf,
            189 => Protocol::Rip,
            190 => Protocol::Ripng,
            192 => Protocol::Eigrp,
            193 => Protocol::Ldp,
            194 => Protocol::Sharp,
            196 => Protocol::FrrStatic,
            197 => Protocol::Openfabric,
            198 => Protocol::Srte,
            _ => Protocol::Other,
        }
    }

    /// The protocol named `name` (iproute2's and FRR's names, as [`Protocol::name`]
    /// gives them; `static` is the config file's).
    pub fn from_name(name: &str) -> Option<Protocol> {
        use Protocol::*;
        [
            Boot, Static, Kernel, Zebra, Bgp, Isis, Ospf, Rip, Ripng, Eigrp, Ldp, Sharp, Openfabric, Srte,
            Babel, Other,
        ]
        .into_iter()
        .find(|p| p.name() == name)
    }

    /// Whether the route came from FRR.
    pub fn is_frr(self) -> bool {
        !matches!(self, Protocol::Boot | Protocol::Static | Protocol::Kernel)
    }
}

/// A prefix route, as shown and as requested.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpRoute {
    /// `address/length`, no host bits set.
    pub dst: String,
    /// The VRF ("default" when not given).
    #[serde(default = "default_vrf")]
    pub vrf: String,
    /// What it does.
    #[serde(default, rename = "type")]
    pub kind: RouteType,
    /// Next hops (none for a blackhole).
    #[serde(default)]
    pub nexthops: Vec<Nexthop>,
    /// RFC 3443 TTL model of the labels pushed: `false` = pipe (iproute2's
    /// `ttl-propagate disabled`).
    #[serde(default = "yes")]
    pub ttl_propagate: bool,
    /// Where it came from. In a request to add or replace: what `route show` is to say
    /// (the CLI's `proto NAME`, default `boot`); the route is a runtime route all the same.
    #[serde(default)]
    pub protocol: Protocol,
    /// The router's address on the subnet (connected routes, shown only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefsrc: Option<IpAddr>,
}

/// What a label route does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MplsAction {
    /// Replace the label by each next hop's `labels` (none: pop) and send there.
    Forward,
    /// Pop, then route the packet underneath in `vrf`.
    Lookup,
}

/// A label route, as shown and as requested.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MplsRoute {
    /// The incoming label.
    pub label: u32,
    /// What it does.
    pub action: MplsAction,
    /// Next hops (`forward`).
    #[serde(default)]
    pub nexthops: Vec<Nexthop>,
    /// The VRF (`lookup`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vrf: Option<String>,
    /// RFC 3443 TTL model on pop: `false` = pipe.
    #[serde(default = "yes")]
    pub ttl_propagate: bool,
    /// Where it came from. In a request to add or replace: what `route show` is to say
    /// (the CLI's `proto NAME`, default `boot`); the route is a runtime route all the same.
    #[serde(default)]
    pub protocol: Protocol,
}

/// One next hop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Nexthop {
    /// The gateway; `None`: the destination is on `dev`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<IpAddr>,
    /// The port's name; optional in requests when the gateway says it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dev: Option<String>,
    /// Prefix routes: labels pushed (`encap mpls`), first = top. Label routes: labels
    /// replacing the incoming one (`as`); empty = pop.
    #[serde(default)]
    pub labels: Vec<u32>,
    /// Relative share of flows.
    #[serde(default = "one")]
    pub weight: u32,
}

fn default_vrf() -> String {
    vmpls_fib::DEFAULT_VRF_NAME.to_string()
}

fn yes() -> bool {
    true
}

fn one() -> u32 {
    1
}

/// A VRF (`vrf show`): where the kernel's VRFs come from in FRR mode, the file's
/// `[[vrf]]`s otherwise. The default VRF is not listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vrf {
    /// Its name.
    pub name: String,
    /// Its kernel table id (zebra's `RTA_TABLE` for its routes); `None` for a VRF of the
    /// file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<u32>,
    /// Its ports' names.
    pub interfaces: Vec<String>,
    /// Its IPv4 and IPv6 destinations in force.
    pub routes: u64,
    /// Where it came from: `netns` (a network namespace holding an interface named like
    /// it), `device` (a kernel `vrf` device), `config` (the file's `[[vrf]]`).
    pub origin: String,
    /// What crossed it; `None` when the forwarding loop did not answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<VrfStats>,
}

/// A VRF's traffic: what its ports (the customers' side) moved, and what arrived from
/// the core under the labels that pop into it (its VPN labels). Made from the port and
/// label counters, so the in-kernel fast path's frames are in them too.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VrfStats {
    /// Frames received on its ports.
    pub rx_packets: u64,
    /// Bytes received on its ports.
    pub rx_bytes: u64,
    /// Frames sent out of its ports.
    pub tx_packets: u64,
    /// Bytes sent out of its ports.
    pub tx_bytes: u64,
    /// Frames that arrived under its labels (popped, then looked up in it).
    pub label_packets: u64,
    /// Bytes of those, Ethernet header on.
    pub label_bytes: u64,
    /// Its labels (those that pop into it), ascending.
    #[serde(default)]
    pub labels: Vec<u32>,
}

/// A port (`link-show`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    /// Index in the router's port list (from 0).
    pub index: u16,
    /// The port's name.
    pub name: String,
    /// The Linux interface it is attached to.
    pub interface: String,
    /// Its kind: `af-packet`, `tap` or `vhost-user`.
    pub kind: String,
    /// Its MTU.
    pub mtu: u32,
    /// Its MAC address, `02:00:...`.
    #[serde(with = "mac_text")]
    pub address: Mac,
    /// Its VRF.
    pub vrf: String,
    /// Whether labelled frames from it are switched (`mpls` in the config).
    #[serde(default)]
    pub mpls: bool,
    /// Its addresses, `address/length`.
    pub addresses: Vec<String>,
    /// Offloads it accepts at output (`tso4`, `tso6`, `uso`, `csum`, `mpls_gso`).
    pub offloads: Vec<String>,
    /// Its interface's state: up with a carrier, up without one, down, or gone.
    #[serde(default)]
    pub state: LinkState,
    /// Its counters.
    pub stats: LinkStats,
}

/// A port's interface as `ip link` tells it: administratively up with a carrier (`UP`),
/// up without one (`NO-CARRIER`), down (`DOWN`), or deleted under the port (`DETACHED`).
/// Ports whose medium has no carrier to read (TAP, vhost-user, tunnels) are `UP` while
/// attached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING-KEBAB-CASE")]
pub enum LinkState {
    #[default]
    Up,
    NoCarrier,
    Down,
    Detached,
}

impl LinkState {
    /// The state of an interface administratively up or not, with a carrier or not
    /// (`IFF_UP`, `IFF_RUNNING`).
    pub fn of(admin_up: bool, carrier: bool) -> LinkState {
        match (admin_up, carrier) {
            (false, _) => LinkState::Down,
            (true, false) => LinkState::NoCarrier,
            (true, true) => LinkState::Up,
        }
    }

    /// `ip link`'s flags in angle brackets, without the brackets.
    pub fn flags_text(self) -> &'static str {
        match self {
            LinkState::Up => "UP",
            LinkState::NoCarrier => "NO-CARRIER,UP",
            LinkState::Down => "DOWN",
            LinkState::Detached => "DETACHED",
        }
    }
}

/// Counters of one port: with the in-kernel fast path, totals of what the port's socket
/// and the fast path moved, the fast path's share in `fast_path`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkStats {
    /// Frames received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames dropped on receive (bad virtio-net header, truncated, no buffer, the
    /// kernel's receive queue full).
    pub rx_dropped: u64,
    /// Of those, frames the kernel dropped before the router read them (the router fell
    /// behind; AF_PACKET ports).
    #[serde(default)]
    pub rx_kernel_dropped: u64,
    /// Of those, frames cut short (larger than the port's buffers).
    #[serde(default)]
    pub rx_truncated: u64,
    /// Of those, super-frames whose sender asked for segments smaller than any real stack
    /// cuts (`gso_size` below 88 bytes).
    #[serde(default)]
    pub rx_gso_size_too_small: u64,
    /// Of those, datagrams that carried no MPLS (MPLS-in-UDP ports).
    #[serde(default)]
    pub rx_not_mpls: u64,
    /// Of those, datagrams from another address than the tunnel's remote end
    /// (MPLS-in-UDP ports).
    #[serde(default)]
    pub rx_wrong_source: u64,
    /// Frames sent.
    pub tx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Frames dropped because the socket buffer was full.
    pub tx_dropped: u64,
    /// Frames the kernel refused.
    pub tx_errors: u64,
    /// Frames not sent because the tunnel's remote end is unreachable (MPLS-in-UDP
    /// ports).
    #[serde(default)]
    pub tx_unreachable: u64,
    /// Frames not sent because they carried no MPLS (MPLS-in-UDP ports carry labelled
    /// frames only).
    #[serde(default)]
    pub tx_not_mpls: u64,
    /// Super-frames the port cut into segments itself (vhost-user guests, which have no
    /// MPLS GSO, and MPLS-in-UDP tunnels); the pipeline counted each as one frame.
    #[serde(default)]
    pub tx_segmented: u64,
    /// The segments made from them (counted in `tx_packets` when sent).
    #[serde(default)]
    pub tx_segments: u64,
    /// Frames that found no room at the peer and waited in the port before they went (a
    /// vhost-user guest's full receive ring; in `tx_dropped` if the guest went first).
    #[serde(default)]
    pub tx_waited: u64,
    /// Errors on the port itself (its interface went down or was deleted, a failed
    /// receive or send).
    #[serde(default)]
    pub errors: u64,
    /// Times the port was opened again on a re-created interface.
    #[serde(default)]
    pub reopened: u64,
    /// The port has no usable interface now (deleted, or back but down or too small);
    /// the router checks every second.
    #[serde(default)]
    pub detached: bool,
    /// What the in-kernel fast path forwarded through the port (included in the totals
    /// above; the pipeline and `capture` never see these frames); `None` when it does
    /// not serve the port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fast_path: Option<FastPathShare>,
}

/// The fast path's share of a port's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FastPathShare {
    /// Frames the programs took from the port.
    pub rx_packets: u64,
    /// Their bytes.
    pub rx_bytes: u64,
    /// Frames the programs sent out of the port.
    pub tx_packets: u64,
    /// Their bytes.
    pub tx_bytes: u64,
}

/// Resolution state of a neighbour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum NeighState {
    /// Its MAC is known.
    Reachable,
    /// Being resolved.
    Incomplete,
    /// Static (`neigh add`, `[[neighbor]]`): never aged or asked for.
    Permanent,
}

/// A point-to-point Ethernet pseudowire (what the file, the CLI or ldpd through zebra
/// says of it) and its encapsulation: one type for the tables, the control protocol and
/// the zebra module's channel, defined beside the channel's decoder.
pub use vmpls_frr::pw::{PwSpec, PwType};

/// Where a pseudowire came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PwOrigin {
    /// The config file's `[[pseudowire]]`.
    Config,
    /// `pw add` / `pw-replace`.
    Cli,
    /// ldpd, through zebra and the module's channel.
    Frr,
}

impl std::fmt::Display for PwOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PwOrigin::Config => "config",
            PwOrigin::Cli => "cli",
            PwOrigin::Frr => "frr",
        })
    }
}

/// A pseudowire and its state (`pw-show`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct PwStatus {
    /// Its name.
    pub name: String,
    /// The attachment port, if one is configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attachment: Option<String>,
    /// The VPLS instance it is a member of (no attachment of its own then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vpls: Option<String>,
    /// Who made it.
    pub origin: PwOrigin,
    /// The labels, peer and encapsulation; `None`: a `[[pseudowire]]` ldpd has not
    /// signalled yet (FRR mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<PwSpec>,
    /// Forwarding: installed, attachment up, a route to the peer.
    pub up: bool,
    /// Why not, when not up: "attachment down", "no route to peer", "no attachment
    /// configured", "label in use", "not signalled".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Frames and bytes from the pseudowire sent out of the attachment.
    pub rx_frames: u64,
    /// Bytes of them, labels included.
    pub rx_bytes: u64,
    /// Frames from the attachment sent into the pseudowire.
    pub tx_frames: u64,
    /// Bytes of them, the customer's frames.
    pub tx_bytes: u64,
}

/// A neighbour table entry (`neigh-show`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Neighbor {
    /// Its IP address.
    pub dst: IpAddr,
    /// The port's name.
    pub dev: String,
    /// Its MAC, when known.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "mac_text::option")]
    pub lladdr: Option<Mac>,
    /// Its state.
    pub state: NeighState,
}

/// A named counter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counter {
    /// Its name (`unknown_label`, `label_swap`, ...).
    pub name: String,
    /// Its value.
    pub value: u64,
}

/// Counters of one port as the pipeline counts them, with the port's own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortCounters {
    /// The port's name.
    pub name: String,
    /// The port's counters.
    #[serde(flatten)]
    pub link: LinkStats,
    /// Frames the pipeline took from the port.
    pub pipeline_rx: u64,
    /// Frames the pipeline handed to the port.
    pub pipeline_tx: u64,
    /// Frames the in-kernel fast path took from the port (0 without it).
    #[serde(default)]
    pub fast_path_rx: u64,
    /// Frames the in-kernel fast path sent out of the port.
    #[serde(default)]
    pub fast_path_tx: u64,
}

/// All counters (`stats`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Per port.
    pub ports: Vec<PortCounters>,
    /// Drops by reason, every reason.
    pub drops: Vec<Counter>,
    /// Events, every kind.
    pub events: Vec<Counter>,
    /// Entries in the neighbour table.
    pub neighbors: u64,
    /// Entries of those whose MAC is known.
    pub neighbors_reachable: u64,
    /// Label routes.
    pub label_routes: u64,
    /// Prefix routes over all VRFs (local and connected included).
    pub prefix_routes: u64,
    /// Frames and bytes switched per incoming label (labels that switched any).
    #[serde(default)]
    pub labels: Vec<LabelCounter>,
    /// What the in-kernel fast path did (`swap`, `push`, `pop`, `ip_forward`, `passed`,
    /// ...); empty when the router runs without it. Its frames are also in `events` and
    /// `labels`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fast_path: Vec<Counter>,
    /// Where the forwarding loop's time went (`busy_us`: awake in turns that received
    /// frames, `idle_us`: awake in turns that received none, `slept_us`: asleep in
    /// `poll(2)`, `turns`, `busy_turns`): with `poll = "adaptive"` the loop spins through
    /// idle turns, so its busy share, not its CPU time, is what forwarding costs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forwarding_loop: Vec<Counter>,
    /// The FPM connection from FRR's zebra (`connected`, `connections`, `refused`,
    /// `decode_errors`, `messages`, `batches`, `unusable`, `routes`, `label_routes`);
    /// empty when the router runs without `[frr]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub frr: Vec<Counter>,
    /// Per VRF but the default one: what its ports and its labels moved.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vrfs: Vec<VrfCounters>,
}

/// One VRF's traffic, by name (`stats`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VrfCounters {
    /// The VRF.
    pub vrf: String,
    /// Its traffic.
    #[serde(flatten)]
    pub stats: VrfStats,
}

/// Frames and bytes one incoming label's route switched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabelCounter {
    /// The incoming label.
    pub label: u32,
    /// Frames (super-frames count once).
    pub packets: u64,
    /// Bytes, Ethernet header on.
    pub bytes: u64,
}

impl Stats {
    /// The drop counter `name`, if it exists.
    pub fn drop(&self, name: &str) -> Option<u64> {
        self.drops.iter().find(|c| c.name == name).map(|c| c.value)
    }

    /// The event counter `name`, if it exists.
    pub fn event(&self, name: &str) -> Option<u64> {
        self.events.iter().find(|c| c.name == name).map(|c| c.value)
    }

    /// All drops, summed.
    pub fn total_drops(&self) -> u64 {
        self.drops.iter().map(|c| c.value).sum()
    }

    /// The traffic of the VRF with these ports and these labels (those that pop into it).
    pub fn vrf(&self, ports: &[String], mut labels: Vec<u32>) -> VrfStats {
        labels.sort_unstable();
        let mut v = VrfStats::default();
        for p in self.ports.iter().filter(|p| ports.contains(&p.name)) {
            v.rx_packets += p.link.rx_packets;
            v.rx_bytes += p.link.rx_bytes;
            v.tx_packets += p.link.tx_packets;
            v.tx_bytes += p.link.tx_bytes;
        }
        for l in self.labels.iter().filter(|l| labels.binary_search(&l.label).is_ok()) {
            v.label_packets += l.packets;
            v.label_bytes += l.bytes;
        }
        v.labels = labels;
        v
    }
}

/// What a reload changed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReloadSummary {
    /// The file read.
    pub config: String,
    /// Prefix routes added.
    pub routes_added: u64,
    /// Prefix routes removed.
    pub routes_removed: u64,
    /// Prefix routes changed.
    pub routes_changed: u64,
    /// Label routes added.
    pub labels_added: u64,
    /// Label routes removed.
    pub labels_removed: u64,
    /// Label routes changed.
    pub labels_changed: u64,
    /// Whether anything else in the forwarding tables changed (port addresses, VRFs,
    /// which ports accept labels, router addresses).
    pub other_changed: bool,
}

impl ReloadSummary {
    /// Whether the reload changed nothing.
    pub fn unchanged(&self) -> bool {
        self.routes_added
            + self.routes_removed
            + self.routes_changed
            + self.labels_added
            + self.labels_removed
            + self.labels_changed
            == 0
            && !self.other_changed
    }
}

impl std::fmt::Display for ReloadSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.unchanged() {
            return write!(f, "{}: no change", self.config);
        }
        write!(
            f,
            "{}: routes +{} -{} ~{}, label routes +{} -{} ~{}",
            self.config,
            self.routes_added,
            self.routes_removed,
            self.routes_changed,
            self.labels_added,
            self.labels_removed,
            self.labels_changed
        )?;
        if self.other_changed {
            f.write_str(", addresses, VRFs or ports' mpls changed")?;
        }
        Ok(())
    }
}

/// The reply to `capture`, before the frames.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureStart {
    /// The port.
    pub port: String,
    /// Its Linux interface.
    pub interface: String,
    /// pcap link type of the frames: 1, Ethernet.
    pub linktype: u32,
    /// The in-kernel fast path serves the port: the frames it forwards bypass the
    /// router's pipeline, and so the capture (`tcpdump -i` on the interface sees them).
    #[serde(default)]
    pub fast_path: bool,
}

/// Which way a captured frame went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Received on the port.
    Rx,
    /// Sent on the port.
    Tx,
}

/// One captured frame on the stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapturedFrame {
    /// When the batch it came in or went out with was handled, nanoseconds since the Unix
    /// epoch.
    pub ts_ns: u64,
    /// Received or sent.
    pub dir: Direction,
    /// The frame from the Ethernet header on, base64 ([`base64_encode`]); super-frames
    /// whole.
    pub data: String,
    /// Frames lost so far on this capture because the reader was too slow.
    pub lost: u64,
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding (RFC 4648 section 4).
pub fn base64_encode(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(B64[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decodes [`base64_encode`]'s output; `None` for anything that is not padded base64.
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    let quads = bytes.len() / 4;
    for (qi, q) in bytes.chunks_exact(4).enumerate() {
        let pad = q.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && qi + 1 != quads) {
            return None;
        }
        let mut n = 0u32;
        for &c in &q[..4 - pad] {
            n = n << 6 | value(c)?;
        }
        n <<= 6 * pad as u32;
        let b = n.to_be_bytes();
        out.extend_from_slice(&b[1..4 - pad]);
    }
    Some(out)
}

/// Routes of one chunk; serialized as the JSON array `route-show` returns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum ShowRows {
    /// Prefix routes.
    Ip(Vec<IpRoute>),
    /// Label routes.
    Mpls(Vec<MplsRoute>),
}

impl ShowRows {
    /// How many routes.
    pub fn len(&self) -> usize {
        match self {
            ShowRows::Ip(l) => l.len(),
            ShowRows::Mpls(l) => l.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a `route-batch` did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchSummary {
    /// Changes applied.
    pub applied: u64,
    /// Changes that failed, in order; without `force` at most one (the batch stopped
    /// there: the changes after it were not applied).
    #[serde(default)]
    pub failed: Vec<BatchFailure>,
}

/// A change of a batch that failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchFailure {
    /// Its place in the batch, from 0.
    pub index: u64,
    /// Why, as `route add` would have said it.
    pub error: String,
}

/// Why `mac` cannot be a neighbour's (multicast or all zeros), for `Error: ...`.
///
/// # Errors
/// The reason, naming the address.
pub fn check_neighbor_mac(mac: Mac) -> Result<Mac, String> {
    if mac.is_multicast() || mac == Mac::default() {
        return Err(format!("{mac} is not a unicast MAC address (a neighbour has one)"));
    }
    Ok(mac)
}

/// A VPLS instance and its members' state (`vpls-show`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct VplsStatus {
    /// Its name.
    pub name: String,
    /// Its attachment circuits.
    pub attachments: Vec<VplsAttachment>,
    /// Its pseudowires.
    pub pseudowires: Vec<VplsPseudowire>,
    /// MACs it learns at most.
    pub mac_limit: u32,
    /// Frames a second it floods at most; 0: no limit.
    pub flood_rate: u32,
    /// Seconds a MAC stays learned without being seen.
    pub mac_aging: u32,
    /// MACs learned now.
    pub macs: u64,
}

/// An attachment circuit of a VPLS instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct VplsAttachment {
    /// The port's name.
    pub port: String,
    /// Its link is up.
    pub up: bool,
}

/// A pseudowire of a VPLS instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct VplsPseudowire {
    /// Its name.
    pub name: String,
    /// Who gave its labels: the config (static) or FRR (ldpd through zebra).
    pub origin: PwOrigin,
    /// Its labels, peer and encapsulation; `None`: ldpd has not signalled it yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<PwSpec>,
    /// Forwarding: installed, an attachment circuit up and a route to the peer.
    pub up: bool,
    /// Why not, when not up: "not signalled", "label in use", "attachment down", "no
    /// route to peer".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One learned MAC of a VPLS instance (`fdb-show`), as `bridge -j fdb show` lists an
/// entry: `ifname` for an attachment circuit, `pw` for a pseudowire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FdbEntry {
    /// The station's address.
    #[serde(with = "mac_text")]
    pub mac: Mac,
    /// The attachment circuit it was learned on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ifname: Option<String>,
    /// The pseudowire it was learned on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pw: Option<String>,
    /// The VPLS instance (the bridge).
    pub master: String,
    /// As `bridge`'s: empty for a learned entry.
    pub state: String,
    /// Seconds since a frame from it was last seen (`bridge -s`'s `updated`).
    pub updated: u64,
}

/// A [`Mac`] as its text `02:00:5e:10:00:01` in JSON (`#[serde(with = "mac_text")]`).
pub mod mac_text {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::Mac;

    /// Writes the text.
    ///
    /// # Errors
    /// The serializer's.
    pub fn serialize<S: Serializer>(mac: &Mac, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(mac)
    }

    /// Reads the text.
    ///
    /// # Errors
    /// Not a MAC address.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Mac, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        text.parse().map_err(|e| serde::de::Error::custom(format!("\"{text}\" is not a MAC address; {e}")))
    }

    /// The same for an `Option<Mac>`.
    pub mod option {
        use serde::{Deserialize, Deserializer, Serializer};

        use super::Mac;

        /// Writes the text, or null.
        ///
        /// # Errors
        /// The serializer's.
        pub fn serialize<S: Serializer>(mac: &Option<Mac>, s: S) -> Result<S::Ok, S::Error> {
            match mac {
                Some(m) => s.collect_str(m),
                None => s.serialize_none(),
            }
        }

        /// Reads the text or null.
        ///
        /// # Errors
        /// Not a MAC address.
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Mac>, D::Error> {
            #[derive(Deserialize)]
            struct Text(#[serde(with = "super")] Mac);
            Ok(Option::<Text>::deserialize(d)?.map(|Text(m)| m))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_travel_as_their_text_and_bad_text_is_refused() {
        let json = r#"{"cmd":"neigh-add","dst":"198.18.30.98","lladdr":"02:00:00:00:77:02","dev":"east"}"#;
        let req: Request = serde_json::from_str(json).unwrap();
        let Request::NeighAdd { lladdr, .. } = &req else { panic!("{req:?}") };
        assert_eq!(*lladdr, Mac([2, 0, 0, 0, 0x77, 2]));
        assert_eq!(
            serde_json::to_string(&req).unwrap(),
            json.replace(r#""dev":"east""#, r#""dev":"east","replace":false"#)
        );
        let n = Neighbor {
            dst: "198.18.1.2".parse().unwrap(),
            dev: "ce1".into(),
            lladdr: None,
            state: NeighState::Incomplete,
        };
        assert_eq!(
            serde_json::to_string(&n).unwrap(),
            r#"{"dst":"198.18.1.2","dev":"ce1","state":"INCOMPLETE"}"#
        );
        let n = Neighbor { lladdr: Some(Mac([2, 0, 0, 0, 0, 0xab])), ..n };
        let text = serde_json::to_string(&n).unwrap();
        assert!(text.contains(r#""lladdr":"02:00:00:00:00:ab""#), "{text}");
        assert_eq!(serde_json::from_str::<Neighbor>(&text).unwrap(), n);
        let e = serde_json::from_str::<Request>(&json.replace("02:00:00:00:77:02", "02:00:zz")).unwrap_err();
        assert!(e.to_string().contains("\"02:00:zz\" is not a MAC address"), "{e}");
        assert!(check_neighbor_mac(Mac([1, 0, 0x5e, 0, 0, 1])).unwrap_err().contains("not a unicast"));
        assert!(check_neighbor_mac(Mac::default()).is_err());
    }

    #[test]
    fn base64_matches_rfc4648_vectors_and_round_trips() {
        for (plain, enc) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64_encode(plain.as_bytes()), enc);
            assert_eq!(base64_decode(enc).as_deref(), Some(plain.as_bytes()));
        }
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(base64_decode(&base64_encode(&all)), Some(all));
        for bad in ["Zg=", "Z===", "Zg==Zg==", "Zm9*", "===="] {
            assert_eq!(base64_decode(bad), None, "{bad}");
        }
    }

    #[test]
    fn requests_have_the_documented_json_form() {
        let r: Request =
            serde_json::from_str(r#"{"cmd":"route-show","family":"inet6","vrf":"cust"}"#).unwrap();
        assert_eq!(r, Request::RouteShow { family: Family::Inet6, vrf: Some("cust".into()), dst: None });
        let r: Request = serde_json::from_str(
            r#"{"cmd":"route-add","route":{"family":"inet","dst":"198.18.3.0/24","nexthops":[{"gateway":"198.18.10.2","dev":"core","labels":[100,200]}]}}"#,
        )
        .unwrap();
        let Request::RouteAdd { route: RouteSpec::Inet(route) } = r else { panic!("{r:?}") };
        assert_eq!(route.vrf, "default");
        assert_eq!(route.kind, RouteType::Unicast);
        assert!(route.ttl_propagate);
        assert_eq!(route.nexthops[0].weight, 1);
        assert_eq!(route.nexthops[0].labels, vec![100, 200]);
        assert_eq!(serde_json::to_string(&Request::Stats).unwrap(), r#"{"cmd":"stats"}"#);
        assert_eq!(
            serde_json::to_string(&Reply::<()>::error("x")).unwrap(),
            r#"{"version":1,"ok":false,"error":{"kind":"invalid","message":"x"}}"#
        );
        let restart: Reply = serde_json::from_str(
            r#"{"version":1,"ok":false,"error":{"kind":"restart-needed","message":"port moved"}}"#,
        )
        .unwrap();
        assert_eq!(restart.into_result().unwrap_err().kind, ErrorKind::RestartNeeded);
        // A request line carries the version beside the request's own fields; without
        // one it is still a request (scripts, socat).
        let line: RequestLine = serde_json::from_str(r#"{"version":1,"cmd":"stats"}"#).unwrap();
        assert_eq!(line, RequestLine::new(Request::Stats));
        assert_eq!(serde_json::to_string(&line).unwrap(), r#"{"version":1,"cmd":"stats"}"#);
        let bare: RequestLine = serde_json::from_str(r#"{"cmd":"stats"}"#).unwrap();
        assert_eq!((bare.version, bare.request), (None, Request::Stats));
        assert!(serde_json::from_str::<Request>(r#"{"cmd":"route-fly"}"#).is_err());
    }
}
