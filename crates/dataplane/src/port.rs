//! What the pipeline knows about a port: identity, MTU and what offloads it accepts.

use crate::packet::PortId;

/// What a port accepts at output; the pipeline does the least work these allow
/// (pass a super-frame whole, complete the checksum, or segment in software).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortCaps {
    /// Takes IPv4 TCP super-frames with a virtio-net header (the kernel segments them).
    pub tso4: bool,
    /// Takes IPv6 TCP super-frames.
    pub tso6: bool,
    /// Takes UDP GSO super-frames (`GSO_UDP_L4`).
    pub uso: bool,
    /// Takes frames whose transport checksum is partial (`NEEDS_CSUM`).
    pub csum: bool,
    /// Takes labelled super-frames marked GSO (a TAP pipe or vhost-user peer does; the
    /// kernel refuses them through AF_PACKET).
    pub mpls_gso: bool,
}

/// A port as the pipeline sees it.
#[derive(Debug, Clone)]
pub struct PortInfo {
    /// Index in the router's port list.
    pub id: PortId,
    /// The name the config gives it.
    pub name: String,
    /// Its Ethernet address: source of every frame it sends.
    pub mac: [u8; 6],
    /// Largest IP or MPLS payload of an Ethernet frame it sends (the interface MTU).
    pub mtu: u32,
    /// Offloads it accepts at output.
    pub caps: PortCaps,
}
