//! The memif control protocol: the fixed 128-byte messages the two ends of a memif
//! exchange on their `SOCK_SEQPACKET` Unix socket (DPDK `drivers/net/memif/memif.h`,
//! libmemif's `memif.h`, protocol version 2.0).
//!
//! ```text
//!  0      2                                                             128
//! +------+--------------------------------------------------------------+
//! | type | payload of that type (packed, little-endian), zero padded     |
//! +------+--------------------------------------------------------------+
//! ```
//!
//! The server (DPDK's and VPP's "master") listens and sends HELLO; the client ("slave")
//! answers with INIT, then ADD_REGION (the region's memfd as `SCM_RIGHTS`) and ADD_RING
//! (the ring's interrupt eventfd) for each region and ring it created, then CONNECT; the
//! server ACKs each of those and answers CONNECT with CONNECTED. Either end may send
//! DISCONNECT with a reason and close.
//!
//! Pure and panic-free: [`Message::parse`] takes any bytes and returns a message or a
//! [`ProtoError`]; [`Message::emit`] writes a whole message.

use std::fmt;

/// Length of every control message.
pub const MESSAGE_LEN: usize = 128;
/// memif protocol version 2.0 (`MEMIF_VERSION`): major in the high byte.
pub const VERSION: u16 = 0x0200;
/// Length of the name fields (`MEMIF_NAME_SZ`).
pub const NAME_LEN: usize = 32;
/// Length of INIT's shared secret.
pub const SECRET_LEN: usize = 24;
/// Length of DISCONNECT's reason text.
pub const REASON_LEN: usize = 96;
/// ADD_RING's flag: the ring carries frames from client to server (else server to client).
pub const ADD_RING_FLAG_C2S: u16 = 1;
/// INIT's interface mode: Ethernet frames (IP and punt/inject modes are not supported).
pub const MODE_ETHERNET: u8 = 0;

/// The message types (`memif_msg_type_t`, a `u16` on the wire).
mod kind {
    pub const ACK: u16 = 1;
    pub const HELLO: u16 = 2;
    pub const INIT: u16 = 3;
    pub const ADD_REGION: u16 = 4;
    pub const ADD_RING: u16 = 5;
    pub const CONNECT: u16 = 6;
    pub const CONNECTED: u16 = 7;
    pub const DISCONNECT: u16 = 8;
}

/// Byte ranges of the fields: the payload starts at 2, right after the type.
mod field {
    use std::ops::Range;
    type Field = Range<usize>;
    pub const TYPE: Field = 0..2;
    pub mod hello {
        use super::Field;
        pub const NAME: Field = 2..34;
        pub const MIN_VERSION: Field = 34..36;
        pub const MAX_VERSION: Field = 36..38;
        pub const MAX_REGION: Field = 38..40;
        pub const MAX_C2S_RING: Field = 40..42;
        pub const MAX_S2C_RING: Field = 42..44;
        pub const MAX_LOG2_RING_SIZE: usize = 44;
    }
    pub mod init {
        use super::Field;
        pub const VERSION: Field = 2..4;
        pub const ID: Field = 4..8;
        pub const MODE: usize = 8;
        pub const SECRET: Field = 9..33;
        pub const NAME: Field = 33..65;
    }
    pub mod add_region {
        use super::Field;
        pub const INDEX: Field = 2..4;
        pub const SIZE: Field = 4..12;
    }
    pub mod add_ring {
        use super::Field;
        pub const FLAGS: Field = 2..4;
        pub const INDEX: Field = 4..6;
        pub const REGION: Field = 6..8;
        pub const OFFSET: Field = 8..12;
        pub const LOG2_RING_SIZE: usize = 12;
        pub const PRIVATE_HDR_SIZE: Field = 13..15;
    }
    /// CONNECT and CONNECTED: the sender's interface name.
    pub const IF_NAME: Field = 2..34;
    pub mod disconnect {
        use super::Field;
        pub const CODE: Field = 2..6;
        pub const REASON: Field = 6..102;
    }
}

/// A NUL-padded text field of `N` bytes (names, reasons): what the peer sent, kept as
/// bytes; shown up to the first NUL, lossily as UTF-8.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Text<const N: usize>([u8; N]);

impl<const N: usize> Text<N> {
    /// `s` cut to `N - 1` bytes, so the field always ends with a NUL as C readers expect.
    pub fn new(s: &str) -> Text<N> {
        let mut b = [0; N];
        let n = s.len().min(N.saturating_sub(1));
        b[..n].copy_from_slice(&s.as_bytes()[..n]);
        Text(b)
    }

    /// The bytes before the first NUL.
    pub fn as_bytes(&self) -> &[u8] {
        let end = self.0.iter().position(|&c| c == 0).unwrap_or(N);
        &self.0[..end]
    }

    fn from_field(bytes: &[u8]) -> Text<N> {
        let mut b = [0; N];
        let n = bytes.len().min(N);
        b[..n].copy_from_slice(&bytes[..n]);
        Text(b)
    }
}

impl<const N: usize> fmt::Display for Text<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(self.as_bytes()))
    }
}

impl<const N: usize> fmt::Debug for Text<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_bytes()))
    }
}

/// A name field (application or interface name).
pub type Name = Text<NAME_LEN>;

/// HELLO, the server's first message: who it is and the limits it accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// The server's application name (DPDK sends its version, "DPDK 22.11.11").
    pub name: Name,
    /// Oldest protocol version it speaks.
    pub min_version: u16,
    /// Newest protocol version it speaks.
    pub max_version: u16,
    /// Highest region index it accepts.
    pub max_region: u16,
    /// Highest client-to-server ring index it accepts.
    pub max_c2s_ring: u16,
    /// Highest server-to-client ring index it accepts.
    pub max_s2c_ring: u16,
    /// Largest ring it accepts, as log2 of the number of descriptors.
    pub max_log2_ring_size: u8,
}

/// INIT, the client's answer to HELLO: which of the server's interfaces it connects to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Init {
    /// The protocol version the client speaks.
    pub version: u16,
    /// The interface id (both ends configure the same).
    pub id: u32,
    /// Interface mode ([`MODE_ETHERNET`]).
    pub mode: u8,
    /// Shared secret, all zero for none.
    pub secret: [u8; SECRET_LEN],
    /// The client's application name.
    pub name: Name,
}

/// ADD_RING: a ring the client created in one of its regions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddRing {
    /// Client to server (else server to client).
    pub c2s: bool,
    /// Ring index among the rings of its direction.
    pub index: u16,
    /// Region holding the ring.
    pub region: u16,
    /// Offset of the ring header in the region.
    pub offset: u32,
    /// log2 of its number of descriptors.
    pub log2_ring_size: u8,
    /// Bytes of private header before each buffer (0: none; vmpls refuses others).
    pub private_hdr_size: u16,
}

/// One control message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message {
    /// The last message was accepted.
    Ack,
    /// See [`Hello`].
    Hello(Hello),
    /// See [`Init`].
    Init(Init),
    /// A shared-memory region (its memfd travels with the message).
    AddRegion {
        /// Region index, counted from 0 in the order they are added.
        index: u16,
        /// Its size in bytes.
        size: u64,
    },
    /// See [`AddRing`] (the ring's interrupt eventfd travels with the message).
    AddRing(AddRing),
    /// The client has sent everything; its interface name.
    Connect {
        /// The client's interface name.
        if_name: Name,
    },
    /// The server has mapped everything; its interface name.
    Connected {
        /// The server's interface name.
        if_name: Name,
    },
    /// The sender closes the connection.
    Disconnect {
        /// Reason code (DPDK and libmemif send 0).
        code: u32,
        /// Reason text.
        reason: Text<REASON_LEN>,
    },
}

/// Why bytes are not a control message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// Not the fixed message length.
    #[error("a memif control message is {MESSAGE_LEN} bytes, got {0}")]
    Length(usize),
    /// A type this protocol version does not define.
    #[error("unknown memif control message type {0}")]
    UnknownType(u16),
}

fn u16_at(b: &[u8], r: std::ops::Range<usize>) -> u16 {
    let mut a = [0; 2];
    a.copy_from_slice(&b[r]);
    u16::from_le_bytes(a)
}

fn u32_at(b: &[u8], r: std::ops::Range<usize>) -> u32 {
    let mut a = [0; 4];
    a.copy_from_slice(&b[r]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], r: std::ops::Range<usize>) -> u64 {
    let mut a = [0; 8];
    a.copy_from_slice(&b[r]);
    u64::from_le_bytes(a)
}

impl Message {
    /// Decodes one message. Only the length and the type are checked here; what the
    /// values mean (a version, an index against a limit) is the connection's to judge.
    pub fn parse(b: &[u8]) -> Result<Message, ProtoError> {
        if b.len() != MESSAGE_LEN {
            return Err(ProtoError::Length(b.len()));
        }
        Ok(match u16_at(b, field::TYPE) {
            kind::ACK => Message::Ack,
            kind::HELLO => {
                use field::hello as f;
                Message::Hello(Hello {
                    name: Name::from_field(&b[f::NAME]),
                    min_version: u16_at(b, f::MIN_VERSION),
                    max_version: u16_at(b, f::MAX_VERSION),
                    max_region: u16_at(b, f::MAX_REGION),
                    max_c2s_ring: u16_at(b, f::MAX_C2S_RING),
                    max_s2c_ring: u16_at(b, f::MAX_S2C_RING),
                    max_log2_ring_size: b[f::MAX_LOG2_RING_SIZE],
                })
            }
            kind::INIT => {
                use field::init as f;
                let mut secret = [0; SECRET_LEN];
                secret.copy_from_slice(&b[f::SECRET]);
                Message::Init(Init {
                    version: u16_at(b, f::VERSION),
                    id: u32_at(b, f::ID),
                    mode: b[f::MODE],
                    secret,
                    name: Name::from_field(&b[f::NAME]),
                })
            }
            kind::ADD_REGION => Message::AddRegion {
                index: u16_at(b, field::add_region::INDEX),
                size: u64_at(b, field::add_region::SIZE),
            },
            kind::ADD_RING => {
                use field::add_ring as f;
                Message::AddRing(AddRing {
                    c2s: u16_at(b, f::FLAGS) & ADD_RING_FLAG_C2S != 0,
                    index: u16_at(b, f::INDEX),
                    region: u16_at(b, f::REGION),
                    offset: u32_at(b, f::OFFSET),
                    log2_ring_size: b[f::LOG2_RING_SIZE],
                    private_hdr_size: u16_at(b, f::PRIVATE_HDR_SIZE),
                })
            }
            kind::CONNECT => Message::Connect { if_name: Name::from_field(&b[field::IF_NAME]) },
            kind::CONNECTED => Message::Connected { if_name: Name::from_field(&b[field::IF_NAME]) },
            kind::DISCONNECT => Message::Disconnect {
                code: u32_at(b, field::disconnect::CODE),
                reason: Text::from_field(&b[field::disconnect::REASON]),
            },
            t => return Err(ProtoError::UnknownType(t)),
        })
    }

    /// Encodes the message, zero padded to [`MESSAGE_LEN`].
    pub fn emit(&self) -> [u8; MESSAGE_LEN] {
        let mut b = [0u8; MESSAGE_LEN];
        let put16 = |b: &mut [u8; MESSAGE_LEN], r: std::ops::Range<usize>, v: u16| {
            b[r].copy_from_slice(&v.to_le_bytes())
        };
        let t = match self {
            Message::Ack => kind::ACK,
            Message::Hello(h) => {
                use field::hello as f;
                b[f::NAME].copy_from_slice(&h.name.0);
                put16(&mut b, f::MIN_VERSION, h.min_version);
                put16(&mut b, f::MAX_VERSION, h.max_version);
                put16(&mut b, f::MAX_REGION, h.max_region);
                put16(&mut b, f::MAX_C2S_RING, h.max_c2s_ring);
                put16(&mut b, f::MAX_S2C_RING, h.max_s2c_ring);
                b[f::MAX_LOG2_RING_SIZE] = h.max_log2_ring_size;
                kind::HELLO
            }
            Message::Init(i) => {
                use field::init as f;
                put16(&mut b, f::VERSION, i.version);
                b[f::ID].copy_from_slice(&i.id.to_le_bytes());
                b[f::MODE] = i.mode;
                b[f::SECRET].copy_from_slice(&i.secret);
                b[f::NAME].copy_from_slice(&i.name.0);
                kind::INIT
            }
            Message::AddRegion { index, size } => {
                put16(&mut b, field::add_region::INDEX, *index);
                b[field::add_region::SIZE].copy_from_slice(&size.to_le_bytes());
                kind::ADD_REGION
            }
            Message::AddRing(r) => {
                use field::add_ring as f;
                put16(&mut b, f::FLAGS, if r.c2s { ADD_RING_FLAG_C2S } else { 0 });
                put16(&mut b, f::INDEX, r.index);
                put16(&mut b, f::REGION, r.region);
                b[f::OFFSET].copy_from_slice(&r.offset.to_le_bytes());
                b[f::LOG2_RING_SIZE] = r.log2_ring_size;
                put16(&mut b, f::PRIVATE_HDR_SIZE, r.private_hdr_size);
                kind::ADD_RING
            }
            Message::Connect { if_name } => {
                b[field::IF_NAME].copy_from_slice(&if_name.0);
                kind::CONNECT
            }
            Message::Connected { if_name } => {
                b[field::IF_NAME].copy_from_slice(&if_name.0);
                kind::CONNECTED
            }
            Message::Disconnect { code, reason } => {
                b[field::disconnect::CODE].copy_from_slice(&code.to_le_bytes());
                b[field::disconnect::REASON].copy_from_slice(&reason.0);
                kind::DISCONNECT
            }
        };
        put16(&mut b, field::TYPE, t);
        b
    }

    /// The reason text of a DISCONNECT we send.
    pub fn disconnect(reason: &str) -> Message {
        Message::Disconnect { code: 0, reason: Text::new(reason) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memif::hex;

    /// Pads a capture's leading bytes with the zeros that followed them on the wire.
    fn message(prefix: &str) -> Vec<u8> {
        let mut b = hex(prefix);
        b.resize(MESSAGE_LEN, 0);
        b
    }

    // Captured from DPDK 22.11.11's testpmd with `--vdev=net_memif0,role=server,...` (HELLO)
    // and `role=client` (the rest), on the control socket; all bytes after these were zero.
    const HELLO: &str = "0200 4450444b2032322e31312e3131 00000000000000000000000000000000000000
                         0002 0002 ff00 ff00 ff00 0e";
    const INIT: &str = "0300 0002 00000000 00 000000000000000000000000000000000000000000000000
                        4450444b2032322e31312e3131";
    const ADD_REGION: &str = "0400 0000 0081400000000000";
    const ADD_RING_C2S: &str = "0500 0100 0000 0000 00000000 0a 0000";
    const ADD_RING_S2C: &str = "0500 0000 0000 0000 80400000 0a 0000";
    const CONNECT: &str = "0600 6e65745f6d656d696630";

    #[test]
    fn hello_from_dpdk_decodes_and_encodes_back_to_the_same_bytes() {
        let bytes = message(HELLO);
        let m = Message::parse(&bytes).unwrap();
        let Message::Hello(h) = m else { panic!("not a HELLO: {m:?}") };
        assert_eq!(h.name.to_string(), "DPDK 22.11.11");
        assert_eq!((h.min_version, h.max_version), (VERSION, VERSION));
        assert_eq!((h.max_region, h.max_c2s_ring, h.max_s2c_ring, h.max_log2_ring_size), (255, 255, 255, 14));
        assert_eq!(m.emit().as_slice(), bytes.as_slice());
    }

    #[test]
    fn a_dpdk_clients_handshake_decodes_field_by_field() {
        let init = Message::parse(&message(INIT)).unwrap();
        assert_eq!(
            init,
            Message::Init(Init {
                version: VERSION,
                id: 0,
                mode: MODE_ETHERNET,
                secret: [0; SECRET_LEN],
                name: Name::new("DPDK 22.11.11")
            })
        );
        // Two 16512-byte rings (128-byte header, 1024 descriptors) then 2048 buffers of 2 KiB.
        assert_eq!(
            Message::parse(&message(ADD_REGION)).unwrap(),
            Message::AddRegion { index: 0, size: 2 * 16512 + 2048 * 2048 }
        );
        let ring = |c2s, offset| AddRing {
            c2s,
            index: 0,
            region: 0,
            offset,
            log2_ring_size: 10,
            private_hdr_size: 0,
        };
        assert_eq!(Message::parse(&message(ADD_RING_C2S)).unwrap(), Message::AddRing(ring(true, 0)));
        assert_eq!(Message::parse(&message(ADD_RING_S2C)).unwrap(), Message::AddRing(ring(false, 16512)));
        assert_eq!(
            Message::parse(&message(CONNECT)).unwrap(),
            Message::Connect { if_name: Name::new("net_memif0") }
        );
    }

    #[test]
    fn every_message_encodes_to_the_bytes_dpdk_sends() {
        for capture in [HELLO, INIT, ADD_REGION, ADD_RING_C2S, ADD_RING_S2C, CONNECT] {
            let bytes = message(capture);
            assert_eq!(Message::parse(&bytes).unwrap().emit().as_slice(), bytes.as_slice(), "{capture}");
        }
    }

    #[test]
    fn disconnect_and_ack_round_trip() {
        let d = Message::disconnect("interface id 3 is not served here");
        let bytes = d.emit();
        assert_eq!(&bytes[..2], &[8, 0]);
        assert_eq!(Message::parse(&bytes).unwrap(), d);
        assert_eq!(Message::parse(&Message::Ack.emit()).unwrap(), Message::Ack);
        assert_eq!(Message::Ack.emit()[..2], [1, 0]);
    }

    #[test]
    fn malformed_messages_are_errors_not_panics() {
        assert_eq!(Message::parse(&[2, 0]), Err(ProtoError::Length(2)));
        assert_eq!(Message::parse(&[0; 129]), Err(ProtoError::Length(129)));
        assert_eq!(Message::parse(&[0; MESSAGE_LEN]), Err(ProtoError::UnknownType(0)));
        let mut b = [0xff; MESSAGE_LEN];
        assert_eq!(Message::parse(&b), Err(ProtoError::UnknownType(0xffff)));
        // A name without a NUL is taken whole, never read past.
        b[..2].copy_from_slice(&7u16.to_le_bytes());
        let Ok(Message::Connected { if_name }) = Message::parse(&b) else { panic!() };
        assert_eq!(if_name.as_bytes().len(), NAME_LEN);
    }

    #[test]
    fn long_names_are_cut_to_leave_a_nul() {
        let n = Name::new(&"x".repeat(40));
        assert_eq!(n.as_bytes().len(), NAME_LEN - 1);
    }
}
