//! Ethernet pseudowires (VPWS, RFC 4448 raw mode with the RFC 4385 control word): frames
//! from an attachment circuit into their pseudowire (control word, pseudowire label,
//! the transport labels of the route to the far PE), and frames from a pseudowire out of
//! its attachment circuit, unchanged.
//!
//! Super-frames stay whole: the GSO offsets move with the bytes pushed or popped, a
//! super-frame that fits the core link crosses it as one jumbo frame (as labelled IP
//! does, `output::emit`), and the far PE gives it its GSO metadata back for the
//! attachment circuit. One that does not fit is cut here first, as the customer's TCP
//! would have been; a plain frame that does not fit is dropped as `pw_too_big`.

use vmpls_fib::{DEFAULT_VRF, RouteTarget};
use vmpls_wire::ethernet::{self, EtherType};
use vmpls_wire::{mpls, pw_cw, virtio_net};

use super::mpls::write_entry;
use super::{Batch, Dataplane, ETH, Hop, write_ethernet};
use crate::counters::{DropReason, Event};
use crate::gso;
use crate::packet::{Packet, PortId};

/// Length of a label stack entry.
const LSE: usize = mpls::ENTRY_LEN;
/// TTL of the pseudowire label and the transport labels pushed over it.
const PW_TTL: u8 = 255;

/// Where a pseudowire's frames go: the transport's next hop and labels.
struct Transport<'a> {
    port: PortId,
    addr: std::net::IpAddr,
    labels: &'a [u32],
}

/// Offset of the IP header in a customer's Ethernet frame (after one 802.1Q tag, if any).
fn inner_l3(frame: &[u8]) -> usize {
    if ethernet::Frame::new_unchecked(frame).is_tagged() { ETH + ethernet::VLAN_TAG_LEN } else { ETH }
}

impl Dataplane {
    /// A frame from attachment circuit `pkt.port` of pseudowire `pw`.
    pub(super) fn pw_ingress(&mut self, b: &mut Batch<'_>, pkt: Packet, pw: u16) {
        self.pw_send(b, pkt, pw, true);
    }

    /// Sends a customer's Ethernet frame into pseudowire `pw` (from its attachment
    /// circuit, `from_attachment`: counted as the pseudowire's, or bridged by a VPLS).
    pub(super) fn pw_send(&mut self, b: &mut Batch<'_>, mut pkt: Packet, pw: u16, from_attachment: bool) {
        let fib = b.fib;
        let Some(entry) = fib.pseudowires.get(usize::from(pw)).filter(|e| e.up) else {
            return self.discard(DropReason::PwDown, pkt, b.pool);
        };
        if pkt.len() < ETH {
            return self.discard(DropReason::TruncatedEthernet, pkt, b.pool);
        }
        let route = fib.vrfs.get(usize::from(DEFAULT_VRF)).and_then(|v| v.lookup(entry.peer));
        let t = match route.map(|r| r.target()) {
            Some(RouteTarget::Forward(group)) => {
                let nh = group.select(0);
                Transport { port: nh.port, addr: nh.via.unwrap_or(entry.peer), labels: &nh.labels }
            }
            Some(RouteTarget::Connected { port }) => Transport { port: *port, addr: entry.peer, labels: &[] },
            _ => return self.discard(DropReason::PwNoRoute, pkt, b.pool),
        };
        let Some(port) = self.ports.get(usize::from(t.port)) else {
            return self.discard(DropReason::NoSuchPort, pkt, b.pool);
        };
        let labels = t.labels.iter().filter(|&&l| l != mpls::IMPLICIT_NULL).count();
        let cw = if entry.control_word { pw_cw::LEN } else { 0 };
        let overhead = LSE * (labels + 1) + cw;
        let mtu = port.mtu as usize;
        let ac = pkt.port;
        if let Some(c) = self.counters.pw_tx.get_mut(usize::from(ac)).filter(|_| from_attachment) {
            c[0] += 1;
            c[1] += pkt.len() as u64;
        }
        if pkt.offload.is_gso() && pkt.len() + overhead > mtu {
            // Too big to cross whole: cut it into segments that fit the core link
            // under the encapsulation, as the customer's stack would for that MTU.
            let l3 = inner_l3(pkt.frame());
            let mut segs = std::mem::take(&mut self.scratch);
            let r = gso::rebuild(&mut pkt, l3, mtu.saturating_sub(overhead + l3))
                .and_then(|_| gso::segment(&pkt, l3, b.pool, &mut segs));
            b.pool.put(pkt);
            match r {
                Ok(_) => {
                    self.counters.event(Event::GsoSegmented, 1);
                    self.counters.event(Event::GsoSegments, segs.len() as u64);
                    for s in segs.drain(..) {
                        self.pw_encap(b, s, &t, entry.remote_label, cw, overhead, mtu);
                    }
                }
                Err(e) => {
                    self.counters.drop(if e == gso::GsoError::NoBuffer {
                        DropReason::NoBuffer
                    } else {
                        DropReason::BadGso
                    });
                    for s in segs.drain(..) {
                        b.pool.put(s);
                    }
                }
            }
            self.scratch = segs;
            return;
        }
        self.pw_encap(b, pkt, &t, entry.remote_label, cw, overhead, mtu);
    }

    /// Pushes the control word (`cw` bytes), the pseudowire label and the transport
    /// labels, and sends toward the transport's next hop.
    #[allow(clippy::too_many_arguments)]
    fn pw_encap(
        &mut self,
        b: &mut Batch<'_>,
        mut pkt: Packet,
        t: &Transport<'_>,
        remote_label: u32,
        cw: usize,
        overhead: usize,
        mtu: usize,
    ) {
        if pkt.len() + overhead > mtu {
            return self.discard(DropReason::PwTooBig, pkt, b.pool);
        }
        let push = ETH + overhead;
        let Some(frame) = pkt.push_front(push) else {
            return self.discard(DropReason::LabelStackTooDeep, pkt, b.pool);
        };
        write_ethernet(frame, [0; 6], [0; 6], EtherType::Mpls);
        let mut i = 0;
        for &label in t.labels.iter().filter(|&&l| l != mpls::IMPLICIT_NULL) {
            write_entry(frame, i, mpls::Repr { label, tc: 0, bottom: false, ttl: PW_TTL });
            i += 1;
        }
        write_entry(frame, i, mpls::Repr { label: remote_label, tc: 0, bottom: true, ttl: PW_TTL });
        if cw > 0 {
            pw_cw::emit_zero(&mut frame[ETH + LSE * (i + 1)..]);
        }
        pkt.offload.shift(push as isize);
        self.counters.event(Event::PwEncap, 1);
        self.resolve_and_send(b, pkt, Hop { port: t.port, addr: t.addr, labels: &[] });
    }

    /// A frame whose top label is pseudowire `pw`'s local label.
    pub(super) fn pw_egress(&mut self, b: &mut Batch<'_>, mut pkt: Packet, top: mpls::Repr, pw: u16) {
        if !top.bottom {
            return self.discard(DropReason::PwLabelNotBottom, pkt, b.pool);
        }
        let Some(entry) = b.fib.pseudowires.get(usize::from(pw)) else {
            return self.discard(DropReason::PwNoAttachment, pkt, b.pool);
        };
        let vpls = b.fib.pw_vpls(pw);
        if entry.attachment.is_none() && vpls.is_none() {
            return self.discard(DropReason::PwNoAttachment, pkt, b.pool);
        }
        let control_word = entry.control_word;
        let mut strip = ETH + LSE;
        if control_word {
            match pw_cw::ControlWord::new_checked(pkt.frame().get(strip..).unwrap_or(&[])) {
                Ok(_) => strip += pw_cw::LEN,
                Err(vmpls_wire::Error::Truncated) => {
                    return self.discard(DropReason::PwTruncated, pkt, b.pool);
                }
                Err(_) => return self.discard(DropReason::PwBadControlWord, pkt, b.pool),
            }
        }
        if pkt.len() < strip + ETH {
            return self.discard(DropReason::PwTruncated, pkt, b.pool);
        }
        if pkt.offload.needs_csum && usize::from(pkt.offload.csum_start) < strip + ETH {
            return self.discard(DropReason::BadChecksumOffload, pkt, b.pool);
        }
        let _ = pkt.pull_front(strip);
        pkt.offload.shift(-(strip as isize));
        self.counters.event(Event::PwDecap, 1);
        match (vpls, entry.attachment) {
            (Some(inst), _) => self.vpls_from_pw(b, pkt, inst, pw),
            (None, Some(ac)) => {
                pkt.port = ac;
                self.ac_output(b, pkt);
            }
            (None, None) => self.discard(DropReason::PwNoAttachment, pkt, b.pool),
        }
    }

    /// Sends a customer's frame out of its attachment circuit as it is (no Ethernet
    /// rewrite): a super-frame whole if the port takes it, else cut; a jumbo frame that
    /// crossed the core in place of a super-frame gets its GSO metadata back.
    pub(super) fn ac_output(&mut self, b: &mut Batch<'_>, mut pkt: Packet) {
        let id = pkt.port;
        let Some(port) = self.ports.get(usize::from(id)) else {
            return self.discard(DropReason::NoSuchPort, pkt, b.pool);
        };
        let (mtu, caps) = (port.mtu as usize, port.caps);
        let l3 = inner_l3(pkt.frame());
        // The MTU counts from the IP header: an 802.1Q tag is not part of it.
        if !pkt.offload.is_gso() && pkt.len().saturating_sub(l3) > mtu {
            if gso::rebuild(&mut pkt, l3, mtu).is_err() {
                return self.discard(DropReason::PwTooBig, pkt, b.pool);
            }
            self.counters.event(Event::GsoRebuilt, 1);
        }
        let tx = &mut b.out.tx[usize::from(id)];
        if pkt.offload.is_gso() {
            let whole = match pkt.offload.gso_type {
                virtio_net::GsoType::TcpV4 => caps.tso4,
                virtio_net::GsoType::TcpV6 => caps.tso6,
                virtio_net::GsoType::UdpL4 => caps.uso,
                _ => false,
            };
            if whole {
                self.counters.event(Event::GsoPassed, 1);
                self.counters.tx_frames[usize::from(id)] += 1;
                return tx.push(pkt);
            }
            let before = tx.len();
            let r = gso::segment(&pkt, l3, b.pool, tx);
            let made = tx.len() - before;
            b.pool.put(pkt);
            self.counters.tx_frames[usize::from(id)] += made as u64;
            match r {
                Ok(_) => {
                    self.counters.event(Event::GsoSegmented, 1);
                    self.counters.event(Event::GsoSegments, made as u64);
                }
                Err(gso::GsoError::NoBuffer) => self.counters.drop(DropReason::NoBuffer),
                Err(_) => self.counters.drop(DropReason::BadGso),
            }
            return;
        }
        if pkt.offload.needs_csum && !caps.csum {
            if gso::complete_checksum(&mut pkt).is_err() {
                return self.discard(DropReason::BadChecksumOffload, pkt, b.pool);
            }
            self.counters.event(Event::ChecksumCompleted, 1);
        }
        self.counters.tx_frames[usize::from(id)] += 1;
        b.out.tx[usize::from(id)].push(pkt);
    }
}
