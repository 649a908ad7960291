//! The sans-I/O forwarding pipeline: a batch of frames in, frames per output port out,
//! counters updated. It opens no socket and reads no clock.
#![deny(unsafe_code)]

pub mod packet;
pub mod port;

pub use packet::{Packet, PacketPool, PortId};
pub use port::{PortCaps, PortInfo};
