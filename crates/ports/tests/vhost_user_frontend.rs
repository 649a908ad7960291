//! The vhost-user port against a frontend written here with the `vhost` crate's own
//! frontend: no QEMU and no guest kernel, so a test can put any virtio-net header in the
//! guest's transmit queue and send any message (and any file descriptors) a hostile
//! frontend could. The "guest's memory" is a memfd this process maps too, with the queues
//! laid out by `virtio-queue`'s `MockSplitQueue`.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use vhost::vhost_user::message::{VhostUserHeaderFlag, VhostUserProtocolFeatures, VhostUserVirtioFeatures};
use vhost::vhost_user::{Frontend, VhostUserFrontend};
use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};
use virtio_queue::mock::MockSplitQueue;
use vm_memory::{Bytes, FileOffset, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};
use vmm_sys_util::eventfd::EventFd;
use vmm_sys_util::sock_ctrl_msg::ScmSocket;
use vmpls_dataplane::gso::MIN_GSO_SIZE;
use vmpls_dataplane::{Packet, PacketPool};
use vmpls_ports::{MAX_MEM_REGIONS, Port, VHOST_USER_WAITING_FRAMES, VhostUserOptions, VhostUserPort};
use vmpls_testkit::TempDir;
use vmpls_wire::virtio_net::GsoType;

/// Bytes of the guest's memory.
const MEMORY: usize = 0x20_0000;
/// Queue size of both queues.
const QUEUE_SIZE: u16 = 64;
/// Where the receive queue (0) and the transmit queue (1) are, and where frames go.
const RX_QUEUE_AT: u64 = 0x0;
const TX_QUEUE_AT: u64 = 0x1_0000;
const BUFFERS_AT: u64 = 0x2_0000;
/// Where the receive buffers are, and their size (a 12-byte header and a 1500-byte frame fit).
const RX_BUFFERS_AT: u64 = 0x18_0000;
const RX_BUFFER_LEN: usize = 2048;

fn rx_buffer_at(descriptor: u16) -> u64 {
    RX_BUFFERS_AT + u64::from(descriptor) * RX_BUFFER_LEN as u64
}

// virtio feature bits.
const VERSION_1: u64 = 1 << 32;
const CSUM: u64 = 1 << 0;
const HOST_TSO4: u64 = 1 << 11;
const MRG_RXBUF: u64 = 1 << 15;

/// A memfd of `len` bytes.
fn memfd(len: usize) -> File {
    // SAFETY: the name is a NUL-terminated string; the returned descriptor (checked) is
    // new and owned by nobody else.
    let file = unsafe {
        let fd = libc::memfd_create(c"vmpls-test-guest".as_ptr(), libc::MFD_CLOEXEC);
        assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
        File::from_raw_fd(fd)
    };
    file.set_len(len as u64).unwrap();
    file
}

/// Descriptors open in this process.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Connects to the port's socket (its listener thread may not poll yet).
fn connect(socket: &Path) -> UnixStream {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match UnixStream::connect(socket) {
            Ok(s) => return s,
            Err(e) => {
                assert!(Instant::now() < deadline, "connect {}: {e}", socket.display());
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// Sets up features and protocol features (`REPLY_ACK`, `CONFIGURE_MEM_SLOTS`).
fn negotiate(fe: &mut Frontend) {
    fe.set_owner().unwrap();
    let offered = fe.get_features().unwrap();
    let wanted = VERSION_1 | CSUM | HOST_TSO4 | MRG_RXBUF | VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits();
    fe.set_features(offered & wanted).unwrap();
    let protocol = fe.get_protocol_features().unwrap();
    fe.set_protocol_features(
        protocol & (VhostUserProtocolFeatures::REPLY_ACK | VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS),
    )
    .unwrap();
}

/// A guest as far as the port can tell: its memory and queues, driven by this test.
struct Guest {
    _frontend: Frontend,
    mem: GuestMemoryMmap,
    kick_tx: EventFd,
    _call: EventFd,
    kick_rx: EventFd,
    /// Descriptors used in the transmit queue so far.
    tx_next: u16,
    /// The transmit queue's used ring.
    tx_used: GuestAddress,
    /// The receive queue's used ring.
    rx_used: GuestAddress,
    /// Receive buffers posted so far.
    rx_posted: u16,
    /// Used entries of the receive queue read so far.
    rx_seen: u16,
}

impl Guest {
    fn connect(socket: &Path) -> Guest {
        let mut frontend = Frontend::from_stream(connect(socket), 2);
        negotiate(&mut frontend);
        let file = memfd(MEMORY);
        let mem = GuestMemoryMmap::<()>::from_ranges_with_files([(
            GuestAddress(0),
            MEMORY,
            Some(FileOffset::new(file.try_clone().unwrap(), 0)),
        )])
        .unwrap();
        let host = mem.get_host_address(GuestAddress(0)).unwrap() as u64;
        let region = VhostUserMemoryRegionInfo {
            guest_phys_addr: 0,
            memory_size: MEMORY as u64,
            userspace_addr: host,
            mmap_offset: 0,
            mmap_handle: file.as_raw_fd(),
        };
        frontend.set_mem_table(&[region]).unwrap();
        let call = EventFd::new(libc::EFD_NONBLOCK).unwrap();
        let kick_rx = EventFd::new(libc::EFD_NONBLOCK).unwrap();
        let kick_tx = EventFd::new(libc::EFD_NONBLOCK).unwrap();
        let (mut tx_used, mut rx_used) = (GuestAddress(0), GuestAddress(0));
        for (q, at, kick) in [(0, RX_QUEUE_AT, &kick_rx), (1, TX_QUEUE_AT, &kick_tx)] {
            let vq = MockSplitQueue::create(&mem, GuestAddress(at), QUEUE_SIZE);
            if q == 1 {
                tx_used = vq.used_addr();
            } else {
                rx_used = vq.used_addr();
            }
            frontend.set_vring_num(q, QUEUE_SIZE).unwrap();
            let addrs = VringConfigData {
                queue_max_size: QUEUE_SIZE,
                queue_size: QUEUE_SIZE,
                flags: 0,
                desc_table_addr: host + vq.desc_table_addr().0,
                used_ring_addr: host + vq.used_addr().0,
                avail_ring_addr: host + vq.avail_addr().0,
                log_addr: None,
            };
            frontend.set_vring_addr(q, &addrs).unwrap();
            frontend.set_vring_base(q, 0).unwrap();
            frontend.set_vring_call(q, &call).unwrap();
            frontend.set_vring_kick(q, kick).unwrap();
            frontend.set_vring_enable(q, true).unwrap();
        }
        Guest {
            _frontend: frontend,
            mem,
            kick_tx,
            _call: call,
            kick_rx,
            tx_next: 0,
            tx_used,
            rx_used,
            rx_posted: 0,
            rx_seen: 0,
        }
    }

    /// Puts `hdr` (12 bytes) and `frame` in the transmit queue as one chain and kicks.
    fn transmit(&mut self, hdr: [u8; 12], frame: &[u8]) {
        self.queue(hdr, frame);
        self.kick_tx.write(1).unwrap();
    }

    /// Kicks the transmit queue.
    fn kick(&self) {
        self.kick_tx.write(1).unwrap();
    }

    /// Whether the device asks for no kicks on the transmit queue
    /// (`VRING_USED_F_NO_NOTIFY` in the used ring's flags): a driver then queues
    /// frames without kicking.
    fn kicks_off(&self) -> bool {
        self.no_notify(self.tx_used)
    }

    /// The same for the receive queue, where a driver kicks after posting buffers.
    fn rx_kicks_off(&self) -> bool {
        self.no_notify(self.rx_used)
    }

    fn no_notify(&self, used: GuestAddress) -> bool {
        let flags: u16 = self.mem.read_obj(used).unwrap();
        u16::from_le(flags) & 1 != 0
    }

    /// Posts `n` receive buffers of [`RX_BUFFER_LEN`] bytes (one descriptor each) and
    /// kicks, as a driver does after refilling its ring.
    fn post_rx_buffers(&mut self, n: u16) {
        let avail = RX_QUEUE_AT + 16 * u64::from(QUEUE_SIZE);
        for _ in 0..n {
            let i = self.rx_posted % QUEUE_SIZE;
            let mut d = [0u8; 16];
            d[..8].copy_from_slice(&rx_buffer_at(i).to_le_bytes());
            d[8..12].copy_from_slice(&(RX_BUFFER_LEN as u32).to_le_bytes());
            d[12..14].copy_from_slice(&2u16.to_le_bytes()); // VRING_DESC_F_WRITE
            self.mem.write_slice(&d, GuestAddress(RX_QUEUE_AT + 16 * u64::from(i))).unwrap();
            let slot = avail + 4 + 2 * u64::from(self.rx_posted % QUEUE_SIZE);
            self.mem.write_obj(i.to_le(), GuestAddress(slot)).unwrap();
            self.rx_posted = self.rx_posted.wrapping_add(1);
        }
        self.mem.write_obj(self.rx_posted.to_le(), GuestAddress(avail + 2)).unwrap();
        self.kick_rx.write(1).unwrap();
    }

    /// The frames the port put in the receive queue since the last call, in order, without
    /// their virtio-net headers.
    fn received(&mut self) -> Vec<Vec<u8>> {
        let idx: u16 = self.mem.read_obj(GuestAddress(self.rx_used.0 + 2)).unwrap();
        let mut frames = Vec::new();
        while self.rx_seen != u16::from_le(idx) {
            let elem = GuestAddress(self.rx_used.0 + 4 + 8 * u64::from(self.rx_seen % QUEUE_SIZE));
            let id = u32::from_le(self.mem.read_obj(elem).unwrap());
            let len = u32::from_le(self.mem.read_obj(GuestAddress(elem.0 + 4)).unwrap()) as usize;
            let mut buf = vec![0u8; len];
            self.mem.read_slice(&mut buf, GuestAddress(rx_buffer_at(id as u16))).unwrap();
            frames.push(buf.split_off(12));
            self.rx_seen = self.rx_seen.wrapping_add(1);
        }
        frames
    }

    /// Puts `hdr` (12 bytes) and `frame` in the transmit queue as one chain, without a kick.
    /// (Written by hand: a `MockSplitQueue` zeroes the rings it is created over.)
    fn queue(&mut self, hdr: [u8; 12], frame: &[u8]) {
        let i = self.tx_next;
        let at = BUFFERS_AT + u64::from(i) * 0x1_0000;
        self.mem.write_slice(&hdr, GuestAddress(at)).unwrap();
        self.mem.write_slice(frame, GuestAddress(at + 12)).unwrap();
        let desc = |index: u16, addr: u64, len: usize, next: Option<u16>| {
            let mut d = [0u8; 16];
            d[..8].copy_from_slice(&addr.to_le_bytes());
            d[8..12].copy_from_slice(&(len as u32).to_le_bytes());
            d[12..14].copy_from_slice(&u16::from(next.is_some()).to_le_bytes()); // VRING_DESC_F_NEXT
            d[14..].copy_from_slice(&next.unwrap_or(0).to_le_bytes());
            self.mem.write_slice(&d, GuestAddress(TX_QUEUE_AT + 16 * u64::from(index))).unwrap();
        };
        desc(i, at, 12, Some(i + 1));
        desc(i + 1, at + 12, frame.len(), None);
        // The available ring follows the descriptor table: flags, idx, ring.
        let avail = TX_QUEUE_AT + 16 * u64::from(QUEUE_SIZE);
        let idx: u16 = self.mem.read_obj(GuestAddress(avail + 2)).unwrap();
        let slot = avail + 4 + 2 * u64::from(idx % QUEUE_SIZE);
        self.mem.write_obj(i.to_le(), GuestAddress(slot)).unwrap();
        self.mem.write_obj(idx.wrapping_add(1).to_le(), GuestAddress(avail + 2)).unwrap();
        self.tx_next += 2;
    }
}

/// Receives from `port` until a frame arrives or `d` passes.
fn receive(port: &mut VhostUserPort, pool: &mut PacketPool, d: Duration) -> Option<Packet> {
    let deadline = Instant::now() + d;
    let mut got = Vec::new();
    while Instant::now() < deadline {
        vmpls_testkit::wait_readable(&*port, Duration::from_millis(20));
        port.recv_batch(pool, &mut got, 64).unwrap();
        if let Some(p) = got.pop() {
            return Some(p);
        }
    }
    None
}

/// Waits (up to 5 s) until `done` holds; panics with `what` and the port's counters if it
/// does not.
fn wait_until(port: &VhostUserPort, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < deadline, "{what}: {:?}", port.vhost_stats());
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A virtio-net header as a Linux guest writes it for a TCP/IPv4 super-frame (partial
/// checksum at 34 + 16, headers 66 bytes) with `gso_size`.
fn tso_header(gso_size: u16) -> [u8; 12] {
    let mut h = [1, 1, 66, 0, 0, 0, 34, 0, 16, 0, 0, 0];
    h[4..6].copy_from_slice(&gso_size.to_le_bytes());
    h
}

fn frame(len: usize) -> Vec<u8> {
    let mut f: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f
}

#[test]
fn a_guest_super_frame_with_a_tiny_gso_size_is_dropped_and_counted() {
    let dir = TempDir::new("vhost-fe-gso");
    let socket = dir.path().join("g.sock");
    let mut port = VhostUserPort::open(0, "g", &socket, &VhostUserOptions::default()).unwrap();
    let mut pool = PacketPool::new(64);
    let mut guest = Guest::connect(&socket);

    // 60,000 bytes in 1-byte segments: refused, counted, the guest's buffer given back.
    guest.transmit(tso_header(1), &frame(60_000));
    assert!(receive(&mut port, &mut pool, Duration::from_millis(500)).is_none());
    assert_eq!(port.stats().rx_gso_size_too_small, 1, "{:?}", port.stats());
    assert_eq!(port.stats().rx_dropped(), 1);

    // The same at the floor, and a plain frame, enter as they are.
    guest.transmit(tso_header(MIN_GSO_SIZE), &frame(60_000));
    let p = receive(&mut port, &mut pool, Duration::from_secs(5)).unwrap_or_else(|| {
        panic!("no super-frame at the floor: {:?} {:?}", port.stats(), port.vhost_stats())
    });
    assert_eq!((p.len(), p.offload.gso_type, p.offload.gso_size), (60_000, GsoType::TcpV4, MIN_GSO_SIZE));
    guest.transmit([0; 12], &frame(60));
    let p = receive(&mut port, &mut pool, Duration::from_secs(5)).expect("a plain frame");
    assert_eq!(p.len(), 60);
    assert_eq!(port.stats().rx_packets, 2);
    drop(guest);
}

#[test]
fn a_batch_keeps_its_good_frames_in_order_around_refused_ones() {
    let dir = TempDir::new("vhost-fe-batch");
    let socket = dir.path().join("g.sock");
    let mut port = VhostUserPort::open(0, "g", &socket, &VhostUserOptions::default()).unwrap();
    let mut pool = PacketPool::new(64);
    let mut guest = Guest::connect(&socket);
    // The port takes the guest's queues once it has seen them: one frame first.
    guest.transmit([0; 12], &frame(70));
    let first = receive(&mut port, &mut pool, Duration::from_secs(5)).expect("a first frame");
    assert_eq!(first.len(), 70);
    pool.put(first);

    // Seven frames taken in one batch: the second, fourth and sixth refused (a bad
    // gso_type, a gso_size below the floor, a bad gso_type again).
    let mut bad_type = [0u8; 12];
    bad_type[1] = 2;
    for i in 0..7 {
        let hdr = match i {
            1 | 5 => bad_type,
            3 => tso_header(1),
            _ => [0; 12],
        };
        // Long enough for the super-frame's headers: refused for its gso_size alone.
        let len = if i == 3 { 200 } else { 60 + i };
        guest.queue(hdr, &frame(len));
    }
    // Frames of other ports the batch is appended to stay as they are.
    let mut got = vec![Packet::from_frame(9, &[0xaa; 64])];
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.len() < 5 && Instant::now() < deadline {
        guest.kick();
        vmpls_testkit::wait_readable(&port, Duration::from_millis(20));
        port.recv_batch(&mut pool, &mut got, 64).unwrap();
    }
    let lens: Vec<(u16, usize)> = got.iter().map(|p| (p.port, p.len())).collect();
    assert_eq!(lens, [(9, 64), (0, 60), (0, 62), (0, 64), (0, 66)], "{:?}", port.stats());
    assert_eq!(got[2].frame(), frame(62), "each frame's own bytes");
    let stats = port.stats();
    assert_eq!((stats.rx_packets, stats.rx_gso_size_too_small), (5, 1), "{stats:?}");
    assert_eq!(port.vhost_stats().rx_bad_header, 2, "{:?}", port.vhost_stats());
    assert_eq!(stats.rx_dropped(), 3, "{stats:?}");
    drop(guest);
}

#[test]
fn a_frontend_cannot_pile_up_descriptors_in_the_router() {
    let dir = TempDir::new("vhost-fe-fds");
    let socket = dir.path().join("g.sock");
    let mut port = VhostUserPort::open(0, "g", &socket, &VhostUserOptions::default()).unwrap();
    let mut pool = PacketPool::new(64);
    // Other tests of this file run alongside and open descriptors of their own.
    const SLACK: usize = 48;

    // 1. Memory regions: each one a descriptor the backend keeps. The port announces its
    // limit and disconnects a frontend that maps more.
    let mut fe = Frontend::from_stream(connect(&socket), 2);
    negotiate(&mut fe);
    // Each region waits for the port's answer: without it the sends all fit in the
    // socket's buffer before the port has read the first, and none is refused.
    fe.set_hdr_flags(VhostUserHeaderFlag::NEED_REPLY);
    const ADDED: usize = 200;
    let file = memfd(ADDED * 4096);
    let base = open_fds();
    let mut most = base;
    let mut refused = None;
    for i in 0..ADDED {
        let region = VhostUserMemoryRegionInfo {
            guest_phys_addr: 0x100_0000 + i as u64 * 4096,
            memory_size: 4096,
            userspace_addr: 0x7000_0000_0000 + i as u64 * 4096,
            mmap_offset: i as u64 * 4096,
            mmap_handle: file.as_raw_fd(),
        };
        if fe.add_mem_region(&region).is_err() {
            refused = Some(i);
            break;
        }
        most = most.max(open_fds());
    }
    assert!(
        most <= base + MAX_MEM_REGIONS + SLACK,
        "{} regions mapped: {most} descriptors open, {base} before",
        refused.unwrap_or(ADDED)
    );
    // Cut off past the limit (a few more may be in flight when the connection goes).
    assert!(refused.is_some_and(|n| n >= MAX_MEM_REGIONS), "refused at {refused:?}");
    drop(fe);
    wait_until(&port, "the frontend was not disconnected", || port.vhost_stats().disconnections >= 1);
    assert_eq!(port.vhost_stats().frontend_too_many_regions, 1);
    let mut fe = Frontend::from_stream(connect(&socket), 2);
    negotiate(&mut fe);
    assert_eq!(fe.get_max_mem_slots().unwrap(), MAX_MEM_REGIONS as u64);
    drop(fe);

    // 2. A message spread over many sends, each carrying 32 descriptors: only those the
    // message takes, with its first bytes, are kept.
    let raw = connect(&socket);
    let (keep_open, _other) = UnixStream::pair().unwrap();
    let fds = [keep_open.as_raw_fd(); 32];
    let base = open_fds();
    let closed_before = port.vhost_stats().frontend_fds_closed;
    let mut hdr = Vec::new();
    for v in [5u32, 1, 200] {
        hdr.extend_from_slice(&v.to_le_bytes()); // SET_MEM_TABLE, version 1, 200 bytes
    }
    raw.send_with_fds(&[&hdr[..]], &fds).unwrap();
    for _ in 0..199 {
        raw.send_with_fds(&[&[0u8][..]], &fds).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    // 24 of the first send's (SET_MEM_TABLE takes 8), all of the others'.
    while port.vhost_stats().frontend_fds_closed < closed_before + 24 + 199 * 32 {
        assert!(
            open_fds() <= base + 32 + SLACK,
            "{} descriptors open, {base} before: the router holds what the frontend sent",
            open_fds()
        );
        assert!(Instant::now() < deadline, "{:?}", port.vhost_stats());
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(open_fds() <= base + 32 + SLACK, "{} descriptors open, {base} before", open_fds());
    drop(raw);

    // 3. The port still works for the next frontend.
    let mut guest = Guest::connect(&socket);
    guest.transmit([0; 12], &frame(60));
    let p = receive(&mut port, &mut pool, Duration::from_secs(5)).expect("a frame after the floods");
    assert_eq!(p.len(), 60);
}

#[test]
fn a_polled_port_keeps_the_guests_kicks_off_and_misses_no_frame_when_polling_stops() {
    let dir = TempDir::new("vhost-fe-poll");
    let socket = dir.path().join("g.sock");
    let mut port = VhostUserPort::open(0, "g", &socket, &VhostUserOptions::default()).unwrap();
    let mut pool = PacketPool::new(64);
    let mut guest = Guest::connect(&socket);
    let mut got = Vec::new();

    // Sleeping on the descriptor: kicks wanted, and a kick wakes the router.
    guest.transmit([0; 12], &frame(60));
    assert_eq!(receive(&mut port, &mut pool, Duration::from_secs(5)).expect("a kicked frame").len(), 60);
    assert!(!guest.kicks_off(), "kicks off while the router sleeps");
    // `receive` may have found the frame before the port's worker thread took the kick;
    // its eventfd write would then land during the polling below. Wait for both wake-ups
    // (the transmit queue's start, then the kick), and take them with an empty receive.
    wait_until(&port, "the transmit queue's two wake-ups", || port.vhost_stats().tx_queue_wakeups >= 2);
    port.recv_batch(&mut pool, &mut got, 64).unwrap();
    assert!(got.is_empty());
    assert!(!vmpls_testkit::wait_readable(&port, Duration::ZERO), "the wake-ups were not taken");

    // Polled: the kicks go off, and frames queued without one are received all the same.
    assert!(!port.set_polling(true));
    for len in [61, 62] {
        guest.queue([0; 12], &frame(len));
        port.recv_batch(&mut pool, &mut got, 64).unwrap();
        assert_eq!(got.drain(..).map(|p| p.len()).collect::<Vec<_>>(), [len]);
        assert!(guest.kicks_off(), "the guest is asked for no kicks while the router polls");
    }
    assert!(!vmpls_testkit::wait_readable(&port, Duration::ZERO), "no kick, no eventfd write");

    // A frame queued (without a kick) just before the polling stops: the router is told
    // to receive before it sleeps, else the frame would wait for the guest's next kick.
    guest.queue([0; 12], &frame(63));
    assert!(port.set_polling(false), "a frame queued without a kick was not reported");
    assert!(!guest.kicks_off(), "kicks back on once the router sleeps");
    port.recv_batch(&mut pool, &mut got, 64).unwrap();
    assert_eq!(got.drain(..).map(|p| p.len()).collect::<Vec<_>>(), [63]);

    // Nothing queued: nothing reported, and a kick after the switch wakes the sleeper.
    assert!(!port.set_polling(true));
    assert!(!port.set_polling(false));
    assert!(!port.set_polling(false), "not polling: nothing to stop");
    guest.transmit([0; 12], &frame(64));
    assert!(vmpls_testkit::wait_readable(&port, Duration::from_secs(2)), "the kick did not wake the router");
    port.recv_batch(&mut pool, &mut got, 64).unwrap();
    assert_eq!(got.drain(..).map(|p| p.len()).collect::<Vec<_>>(), [64]);
    assert_eq!(port.stats().rx_packets, 5);
    assert_eq!(port.stats().rx_dropped(), 0);
    drop(guest);
}

#[test]
fn the_receive_queue_asks_for_no_kicks() {
    // While no frame waits for receive buffers, a kick after the guest posts buffers would
    // only wake the port's worker (and make a QEMU guest exit): the first event of the
    // queue (its start) turns them off, until frames wait.
    let dir = TempDir::new("vhost-fe-rxkick");
    let socket = dir.path().join("g.sock");
    let port = VhostUserPort::open(0, "g", &socket, &VhostUserOptions::default()).unwrap();
    let guest = Guest::connect(&socket);
    wait_until(&port, "receive-queue kicks still wanted", || guest.rx_kicks_off());
    let started = port.vhost_stats().rx_queue_events;
    assert!(started >= 1);
    // A driver that kicks all the same is heard, and still asked for none.
    guest.kick_rx.write(1).unwrap();
    wait_until(&port, "the driver's kick", || port.vhost_stats().rx_queue_events != started);
    assert!(guest.rx_kicks_off());
    assert!(!guest.kicks_off(), "the transmit queue's kicks are the router's to switch, not this");
}

/// The frames to send, in buffers of `pool`: `n` of them, each `len` bytes, numbered in
/// byte 20.
fn numbered(pool: &mut PacketPool, n: usize, len: usize) -> Vec<Packet> {
    (0..n)
        .map(|i| {
            let mut f = frame(len);
            f[20] = i as u8;
            let mut p = pool.get().expect("a buffer");
            p.receive_area()[..len].copy_from_slice(&f);
            p.set_received(len);
            p
        })
        .collect()
}

#[test]
fn frames_wait_for_a_full_receive_ring_and_go_in_order_when_the_guest_posts_buffers() {
    // A guest slower than its traffic fills its receive ring; QEMU's tap backend leaves
    // the frames in the TAP's queue then, and so does the port, bounded.
    const POOL: usize = 1024;
    let dir = TempDir::new("vhost-fe-wait");
    let socket = dir.path().join("g.sock");
    let mut port = VhostUserPort::open(0, "g", &socket, &VhostUserOptions::default()).unwrap();
    let mut pool = PacketPool::new(POOL);
    let mut guest = Guest::connect(&socket);
    let mut got = Vec::new();
    wait_until(&port, "the queue did not start", || guest.rx_kicks_off());
    // Take the transmit queue's start, so only the receive queue wakes the port below.
    wait_until(&port, "the transmit queue's start", || port.vhost_stats().tx_queue_wakeups >= 1);
    port.recv_batch(&mut pool, &mut got, 64).unwrap();

    // No buffers: the frames wait, and the guest is asked to kick when it posts some.
    let mut batch = numbered(&mut pool, 5, 100);
    assert_eq!(port.send_batch(&mut batch, &mut pool).unwrap(), 0);
    assert!(batch.is_empty());
    let v = port.vhost_stats();
    assert_eq!((port.stats().tx_waited, v.tx_no_rx_buffers, port.stats().tx_dropped), (5, 0, 0), "{v:?}");
    assert!(!guest.rx_kicks_off(), "frames wait: the guest's next buffers must wake the port");
    assert_eq!(pool.available(), POOL - 5, "the waiting frames hold their buffers");

    // Three buffers and a kick: the kick wakes the sleeping router, the oldest three go.
    guest.post_rx_buffers(3);
    assert!(
        vmpls_testkit::wait_readable(&port, Duration::from_secs(2)),
        "the guest's kick did not wake the port"
    );
    port.recv_batch(&mut pool, &mut got, 64).unwrap();
    let order = |frames: Vec<Vec<u8>>| frames.iter().map(|f| (f.len(), f[20])).collect::<Vec<_>>();
    assert_eq!(order(guest.received()), [(100, 0), (100, 1), (100, 2)]);
    assert!(!guest.rx_kicks_off(), "two frames still wait");

    // A new frame goes behind the waiting ones, not before them.
    let mut late = numbered(&mut pool, 1, 200);
    port.send_batch(&mut late, &mut pool).unwrap();
    assert!(guest.received().is_empty());
    guest.post_rx_buffers(8);
    assert!(vmpls_testkit::wait_readable(&port, Duration::from_secs(2)));
    port.recv_batch(&mut pool, &mut got, 64).unwrap();
    assert_eq!(order(guest.received()), [(100, 3), (100, 4), (200, 0)]);
    assert!(guest.rx_kicks_off(), "nothing waits: no kicks wanted");
    assert_eq!(guest.received(), Vec::<Vec<u8>>::new());
    let s = port.stats();
    assert_eq!((s.tx_packets, s.tx_dropped), (6, 0), "{s:?}");
    assert_eq!(pool.available(), POOL);

    // Five buffers left: a batch beyond them and the bound is dropped past the bound,
    // counted, and the pool gets those buffers back at once.
    let mut flood = numbered(&mut pool, 5 + VHOST_USER_WAITING_FRAMES + 7, 60);
    port.send_batch(&mut flood, &mut pool).unwrap();
    assert_eq!(guest.received().len(), 5);
    let v = port.vhost_stats();
    assert_eq!(
        (port.stats().tx_waited, v.tx_no_rx_buffers),
        (6 + VHOST_USER_WAITING_FRAMES as u64, 7),
        "{v:?}"
    );
    assert_eq!(port.stats().tx_dropped, 7);
    assert_eq!(
        pool.available(),
        POOL - VHOST_USER_WAITING_FRAMES,
        "the waiting frames hold their buffers, the sent and dropped ones not"
    );

    // While the router polls it comes back without kicks: they go off, and when the
    // polling ends the port asks to be received from before the router sleeps.
    assert!(!port.set_polling(true));
    port.recv_batch(&mut pool, &mut got, 64).unwrap();
    assert!(guest.rx_kicks_off(), "a polling router needs no kicks");
    guest.post_rx_buffers(16);
    port.recv_batch(&mut pool, &mut got, 64).unwrap();
    assert_eq!(guest.received().len(), 16, "the polling router sent without a kick");
    assert!(port.set_polling(false), "frames wait: the router must look before it sleeps");
    port.recv_batch(&mut pool, &mut got, 64).unwrap();
    assert!(!guest.rx_kicks_off(), "the router sleeps and frames wait: kicks on again");
    assert!(got.is_empty());

    // The guest goes: what waited is dropped and counted, every buffer back in the pool.
    drop(guest);
    wait_until(&port, "the guest's disconnection", || port.vhost_stats().disconnections >= 1);
    port.recv_batch(&mut pool, &mut got, 64).unwrap();
    let v = port.vhost_stats();
    assert_eq!(v.tx_not_connected, VHOST_USER_WAITING_FRAMES as u64 - 16, "{v:?}");
    assert_eq!(pool.available(), POOL);
}

#[test]
fn frames_wait_only_while_the_pool_stays_half_free() {
    // Guests that stop taking frames must not take the buffers the other ports receive in.
    let dir = TempDir::new("vhost-fe-reserve");
    let socket = dir.path().join("g.sock");
    let mut port = VhostUserPort::open(0, "g", &socket, &VhostUserOptions::default()).unwrap();
    let mut pool = PacketPool::new(100);
    let guest = Guest::connect(&socket);
    wait_until(&port, "the queue did not start", || guest.rx_kicks_off());
    let mut batch = numbered(&mut pool, 80, 60);
    port.send_batch(&mut batch, &mut pool).unwrap();
    let v = port.vhost_stats();
    // 80 in flight, 20 free: a frame waits only while half the pool (50) is free, so the
    // first 30 are dropped (their buffers come back), the last 50 wait.
    assert_eq!((v.tx_no_rx_buffers, port.stats().tx_waited), (30, 50), "{v:?}");
    assert_eq!(pool.available(), 50);
    assert_eq!(port.stats().tx_dropped, 30);
    drop(guest);
}
