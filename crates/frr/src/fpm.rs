//! FPM framing: how zebra's `dplane_fpm_nl` wraps each netlink message on its TCP
//! connection.
//!
//! ```text
//!  0        1        2                 4
//! +--------+--------+--------+--------+---------------------------+
//! | version| type   | length (BE, incl. header) | payload ...       |
//! +--------+--------+--------+--------+---------------------------+
//! ```
//!
//! Version 1, type 1 (netlink) is the only combination zebra's netlink module sends;
//! type 2 (protobuf) belongs to the older `fpm` module, which carries no labels. The
//! header's 16-bit length bounds a frame at 65,535 bytes, so a peer sending garbage can
//! make us buffer at most that much before the payload fails to decode.

use thiserror::Error;

/// Bytes of the frame header.
pub const HEADER_LEN: usize = 4;
/// The largest frame, header included (the length is 16 bits).
pub const MAX_FRAME_LEN: usize = u16::MAX as usize;
/// The only FPM version there is.
pub const VERSION: u8 = 1;
/// Payload type: netlink messages.
pub const TYPE_NETLINK: u8 = 1;
/// Payload type: protobuf (the old `fpm` module; no labels).
pub const TYPE_PROTOBUF: u8 = 2;

/// Why a byte stream is not FPM from `dplane_fpm_nl`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum FrameError {
    /// A version other than 1.
    #[error("FPM version {0} (only version 1 exists): the peer is not zebra's FPM module")]
    Version(u8),
    /// The protobuf encoding of the old `fpm` module.
    #[error(
        "FPM frame type 2 (protobuf): load zebra's `dplane_fpm_nl` module, not `fpm`, which sends no labels"
    )]
    Protobuf,
    /// Any other payload type.
    #[error("FPM frame type {0} is unknown (only 1, netlink, is handled)")]
    Type(u8),
    /// A length shorter than the header itself.
    #[error("FPM frame length {0} is shorter than its own header")]
    Length(u16),
}

/// One FPM frame found at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The netlink messages it carries.
    pub payload: &'a [u8],
    /// Bytes of the buffer it takes, header included.
    pub len: usize,
}

/// The frame at the start of `buf`: `Ok(None)` until all of it has arrived.
///
/// # Errors
/// The header is not one `dplane_fpm_nl` sends; the stream cannot be resynchronised,
/// so the connection should be closed.
pub fn parse_frame(buf: &[u8]) -> Result<Option<Frame<'_>>, FrameError> {
    let Some(header) = buf.get(..HEADER_LEN) else {
        return Ok(None);
    };
    match (header[0], header[1]) {
        (VERSION, TYPE_NETLINK) => {}
        (VERSION, TYPE_PROTOBUF) => return Err(FrameError::Protobuf),
        (VERSION, t) => return Err(FrameError::Type(t)),
        (v, _) => return Err(FrameError::Version(v)),
    }
    let len = u16::from_be_bytes([header[2], header[3]]);
    if usize::from(len) < HEADER_LEN {
        return Err(FrameError::Length(len));
    }
    let len = usize::from(len);
    Ok(buf.get(HEADER_LEN..len).map(|payload| Frame { payload, len }))
}

/// Wraps netlink messages in one FPM frame, as zebra does (for tests and generators).
///
/// # Panics
/// If the payload does not fit a frame (over 65,531 bytes).
pub fn frame(payload: &[u8]) -> Vec<u8> {
    let len = u16::try_from(HEADER_LEN + payload.len()).expect("an FPM frame holds at most 65,535 bytes");
    let mut out = Vec::with_capacity(usize::from(len));
    out.extend_from_slice(&[VERSION, TYPE_NETLINK]);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_is_returned_once_complete() {
        let f = frame(&[1, 2, 3]);
        assert_eq!(f, [1, 1, 0, 7, 1, 2, 3]);
        for cut in 0..f.len() {
            assert_eq!(parse_frame(&f[..cut]), Ok(None), "cut at {cut}");
        }
        let mut two = f.clone();
        two.extend_from_slice(&f);
        assert_eq!(parse_frame(&two), Ok(Some(Frame { payload: &[1, 2, 3], len: 7 })));
    }

    #[test]
    fn headers_zebra_never_sends_are_refused() {
        assert_eq!(parse_frame(&[2, 1, 0, 4]), Err(FrameError::Version(2)));
        assert_eq!(parse_frame(&[1, 2, 0, 4]), Err(FrameError::Protobuf));
        assert_eq!(parse_frame(&[1, 9, 0, 4]), Err(FrameError::Type(9)));
        assert_eq!(parse_frame(&[1, 1, 0, 3]), Err(FrameError::Length(3)));
        // An empty frame is well formed.
        assert_eq!(parse_frame(&[1, 1, 0, 4]), Ok(Some(Frame { payload: &[], len: 4 })));
        // A 64 KiB length waits for its bytes (the caller bounds its buffer).
        assert_eq!(parse_frame(&[1, 1, 0xff, 0xff, 0]), Ok(None));
    }
}
