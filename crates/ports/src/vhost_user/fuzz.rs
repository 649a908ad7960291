//! The vhost-user fuzz harness: a guest's memory made of arbitrary bytes, with a transmit
//! and a receive virtqueue laid out in it, driven through the same ring and chain functions
//! the port uses ([`SplitRing`], [`chain::read_tx_chain`], [`chain::write_rx_frame`]).
//!
//! It lives in the crate (not in `fuzz/`) because the chain functions are crate-private;
//! the cargo-fuzz target `vhost_queues` and the stable corpus replay
//! (`crates/ports/tests/fuzz_corpus.rs`) both call [`drive_queues`].
//!
//! Input: byte 0 picks the queue size (`1 << (b % 9)`, 1..=256), byte 1 the features
//! (bit 0 mergeable receive buffers, bit 1 the 12-byte header), bytes 2..4 the length of
//! the frame written to the receive queue (little endian, 14..=65535 after clamping);
//! the rest is the first bytes of the guest's 64 KiB of memory (the remainder is zero).
//! The transmit queue's descriptor table is at 0x0000, its available ring at 0x1000 and
//! used ring at 0x1400; the receive queue's at 0x2000, 0x3000 and 0x3400. Descriptors may
//! point anywhere, inside memory or not.

use virtio_queue::{Queue, QueueT};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
use vmpls_dataplane::Packet;
use vmpls_wire::{ethernet, virtio_net};

use super::chain::{self, RxError};
use super::ring::SplitRing;

/// Bytes of guest memory.
const MEMORY: usize = 0x1_0000;

/// Runs one input: pops every transmit chain, writes frames to the receive queue until it
/// refuses, publishes the used entries. Panics if a promise of the chain functions breaks:
/// a frame shorter than an Ethernet header or longer than the buffer, offload offsets
/// outside the frame, used entries that do not add up to the frame, or a refused frame
/// that consumed buffers. Returns how many frames went each way.
pub fn drive_queues(data: &[u8]) -> QueueRun {
    let mut run = QueueRun::default();
    let [size_exp, features, len_lo, len_hi, image @ ..] = data else { return run };
    let size: u16 = 1 << (size_exp % 9);
    let mergeable = features & 1 != 0;
    let hdr_len = if features & 2 != 0 { virtio_net::HEADER_LEN_MRG } else { virtio_net::HEADER_LEN };
    let rx_len = usize::from(u16::from_le_bytes([*len_lo, *len_hi])).max(ethernet::HEADER_LEN);

    let Ok(mem) = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), MEMORY)]) else { return run };
    let image = &image[..image.len().min(MEMORY)];
    mem.write_slice(image, GuestAddress(0)).expect("the image fits the memory");

    let mut tx = queue(size, 0x0000, 0x1000, 0x1400);
    let mut rx = queue(size, 0x2000, 0x3000, 0x3400);
    let (Ok(mut tx), Ok(mut rx)) = (SplitRing::new(&mut tx, &mem), SplitRing::new(&mut rx, &mem)) else {
        unreachable!("both queues' rings lie inside the memory")
    };

    // The guest's transmit queue: frames into the router.
    let mut packet = Packet::new();
    let mut used = Vec::new();
    tx.prefetch(usize::from(size));
    for _ in 0..=usize::from(size) {
        let Some(c) = tx.pop() else { break };
        // A guest may put any head index in its available ring; publish_used skips those
        // beyond the queue, and their chains hold no descriptor.
        let head = c.head_index();
        used.push((head, 0));
        let area = packet.receive_area_after(hdr_len);
        let room = area.len() - hdr_len;
        let read = chain::read_tx_chain(&mem, c, hdr_len, area);
        assert!(head < size || read.is_err(), "a frame from head {head} of a {size}-entry queue");
        if let Ok((offload, len)) = read {
            assert!((ethernet::HEADER_LEN..=room).contains(&len), "frame of {len} bytes, buffer {room}");
            assert!(
                usize::from(offload.hdr_len) <= len,
                "hdr_len {} past a {len}-byte frame",
                offload.hdr_len
            );
            if offload.needs_csum {
                let end = usize::from(offload.csum_start) + usize::from(offload.csum_offset) + 2;
                assert!(end <= len, "checksum field ends at {end}, past a {len}-byte frame");
            }
            run.tx_frames += 1;
        }
    }
    let _ = tx.publish_used(&used);
    std::hint::black_box(tx.guest_wants_interrupt());

    // The guest's receive queue: frames out of the router, until it takes no more.
    let frame: Vec<u8> = (0..rx_len).map(|i| i as u8).collect();
    let mut hdr = [0u8; virtio_net::HEADER_LEN_MRG];
    hdr[0] = features >> 2;
    used.clear();
    for _ in 0..=usize::from(size) {
        let before = (used.len(), rx.next_avail());
        match chain::write_rx_frame(&mut rx, &hdr, hdr_len, &frame, mergeable, &mut used) {
            Ok(buffers) => {
                let entries = &used[before.0..];
                assert!(
                    buffers >= 1 && usize::from(buffers) == entries.len(),
                    "{buffers} buffers, {entries:?}"
                );
                assert!(mergeable || buffers == 1, "{buffers} buffers without mergeable buffers");
                let written: u64 = entries.iter().map(|&(_, n)| u64::from(n)).sum();
                assert_eq!(written, (hdr_len + frame.len()) as u64, "used lengths {entries:?}");
                run.rx_frames += 1;
            }
            Err(RxError::NoBuffers | RxError::TooBig) => {
                assert_eq!((used.len(), rx.next_avail()), before, "a refused frame consumed buffers");
                break;
            }
            Err(RxError::BadChain) => {
                let entries = &used[before.0..];
                assert!(!entries.is_empty(), "a bad chain not returned to the guest");
                assert!(entries.iter().all(|&(_, n)| n == 0), "a bad chain reported as filled: {entries:?}");
            }
        }
    }
    let _ = rx.publish_used(&used);
    std::hint::black_box(rx.guest_wants_interrupt());
    run
}

/// What [`drive_queues`] moved.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct QueueRun {
    /// Frames read from the transmit queue.
    pub tx_frames: usize,
    /// Frames written to the receive queue.
    pub rx_frames: usize,
}

fn queue(size: u16, desc: u32, avail: u32, used: u32) -> Queue {
    let mut q = Queue::new(256).expect("256 is a valid queue size");
    q.set_size(size);
    q.set_desc_table_address(Some(desc), Some(0));
    q.set_avail_ring_address(Some(avail), Some(0));
    q.set_used_ring_address(Some(used), Some(0));
    q.set_ready(true);
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A transmit chain of one descriptor holding a header and a frame, and a receive
    /// queue with two 1 KiB buffers.
    #[test]
    fn a_hand_made_queue_pair_goes_through() {
        let mut image = vec![0u8; 0x5000];
        let desc = |img: &mut [u8], at: usize, addr: u64, len: u32, flags: u16| {
            img[at..at + 8].copy_from_slice(&addr.to_le_bytes());
            img[at + 8..at + 12].copy_from_slice(&len.to_le_bytes());
            img[at + 12..at + 14].copy_from_slice(&flags.to_le_bytes());
        };
        // tx: descriptor 0 -> 70 bytes at 0x4000; avail ring: idx 1, ring[0] = 0.
        desc(&mut image, 0x0000, 0x4000, 70, 0);
        image[0x1002..0x1004].copy_from_slice(&1u16.to_le_bytes());
        // rx: descriptors 0 and 1, device-writable (flag 2), 1 KiB each; avail idx 2.
        desc(&mut image, 0x2000, 0x4400, 1024, 2);
        desc(&mut image, 0x2010, 0x4800, 1024, 2);
        image[0x3002..0x3004].copy_from_slice(&2u16.to_le_bytes());
        image[0x3006..0x3008].copy_from_slice(&1u16.to_le_bytes());
        let mut input = vec![4, 0, 100, 0];
        input.extend_from_slice(&image);
        assert_eq!(drive_queues(&input), QueueRun { tx_frames: 1, rx_frames: 2 });
        // Mergeable buffers with a 12-byte header: a 1500-byte frame spans both buffers.
        input[1] = 3;
        input[2..4].copy_from_slice(&1500u16.to_le_bytes());
        assert_eq!(drive_queues(&input), QueueRun { tx_frames: 1, rx_frames: 1 });
        // Without them it fits no buffer, and the guest keeps both.
        input[1] = 2;
        assert_eq!(drive_queues(&input), QueueRun { tx_frames: 1, rx_frames: 0 });
    }

    #[test]
    fn short_and_empty_inputs_are_ignored_or_handled() {
        for input in [&[][..], &[1][..], &[1, 2, 3][..], &[8, 3, 255, 255][..], &[0xff; 64][..]] {
            drive_queues(input);
        }
    }
}
