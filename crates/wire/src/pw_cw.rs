//! The pseudowire control word (RFC 4385 section 3, the generic "preferred" control
//! word used by Ethernet pseudowires, RFC 4448 section 4.6).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |0 0 0 0| Flags |FRG|  Length   |     Sequence Number           |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! The first nibble 0 tells a pseudowire payload from an IP packet under the bottom label
//! (IPv4 starts with 4, IPv6 with 6: ECMP hashing of P routers) and from the associated
//! channel (RFC 4385 section 4, first nibble 1). vmpls sends flags, fragmentation bits,
//! length and sequence number 0 (RFC 4448: the sequence number is optional; 0 means
//! "not used") and accepts any value of them on receipt; only the first nibble is checked.

use crate::{Error, Result};

/// Length of the control word.
pub const LEN: usize = 4;

/// A view over a 4-byte control word.
#[derive(Debug, Clone)]
pub struct ControlWord<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ControlWord<T> {
    /// Wraps a buffer without checking it.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> ControlWord<T> {
        ControlWord { buffer }
    }

    /// Wraps a buffer that starts with a control word: at least [`LEN`] bytes
    /// (`Err(Truncated)`), first nibble 0 (`Err(Malformed)`: an associated channel
    /// header, or not a control word at all).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<ControlWord<T>> {
        let b = buffer.as_ref();
        if b.len() < LEN {
            return Err(Error::Truncated);
        }
        if b[0] >> 4 != 0 {
            return Err(Error::Malformed);
        }
        Ok(ControlWord { buffer })
    }

    /// The four flag bits (RFC 4385; none defined for Ethernet).
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[0] & 0x0f
    }

    /// The fragmentation bits (RFC 4623).
    #[inline]
    pub fn frg(&self) -> u8 {
        self.buffer.as_ref()[1] >> 6
    }

    /// The length field (used only for payloads padded to the Ethernet minimum).
    #[inline]
    pub fn length(&self) -> u8 {
        self.buffer.as_ref()[1] & 0x3f
    }

    /// The sequence number (0: not used).
    #[inline]
    pub fn sequence(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[2], b[3]])
    }
}

/// Writes the control word vmpls sends (all zero: no flags, no fragmentation, no length,
/// no sequence number) at the start of `buf`.
///
/// # Panics
/// If `buf` is shorter than [`LEN`].
#[inline]
pub fn emit_zero(buf: &mut [u8]) {
    buf[..LEN].copy_from_slice(&[0; LEN]);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pseudowire frame as the core link carries it (Ethernet, PW label 1000 with S=1
    /// TTL 255, control word, the start of the customer's frame: a broadcast ARP request),
    /// laid out as RFC 4448 figure 2 and Wireshark's `pwethcw` dissector read it.
    const PW_FRAME: &[u8] = &[
        // outer Ethernet
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x88, 0x47,
        // label 1000, S=1, TTL 255
        0x00, 0x3e, 0x81, 0xff, // control word
        0x00, 0x00, 0x00, 0x00, // inner Ethernet: broadcast ARP
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x5a, 0x11, 0x22, 0x33, 0x44, 0x55, 0x08, 0x06,
    ];

    #[test]
    fn zero_control_word_in_a_captured_frame() {
        let cw = ControlWord::new_checked(&PW_FRAME[18..]).unwrap();
        assert_eq!((cw.flags(), cw.frg(), cw.length(), cw.sequence()), (0, 0, 0, 0));
        let label = crate::mpls::Entry::new_checked(&PW_FRAME[14..]).unwrap();
        assert_eq!((label.label(), label.bottom_of_stack(), label.ttl()), (1000, true, 255));
    }

    #[test]
    fn fields_of_a_sequenced_word() {
        // flags 0b0101, FRG 0b10, length 46, sequence 0x1234
        let cw = ControlWord::new_checked([0x05, 0x80 | 46, 0x12, 0x34]).unwrap();
        assert_eq!((cw.flags(), cw.frg(), cw.length(), cw.sequence()), (5, 2, 46, 0x1234));
    }

    #[test]
    fn rejects_ip_and_associated_channel_and_short() {
        // An IPv4 header where a control word should be.
        assert_eq!(ControlWord::new_checked([0x45, 0, 0, 0x54]).unwrap_err(), Error::Malformed);
        // RFC 4385 associated channel header (first nibble 1).
        assert_eq!(ControlWord::new_checked([0x10, 0, 0x00, 0x21]).unwrap_err(), Error::Malformed);
        assert_eq!(ControlWord::new_checked([0u8; 3]).unwrap_err(), Error::Truncated);
        assert_eq!(ControlWord::new_checked(&[][..]).unwrap_err(), Error::Truncated);
    }

    #[test]
    fn emits_zero() {
        let mut b = [0xffu8; 6];
        emit_zero(&mut b);
        assert_eq!(b, [0, 0, 0, 0, 0xff, 0xff]);
        assert!(ControlWord::new_checked(&b[..]).is_ok());
    }
}
