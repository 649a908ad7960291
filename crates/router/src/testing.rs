//! Test doubles shared by the modules' tests.

use std::os::fd::RawFd;

use vmpls_dataplane::{Packet, PacketPool};
use vmpls_ports::{Port, PortStats};

/// A port whose offloads the test changes, like a vhost-user port's when a guest
/// negotiates.
pub(crate) struct FakePort(pub(crate) vmpls_dataplane::PortInfo);

impl Port for FakePort {
    fn info(&self) -> &vmpls_dataplane::PortInfo {
        &self.0
    }
    fn fd(&self) -> RawFd {
        -1
    }
    fn recv_batch(&mut self, _: &mut PacketPool, _: &mut Vec<Packet>, _: usize) -> std::io::Result<usize> {
        Ok(0)
    }
    fn send_batch(&mut self, pkts: &mut Vec<Packet>, pool: &mut PacketPool) -> std::io::Result<usize> {
        let n = pkts.len();
        pkts.drain(..).for_each(|p| pool.put(p));
        Ok(n)
    }
    fn stats(&self) -> PortStats {
        PortStats::default()
    }
}
