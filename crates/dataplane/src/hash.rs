//! The flow hash that picks an ECMP next hop.
//!
//! Every packet of one flow must hash alike, so that a flow stays on one path and is not
//! reordered. Inputs, as the kernel and VPP take them: the label stack (reserved labels
//! skipped; an entropy label after the entropy label indicator 7 ends the label part,
//! RFC 6790), then below the bottom of the stack the IPv4/IPv6 addresses, protocol and,
//! for unfragmented TCP/UDP, the ports.

use vmpls_wire::mpls;

/// Accumulates 32-bit words into a flow hash (murmur3's mixing steps).
#[derive(Debug, Clone, Copy)]
pub struct FlowHasher(u32);

impl Default for FlowHasher {
    fn default() -> Self {
        FlowHasher(0x9747_b28c)
    }
}

impl FlowHasher {
    /// Mixes one word in.
    #[inline]
    pub fn write(&mut self, word: u32) {
        let mut k = word.wrapping_mul(0xcc9e_2d51);
        k = k.rotate_left(15).wrapping_mul(0x1b87_3593);
        self.0 ^= k;
        self.0 = self.0.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
    }

    /// Mixes a byte slice in, four bytes at a time.
    #[inline]
    pub fn write_bytes(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(4);
        for c in &mut chunks {
            self.write(u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 4];
            w[..rest.len()].copy_from_slice(rest);
            self.write(u32::from_be_bytes(w));
        }
    }

    /// The final, avalanche-mixed hash.
    #[inline]
    pub fn finish(self) -> u32 {
        let mut h = self.0;
        h ^= h >> 16;
        h = h.wrapping_mul(0x85eb_ca6b);
        h ^= h >> 13;
        h = h.wrapping_mul(0xc2b2_ae35);
        h ^ (h >> 16)
    }
}

/// Hashes a label stack starting at `stack` (the first entry) and, if the stack ends
/// within the buffer, the IP packet under it. Never panics on short input: it hashes
/// whatever is there.
pub fn mpls_flow_hash(stack: &[u8]) -> u32 {
    let mut h = FlowHasher::default();
    let mut off = 0;
    let mut after_eli = false;
    while let Some(e) = stack.get(off..off + mpls::ENTRY_LEN) {
        let word = u32::from_be_bytes([e[0], e[1], e[2], e[3]]);
        let label = word >> 12;
        let bottom = word & 0x100 != 0;
        off += mpls::ENTRY_LEN;
        if after_eli {
            // The entropy label carries the flow identity the ingress computed: it alone
            // decides, as RFC 6790 section 4.3 asks of transit LSRs.
            h.write(label);
            return h.finish();
        }
        if label == mpls::ENTROPY_LABEL_INDICATOR {
            after_eli = true;
        } else if label >= mpls::FIRST_UNRESERVED {
            h.write(label);
        }
        if bottom {
            ip_flow_words(&mut h, &stack[off..]);
            return h.finish();
        }
    }
    h.finish()
}

/// Hashes an IP packet: addresses, protocol, and ports for unfragmented TCP/UDP.
pub fn ip_flow_hash(ip: &[u8]) -> u32 {
    let mut h = FlowHasher::default();
    ip_flow_words(&mut h, ip);
    h.finish()
}

fn ip_flow_words(h: &mut FlowHasher, ip: &[u8]) {
    let Some(&first) = ip.first() else { return };
    match first >> 4 {
        4 if ip.len() >= 20 => {
            let ihl = usize::from(first & 0x0f) * 4;
            let proto = ip[9];
            h.write_bytes(&ip[12..20]);
            h.write(u32::from(proto));
            let frag = u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff;
            if frag == 0 {
                ports(h, proto, ip.get(ihl..));
            }
        }
        6 if ip.len() >= 40 => {
            let next = ip[6];
            h.write_bytes(&ip[8..40]);
            h.write(u32::from(next));
            // The flow label already names the flow when the sender set one.
            h.write(u32::from_be_bytes([0, ip[1] & 0x0f, ip[2], ip[3]]));
            ports(h, next, ip.get(40..));
        }
        _ => {}
    }
}

fn ports(h: &mut FlowHasher, proto: u8, l4: Option<&[u8]>) {
    use vmpls_wire::ipv4::protocol::{TCP, UDP};
    if (proto == TCP || proto == UDP)
        && let Some(p) = l4.and_then(|l4| l4.get(0..4))
    {
        h.write(u32::from_be_bytes([p[0], p[1], p[2], p[3]]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4_tcp(src_port: u16) -> Vec<u8> {
        let mut ip = vec![0u8; 40];
        ip[0] = 0x45;
        ip[9] = 6;
        ip[12..16].copy_from_slice(&[198, 18, 1, 2]);
        ip[16..20].copy_from_slice(&[198, 18, 2, 2]);
        ip[20..22].copy_from_slice(&src_port.to_be_bytes());
        ip[22..24].copy_from_slice(&5201u16.to_be_bytes());
        ip
    }

    fn entry(label: u32, bottom: bool) -> [u8; 4] {
        ((label << 12) | if bottom { 0x100 } else { 0 } | 64).to_be_bytes()
    }

    #[test]
    fn same_flow_same_hash_other_ttl() {
        let mut a = entry(1002, true).to_vec();
        a.extend(ipv4_tcp(40000));
        let mut b = a.clone();
        b[3] = 3; // another TTL on the label
        b[4 + 8] = 7; // and on the IP header
        assert_eq!(mpls_flow_hash(&a), mpls_flow_hash(&b));
    }

    #[test]
    fn ports_spread_flows() {
        let hashes: std::collections::HashSet<u32> = (0..100)
            .map(|p| {
                let mut f = entry(1002, true).to_vec();
                f.extend(ipv4_tcp(40000 + p));
                mpls_flow_hash(&f) % 2
            })
            .collect();
        assert_eq!(hashes.len(), 2);
    }

    #[test]
    fn entropy_label_alone_decides() {
        let mut a = entry(1002, false).to_vec();
        a.extend(entry(7, false));
        a.extend(entry(5555, true));
        let mut b = a.clone();
        a.extend(ipv4_tcp(1));
        b.extend(ipv4_tcp(2));
        assert_eq!(mpls_flow_hash(&a), mpls_flow_hash(&b));
    }

    #[test]
    fn reserved_labels_are_skipped() {
        let mut a = entry(0, false).to_vec();
        a.extend(entry(1002, true));
        a.extend(ipv4_tcp(9));
        let mut b = entry(1002, true).to_vec();
        b.extend(ipv4_tcp(9));
        assert_eq!(mpls_flow_hash(&a), mpls_flow_hash(&b));
    }

    #[test]
    fn short_input_does_not_panic() {
        let mut f = entry(1002, true).to_vec();
        f.extend(ipv4_tcp(1));
        for n in 0..f.len() {
            mpls_flow_hash(&f[..n]);
            ip_flow_hash(&f[4..4 + n.min(f.len() - 4)]);
        }
    }
}
