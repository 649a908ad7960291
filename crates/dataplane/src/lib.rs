//! The sans-I/O forwarding pipeline: a batch of frames in, frames per output port out,
//! counters updated. It opens no socket and reads no clock: time comes in as an argument.
#![deny(unsafe_code)]

pub mod counters;
pub mod fragment;
pub mod gro;
pub mod gso;
pub mod hash;
pub mod mac_table;
pub mod neighbor;
pub mod packet;
pub mod pipeline;
pub mod port;
pub mod rate;

pub use counters::{Counters, DropReason, Event};
pub use packet::{Packet, PacketBuffer, PacketPool, PortId};
pub use pipeline::{Dataplane, DataplaneConfig, FdbDev, FdbEntry, HostStack, Output, POOL_LOW_WATER};
pub use port::{PortCaps, PortInfo};
pub use rate::TokenBucket;
