//! The maps' C layout (`bpf/fastpath.bpf.c`) as `#[repr(C)]` twins, the encoding of
//! [`FastTables`] into map entries with its validation, and the diff between two sets of
//! entries. Pure: no syscalls, unit-tested without root.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use vmpls_wire::mpls::MAX_LABEL;

use crate::{
    Adjacency, Delivery, FastGroup, FastPathError, FastPort, FastTables, FastTablesChange, LabelEntry,
    RouteEntry, Tunnel,
};

/// The most labels a route may push.
pub(crate) const MAX_PUSH: usize = 4;

pub(crate) const LABEL_SWAP: u32 = 1;
pub(crate) const LABEL_POP_IP: u32 = 2;
pub(crate) const LABEL_PHP: u32 = 3;
pub(crate) const LABEL_MULTI: u32 = 4;
/// Next hops in a group (`FP_MAX_NH`).
pub(crate) const MAX_NH: usize = 64;
/// Buckets in a group (`FP_MAX_BUCKETS`).
pub(crate) const MAX_BUCKETS: usize = 4096;
pub(crate) const ROUTE_LOCAL: u32 = 1;
pub(crate) const ROUTE_FORWARD: u32 = 2;

/// `struct fp_counter_set`, the one value of `fp_counters` (per CPU), indexed by
/// [`counter`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RawCounterSet {
    pub c: [u64; counter::COUNT],
}

/// `fp_counters` indices.
pub(crate) mod counter {
    pub(crate) const FRAMES_IN: u32 = 0;
    pub(crate) const SWAP: u32 = 1;
    pub(crate) const PUSH: u32 = 2;
    pub(crate) const POP: u32 = 3;
    pub(crate) const IP_FORWARD: u32 = 4;
    pub(crate) const PASSED: u32 = 5;
    pub(crate) const BYTES: u32 = 6;
    pub(crate) const REDIRECT_FAILED: u32 = 7;
    pub(crate) const ENCAP: u32 = 8;
    pub(crate) const DECAP: u32 = 9;
    pub(crate) const CROSSED: u32 = 10;
    pub(crate) const REPASSED: u32 = 11;
    pub(crate) const ACT_MPLS: u32 = 12;
    pub(crate) const RECALLED: u32 = 13;
    pub(crate) const XDP_POP: u32 = 14;
    pub(crate) const XDP_SWAP: u32 = 15;
    /// `C_MAX`.
    pub(crate) const COUNT: usize = 16;
}

/// `struct fp_adj`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub(crate) struct RawAdj {
    pub ifindex: u32,
    pub mtu: u32,
    pub dmac: [u8; 6],
    pub smac: [u8; 6],
}

/// `struct fp_port`, the value of `fp_ports` (key: ifindex).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct RawPort {
    pub vrf: u32,
    pub mac: [u8; 6],
    pub accepts_mpls: u8,
    pub netns: u8,
    pub transmit: u8,
    /// Set by [`crate::FastPath`] for ports with an action chain, not by [`encode`].
    pub act_chain: u8,
    pub pad: [u8; 2],
}

/// `struct fp_label`, the value of `fp_labels` (key: label).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct RawLabel {
    pub action: u32,
    pub out_label: u32,
    pub vrf: u32,
    pub uniform: u32,
    pub adj: RawAdj,
    /// `LABEL_MULTI`: the group's key in `fp_groups`.
    pub group: u32,
}

/// `struct fp_key4` without its leading `prefixlen` (aya's `lpm_trie::Key` adds it).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct RawKey4 {
    /// VRF in network byte order.
    pub vrf: u32,
    pub addr: [u8; 4],
}

/// `struct fp_key6` without its leading `prefixlen`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct RawKey6 {
    /// VRF in network byte order.
    pub vrf: u32,
    pub addr: [u8; 16],
}

/// `struct fp_route`, the value of `fp_routes_v4` and `fp_routes_v6`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct RawRoute {
    pub action: u32,
    pub nlabels: u32,
    pub labels: [u32; 4],
    pub label_ttl: u32,
    pub adj: RawAdj,
    /// Not 0: an ECMP route, the group's key in `fp_groups`.
    pub group: u32,
}

/// `struct fp_nh`: one next hop of a group.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub(crate) struct RawNh {
    pub nlabels: u32,
    pub labels: [u32; 4],
    pub adj: RawAdj,
}

/// `struct fp_group`, the value of `fp_groups` (key: the group's id).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct RawGroup {
    pub nnh: u32,
    pub nbuckets: u32,
    pub nh: [RawNh; MAX_NH],
    pub buckets: [u8; MAX_BUCKETS],
}

impl Default for RawGroup {
    fn default() -> Self {
        RawGroup { nnh: 0, nbuckets: 0, nh: [RawNh::default(); MAX_NH], buckets: [0; MAX_BUCKETS] }
    }
}

/// `struct fp_tunnel`, the value of `fp_tunnels` (key: the tunnel's adjacency ifindex).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct RawTunnel {
    pub family: u32,
    pub ifindex: u32,
    pub encap: u32,
    /// Network order.
    pub port: u16,
    pub pad: u16,
    pub local: [u8; 16],
    pub remote: [u8; 16],
}

/// `struct fp_tunnel_key`, the key of `fp_tunnel_rx` (value: the tunnel's key).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub(crate) struct RawTunnelKey {
    pub family: u32,
    /// Network order.
    pub port: u16,
    pub pad: u16,
    pub local: [u8; 16],
    pub remote: [u8; 16],
}

/// `struct fp_crossing`, the value of `fp_crossings` (key: the VRF namespace's number).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct RawCrossing {
    pub root_ifindex: u32,
    pub vrf_ifindex: u32,
}

/// `struct fp_label_stat`, per CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct RawLabelStat {
    pub frames: u64,
    pub bytes: u64,
}

/// `struct fp_port_stat`, per CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct RawPortStat {
    pub rx_frames: u64,
    pub rx_bytes: u64,
    pub tx_frames: u64,
    pub tx_bytes: u64,
    pub rx_by_label: u64,
}

// The C side has the same sizes as _Static_assert; none of these has padding, which Pod
// requires (every byte initialised).
const _: () = assert!(size_of::<RawAdj>() == 20);
const _: () = assert!(size_of::<RawPort>() == 16);
const _: () = assert!(size_of::<RawLabel>() == 40);
const _: () = assert!(size_of::<RawKey4>() + 4 == 12);
const _: () = assert!(size_of::<RawKey6>() + 4 == 24);
const _: () = assert!(size_of::<RawRoute>() == 52);
const _: () = assert!(size_of::<RawNh>() == 40);
const _: () = assert!(size_of::<RawGroup>() == 8 + 40 * MAX_NH + MAX_BUCKETS);
const _: () = assert!(size_of::<RawLabelStat>() == 16);
const _: () = assert!(size_of::<RawTunnel>() == 48);
const _: () = assert!(size_of::<RawTunnelKey>() == 40);
const _: () = assert!(size_of::<RawPortStat>() == 40);
const _: () = assert!(size_of::<RawCrossing>() == 8);
const _: () = assert!(size_of::<RawCounterSet>() == 8 * counter::COUNT);

// SAFETY: each type is #[repr(C)], Copy, made only of integers and byte arrays, with no
// padding (sizes asserted above), so every bit pattern is valid and every byte is
// initialised: what aya's `Pod` asks for.
unsafe impl aya::Pod for RawAdj {}
// SAFETY: as above.
unsafe impl aya::Pod for RawPort {}
// SAFETY: as above.
unsafe impl aya::Pod for RawLabel {}
// SAFETY: as above.
unsafe impl aya::Pod for RawKey4 {}
// SAFETY: as above.
unsafe impl aya::Pod for RawKey6 {}
// SAFETY: as above.
unsafe impl aya::Pod for RawRoute {}
// SAFETY: as above.
unsafe impl aya::Pod for RawLabelStat {}
// SAFETY: as above.
unsafe impl aya::Pod for RawTunnel {}
// SAFETY: as above.
unsafe impl aya::Pod for RawTunnelKey {}
// SAFETY: as above.
unsafe impl aya::Pod for RawPortStat {}
// SAFETY: as above.
unsafe impl aya::Pod for RawNh {}
// SAFETY: as above.
unsafe impl aya::Pod for RawGroup {}
// SAFETY: as above.
unsafe impl aya::Pod for RawCrossing {}
// SAFETY: as above.
unsafe impl aya::Pod for RawCounterSet {}

/// The map entries a [`FastTables`] stands for. Route keys stay in the tables' form
/// `(vrf, prefix, length)`; [`key4`] / [`key6`] give the trie key.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Encoded {
    pub ports: BTreeMap<u32, RawPort>,
    pub labels: BTreeMap<u32, RawLabel>,
    pub routes_v4: BTreeMap<(u16, Ipv4Addr, u8), RawRoute>,
    pub routes_v6: BTreeMap<(u16, Ipv6Addr, u8), RawRoute>,
    pub tunnels: BTreeMap<u32, RawTunnel>,
    pub tunnels_rx: BTreeMap<RawTunnelKey, u32>,
    pub crossings: BTreeMap<u32, RawCrossing>,
    pub groups: Groups,
}

/// The ECMP groups that labels and routes refer to, by id and by content: entries with the
/// same group share one id (one map entry). An id is never given to other content while
/// a FastPath lives (ids come from a counter), so an entry never sees another group under
/// its id while the maps change.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Groups {
    /// Content and how many entries refer to it.
    pub by_id: BTreeMap<u32, (Box<RawGroup>, usize)>,
    pub ids: BTreeMap<Box<RawGroup>, u32>,
}

impl Groups {
    /// One more reference to `g`: the id it has here, else the one it has in `prev`, else
    /// `next` (which then advances; never 0).
    pub fn acquire(&mut self, g: &RawGroup, prev: &Groups, next: &mut u32) -> u32 {
        let id = match self.ids.get(g).or_else(|| prev.ids.get(g)) {
            Some(&id) => id,
            None => {
                let id = *next;
                *next = next.wrapping_add(1).max(1);
                id
            }
        };
        let slot = self.by_id.entry(id).or_insert_with(|| (Box::new(*g), 0));
        slot.1 += 1;
        self.ids.entry(Box::new(*g)).or_insert(id);
        id
    }

    /// One reference less to `id`; the group goes with its last.
    pub fn release(&mut self, id: u32) {
        if let Some(slot) = self.by_id.get_mut(&id) {
            slot.1 = slot.1.saturating_sub(1);
            if slot.1 == 0
                && let Some((g, _)) = self.by_id.remove(&id)
            {
                self.ids.remove(&g);
            }
        }
    }

    /// Records `g` as held under `id` (what the maps hold: references are not counted).
    pub fn insert(&mut self, id: u32, g: &RawGroup) {
        self.by_id.insert(id, (Box::new(*g), 0));
        self.ids.insert(Box::new(*g), id);
    }

    /// Forgets `id` whatever its references.
    pub fn remove(&mut self, id: u32) {
        if let Some((g, _)) = self.by_id.remove(&id) {
            self.ids.remove(&g);
        }
    }
}

fn adj(a: &Adjacency) -> RawAdj {
    RawAdj { ifindex: a.ifindex, mtu: a.mtu, dmac: a.dst_mac, smac: a.src_mac }
}

fn port(p: &FastPort) -> RawPort {
    RawPort {
        vrf: u32::from(p.vrf),
        mac: p.mac,
        accepts_mpls: u8::from(p.accepts_mpls),
        netns: p.netns,
        transmit: u8::from(p.delivery == Delivery::Transmit),
        act_chain: 0,
        pad: [0; 2],
    }
}

/// An address in the maps' 16 bytes (IPv4 in the first 4) and its family (4 or 6).
fn addr16(a: std::net::IpAddr) -> (u32, [u8; 16]) {
    let mut b = [0u8; 16];
    match a {
        std::net::IpAddr::V4(a) => {
            b[..4].copy_from_slice(&a.octets());
            (4, b)
        }
        std::net::IpAddr::V6(a) => (6, a.octets()),
    }
}

/// A tunnel's entry and the key its datagrams arrive under.
pub(crate) fn tunnel(t: &Tunnel) -> Result<(RawTunnel, RawTunnelKey), FastPathError> {
    let (family, local) = addr16(t.local);
    let (remote_family, remote) = addr16(t.remote);
    if family != remote_family {
        return Err(FastPathError::TunnelFamilies { local: t.local, remote: t.remote });
    }
    let port = t.port.to_be();
    Ok((
        RawTunnel {
            family,
            ifindex: t.underlay_ifindex,
            encap: u32::from(t.encap),
            port,
            pad: 0,
            local,
            remote,
        },
        RawTunnelKey { family, port, pad: 0, local, remote },
    ))
}

fn check_label(label: u32, what: &'static str) -> Result<(), FastPathError> {
    if label > MAX_LABEL {
        return Err(FastPathError::InvalidLabel { label, what });
    }
    Ok(())
}

/// A group's map entry, checked: 1 to 64 next hops, each with at most `max_labels` valid
/// labels, and 1 to 4096 buckets that each name one of them.
fn group(g: &FastGroup, max_labels: usize, what: &dyn std::fmt::Display) -> Result<RawGroup, FastPathError> {
    let bad = |why: &'static str| FastPathError::InvalidGroup { what: what.to_string(), why };
    if g.nexthops.is_empty() || g.nexthops.len() > MAX_NH {
        return Err(bad("a group has 1 to 64 next hops"));
    }
    if g.buckets.is_empty() || g.buckets.len() > MAX_BUCKETS {
        return Err(bad("a group has 1 to 4096 buckets"));
    }
    if g.buckets.iter().any(|&b| usize::from(b) >= g.nexthops.len()) {
        return Err(bad("a bucket names a next hop the group does not have"));
    }
    let mut raw =
        RawGroup { nnh: g.nexthops.len() as u32, nbuckets: g.buckets.len() as u32, ..RawGroup::default() };
    for (slot, nh) in raw.nh.iter_mut().zip(&g.nexthops) {
        if nh.labels.len() > max_labels {
            return Err(bad(if max_labels == 1 {
                "a label's next hop swaps in one label or pops"
            } else {
                "a next hop pushes at most 4 labels"
            }));
        }
        for (l, &label) in slot.labels.iter_mut().zip(&nh.labels) {
            check_label(label, "next hop label")?;
            *l = label;
        }
        slot.nlabels = nh.labels.len() as u32;
        slot.adj = adj(&nh.adj);
    }
    raw.buckets[..g.buckets.len()].copy_from_slice(&g.buckets);
    Ok(raw)
}

/// A label's map entry, and its group's for an ECMP entry (whose id the caller fills in).
fn label(l: &LabelEntry) -> Result<(RawLabel, Option<RawGroup>), FastPathError> {
    Ok(match l {
        LabelEntry::Swap { out_label, adj: a } => {
            check_label(*out_label, "swap out label")?;
            let raw =
                RawLabel { action: LABEL_SWAP, out_label: *out_label, adj: adj(a), ..RawLabel::default() };
            (raw, None)
        }
        LabelEntry::PopIp { vrf, uniform } => {
            let raw = RawLabel {
                action: LABEL_POP_IP,
                vrf: u32::from(*vrf),
                uniform: u32::from(*uniform),
                ..RawLabel::default()
            };
            (raw, None)
        }
        LabelEntry::Php { uniform, adj: a } => {
            let raw = RawLabel {
                action: LABEL_PHP,
                uniform: u32::from(*uniform),
                adj: adj(a),
                ..RawLabel::default()
            };
            (raw, None)
        }
        LabelEntry::Multipath { uniform, group: g } => {
            let raw = RawLabel { action: LABEL_MULTI, uniform: u32::from(*uniform), ..RawLabel::default() };
            (raw, Some(group(g, 1, &"label group")?))
        }
    })
}

/// A route's map entry, and its group's for an ECMP route (whose id the caller fills in).
fn route(
    r: &RouteEntry,
    prefix: &dyn std::fmt::Display,
) -> Result<(RawRoute, Option<RawGroup>), FastPathError> {
    let label_ttl = |t: &Option<u8>| {
        if *t == Some(0) {
            return Err(FastPathError::ZeroLabelTtl { prefix: prefix.to_string() });
        }
        Ok(t.map_or(0, u32::from))
    };
    Ok(match r {
        RouteEntry::Local => (RawRoute { action: ROUTE_LOCAL, ..RawRoute::default() }, None),
        RouteEntry::Multipath { label_ttl: t, group: g } => {
            let raw = RawRoute { action: ROUTE_FORWARD, label_ttl: label_ttl(t)?, ..RawRoute::default() };
            (raw, Some(group(g, MAX_PUSH, prefix)?))
        }
        RouteEntry::Forward { labels, label_ttl: label_ttl_in, adj: a } => {
            if labels.len() > MAX_PUSH {
                return Err(FastPathError::TooManyLabels { prefix: prefix.to_string(), count: labels.len() });
            }
            let mut raw = [0u32; 4];
            for (slot, l) in raw.iter_mut().zip(labels) {
                check_label(*l, "pushed label")?;
                *slot = *l;
            }
            let raw = RawRoute {
                action: ROUTE_FORWARD,
                nlabels: labels.len() as u32,
                labels: raw,
                label_ttl: label_ttl(label_ttl_in)?,
                adj: adj(a),
                group: 0,
            };
            (raw, None)
        }
    })
}

/// Checks that `len` fits the family's `bits` and that no bit beyond it is set in `addr`
/// (two spellings of one prefix would be one trie entry).
fn check_prefix(addr: &[u8], len: u8, bits: u8, prefix: &dyn std::fmt::Display) -> Result<(), FastPathError> {
    if len > bits {
        return Err(FastPathError::InvalidPrefix {
            prefix: prefix.to_string(),
            why: "prefix length too long",
        });
    }
    let host_bits_set = addr.iter().enumerate().any(|(i, b)| {
        let first = (i * 8) as u32;
        let keep = u32::from(len).saturating_sub(first).min(8);
        let mask = if keep == 0 { 0u8 } else { 0xffu8 << (8 - keep) };
        b & !mask != 0
    });
    if host_bits_set {
        return Err(FastPathError::InvalidPrefix {
            prefix: prefix.to_string(),
            why: "bits set beyond the prefix length",
        });
    }
    Ok(())
}

/// Validates `t` and encodes it into map entries; nothing is touched on error. Groups keep
/// the ids they have in `prev`; new ones are numbered from `next`, which is returned advanced.
pub(crate) fn encode(t: &FastTables, prev: &Groups, mut next: u32) -> Result<(Encoded, u32), FastPathError> {
    let mut e = Encoded::default();
    for (ifindex, p) in &t.ports {
        e.ports.insert(*ifindex, port(p));
    }
    for (netns, c) in &t.crossings {
        if *netns == 0 {
            return Err(FastPathError::RootCrossing);
        }
        let raw = RawCrossing { root_ifindex: c.root_ifindex, vrf_ifindex: c.vrf_ifindex };
        e.crossings.insert(u32::from(*netns), raw);
    }
    for (l, entry) in &t.labels {
        check_label(*l, "incoming label")?;
        let (mut raw, g) = label(entry)?;
        if let Some(g) = g {
            raw.group = e.groups.acquire(&g, prev, &mut next);
        }
        e.labels.insert(*l, raw);
    }
    for ((vrf, addr, len), r) in &t.routes_v4 {
        let shown = format!("vrf {vrf} {addr}/{len}");
        check_prefix(&addr.octets(), *len, 32, &shown)?;
        let (mut raw, g) = route(r, &shown)?;
        if let Some(g) = g {
            raw.group = e.groups.acquire(&g, prev, &mut next);
        }
        e.routes_v4.insert((*vrf, *addr, *len), raw);
    }
    for ((vrf, addr, len), r) in &t.routes_v6 {
        let shown = format!("vrf {vrf} {addr}/{len}");
        check_prefix(&addr.octets(), *len, 128, &shown)?;
        let (mut raw, g) = route(r, &shown)?;
        if let Some(g) = g {
            raw.group = e.groups.acquire(&g, prev, &mut next);
        }
        e.routes_v6.insert((*vrf, *addr, *len), raw);
    }
    for (key, t) in &t.tunnels {
        let (raw, rx) = tunnel(t)?;
        e.tunnels.insert(*key, raw);
        e.tunnels_rx.insert(rx, *key);
    }
    Ok((e, next))
}

/// The map entries of some changed entries (`None`: removed), checked as [`encode`] does,
/// each with its group's content (the id is the caller's to give).
pub(crate) type EncodedChange = (
    Vec<(u32, Option<(RawLabel, Option<RawGroup>)>)>,
    Vec<((u16, Ipv4Addr, u8), Option<(RawRoute, Option<RawGroup>)>)>,
    Vec<((u16, Ipv6Addr, u8), Option<(RawRoute, Option<RawGroup>)>)>,
);

pub(crate) fn encode_change(c: &FastTablesChange) -> Result<EncodedChange, FastPathError> {
    let labels = c
        .labels
        .iter()
        .map(|(l, e)| {
            check_label(*l, "incoming label")?;
            Ok((*l, e.as_ref().map(label).transpose()?))
        })
        .collect::<Result<_, FastPathError>>()?;
    let v4 = c
        .routes_v4
        .iter()
        .map(|((vrf, addr, len), r)| {
            let shown = format!("vrf {vrf} {addr}/{len}");
            check_prefix(&addr.octets(), *len, 32, &shown)?;
            Ok(((*vrf, *addr, *len), r.as_ref().map(|r| route(r, &shown)).transpose()?))
        })
        .collect::<Result<_, FastPathError>>()?;
    let v6 = c
        .routes_v6
        .iter()
        .map(|((vrf, addr, len), r)| {
            let shown = format!("vrf {vrf} {addr}/{len}");
            check_prefix(&addr.octets(), *len, 128, &shown)?;
            Ok(((*vrf, *addr, *len), r.as_ref().map(|r| route(r, &shown)).transpose()?))
        })
        .collect::<Result<_, FastPathError>>()?;
    Ok((labels, v4, v6))
}

/// The `fp_routes_v4` key of `(vrf, prefix, length)`: the VRF is matched exactly.
pub(crate) fn key4(vrf: u16, addr: Ipv4Addr, len: u8) -> aya::maps::lpm_trie::Key<RawKey4> {
    aya::maps::lpm_trie::Key::new(
        32 + u32::from(len),
        RawKey4 { vrf: u32::from(vrf).to_be(), addr: addr.octets() },
    )
}

/// The `fp_routes_v6` key of `(vrf, prefix, length)`.
pub(crate) fn key6(vrf: u16, addr: Ipv6Addr, len: u8) -> aya::maps::lpm_trie::Key<RawKey6> {
    aya::maps::lpm_trie::Key::new(
        32 + u32::from(len),
        RawKey6 { vrf: u32::from(vrf).to_be(), addr: addr.octets() },
    )
}

/// What turns `old` into `new`: the entries to insert or overwrite, and the keys to delete.
pub(crate) struct Diff<K, V> {
    pub upsert: Vec<(K, V)>,
    pub remove: Vec<K>,
}

pub(crate) fn diff<K: Ord + Copy, V: PartialEq + Copy>(
    old: &BTreeMap<K, V>,
    new: &BTreeMap<K, V>,
) -> Diff<K, V> {
    Diff {
        upsert: new.iter().filter(|(k, v)| old.get(k) != Some(v)).map(|(k, v)| (*k, *v)).collect(),
        remove: old.keys().filter(|k| !new.contains_key(k)).copied().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Crossing;

    fn enc(t: &FastTables) -> Result<Encoded, FastPathError> {
        encode(t, &Groups::default(), 1).map(|(e, _)| e)
    }

    fn adjacency() -> Adjacency {
        Adjacency { ifindex: 7, mtu: 1500, dst_mac: [2, 0, 0, 0, 0, 1], src_mac: [2, 0, 0, 0, 0, 2] }
    }

    #[test]
    fn route_keys_put_the_vrf_in_network_order_after_the_prefix_length() {
        let k = key4(0x0102, Ipv4Addr::new(198, 18, 0, 0), 15);
        assert_eq!(k.prefix_len(), 47);
        // SAFETY: Key<RawKey4> is #[repr(C, packed)], 12 initialised bytes, read as bytes.
        let bytes: [u8; 12] = unsafe { std::mem::transmute(k) };
        assert_eq!(bytes, [47, 0, 0, 0, 0, 0, 1, 2, 198, 18, 0, 0]);
        let k = key6(1, "2001:db8::".parse().unwrap(), 128);
        assert_eq!(k.prefix_len(), 160);
        let data = k.data();
        assert_eq!(data.vrf.to_ne_bytes(), [0, 0, 0, 1]);
        assert_eq!(&data.addr[..4], &[0x20, 0x01, 0x0d, 0xb8]);
    }

    #[test]
    fn encode_lays_out_labels_routes_and_ports() {
        let mut t = FastTables::default();
        t.ports.insert(
            3,
            FastPort {
                vrf: 9,
                mac: [2, 1, 2, 3, 4, 5],
                accepts_mpls: true,
                netns: 2,
                delivery: Delivery::VethPeer,
            },
        );
        t.ports.insert(
            4,
            FastPort {
                vrf: 0,
                mac: [2, 1, 2, 3, 4, 6],
                accepts_mpls: true,
                netns: 0,
                delivery: Delivery::Transmit,
            },
        );
        t.crossings.insert(2, Crossing { root_ifindex: 20, vrf_ifindex: 21 });
        t.labels.insert(100, LabelEntry::Swap { out_label: 200, adj: adjacency() });
        t.labels.insert(101, LabelEntry::PopIp { vrf: 4, uniform: true });
        t.labels.insert(102, LabelEntry::Php { uniform: false, adj: adjacency() });
        t.routes_v4.insert(
            (0, Ipv4Addr::new(198, 18, 2, 0), 24),
            RouteEntry::Forward { labels: vec![16, 17], label_ttl: Some(255), adj: adjacency() },
        );
        t.routes_v6.insert((2, "2001:db8::".parse().unwrap(), 32), RouteEntry::Local);
        let e = enc(&t).unwrap();
        assert_eq!(
            e.ports[&3],
            RawPort {
                vrf: 9,
                mac: [2, 1, 2, 3, 4, 5],
                accepts_mpls: 1,
                netns: 2,
                transmit: 0,
                act_chain: 0,
                pad: [0; 2]
            }
        );
        assert_eq!((e.ports[&4].transmit, e.ports[&4].netns), (1, 0));
        assert_eq!(e.crossings[&2], RawCrossing { root_ifindex: 20, vrf_ifindex: 21 });
        let swap = e.labels[&100];
        assert_eq!((swap.action, swap.out_label, swap.adj.ifindex, swap.adj.mtu), (LABEL_SWAP, 200, 7, 1500));
        assert_eq!(swap.adj.dmac, [2, 0, 0, 0, 0, 1]);
        let pop = e.labels[&101];
        assert_eq!((pop.action, pop.vrf, pop.uniform), (LABEL_POP_IP, 4, 1));
        let php = e.labels[&102];
        assert_eq!((php.action, php.uniform, php.adj.ifindex), (LABEL_PHP, 0, 7));
        let r = e.routes_v4[&(0, Ipv4Addr::new(198, 18, 2, 0), 24)];
        assert_eq!((r.action, r.nlabels, r.labels, r.label_ttl), (ROUTE_FORWARD, 2, [16, 17, 0, 0], 255));
        let l = e.routes_v6.values().next().unwrap();
        assert_eq!((l.action, l.nlabels), (ROUTE_LOCAL, 0));
    }

    #[test]
    fn uniform_label_ttl_is_encoded_as_zero() {
        let mut t = FastTables::default();
        t.routes_v4.insert(
            (0, Ipv4Addr::new(198, 18, 0, 1), 32),
            RouteEntry::Forward { labels: vec![16], label_ttl: None, adj: adjacency() },
        );
        assert_eq!(enc(&t).unwrap().routes_v4.values().next().unwrap().label_ttl, 0);
    }

    #[test]
    fn validation_rejects_bad_labels_prefixes_and_stacks() {
        let fwd = |labels: Vec<u32>, label_ttl| RouteEntry::Forward { labels, label_ttl, adj: adjacency() };
        let mut t = FastTables::default();
        t.labels.insert(MAX_LABEL + 1, LabelEntry::PopIp { vrf: 0, uniform: false });
        assert!(matches!(enc(&t), Err(FastPathError::InvalidLabel { label: 0x10_0000, .. })));

        let mut t = FastTables::default();
        t.labels.insert(16, LabelEntry::Swap { out_label: MAX_LABEL + 1, adj: adjacency() });
        assert!(matches!(enc(&t), Err(FastPathError::InvalidLabel { .. })));

        let mut t = FastTables::default();
        t.routes_v4.insert((0, Ipv4Addr::new(198, 18, 0, 0), 15), fwd(vec![16, 17, 18, 19, 20], None));
        assert!(matches!(enc(&t), Err(FastPathError::TooManyLabels { count: 5, .. })));

        let mut t = FastTables::default();
        t.routes_v4.insert((0, Ipv4Addr::new(198, 18, 0, 0), 15), fwd(vec![16, MAX_LABEL + 1], None));
        assert!(matches!(enc(&t), Err(FastPathError::InvalidLabel { .. })));

        let mut t = FastTables::default();
        t.routes_v4.insert((0, Ipv4Addr::new(198, 18, 0, 0), 33), RouteEntry::Local);
        assert!(matches!(enc(&t), Err(FastPathError::InvalidPrefix { .. })));

        let mut t = FastTables::default();
        t.routes_v4.insert((0, Ipv4Addr::new(198, 19, 0, 0), 15), RouteEntry::Local);
        assert!(matches!(enc(&t), Err(FastPathError::InvalidPrefix { .. })));

        let mut t = FastTables::default();
        t.routes_v6.insert((0, "2001:db8::".parse().unwrap(), 129), RouteEntry::Local);
        assert!(matches!(enc(&t), Err(FastPathError::InvalidPrefix { .. })));

        let mut t = FastTables::default();
        t.routes_v6.insert((0, "2001:db8::1".parse().unwrap(), 127), RouteEntry::Local);
        assert!(matches!(enc(&t), Err(FastPathError::InvalidPrefix { .. })));

        let mut t = FastTables::default();
        t.routes_v6.insert((0, "2001:db8::1".parse().unwrap(), 128), fwd(vec![16], Some(0)));
        assert!(matches!(enc(&t), Err(FastPathError::ZeroLabelTtl { .. })));
    }

    #[test]
    fn prefixes_at_the_edges_are_valid() {
        let mut t = FastTables::default();
        t.routes_v4.insert((0, Ipv4Addr::UNSPECIFIED, 0), RouteEntry::Local);
        t.routes_v4.insert((0, Ipv4Addr::new(198, 18, 0, 1), 32), RouteEntry::Local);
        t.routes_v4.insert((0, Ipv4Addr::new(198, 18, 0, 0), 15), RouteEntry::Local);
        t.routes_v6.insert((0, "2001:db8::1".parse().unwrap(), 128), RouteEntry::Local);
        t.routes_v6.insert((0, "2001:db8:8000::".parse().unwrap(), 33), RouteEntry::Local);
        t.labels.insert(MAX_LABEL, LabelEntry::Swap { out_label: MAX_LABEL, adj: adjacency() });
        assert!(enc(&t).is_ok());
    }

    #[test]
    fn tunnels_are_encoded_with_their_receive_key_in_network_order() {
        let mut t = FastTables::default();
        let v4 = Tunnel {
            local: "198.18.101.2".parse().unwrap(),
            remote: "198.18.102.2".parse().unwrap(),
            port: 6635,
            underlay_ifindex: 4,
            encap: true,
        };
        t.tunnels.insert(crate::tunnel_key(1), v4);
        let v6 = Tunnel {
            local: "2001:db8:101::2".parse().unwrap(),
            remote: "2001:db8:102::2".parse().unwrap(),
            encap: false,
            ..v4
        };
        t.tunnels.insert(crate::tunnel_key(2), v6);
        let e = enc(&t).unwrap();
        let raw = e.tunnels[&0x8000_0001];
        assert_eq!((raw.family, raw.ifindex, raw.encap), (4, 4, 1));
        assert_eq!(raw.port.to_ne_bytes(), [0x19, 0xeb], "6635 in network order");
        assert_eq!(raw.local, [198, 18, 101, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&raw.remote[..4], &[198, 18, 102, 2]);
        let rx = RawTunnelKey { family: 4, port: raw.port, pad: 0, local: raw.local, remote: raw.remote };
        assert_eq!(e.tunnels_rx.get(&rx), Some(&0x8000_0001), "datagrams from remote to local");
        let raw6 = e.tunnels[&0x8000_0002];
        assert_eq!((raw6.family, raw6.encap), (6, 0));
        assert_eq!(raw6.remote[15], 2);
        assert_eq!(e.tunnels_rx.len(), 2);

        let mut t = FastTables::default();
        t.tunnels.insert(crate::tunnel_key(1), Tunnel { remote: "2001:db8::1".parse().unwrap(), ..v4 });
        assert!(matches!(enc(&t), Err(FastPathError::TunnelFamilies { .. })));
    }

    #[test]
    fn groups_are_shared_by_content_counted_and_keep_their_ids() {
        let nh = |label| crate::FastNexthop { labels: vec![label], adj: adjacency() };
        let g =
            |a, b| std::sync::Arc::new(FastGroup { nexthops: vec![nh(a), nh(b)], buckets: vec![0, 1, 0] });
        let mut t = FastTables::default();
        t.labels.insert(100, LabelEntry::Multipath { uniform: true, group: g(200, 300) });
        t.labels.insert(101, LabelEntry::Multipath { uniform: true, group: g(200, 300) });
        t.routes_v4.insert(
            (0, Ipv4Addr::new(198, 18, 2, 0), 24),
            RouteEntry::Multipath { label_ttl: None, group: g(16, 17) },
        );
        let (e, next) = encode(&t, &Groups::default(), 1).unwrap();
        assert_eq!(next, 3, "two distinct groups");
        let (a, b) = (e.labels[&100].group, e.labels[&101].group);
        assert_eq!((a, b, e.labels[&100].action), (1, 1, LABEL_MULTI));
        let route = e.routes_v4.values().next().unwrap();
        assert_eq!((route.group, route.action, route.nlabels), (2, ROUTE_FORWARD, 0));
        let raw = &e.groups.by_id[&1];
        assert_eq!((raw.0.nnh, raw.0.nbuckets, raw.1), (2, 3, 2));
        assert_eq!((raw.0.nh[1].nlabels, raw.0.nh[1].labels[0]), (1, 300));
        assert_eq!(&raw.0.buckets[..4], &[0, 1, 0, 0]);

        // Encoded again with one group gone and one new: the kept one keeps its id, the
        // new one takes a fresh id (never one another group had).
        t.routes_v4.insert(
            (0, Ipv4Addr::new(198, 18, 2, 0), 24),
            RouteEntry::Multipath { label_ttl: Some(9), group: g(18, 19) },
        );
        let (e2, next) = encode(&t, &e.groups, next).unwrap();
        assert_eq!((e2.labels[&100].group, e2.routes_v4.values().next().unwrap().group, next), (1, 3, 4));
        let mut groups = e2.groups.clone();
        groups.release(1);
        assert!(groups.by_id.contains_key(&1), "one label still refers to it");
        groups.release(1);
        assert!(!groups.by_id.contains_key(&1) && groups.ids.len() == 1);

        // Groups the programs cannot hold.
        let bad = |group: FastGroup| {
            let mut t = FastTables::default();
            t.labels.insert(1, LabelEntry::Multipath { uniform: false, group: std::sync::Arc::new(group) });
            matches!(enc(&t), Err(FastPathError::InvalidGroup { .. }))
        };
        assert!(bad(FastGroup { nexthops: vec![], buckets: vec![0] }));
        assert!(bad(FastGroup { nexthops: vec![nh(1)], buckets: vec![] }));
        assert!(bad(FastGroup { nexthops: vec![nh(1)], buckets: vec![1] }));
        assert!(bad(FastGroup {
            nexthops: vec![crate::FastNexthop { labels: vec![1, 2], adj: adjacency() }],
            buckets: vec![0]
        }));
        assert!(bad(FastGroup { nexthops: vec![nh(1)], buckets: vec![0; MAX_BUCKETS + 1] }));
    }

    #[test]
    fn diff_inserts_changed_and_removes_gone_entries() {
        let old: BTreeMap<u32, u32> = [(1, 10), (2, 20), (3, 30)].into();
        let new: BTreeMap<u32, u32> = [(2, 20), (3, 31), (4, 40)].into();
        let d = diff(&old, &new);
        assert_eq!(d.upsert, vec![(3, 31), (4, 40)]);
        assert_eq!(d.remove, vec![1]);
        let d = diff(&new, &new);
        assert!(d.upsert.is_empty() && d.remove.is_empty());
    }
}
