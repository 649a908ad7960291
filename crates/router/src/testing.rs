//! Test doubles shared by the modules' tests.

use std::os::fd::{AsFd, BorrowedFd};

use vmpls_dataplane::{Packet, PacketPool};
use vmpls_ports::{Port, PortStats};
use vmpls_sys::EventFd;

/// A port whose offloads the test changes, like a vhost-user port's when a guest
/// negotiates. Its descriptor is an eventfd nobody signals: it never polls readable.
pub(crate) struct FakePort {
    info: vmpls_dataplane::PortInfo,
    wake: EventFd,
}

impl FakePort {
    /// A port that reports `info`.
    pub(crate) fn new(info: vmpls_dataplane::PortInfo) -> FakePort {
        FakePort { info, wake: EventFd::new().expect("an eventfd") }
    }
}

impl AsFd for FakePort {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.wake.as_fd()
    }
}

impl Port for FakePort {
    fn info(&self) -> &vmpls_dataplane::PortInfo {
        &self.info
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
