use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::time::SystemTime;

use vmpls_control::api::Direction;
use vmpls_dataplane::{Packet, PortId};

/// One frame copied for a capture.
#[derive(Debug)]
pub struct CaptureFrame {
    /// Nanoseconds since the Unix epoch, per batch.
    pub ts_ns: u64,
    /// Received or sent.
    pub dir: Direction,
    /// The frame, Ethernet header on.
    pub data: Vec<u8>,
}

/// Bytes of frames a capture may have queued for its reader: a reader that falls behind
/// costs the router at most this much (a queue counted in frames would hold 1,024
/// super-frames of 64 KiB, 64 MiB, behind one slow `vmpls capture`).
pub const CAPTURE_QUEUE_BYTES: usize = 4 << 20;

/// A capture subscription the forwarding loop feeds.
pub struct CaptureSink {
    /// The port.
    pub port: PortId,
    /// Only frames whose label stack holds this label.
    pub label: Option<u32>,
    /// Bounded in frames too: a full queue loses the frame (counted in `lost`).
    pub tx: SyncSender<CaptureFrame>,
    /// Bytes queued and not yet taken by the reader, who subtracts what it takes: at
    /// [`CAPTURE_QUEUE_BYTES`], frames are lost (counted in `lost`).
    pub queued: Arc<AtomicUsize>,
    /// Frames lost to a full queue.
    pub lost: Arc<AtomicU64>,
}

fn now_ns() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// Whether the frame's label stack (if it is MPLS) holds `label`.
pub(crate) fn has_label(frame: &[u8], label: u32) -> bool {
    let Ok(eth) = vmpls_wire::ethernet::Frame::new_checked(frame) else {
        return false;
    };
    if !matches!(
        eth.ethertype(),
        vmpls_wire::ethernet::EtherType::Mpls | vmpls_wire::ethernet::EtherType::MplsMulticast
    ) {
        return false;
    }
    vmpls_wire::mpls::Stack::new(eth.payload()).any(|e| e.label == label)
}

/// Copies the frames of `pkts` on `port` to the captures that want them; drops captures
/// whose reader is gone.
pub(crate) fn capture(captures: &mut Vec<CaptureSink>, port: PortId, dir: Direction, pkts: &[Packet]) {
    let ts_ns = now_ns();
    captures.retain(|c| {
        if c.port != port {
            return true;
        }
        for p in pkts {
            if c.label.is_some_and(|l| !has_label(p.frame(), l)) {
                continue;
            }
            let len = p.frame().len();
            if c.queued.load(Ordering::Relaxed) + len > CAPTURE_QUEUE_BYTES {
                c.lost.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            // Counted before the send: the reader may take the frame (and give its bytes
            // back) before this thread would count it after.
            c.queued.fetch_add(len, Ordering::Relaxed);
            let f = CaptureFrame { ts_ns, dir, data: p.frame().to_vec() };
            match c.tx.try_send(f) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => {
                    c.queued.fetch_sub(len, Ordering::Relaxed);
                    c.lost.fetch_add(1, Ordering::Relaxed);
                }
                Err(TrySendError::Disconnected(_)) => return false,
            }
        }
        true
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn labelled(labels: &[u32]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x88, 0x47]);
        for (i, l) in labels.iter().enumerate() {
            let bos = u32::from(i + 1 == labels.len());
            f.extend_from_slice(&(l << 12 | bos << 8 | 64).to_be_bytes());
        }
        f.extend_from_slice(&[0x45; 20]);
        f
    }

    #[test]
    fn label_filter_looks_through_the_whole_stack() {
        let f = labelled(&[100, 200]);
        assert!(has_label(&f, 100));
        assert!(has_label(&f, 200));
        assert!(!has_label(&f, 300));
        let mut ip = f.clone();
        ip[12..14].copy_from_slice(&[0x08, 0x00]);
        assert!(!has_label(&ip, 100));
        assert!(!has_label(&f[..10], 100));
    }

    #[test]
    fn captures_are_bounded_and_end_with_their_reader() {
        let (tx, rx) = mpsc::sync_channel(2);
        let lost = Arc::new(AtomicU64::new(0));
        let queued = Arc::new(AtomicUsize::new(0));
        let mut caps =
            vec![CaptureSink { port: 1, label: Some(100), tx, queued: queued.clone(), lost: lost.clone() }];
        let pkts: Vec<Packet> = (0..4).map(|_| Packet::from_frame(1, &labelled(&[100]))).collect();
        let other = vec![Packet::from_frame(1, &labelled(&[999]))];
        capture(&mut caps, 1, Direction::Rx, &other);
        capture(&mut caps, 0, Direction::Rx, &pkts);
        assert_eq!(rx.try_iter().count(), 0, "other labels and ports are not captured");
        capture(&mut caps, 1, Direction::Tx, &pkts);
        assert_eq!(lost.load(Ordering::Relaxed), 2, "a full queue loses frames");
        let got: Vec<CaptureFrame> = rx.try_iter().collect();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].dir, Direction::Tx);
        assert_eq!(got[0].data, labelled(&[100]));
        drop(rx);
        capture(&mut caps, 1, Direction::Tx, &pkts);
        assert!(caps.is_empty(), "a capture whose reader left is removed");
    }

    #[test]
    fn a_slow_reader_holds_a_bounded_number_of_bytes() {
        let (tx, rx) = mpsc::sync_channel(1024);
        let (lost, queued) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicUsize::new(0)));
        let mut caps =
            vec![CaptureSink { port: 0, label: None, tx, queued: queued.clone(), lost: lost.clone() }];
        // Super-frames of 64 KiB: far fewer than the 1,024 the queue takes fit the bytes.
        let big: Vec<Packet> = (0..128).map(|_| Packet::from_frame(0, &vec![0u8; 65_536])).collect();
        capture(&mut caps, 0, Direction::Rx, &big);
        let fit = CAPTURE_QUEUE_BYTES / 65_536;
        assert_eq!(rx.try_iter().count(), fit);
        assert_eq!(lost.load(Ordering::Relaxed), (128 - fit) as u64);
        assert_eq!(queued.load(Ordering::Relaxed), fit * 65_536, "the reader has not taken them yet");
        // Once the reader takes them (and gives their bytes back), frames flow again.
        queued.store(0, Ordering::Relaxed);
        capture(&mut caps, 0, Direction::Rx, &big[..1]);
        assert_eq!(rx.try_iter().count(), 1);
    }
}
