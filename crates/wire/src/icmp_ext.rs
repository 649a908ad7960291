//! ICMP multi-part messages (RFC 4884) and the MPLS label stack object (RFC 4950).
//!
//! An ICMP error that carries an extension has this layout after its 8-byte ICMP header:
//!
//! ```text
//! +---------------------------------------------------------------+
//! | original datagram, zero-padded or truncated to 128 bytes       |  length field in the
//! | (ICMPv4: byte 5 = 128/4 = 32; ICMPv6: byte 4 = 128/8 = 16)     |  ICMP header says so
//! +---------------------------------------------------------------+
//! |Version|       (Reserved)      |           Checksum            |  extension header
//! +---------------------------------------------------------------+
//! |             Length            |   Class-Num   |    C-Type     |  object header
//! +---------------------------------------------------------------+
//! |                Label                  | TC  |S|      TTL      |  one word a label
//! +---------------------------------------------------------------+  stack entry
//! ```
//!
//! The extension checksum covers the extension header and all its objects; zero means
//! "no checksum sent". The object length counts its own 4-byte header. The MPLS label stack
//! object (class-num 1, c-type 1) holds the label stack as received, one 32-bit entry each.
//!
//! [`emit_quote_and_extension`] is the one place that applies RFC 4884's padding rules; both
//! ICMPv4 and ICMPv6 error builders use it.

use crate::checksum;
use crate::{Error, Result};

/// Length of the "original datagram" field when an extension follows it (RFC 4884 section
/// 5.1: at least 128 bytes; vmpls always uses exactly 128).
pub const ORIGINAL_DATAGRAM_LEN: usize = 128;
/// The ICMPv4 length field counts 32-bit words: 128 bytes are 32 words.
pub const LENGTH_UNIT_V4: usize = 4;
/// The ICMPv6 length field counts 64-bit words: 128 bytes are 16 words.
pub const LENGTH_UNIT_V6: usize = 8;
/// The extension version (RFC 4884 section 7).
pub const VERSION: u8 = 2;
/// Length of the extension header.
pub const HEADER_LEN: usize = 4;
/// Length of an object header.
pub const OBJECT_HEADER_LEN: usize = 4;
/// Class-num of the MPLS label stack object (RFC 4950 section 7).
pub const CLASS_MPLS_LABEL_STACK: u8 = 1;
/// C-type of the incoming MPLS label stack (RFC 4950 section 7).
pub const C_TYPE_INCOMING_LABEL_STACK: u8 = 1;
/// Length of one label stack entry.
pub const ENTRY_LEN: usize = 4;

mod field {
    use crate::Field;
    // Extension header.
    pub const VERSION: usize = 0;
    pub const CHECKSUM: Field = 2..4;
    // Object header.
    pub const OBJ_LENGTH: Field = 0..2;
    pub const OBJ_CLASS_NUM: usize = 2;
    pub const OBJ_C_TYPE: usize = 3;
}

/// The value of the ICMP length field for a 128-byte original datagram field, given the
/// field's unit ([`LENGTH_UNIT_V4`] or [`LENGTH_UNIT_V6`]).
pub const fn length_field(unit: usize) -> u8 {
    (ORIGINAL_DATAGRAM_LEN / unit) as u8
}

/// Bytes of an extension structure holding one MPLS label stack object of `entries`
/// entries: extension header, object header, 4 bytes an entry.
pub const fn mpls_extension_len(entries: usize) -> usize {
    HEADER_LEN + OBJECT_HEADER_LEN + ENTRY_LEN * entries
}

/// Writes an extension structure with one MPLS label stack object holding `entries`
/// (raw big-endian label stack words as received: label, TC, S, TTL) and fills its
/// checksum. Returns the bytes written, [`mpls_extension_len`]`(entries.len())`.
///
/// `Err(Truncated)` if `buf` is too short; `Err(Malformed)` if the object would not fit
/// its 16-bit length field. Nothing is written on error.
pub fn emit_mpls_extension(buf: &mut [u8], entries: &[u32]) -> Result<usize> {
    let len = mpls_extension_len(entries.len());
    let obj_len = u16::try_from(len - HEADER_LEN).map_err(|_| Error::Malformed)?;
    let out = buf.get_mut(..len).ok_or(Error::Truncated)?;
    out[field::VERSION] = VERSION << 4;
    out[1] = 0;
    out[field::CHECKSUM].fill(0);
    let obj = &mut out[HEADER_LEN..];
    obj[field::OBJ_LENGTH].copy_from_slice(&obj_len.to_be_bytes());
    obj[field::OBJ_CLASS_NUM] = CLASS_MPLS_LABEL_STACK;
    obj[field::OBJ_C_TYPE] = C_TYPE_INCOMING_LABEL_STACK;
    for (dst, entry) in obj[OBJECT_HEADER_LEN..].chunks_exact_mut(ENTRY_LEN).zip(entries) {
        dst.copy_from_slice(&entry.to_be_bytes());
    }
    let check = checksum::checksum(out);
    out[field::CHECKSUM].copy_from_slice(&check.to_be_bytes());
    Ok(len)
}

/// Bytes that [`emit_quote_and_extension`] writes for a label stack of `entries` entries.
pub const fn quote_and_extension_len(entries: usize) -> usize {
    ORIGINAL_DATAGRAM_LEN + mpls_extension_len(entries)
}

/// Writes the RFC 4884 body of an ICMP error with an MPLS extension: `original` truncated
/// or zero-padded to exactly [`ORIGINAL_DATAGRAM_LEN`] bytes, then the extension structure
/// holding `entries`. The caller sets the ICMP length field to [`length_field`] of its unit.
/// Returns the bytes written, [`quote_and_extension_len`]`(entries.len())`.
pub fn emit_quote_and_extension(buf: &mut [u8], original: &[u8], entries: &[u32]) -> Result<usize> {
    let len = quote_and_extension_len(entries.len());
    if buf.len() < len {
        return Err(Error::Truncated);
    }
    let quoted = original.len().min(ORIGINAL_DATAGRAM_LEN);
    buf[..quoted].copy_from_slice(&original[..quoted]);
    buf[quoted..ORIGINAL_DATAGRAM_LEN].fill(0);
    emit_mpls_extension(&mut buf[ORIGINAL_DATAGRAM_LEN..], entries)?;
    Ok(len)
}

/// Finds the extension structure in the data of an ICMP error (the bytes after its 8-byte
/// header), given its length field and unit. `None` when the length field is zero (no
/// extension, or a sender that predates RFC 4884) or the data ends at the original
/// datagram field.
pub fn find_extension(data: &[u8], length_field: u8, unit: usize) -> Option<&[u8]> {
    let at = usize::from(length_field) * unit;
    if length_field == 0 || data.len() <= at {
        return None;
    }
    data.get(at..)
}

/// A view over an ICMP extension structure (RFC 4884 section 7): header and objects.
#[derive(Debug)]
pub struct Extension<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Extension<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Extension<T> {
        Extension { buffer }
    }

    /// Wraps a buffer holding at least the extension header, with version 2.
    pub fn new_checked(buffer: T) -> Result<Extension<T>> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if b[field::VERSION] >> 4 != VERSION {
            return Err(Error::Malformed);
        }
        Ok(Extension { buffer })
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The version (2).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION] >> 4
    }

    /// The checksum field; zero when the sender sent none.
    pub fn checksum(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::CHECKSUM];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// True when the checksum covers the whole structure correctly, or is zero (RFC 4884:
    /// "an all-zero value means that no checksum was transmitted").
    pub fn verify_checksum(&self) -> bool {
        self.checksum() == 0 || checksum::verify(self.buffer.as_ref())
    }

    /// The objects after the header, in order. Yields an error and stops at an object whose
    /// length is below 4 (`Malformed`) or runs past the buffer (`Truncated`).
    pub fn objects(&self) -> Objects<'_> {
        Objects { rest: &self.buffer.as_ref()[HEADER_LEN..] }
    }

    /// The entries of the first MPLS label stack object, if there is one. `Err(Malformed)`
    /// if that object's payload is not a whole number of entries, or an object before it
    /// is malformed.
    pub fn mpls_label_stack(&self) -> Result<Option<LabelStack<'_>>> {
        for obj in self.objects() {
            let obj = obj?;
            if obj.class_num() == CLASS_MPLS_LABEL_STACK && obj.c_type() == C_TYPE_INCOMING_LABEL_STACK {
                let bytes = obj.into_inner();
                return LabelStack::new(&bytes[OBJECT_HEADER_LEN..]).map(Some);
            }
        }
        Ok(None)
    }
}

/// Iterator over the objects of an [`Extension`].
#[derive(Debug, Clone)]
pub struct Objects<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Objects<'a> {
    type Item = Result<Object<&'a [u8]>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        match Object::new_checked(self.rest) {
            Ok(obj) => {
                let len = usize::from(obj.length());
                let (this, rest) = self.rest.split_at(len);
                self.rest = rest;
                Some(Ok(Object::new_unchecked(this)))
            }
            Err(e) => {
                self.rest = &[];
                Some(Err(e))
            }
        }
    }
}

/// A view over one extension object: header and payload. The buffer may extend past the
/// object; [`Object::payload`] stops at its length.
#[derive(Debug)]
pub struct Object<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Object<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Object<T> {
        Object { buffer }
    }

    /// Wraps a buffer that holds the object header and as many bytes as its length says.
    pub fn new_checked(buffer: T) -> Result<Object<T>> {
        let b = buffer.as_ref();
        if b.len() < OBJECT_HEADER_LEN {
            return Err(Error::Truncated);
        }
        let len = usize::from(u16::from_be_bytes([b[0], b[1]]));
        if len < OBJECT_HEADER_LEN {
            return Err(Error::Malformed);
        }
        if b.len() < len {
            return Err(Error::Truncated);
        }
        Ok(Object { buffer })
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The object length, header included.
    pub fn length(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::OBJ_LENGTH];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// The class-num.
    pub fn class_num(&self) -> u8 {
        self.buffer.as_ref()[field::OBJ_CLASS_NUM]
    }

    /// The c-type.
    pub fn c_type(&self) -> u8 {
        self.buffer.as_ref()[field::OBJ_C_TYPE]
    }

    /// The bytes after the object header, up to its length.
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let end = usize::from(self.length()).min(b.len());
        &b[OBJECT_HEADER_LEN.min(end)..end]
    }
}

/// The entries of an MPLS label stack object, as raw big-endian 32-bit words
/// (label << 12 | TC << 9 | S << 8 | TTL), top of the stack first.
#[derive(Debug, Clone)]
pub struct LabelStack<'a> {
    words: core::slice::ChunksExact<'a, u8>,
}

impl<'a> LabelStack<'a> {
    /// Reads an object payload; `Err(Malformed)` if it is not a whole number of entries.
    pub fn new(payload: &'a [u8]) -> Result<LabelStack<'a>> {
        if !payload.len().is_multiple_of(ENTRY_LEN) {
            return Err(Error::Malformed);
        }
        Ok(LabelStack { words: payload.chunks_exact(ENTRY_LEN) })
    }
}

impl Iterator for LabelStack<'_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        self.words.next().map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.words.size_hint()
    }
}

impl ExactSizeIterator for LabelStack<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    // Label 100 (TC 0, not bottom, TTL 1) over label 200 (bottom, TTL 64): the stack an
    // LSR sees when the top label's TTL expires.
    const STACK: [u32; 2] = [(100 << 12) | 1, (200 << 12) | (1 << 8) | 64];

    #[test]
    fn emits_rfc4950_layout() {
        let mut buf = [0xaau8; 32];
        let n = emit_mpls_extension(&mut buf, &STACK).unwrap();
        assert_eq!(n, 16);
        assert_eq!(n, mpls_extension_len(2));
        // Version 2, reserved zero.
        assert_eq!(&buf[0..2], &[0x20, 0x00]);
        // Object: length 12, class 1, c-type 1, then the two entries as on the wire.
        assert_eq!(&buf[4..16], &[0, 12, 1, 1, 0x00, 0x06, 0x40, 0x01, 0x00, 0x0c, 0x81, 0x40]);
        assert!(checksum::verify(&buf[..n]));
        assert_ne!(u16::from_be_bytes([buf[2], buf[3]]), 0);
        // Nothing past the structure is touched.
        assert!(buf[n..].iter().all(|&b| b == 0xaa));
    }

    #[test]
    fn parses_what_it_emits() {
        let mut buf = [0u8; 16];
        emit_mpls_extension(&mut buf, &STACK).unwrap();
        let ext = Extension::new_checked(&buf[..]).unwrap();
        assert_eq!(ext.version(), 2);
        assert!(ext.verify_checksum());
        let objs: Vec<_> = ext.objects().collect::<Result<_>>().unwrap();
        assert_eq!(objs.len(), 1);
        assert_eq!((objs[0].length(), objs[0].class_num(), objs[0].c_type()), (12, 1, 1));
        assert_eq!(objs[0].payload().len(), 8);
        let stack: Vec<u32> = ext.mpls_label_stack().unwrap().unwrap().collect();
        assert_eq!(stack, STACK);
    }

    #[test]
    fn detects_corruption_and_accepts_zero_checksum() {
        let mut buf = [0u8; 16];
        emit_mpls_extension(&mut buf, &STACK).unwrap();
        buf[9] ^= 0x10;
        assert!(!Extension::new_checked(&buf[..]).unwrap().verify_checksum());
        buf[2] = 0;
        buf[3] = 0;
        assert!(Extension::new_checked(&buf[..]).unwrap().verify_checksum());
    }

    #[test]
    fn pads_short_and_truncates_long_quotes() {
        let short = [0x45u8; 28];
        let mut buf = [0xffu8; 200];
        let n = emit_quote_and_extension(&mut buf, &short, &STACK).unwrap();
        assert_eq!(n, 128 + 16);
        assert_eq!(&buf[..28], &short[..]);
        assert!(buf[28..128].iter().all(|&b| b == 0));
        assert_eq!(buf[128], 0x20);

        let long: Vec<u8> = (0..300u32).map(|i| i as u8).collect();
        let n = emit_quote_and_extension(&mut buf, &long, &STACK).unwrap();
        assert_eq!(&buf[..128], &long[..128]);
        let ext = Extension::new_checked(&buf[128..n]).unwrap();
        assert!(ext.verify_checksum());
        assert_eq!(length_field(LENGTH_UNIT_V4), 32);
        assert_eq!(length_field(LENGTH_UNIT_V6), 16);
        assert_eq!(find_extension(&buf[..n], 32, LENGTH_UNIT_V4), Some(&buf[128..n]));
        assert_eq!(find_extension(&buf[..n], 0, LENGTH_UNIT_V4), None);
        assert_eq!(find_extension(&buf[..128], 32, LENGTH_UNIT_V4), None);
    }

    #[test]
    fn short_buffers_are_errors() {
        let mut buf = [0u8; 143];
        assert_eq!(emit_quote_and_extension(&mut buf, &[1, 2, 3], &STACK), Err(Error::Truncated));
        assert_eq!(emit_mpls_extension(&mut buf[..15], &STACK), Err(Error::Truncated));
        let too_many = vec![0u32; 20_000];
        let mut big = vec![0u8; mpls_extension_len(too_many.len())];
        assert_eq!(emit_mpls_extension(&mut big, &too_many), Err(Error::Malformed));
    }

    #[test]
    fn malformed_objects_stop_iteration() {
        let mut buf = [0u8; 24];
        emit_mpls_extension(&mut buf, &STACK).unwrap();
        // A second object with length 2 (< header) after the first.
        buf[16..20].copy_from_slice(&[0, 2, 9, 9]);
        let ext = Extension::new_checked(&buf[..20]).unwrap();
        let items: Vec<_> = ext.objects().collect();
        assert_eq!(items.len(), 2);
        assert!(items[0].is_ok());
        assert_eq!(items[1].as_ref().unwrap_err(), &Error::Malformed);
        // An object claiming more than the buffer holds.
        buf[16..20].copy_from_slice(&[0, 40, 9, 9]);
        let ext = Extension::new_checked(&buf[..]).unwrap();
        assert_eq!(ext.objects().nth(1).unwrap().unwrap_err(), Error::Truncated);
        // A label stack object whose payload is not whole entries.
        let mut odd = [0x20u8, 0, 0, 0, 0, 7, 1, 1, 0, 0, 0];
        assert_eq!(
            Extension::new_checked(&odd[..]).unwrap().mpls_label_stack().unwrap_err(),
            Error::Malformed
        );
        odd[0] = 0x10;
        assert_eq!(Extension::new_checked(&odd[..]).unwrap_err(), Error::Malformed);
        for len in 0..HEADER_LEN {
            assert_eq!(Extension::new_checked(&buf[..len]).unwrap_err(), Error::Truncated);
        }
        // Every prefix parses or errors without panicking.
        for len in 0..buf.len() {
            if let Ok(ext) = Extension::new_checked(&buf[..len]) {
                let _ = ext.objects().count();
                let _ = ext.mpls_label_stack().map(|s| s.map(|s| s.count()));
            }
        }
    }
}
