//! The error every table operation returns.

use core::fmt;
use std::net::IpAddr;

use crate::{Label, PortId, VrfId};

/// What was wrong with a table entry handed to the FIB.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FibError {
    /// A prefix length longer than the address (more than 32 for IPv4, 128 for IPv6).
    InvalidPrefixLength {
        /// The length given.
        len: u8,
        /// The longest length the address family allows.
        max: u8,
    },
    /// A next-hop group without next hops.
    EmptyNexthopGroup,
    /// A next hop with weight 0 (weights start at 1).
    ZeroWeight {
        /// Position of the next hop in its group.
        index: usize,
    },
    /// More next hops than a group holds.
    TooManyNexthops {
        /// How many were given.
        count: usize,
    },
    /// A label above 1048575 (labels have 20 bits).
    LabelOutOfRange {
        /// The label given.
        label: u32,
    },
    /// An incoming label in the reserved range 0-15.
    ReservedLabel {
        /// The label given.
        label: Label,
    },
    /// Implicit null (3) inside a label stack of more than one label: it never appears
    /// on the wire, so it can only stand alone (meaning "no label", penultimate-hop pop).
    ImplicitNullInStack,
    /// A label route to a pseudowire the tables do not hold.
    UnknownPseudowire {
        /// The index given.
        pw: u16,
    },
    /// A VRF id that was not defined.
    UnknownVrf {
        /// The id given.
        vrf: VrfId,
    },
    /// A VRF name defined twice.
    DuplicateVrf {
        /// The name.
        name: String,
    },
    /// A port id that was not defined.
    UnknownPort {
        /// The id given.
        port: PortId,
    },
    /// More ports than a [`PortId`] can number.
    TooManyPorts,
    /// An IPv4 table past the size its direct index can number (about 16 million prefixes).
    TableFull,
    /// More VRFs than a [`VrfId`] can number.
    TooManyVrfs,
    /// An incoming label given two routes.
    DuplicateLabel {
        /// The label.
        label: Label,
    },
    /// A prefix given twice in one VRF (including the local and connected routes the
    /// builder derives from port addresses).
    DuplicatePrefix {
        /// The VRF.
        vrf: VrfId,
        /// The (masked) prefix address.
        addr: IpAddr,
        /// The prefix length.
        len: u8,
    },
    /// A router address of the wrong family or not usable as a host address.
    InvalidAddress {
        /// The address.
        addr: IpAddr,
    },
}

impl fmt::Display for FibError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FibError::InvalidPrefixLength { len, max } => {
                write!(f, "prefix length /{len} is longer than the address (at most /{max})")
            }
            FibError::EmptyNexthopGroup => f.write_str("a next-hop group needs at least one next hop"),
            FibError::ZeroWeight { index } => {
                write!(f, "next hop {index} has weight 0; weights start at 1")
            }
            FibError::TooManyNexthops { count } => {
                write!(f, "{count} next hops in one group; at most {} are allowed", crate::MAX_NEXTHOPS)
            }
            FibError::LabelOutOfRange { label } => {
                write!(f, "label {label} is out of range (0-{})", crate::MAX_LABEL)
            }
            FibError::ReservedLabel { label } => write!(
                f,
                "label {label} is reserved (0-15); incoming labels start at {}",
                crate::FIRST_UNRESERVED
            ),
            FibError::ImplicitNullInStack => {
                f.write_str("implicit null (3) can only stand alone as [3] (pop), not inside a label stack")
            }
            FibError::UnknownVrf { vrf } => write!(f, "VRF {vrf} is not defined"),
            FibError::UnknownPseudowire { pw } => write!(f, "pseudowire {pw} is not defined"),
            FibError::DuplicateVrf { name } => write!(f, "VRF \"{name}\" is defined twice"),
            FibError::UnknownPort { port } => write!(f, "port {port} is not defined"),
            FibError::TooManyPorts => f.write_str("too many ports"),
            FibError::TableFull => f.write_str("the IPv4 table is full (about 16 million prefixes)"),
            FibError::TooManyVrfs => f.write_str("too many VRFs"),
            FibError::DuplicateLabel { label } => write!(f, "label {label} has two routes"),
            FibError::DuplicatePrefix { vrf, addr, len } => {
                write!(f, "prefix {addr}/{len} is defined twice in VRF {vrf}")
            }
            FibError::InvalidAddress { addr } => write!(f, "{addr} is not usable here"),
        }
    }
}

impl std::error::Error for FibError {}
