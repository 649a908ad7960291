//! `vmpls-frr`: FRRouting as vmpls's control plane, without I/O.
//!
//! zebra, FRR's routing manager, hands the routes and labels its daemons compute (OSPF,
//! IS-IS, LDP, segment routing, static LSPs, BGP) to an outside data plane over FPM:
//! a TCP connection carrying netlink route messages. This crate reads that stream:
//!
//! - [`fpm`]: the 4-byte frame header around each message;
//! - [`route`]: the netlink messages, decoded into [`route::Update`]s (label routes,
//!   labelled and plain IP routes, ECMP next hops with weights), strictly: broken framing
//!   is an error, and a well-framed route vmpls cannot carry is skipped by kind
//!   ([`route::Unsupported`]), never guessed at;
//! - [`rib`]: the table zebra has sent, the changes a burst of messages makes (applied by
//!   the router as one table change), and the replacement of the whole table when zebra
//!   reconnects.
//!
//! - [`pw`]: the zebra module's pseudowire channel (line-delimited JSON): zebra's
//!   pseudowires in, their status out.
//!
//! The router binary owns the socket and turns these routes into its tables (zebra's
//! interface indexes into ports). The zebra module that makes FRR hand labels to FPM on
//! kernels without MPLS is in `frr/zebra-module/` (GPL-2.0-or-later).

#![deny(unsafe_code)]

pub mod fpm;
pub mod pw;
pub mod rib;
pub mod route;

pub use rib::Rib;
pub use route::{Dest, Kind, Nexthop, Route, RouteKey, Skipped, Unsupported, Update};
