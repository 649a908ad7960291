//! MPLS label stack entries (RFC 3032 section 2.1).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                Label                  | TC  |S|       TTL     |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! A stack is a run of entries ending with the first one whose S (bottom of stack) bit is
//! set; the payload follows it. [`Entry`] views one entry in place (swap a label,
//! decrement a TTL), [`Repr`] is one entry decoded, [`Stack`] walks a stack and
//! [`stack_depth`] measures it.

use crate::{Error, Result};

mod field {
    use crate::Field;
    pub const ENTRY: Field = 0..4;
}

/// IPv4 Explicit NULL (RFC 3032): pop, the payload is IPv4.
pub const IPV4_EXPLICIT_NULL: u32 = 0;
/// Router Alert (RFC 3032): deliver to the control plane.
pub const ROUTER_ALERT: u32 = 1;
/// IPv6 Explicit NULL (RFC 3032): pop, the payload is IPv6.
pub const IPV6_EXPLICIT_NULL: u32 = 2;
/// Implicit NULL (RFC 3032): signalled, never sent; the upstream router pops instead.
pub const IMPLICIT_NULL: u32 = 3;
/// Entropy Label Indicator (RFC 6790): the next entry is an entropy label.
pub const ENTROPY_LABEL_INDICATOR: u32 = 7;
/// Generic Associated Channel Label (RFC 5586).
pub const GAL: u32 = 13;
/// OAM Alert (RFC 3429).
pub const OAM_ALERT: u32 = 14;
/// The first label not reserved by RFC 3032 (0 to 15 are special purpose).
pub const FIRST_UNRESERVED: u32 = 16;
/// The largest 20-bit label.
pub const MAX_LABEL: u32 = 0xF_FFFF;
/// Length of one label stack entry.
pub const ENTRY_LEN: usize = 4;

const LABEL_SHIFT: u32 = 12;
const TC_SHIFT: u32 = 9;
const TC_MASK: u32 = 0x7;
const S_BIT: u32 = 1 << 8;
const TTL_MASK: u32 = 0xff;

/// A view over one 4-byte label stack entry.
#[derive(Debug, Clone)]
pub struct Entry<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Entry<T> {
    /// Wraps a buffer without checking its length.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Entry<T> {
        Entry { buffer }
    }

    /// Wraps a buffer of at least [`ENTRY_LEN`] bytes (only the first four are the entry).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Entry<T>> {
        let entry = Entry::new_unchecked(buffer);
        entry.check_len()?;
        Ok(entry)
    }

    /// Checks that the buffer holds a whole entry; `Err(Truncated)` otherwise.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < ENTRY_LEN {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Returns the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The entry as one big-endian 32-bit word.
    #[inline]
    pub fn raw(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::ENTRY];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// The 20-bit label.
    #[inline]
    pub fn label(&self) -> u32 {
        self.raw() >> LABEL_SHIFT
    }

    /// The 3-bit traffic class (RFC 5462).
    #[inline]
    pub fn tc(&self) -> u8 {
        ((self.raw() >> TC_SHIFT) & TC_MASK) as u8
    }

    /// True on the bottom-of-stack entry (S bit).
    #[inline]
    pub fn bottom_of_stack(&self) -> bool {
        self.raw() & S_BIT != 0
    }

    /// The time to live.
    #[inline]
    pub fn ttl(&self) -> u8 {
        (self.raw() & TTL_MASK) as u8
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Entry<T> {
    /// Overwrites the whole entry with a big-endian word.
    #[inline]
    pub fn set_raw(&mut self, word: u32) {
        self.buffer.as_mut()[field::ENTRY].copy_from_slice(&word.to_be_bytes());
    }

    /// Sets the label; bits above the 20th are dropped.
    #[inline]
    pub fn set_label(&mut self, label: u32) {
        let w = self.raw();
        self.set_raw((w & ((1 << LABEL_SHIFT) - 1)) | ((label & MAX_LABEL) << LABEL_SHIFT));
    }

    /// Sets the traffic class; bits above the 3rd are dropped.
    #[inline]
    pub fn set_tc(&mut self, tc: u8) {
        let w = self.raw();
        self.set_raw((w & !(TC_MASK << TC_SHIFT)) | ((u32::from(tc) & TC_MASK) << TC_SHIFT));
    }

    /// Sets or clears the bottom-of-stack bit.
    #[inline]
    pub fn set_bottom_of_stack(&mut self, bottom: bool) {
        let w = self.raw();
        self.set_raw(if bottom { w | S_BIT } else { w & !S_BIT });
    }

    /// Sets the time to live.
    #[inline]
    pub fn set_ttl(&mut self, ttl: u8) {
        // Only the last byte changes.
        self.buffer.as_mut()[field::ENTRY.end - 1] = ttl;
    }
}

/// One label stack entry, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// The 20-bit label.
    pub label: u32,
    /// The 3-bit traffic class.
    pub tc: u8,
    /// Bottom of stack.
    pub bottom: bool,
    /// Time to live.
    pub ttl: u8,
}

impl Repr {
    /// Decodes an entry, checking its length first.
    pub fn parse<T: AsRef<[u8]>>(entry: &Entry<T>) -> Result<Repr> {
        entry.check_len()?;
        Ok(Repr::from_u32(entry.raw()))
    }

    /// Decodes a raw big-endian entry word.
    #[inline]
    pub const fn from_u32(word: u32) -> Repr {
        Repr {
            label: word >> LABEL_SHIFT,
            tc: ((word >> TC_SHIFT) & TC_MASK) as u8,
            bottom: word & S_BIT != 0,
            ttl: (word & TTL_MASK) as u8,
        }
    }

    /// Encodes the entry as a word; bits of `label` above 20 and of `tc` above 3 are
    /// dropped.
    #[inline]
    pub const fn to_u32(&self) -> u32 {
        ((self.label & MAX_LABEL) << LABEL_SHIFT)
            | ((self.tc as u32 & TC_MASK) << TC_SHIFT)
            | if self.bottom { S_BIT } else { 0 }
            | self.ttl as u32
    }

    /// True for the special-purpose labels 0 to 15.
    pub const fn is_reserved(&self) -> bool {
        self.label < FIRST_UNRESERVED
    }

    /// Length of an entry, [`ENTRY_LEN`].
    pub const fn buffer_len(&self) -> usize {
        ENTRY_LEN
    }

    /// Writes the entry into the first four bytes of `entry`.
    ///
    /// # Panics
    /// If the buffer is shorter than [`ENTRY_LEN`].
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, entry: &mut Entry<T>) {
        entry.set_raw(self.to_u32());
    }
}

/// The number of entries in the stack at the start of `buf`, up to and including the
/// first with the S bit set. `Err(Truncated)` if the buffer ends first (an empty buffer
/// included).
#[inline]
pub fn stack_depth(buf: &[u8]) -> Result<usize> {
    for (i, e) in buf.chunks_exact(ENTRY_LEN).enumerate() {
        if e[2] & 0x01 != 0 {
            return Ok(i + 1);
        }
    }
    Err(Error::Truncated)
}

/// An iterator over the entries of the label stack at the start of a buffer, ending after
/// the bottom-of-stack entry, or earlier if the buffer ends before it (check with
/// [`stack_depth`] when that matters).
#[derive(Debug, Clone)]
pub struct Stack<'a> {
    rest: &'a [u8],
    done: bool,
}

impl<'a> Stack<'a> {
    /// Iterates the stack at the start of `buf`.
    pub const fn new(buf: &'a [u8]) -> Stack<'a> {
        Stack { rest: buf, done: false }
    }

    /// The bytes not consumed yet: after the bottom entry has been yielded, the payload.
    pub const fn remaining(&self) -> &'a [u8] {
        self.rest
    }
}

impl Iterator for Stack<'_> {
    type Item = Repr;

    fn next(&mut self) -> Option<Repr> {
        if self.done {
            return None;
        }
        match self.rest.split_first_chunk::<ENTRY_LEN>() {
            Some((e, rest)) => {
                let repr = Repr::from_u32(u32::from_be_bytes(*e));
                self.rest = rest;
                self.done = repr.bottom;
                Some(repr)
            }
            None => {
                self.done = true;
                None
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.done { (0, Some(0)) } else { (0, Some(self.rest.len() / ENTRY_LEN)) }
    }
}

impl core::iter::FusedIterator for Stack<'_> {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ethernet::{EtherType, Frame};
    use crate::ipv4;

    // This kernel cannot forward MPLS (no mpls_router), so this frame was built by hand
    // with Python's struct from RFC 3032: the Ethernet header and IPv4 packet of a real
    // `ping -Q 0xb9 -t 17 198.18.1.2` echo request captured with an AF_PACKET socket on a
    // veth pair between two namespaces, EtherType changed to 0x8847, and two entries
    // inserted in front of the IPv4 header:
    //   label 16000, TC 0, S 0, TTL 64: 16000 << 12 = 0x03e8_0000, | 64 = 0x03e8_0040
    //   label 100, TC 5, S 1, TTL 17: 100 << 12 = 0x64000, | 5 << 9 = 0xa00, | 1 << 8,
    //                                  | 17 = 0x0006_4b11
    static MPLS_FRAME: [u8; 106] = [
        0x02, 0x00, 0x00, 0x00, 0x0b, 0x01, 0x02, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x88, 0x47, 0x03, 0xe8, 0x00,
        0x40, 0x00, 0x06, 0x4b, 0x11, 0x45, 0xb9, 0x00, 0x54, 0xa5, 0x4b, 0x40, 0x00, 0x11, 0x01, 0x35, 0x7d,
        0xc6, 0x12, 0x01, 0x01, 0xc6, 0x12, 0x01, 0x02, 0x08, 0x00, 0x93, 0x5c, 0x19, 0x36, 0x00, 0x01, 0x21,
        0xd2, 0x0c, 0x6b, 0x00, 0x00, 0x00, 0x00, 0x51, 0x5c, 0x0d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x11,
        0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22,
        0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33,
        0x34, 0x35, 0x36, 0x37,
    ];

    const TOP: Repr = Repr { label: 16000, tc: 0, bottom: false, ttl: 64 };
    const BOTTOM: Repr = Repr { label: 100, tc: 5, bottom: true, ttl: 17 };

    fn stack_bytes() -> &'static [u8] {
        &MPLS_FRAME[14..]
    }

    #[test]
    fn hand_computed_words_match() {
        assert_eq!(TOP.to_u32(), 0x03e8_0040);
        assert_eq!(BOTTOM.to_u32(), 0x0006_4b11);
        assert_eq!(Repr::from_u32(0x0006_4b11), BOTTOM);
        // IPv4 explicit null, bottom, TTL 64.
        assert_eq!(
            Repr::from_u32(0x0000_0140),
            Repr { label: IPV4_EXPLICIT_NULL, tc: 0, bottom: true, ttl: 64 }
        );
        assert_eq!(Repr::from_u32(0xffff_ffff).label, MAX_LABEL);
    }

    #[test]
    fn parses_entries_of_frame() {
        let frame = Frame::new_checked(&MPLS_FRAME[..]).unwrap();
        assert_eq!(frame.ethertype(), EtherType::Mpls);
        let top = Entry::new_checked(frame.payload()).unwrap();
        assert_eq!((top.label(), top.tc(), top.bottom_of_stack(), top.ttl()), (16000, 0, false, 64));
        assert_eq!(Repr::parse(&top).unwrap(), TOP);
        let bottom = Entry::new_checked(&frame.payload()[4..]).unwrap();
        assert_eq!((bottom.label(), bottom.tc(), bottom.bottom_of_stack(), bottom.ttl()), (100, 5, true, 17));
        assert_eq!(Repr::parse(&bottom).unwrap(), BOTTOM);
    }

    #[test]
    fn emits_entries_of_frame() {
        let mut out = [0u8; 8];
        TOP.emit(&mut Entry::new_unchecked(&mut out[..4]));
        BOTTOM.emit(&mut Entry::new_unchecked(&mut out[4..]));
        assert_eq!(&out[..], &stack_bytes()[..8]);
        assert_eq!(TOP.buffer_len(), ENTRY_LEN);
    }

    #[test]
    fn stack_walk_reaches_the_ipv4_payload() {
        assert_eq!(stack_depth(stack_bytes()), Ok(2));
        let mut stack = Stack::new(stack_bytes());
        assert_eq!(stack.next(), Some(TOP));
        assert_eq!(stack.next(), Some(BOTTOM));
        assert_eq!(stack.next(), None);
        assert_eq!(stack.next(), None);
        let ip = ipv4::Packet::new_checked(stack.remaining()).unwrap();
        assert!(ip.verify_checksum());
        assert_eq!(ip.ttl(), 17);
    }

    #[test]
    fn setters_rewrite_in_place() {
        let mut bytes = MPLS_FRAME;
        let mut e = Entry::new_checked(&mut bytes[14..18]).unwrap();
        e.set_label(MAX_LABEL);
        e.set_tc(7);
        e.set_bottom_of_stack(true);
        e.set_ttl(1);
        assert_eq!(&bytes[14..18], &[0xff, 0xff, 0xff, 0x01]);
        let mut e = Entry::new_checked(&mut bytes[14..18]).unwrap();
        e.set_label(IPV6_EXPLICIT_NULL);
        e.set_tc(0);
        e.set_bottom_of_stack(false);
        e.set_ttl(255);
        assert_eq!(&bytes[14..18], &[0x00, 0x00, 0x20, 0xff]);
        // Oversized values are masked, not spilled into the neighbouring fields.
        let mut e = Entry::new_checked(&mut bytes[14..18]).unwrap();
        e.set_label(0x10_0000 | 42);
        e.set_tc(0xf8 | 3);
        assert_eq!(Repr::parse(&e).unwrap().label, 42);
        assert_eq!(e.tc(), 3);
        assert!(!e.bottom_of_stack());
        assert_eq!(e.ttl(), 255);
    }

    #[test]
    fn reserved_labels() {
        for label in [
            IPV4_EXPLICIT_NULL,
            ROUTER_ALERT,
            IPV6_EXPLICIT_NULL,
            IMPLICIT_NULL,
            ENTROPY_LABEL_INDICATOR,
            GAL,
            OAM_ALERT,
            15,
        ] {
            assert!(Repr { label, ..TOP }.is_reserved(), "label {label}");
        }
        assert!(!Repr { label: FIRST_UNRESERVED, ..TOP }.is_reserved());
        assert!(!TOP.is_reserved());
    }

    #[test]
    fn truncated_stacks() {
        assert_eq!(stack_depth(&[]), Err(Error::Truncated));
        // Top entry only (S=0): the stack goes on past the buffer.
        assert_eq!(stack_depth(&stack_bytes()[..4]), Err(Error::Truncated));
        assert_eq!(stack_depth(&stack_bytes()[..7]), Err(Error::Truncated));
        assert_eq!(stack_depth(&stack_bytes()[..8]), Ok(2));
        assert_eq!(Stack::new(&stack_bytes()[..7]).collect::<Vec<_>>(), vec![TOP]);
        for len in 0..4 {
            assert_eq!(Entry::new_checked(&stack_bytes()[..len]).unwrap_err(), Error::Truncated);
            assert_eq!(
                Repr::parse(&Entry::new_unchecked(&stack_bytes()[..len])).unwrap_err(),
                Error::Truncated
            );
        }
    }

    #[test]
    fn deep_stack_depth() {
        let mut buf = Vec::new();
        for i in 0..16u32 {
            let e = Repr { label: FIRST_UNRESERVED + i, tc: 0, bottom: i == 15, ttl: 64 };
            buf.extend_from_slice(&e.to_u32().to_be_bytes());
        }
        buf.extend_from_slice(&[0x45, 0x00]);
        assert_eq!(stack_depth(&buf), Ok(16));
        let labels: Vec<u32> = Stack::new(&buf).map(|r| r.label).collect();
        assert_eq!(labels, (16..32).collect::<Vec<_>>());
    }

    #[test]
    fn no_panic_on_any_prefix() {
        let s = stack_bytes();
        for len in 0..=s.len().min(60) {
            let buf = &s[..len];
            let depth = stack_depth(buf);
            let n = Stack::new(buf).count();
            match depth {
                Ok(d) => assert_eq!(d, n),
                Err(e) => assert_eq!((e, n), (Error::Truncated, len / 4)),
            }
            if let Ok(e) = Entry::new_checked(buf) {
                let _ = (e.label(), e.tc(), e.bottom_of_stack(), e.ttl());
            }
        }
    }
}
