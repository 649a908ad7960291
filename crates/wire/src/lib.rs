//! Zero-copy views and builders for the frames vmpls switches.
//!
//! One module a protocol, in the manner of smoltcp's `wire`: a `Packet<T: AsRef<[u8]>>`
//! view validated once by `new_checked()`, accessors that cannot panic afterwards, setters
//! where `T: AsMut<[u8]>` so headers are rewritten in place, and a `Repr` where a header is
//! built from scratch.
//!
//! Panic-freedom contract: every `new_checked()` returns an error for a buffer too short
//! for the header it claims; after that no accessor indexes out of bounds. `new_unchecked()`
//! views are for buffers the caller has already validated.
#![deny(unsafe_code)]

pub mod arp;
pub mod checksum;
pub mod ethernet;
pub mod icmp_ext;
pub mod icmpv4;
pub mod icmpv6;
pub mod ip;
pub mod ipv4;
pub mod ipv6;
pub mod ipv6_ext;
pub mod mpls;
pub mod prefix;
pub mod pw_cw;
pub mod tcp;
pub mod udp;
pub mod virtio_net;

/// The error every parser in this crate returns: the buffer does not hold what it claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The buffer is shorter than the header or the length field says.
    Truncated,
    /// A field holds a value the protocol does not allow (version, header length, ...).
    Malformed,
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Truncated => f.write_str("truncated packet"),
            Error::Malformed => f.write_str("malformed packet"),
        }
    }
}

impl std::error::Error for Error {}

/// Result of parsing.
pub type Result<T> = core::result::Result<T, Error>;

/// A byte range inside a header.
pub(crate) type Field = core::ops::Range<usize>;
