//! VPLS (RFC 4762): a learning bridge per instance over its attachment circuits (ports in
//! raw Ethernet mode) and its pseudowires (the VPWS encapsulation of `pw.rs`).
//!
//! - Source MACs are learned on the member they came from (MAC moves included), up to
//!   the instance's MAC limit (beyond it frames still pass, their source is not learned:
//!   `vpls_mac_limit`), and age out after the instance's aging time.
//! - Known unicast goes to its member only; unknown unicast, broadcast and multicast
//!   are flooded to every other member, within the instance's flood rate
//!   (`vpls_flood_rate` beyond it).
//! - Split horizon: a frame from a pseudowire never goes out of another pseudowire (the
//!   PEs are a full mesh: the ingress PE sent it to every one already).
//! - MAC withdrawal: the entries of an attachment circuit whose link went down
//!   ([`Dataplane::set_port_link`]) and of a pseudowire that left the instance or is no
//!   longer in force (a new FIB) are removed at once.
//!
//! The FIB says what the instances are; their MAC tables are this module's state, matched
//! to the FIB's instances by name whenever a new FIB is in force.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use vmpls_fib::{Fib, VplsInstance};

use super::{Batch, Dataplane, ETH};
use crate::counters::{DropReason, Event};
use crate::mac_table::{Learned, MacTable, Member, is_station};
use crate::packet::{Packet, PacketPool, PortId};
use crate::rate::TokenBucket;

/// The MAC table and flood limiter of one instance.
#[derive(Debug)]
struct Bridge {
    name: String,
    macs: MacTable,
    /// `None`: no flood limit.
    flood: Option<TokenBucket>,
}

impl Bridge {
    fn new(vi: &VplsInstance) -> Bridge {
        Bridge {
            name: vi.name.clone(),
            macs: MacTable::new(vi.mac_limit as usize, aging(vi)),
            flood: flood_bucket(vi.flood_rate),
        }
    }
}

fn aging(vi: &VplsInstance) -> Duration {
    Duration::from_secs(u64::from(vi.mac_aging_s))
}

/// The flood limiter of `rate` frames a second (a second's worth of burst); 0: none.
fn flood_bucket(rate: u32) -> Option<TokenBucket> {
    (rate > 0).then(|| TokenBucket::new(rate, rate))
}

/// The pipeline's VPLS state: the instances' bridges (index = the FIB's instance index)
/// and the links of the attachment circuits.
#[derive(Debug, Default)]
pub(super) struct VplsState {
    bridges: Vec<Bridge>,
    /// The FIB the bridges were last matched to.
    seen: Weak<Fib>,
    /// That FIB's pseudowire names (index = pseudowire index), to tell a pseudowire
    /// that kept its index from another that took it.
    pw_names: Vec<String>,
    /// Per port: its link is down (an attachment circuit is then left out of floods
    /// and its MACs withdrawn).
    link_down: Vec<bool>,
    /// Members a flood goes to, reused from frame to frame.
    targets: Vec<Member>,
}

/// One entry of a VPLS instance's MAC table, as `bridge fdb show` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FdbEntry {
    /// The instance's name.
    pub vpls: String,
    /// The station's address.
    pub mac: [u8; 6],
    /// Where it was learned.
    pub dev: FdbDev,
    /// Seconds since a frame from it was last seen.
    pub age_s: u64,
}

/// Where a MAC was learned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FdbDev {
    /// An attachment circuit: the port's name.
    Port(String),
    /// A pseudowire: its name.
    Pw(String),
}

/// True when `m` can carry frames of instance `vi` under `fib`.
fn usable(fib: &Fib, vi: &VplsInstance, link_down: &[bool], m: Member) -> bool {
    match m {
        Member::Ac(p) => {
            vi.attachments.contains(&p) && !link_down.get(usize::from(p)).copied().unwrap_or(false)
        }
        Member::Pw(i) => {
            vi.pseudowires.contains(&i) && fib.pseudowires.get(usize::from(i)).is_some_and(|p| p.up)
        }
    }
}

/// A copy of `pkt` (frame and offload metadata) in a buffer of `pool`.
fn copy_of(pkt: &Packet, pool: &mut PacketPool) -> Option<Packet> {
    let mut c = pool.get()?;
    c.set_frame(pkt.frame());
    c.offload = pkt.offload;
    c.port = pkt.port;
    Some(c)
}

impl VplsState {
    /// Matches the bridges to the instances of `fib` if it is not the FIB they were
    /// matched to: bridges of instances gone are dropped, new instances get an empty
    /// one, and the MACs of members gone or no longer in force are withdrawn. Returns
    /// how many MACs were withdrawn.
    fn follow(&mut self, fib: &Arc<Fib>) -> u64 {
        if Weak::ptr_eq(&self.seen, &Arc::downgrade(fib)) {
            return 0;
        }
        let old_names = std::mem::take(&mut self.pw_names);
        let mut old: Vec<Bridge> = std::mem::take(&mut self.bridges);
        let mut withdrawn = 0;
        for vi in &fib.vpls {
            let mut b = match old.iter().position(|b| b.name == vi.name) {
                Some(i) => old.swap_remove(i),
                None => Bridge::new(vi),
            };
            b.macs.set_limits(vi.mac_limit as usize, aging(vi));
            if b.flood.as_ref().map_or(0, TokenBucket::rate) != vi.flood_rate {
                b.flood = flood_bucket(vi.flood_rate);
            }
            let link_down = &self.link_down;
            withdrawn += b.macs.withdraw(|m| {
                let renamed = match m {
                    Member::Pw(i) => {
                        old_names.get(usize::from(i)) != fib.pseudowires.get(usize::from(i)).map(|p| &p.name)
                    }
                    Member::Ac(_) => false,
                };
                renamed || !usable(fib, vi, link_down, m)
            }) as u64;
            self.bridges.push(b);
        }
        self.pw_names = fib.pseudowires.iter().map(|p| p.name.clone()).collect();
        self.seen = Arc::downgrade(fib);
        withdrawn
    }
}

impl Dataplane {
    /// Matches the VPLS state to `fib` (called with each FIB loaded for work).
    #[inline]
    pub(super) fn vpls_follow(&mut self, fib: &Arc<Fib>) {
        if fib.vpls.is_empty() && self.vpls.bridges.is_empty() {
            return;
        }
        let n = self.vpls.follow(fib);
        self.counters.event(Event::VplsMacWithdrawn, n);
    }

    /// Tells the pipeline whether `port`'s link is up (carrier and administratively up):
    /// a VPLS attachment circuit that goes down has its MACs withdrawn and is left out of
    /// floods until it is back.
    pub fn set_port_link(&mut self, port: PortId, up: bool) {
        let i = usize::from(port);
        if i >= self.ports.len() {
            return;
        }
        let st = &mut self.vpls;
        if st.link_down.len() < self.ports.len() {
            st.link_down.resize(self.ports.len(), false);
        }
        st.link_down[i] = !up;
        if !up {
            let n: usize = st.bridges.iter_mut().map(|b| b.macs.withdraw(|m| m == Member::Ac(port))).sum();
            self.counters.event(Event::VplsMacWithdrawn, n as u64);
        }
    }

    /// Whether `port`'s link is up as last told ([`set_port_link`](Dataplane::set_port_link));
    /// a port never told of counts as up.
    pub fn port_link_up(&self, port: PortId) -> bool {
        !self.vpls.link_down.get(usize::from(port)).copied().unwrap_or(false)
    }

    /// The VPLS instances' MAC tables at `now` (instance by instance, MAC order), for
    /// `bridge fdb show`.
    pub fn vpls_fdb(&mut self, now: Instant) -> Vec<FdbEntry> {
        let fib = self.fib.load_full();
        self.vpls_follow(&fib);
        let mut out = Vec::new();
        for b in &self.vpls.bridges {
            for (mac, member, age_s) in b.macs.entries(now) {
                let dev = match member {
                    Member::Ac(p) => FdbDev::Port(
                        self.ports.get(usize::from(p)).map(|p| p.name.clone()).unwrap_or_default(),
                    ),
                    Member::Pw(i) => FdbDev::Pw(
                        fib.pseudowires.get(usize::from(i)).map(|p| p.name.clone()).unwrap_or_default(),
                    ),
                };
                out.push(FdbEntry { vpls: b.name.clone(), mac, dev, age_s });
            }
        }
        out
    }

    /// A frame from attachment circuit `pkt.port` of instance `inst`.
    pub(super) fn vpls_from_ac(&mut self, b: &mut Batch<'_>, pkt: Packet, inst: u16) {
        let from = Member::Ac(pkt.port);
        self.vpls_bridge(b, pkt, inst, from);
    }

    /// A frame from pseudowire `pw` of instance `inst`, its labels and control word off.
    pub(super) fn vpls_from_pw(&mut self, b: &mut Batch<'_>, pkt: Packet, inst: u16, pw: u16) {
        self.vpls_bridge(b, pkt, inst, Member::Pw(pw));
    }

    /// Learns the source, then forwards to the destination's member or floods.
    fn vpls_bridge(&mut self, b: &mut Batch<'_>, pkt: Packet, inst: u16, from: Member) {
        let fib = b.fib;
        let (Some(vi), Some(bridge)) =
            (fib.vpls.get(usize::from(inst)), self.vpls.bridges.get_mut(usize::from(inst)))
        else {
            return self.discard(DropReason::VplsNoMember, pkt, b.pool);
        };
        let Some(header) = pkt.frame().get(..ETH) else {
            return self.discard(DropReason::TruncatedEthernet, pkt, b.pool);
        };
        let mut dst = [0u8; 6];
        let mut src = [0u8; 6];
        dst.copy_from_slice(&header[..6]);
        src.copy_from_slice(&header[6..12]);
        match bridge.macs.learn(src, from, b.now) {
            Learned::New => self.counters.event(Event::VplsMacLearned, 1),
            Learned::Moved { .. } => self.counters.event(Event::VplsMacMoved, 1),
            Learned::LimitReached => self.counters.event(Event::VplsMacLimit, 1),
            Learned::Refreshed | Learned::NotUnicast => {}
        }
        let known = if is_station(dst) { bridge.macs.lookup(dst, b.now) } else { None };
        if let Some(to) = known {
            if to == from {
                return self.discard(DropReason::VplsFiltered, pkt, b.pool);
            }
            if matches!((from, to), (Member::Pw(_), Member::Pw(_))) {
                return self.discard(DropReason::VplsSplitHorizon, pkt, b.pool);
            }
            if usable(fib, vi, &self.vpls.link_down, to) {
                return self.vpls_send(b, pkt, to);
            }
        }
        if let Some(bucket) = &mut bridge.flood
            && !bucket.take(b.now)
        {
            return self.discard(DropReason::VplsFloodRate, pkt, b.pool);
        }
        let mut targets = std::mem::take(&mut self.vpls.targets);
        targets.clear();
        let link_down = &self.vpls.link_down;
        targets.extend(
            vi.attachments
                .iter()
                .map(|&p| Member::Ac(p))
                .filter(|&m| m != from && usable(fib, vi, link_down, m)),
        );
        // Split horizon: what came from a pseudowire goes to attachment circuits only.
        if let Member::Ac(_) = from {
            targets.extend(
                vi.pseudowires.iter().map(|&i| Member::Pw(i)).filter(|&m| usable(fib, vi, link_down, m)),
            );
        }
        match targets.split_last() {
            None => self.discard(DropReason::VplsNoMember, pkt, b.pool),
            Some((&last, rest)) => {
                self.counters.event(Event::VplsFlooded, 1);
                for &to in rest {
                    match copy_of(&pkt, b.pool) {
                        Some(c) => self.vpls_send(b, c, to),
                        None => self.counters.drop(DropReason::NoBuffer),
                    }
                }
                self.vpls_send(b, pkt, last);
            }
        }
        self.vpls.targets = targets;
    }

    /// Sends a bridged frame out of one member.
    fn vpls_send(&mut self, b: &mut Batch<'_>, mut pkt: Packet, to: Member) {
        match to {
            Member::Ac(port) => {
                pkt.port = port;
                self.ac_output(b, pkt);
            }
            Member::Pw(pw) => self.pw_send(b, pkt, pw, false),
        }
    }
}
