//! A memif port: frames to and from another process on this host through shared memory,
//! in the protocol of VPP's memif and DPDK's `net_memif` (version 2.0), so a vmpls router
//! talks to DPDK applications, VPP, or another vmpls router without the kernel.
//!
//! The control socket is a Unix `SOCK_SEQPACKET` socket: the server listens, the client
//! connects and creates the shared memory (one region holding the rings and the buffers,
//! laid out as DPDK's client does, [`ring::ClientLayout`]) and the rings' interrupt
//! eventfds, and hands them over ([`proto`]). One ring each way, index 0: client to
//! server (C2S) and server to client (S2C). A frame larger than one buffer (2 KiB)
//! crosses as a chain of descriptors (`MEMIF_DESC_FLAG_NEXT`), so a 64 KiB super-frame
//! crosses whole.
//!
//! Offloads: memif carries bare Ethernet frames. When both ends are vmpls (each says
//! so in the application name of its HELLO or INIT, [`APP_NAME`]), every frame is
//! preceded in the shared memory by its 10-byte virtio-net header, as on a TAP or
//! vhost-user port: TCP and UDP super-frames (labelled or not) and partial checksums
//! cross whole, and the port offers every offload ([`memif_caps`]). With any other
//! peer (DPDK, VPP) the port offers none, so the pipeline segments and completes
//! checksums before the frame reaches it. The offer follows the peer of the moment
//! (the router reads [`Port::info`]'s caps every turn).
//!
//! The port's descriptor ([`AsFd`]) is an epoll set of the listening socket (server),
//! the control connection, the receive ring's interrupt eventfd and a one-second timer
//! (a client retries the connection on it while the server is away; both look at the
//! receive ring again, in case the peer missed that its interrupts were wanted). While the
//! router polls ([`Port::set_polling`]) the receive ring's interrupts are masked
//! (`MEMIF_RING_FLAG_MASK_INT`) and the control socket is looked at every
//! [`CONTROL_CHECK_EVERY`] calls.
//!
//! A peer is not trusted: a malformed message, a ring or buffer outside its region, an
//! index that runs past the ring are a logged disconnect (the client retries) or a
//! counted drop, never a panic or a wait.

mod proto;
mod ring;
mod shm;

/// Decodes the hex the captures in the tests are written in (spaces and newlines apart).
#[cfg(test)]
fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::event::epoll;
use rustix::net::{AddressFamily, SocketFlags, SocketType};
use tracing::{info, warn};
use vmpls_dataplane::gso::{self, OffloadRefused};
use vmpls_dataplane::{Packet, PacketPool, PortCaps, PortId, PortInfo};
use vmpls_wire::virtio_net;

use self::proto::{AddRing, Message, Name};
use self::ring::{ClientLayout, Descriptor};
use self::shm::{Region, RingAt};
use crate::vhost_user::derived_mac;
use crate::{MIN_MTU, Port, PortError, PortStats};

/// The application name vmpls sends in HELLO and INIT; a peer whose name starts with it
/// exchanges virtio-net headers in band (see the module documentation).
pub const APP_NAME: &str = "vmpls vnet-hdr/1";
/// log2 of the ring size a client creates for a vmpls server (4096 descriptors, 8 MiB
/// of buffers each way: 128 super-frames).
pub const VMPLS_PEER_LOG2_RING_SIZE: u8 = 12;
/// The MTU of a memif port unless configured (DPDK's and VPP's default too).
pub const DEFAULT_MTU: u32 = 1500;
/// The largest MTU: a super-frame and its header fit any chain a 1024-descriptor ring holds.
pub const MAX_MTU: u32 = 65535 - 14;
/// While polling, the control socket is looked at once in this many receive calls.
pub const CONTROL_CHECK_EVERY: u32 = 256;
/// Most regions a client may add (DPDK's client adds one, or one per mempool with
/// zero-copy).
const MAX_REGIONS: usize = 16;
/// Largest region accepted from a client.
const MAX_REGION_LEN: u64 = 1 << 32;
/// The client's retry period while the server is not there.
const RETRY_EVERY: Duration = Duration::from_secs(1);

/// epoll tokens.
const LISTENER: u64 = 0;
const CONTROL: u64 = 1;
const RX_KICK: u64 = 2;
const TIMER: u64 = 3;

/// Which end of the control socket the port is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemifRole {
    /// Listens on the socket; the client brings the shared memory (VPP's and DPDK's
    /// "master", DPDK's `role=server`).
    Server,
    /// Connects to the socket, creates the shared memory (DPDK's default `role=client`).
    Client,
}

/// How to open a memif port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemifOptions {
    /// The control socket's path.
    pub socket: PathBuf,
    /// Server or client.
    pub role: MemifRole,
    /// The interface id both ends configure (one socket may serve several).
    pub id: u32,
    /// MTU; `None`: [`DEFAULT_MTU`].
    pub mtu: Option<u32>,
    /// The port's MAC; `None`: one derived from the socket path, id and role.
    pub mac: Option<[u8; 6]>,
    /// log2 of the ring size a client creates (DPDK's default 10: 1024 descriptors).
    pub log2_ring_size: u8,
    /// Bytes of each buffer a client creates (DPDK's default 2048).
    pub buffer_size: u32,
}

impl MemifOptions {
    /// Options with DPDK's defaults for the rings and buffers.
    pub fn new(socket: impl Into<PathBuf>, role: MemifRole, id: u32) -> MemifOptions {
        MemifOptions {
            socket: socket.into(),
            role,
            id,
            mtu: None,
            mac: None,
            log2_ring_size: 10,
            buffer_size: 2048,
        }
    }
}

/// What a memif port accepts at output: everything when its peer is vmpls (the frames
/// cross with their virtio-net header), nothing otherwise.
pub fn memif_caps(vmpls_peer: bool) -> PortCaps {
    if vmpls_peer {
        PortCaps { tso4: true, tso6: true, uso: true, csum: true, mpls_gso: true }
    } else {
        PortCaps::default()
    }
}

/// Counters of a memif port beyond [`PortStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemifStats {
    /// Connections completed.
    pub connects: u64,
    /// Connections ended (by either end, or for a protocol error).
    pub disconnects: u64,
    /// Connections refused or ended for something the peer sent or wrote wrong.
    pub protocol_errors: u64,
    /// Received frames dropped for a descriptor outside its region.
    pub rx_bad_descriptor: u64,
    /// Frames not sent for want of free descriptors (also in `tx_dropped`).
    pub tx_ring_full: u64,
    /// Frames not sent because they need an offload the peer cannot take (the peer
    /// changed between the pipeline's decision and the send; also in `tx_dropped`).
    pub tx_offload_refused: u64,
    /// Frames not sent because no peer was connected (also in `tx_dropped`).
    pub tx_not_connected: u64,
    /// Times the peer moved our own transmit index (DPDK resets the rings as it
    /// completes the handshake): we went on from where it put it.
    pub peer_ring_resets: u64,
}

/// A connection being set up.
struct Handshake {
    sock: OwnedFd,
    /// Server: INIT came (the next messages may follow).
    init: bool,
    /// The peer's application name (from HELLO or INIT).
    peer_name: Name,
    regions: Vec<Region>,
    /// The C2S and S2C rings with their interrupt eventfds.
    c2s: Option<(RingAt, OwnedFd)>,
    s2c: Option<(RingAt, OwnedFd)>,
    /// Client: messages to send, one per ACK, each with the fd it carries.
    outbox: VecDeque<(Message, Option<OwnedFd>)>,
    /// Client: the layout it made.
    layout: Option<ClientLayout>,
}

impl Handshake {
    fn new(sock: OwnedFd) -> Handshake {
        Handshake {
            sock,
            init: false,
            peer_name: Name::new(""),
            regions: Vec::new(),
            c2s: None,
            s2c: None,
            outbox: VecDeque::new(),
            layout: None,
        }
    }
}

/// A connected memif.
struct Link {
    sock: OwnedFd,
    regions: Vec<Region>,
    region_lens: Vec<usize>,
    rx: RingAt,
    tx: RingAt,
    rx_kick: OwnedFd,
    tx_kick: OwnedFd,
    /// The receive ring's next descriptor to read.
    rx_next: u16,
    /// The transmit ring's next descriptor to fill.
    tx_next: u16,
    /// Frames carry a virtio-net header (the peer is vmpls).
    vnet: bool,
    /// Client: its own layout (it owns every buffer).
    layout: Option<ClientLayout>,
}

enum State {
    Idle,
    Handshake(Box<Handshake>),
    Up(Box<Link>),
}

/// A memif port (see the module documentation).
pub struct MemifPort {
    info: PortInfo,
    opts: MemifOptions,
    epoll: OwnedFd,
    listener: Option<OwnedFd>,
    timer: OwnedFd,
    state: State,
    stats: PortStats,
    mstats: MemifStats,
    polling: bool,
    calls: u32,
}

impl std::fmt::Debug for MemifPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemifPort")
            .field("info", &self.info)
            .field("socket", &self.opts.socket)
            .field("role", &self.opts.role)
            .field("connected", &matches!(self.state, State::Up(_)))
            .finish()
    }
}

fn seqpacket() -> io::Result<OwnedFd> {
    Ok(rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )?)
}

fn unix_addr(path: &Path) -> io::Result<rustix::net::SocketAddrUnix> {
    Ok(rustix::net::SocketAddrUnix::new(path)?)
}

/// Listens on `path`, replacing a stale socket there (one nobody accepts on).
fn listen(path: &Path) -> io::Result<OwnedFd> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if !meta.file_type().is_socket() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "a file that is not a socket is in the way",
            ));
        }
        let probe = seqpacket()?;
        if rustix::net::connect(&probe, &unix_addr(path)?).is_ok() {
            return Err(io::Error::new(io::ErrorKind::AddrInUse, "another process listens on the socket"));
        }
        std::fs::remove_file(path)?;
    }
    let fd = seqpacket()?;
    rustix::net::bind(&fd, &unix_addr(path)?)?;
    rustix::net::listen(&fd, 4)?;
    Ok(fd)
}

fn send_message(sock: BorrowedFd<'_>, msg: &Message, fd: Option<BorrowedFd<'_>>) -> io::Result<()> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let bytes = msg.emit();
    let fds = fd.map(|f| [f]);
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if let Some(fds) = &fds {
        control.push(SendAncillaryMessage::ScmRights(fds));
    }
    rustix::net::sendmsg(
        sock,
        &[io::IoSlice::new(&bytes)],
        &mut control,
        SendFlags::NOSIGNAL | SendFlags::DONTWAIT,
    )?;
    Ok(())
}

/// A control message as received: decoded or not, with the fd it carried.
type Received = (Result<Message, proto::ProtoError>, Option<OwnedFd>);

/// One received control message: `Ok(None)` when nothing waits; an error of kind
/// `UnexpectedEof` when the peer closed.
fn recv_message(sock: BorrowedFd<'_>) -> io::Result<Option<Received>> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    let mut bytes = [0u8; proto::MESSAGE_LEN + 1];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = match rustix::net::recvmsg(
        sock,
        &mut [io::IoSliceMut::new(&mut bytes)],
        &mut control,
        RecvFlags::DONTWAIT | RecvFlags::CMSG_CLOEXEC,
    ) {
        Ok(r) => r,
        Err(rustix::io::Errno::AGAIN) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    if got.bytes == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    let mut fd = None;
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = m {
            // The first fd; any other is closed as it drops.
            for f in fds {
                fd.get_or_insert(f);
            }
        }
    }
    Ok(Some((Message::parse(&bytes[..got.bytes.min(bytes.len())]), fd)))
}

fn kick(fd: BorrowedFd<'_>) {
    // A full counter (EAGAIN) already wakes the peer.
    let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
}

fn drain(fd: BorrowedFd<'_>) {
    let mut b = [0u8; 8];
    let _ = rustix::io::read(fd, &mut b);
}

fn eventfd() -> io::Result<OwnedFd> {
    use rustix::event::EventfdFlags;
    Ok(rustix::event::eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)?)
}

impl MemifPort {
    /// Opens a memif port with index `id` and configured `name`: a server listens on the
    /// socket (a stale socket file is replaced; the socket is removed on drop), a client
    /// connects now if the server is there and retries every second while it is not.
    pub fn open(id: PortId, name: &str, opts: &MemifOptions) -> Result<MemifPort, PortError> {
        let shown = opts.socket.display().to_string();
        let io_err = |op: &'static str| {
            let shown = shown.clone();
            move |source: io::Error| PortError::Io { ifname: shown, op, source }
        };
        let mtu = opts.mtu.unwrap_or(DEFAULT_MTU);
        if mtu < MIN_MTU {
            return Err(PortError::MtuTooSmall { ifname: shown, requested: mtu });
        }
        if mtu > MAX_MTU {
            return Err(PortError::MtuTooLarge { ifname: shown, requested: mtu, interface_mtu: MAX_MTU });
        }
        let log2_ok = (1..=ring::MAX_LOG2_RING_SIZE).contains(&opts.log2_ring_size);
        if !log2_ok || opts.buffer_size < 128 || !opts.buffer_size.is_multiple_of(64) {
            return Err(io_err("check the ring and buffer sizes")(io::Error::new(
                io::ErrorKind::InvalidInput,
                "rings of 2^1..2^14 descriptors and buffers of a multiple of 64 bytes, at least 128",
            )));
        }
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)
            .map_err(|e| io_err("create an epoll set")(e.into()))?;
        let add = |fd: BorrowedFd<'_>, token| {
            epoll::add(&epoll, fd, epoll::EventData::new_u64(token), epoll::EventFlags::IN)
                .map_err(|e| io_err("add to the epoll set")(e.into()))
        };
        let mut seed = opts.socket.as_os_str().as_encoded_bytes().to_vec();
        seed.extend_from_slice(&opts.id.to_le_bytes());
        // The two ends of one memif share its socket and id: the role tells their MACs apart.
        seed.push(opts.role as u8);
        let info = PortInfo {
            id,
            name: name.to_owned(),
            mac: opts.mac.unwrap_or_else(|| derived_mac(&seed)),
            mtu,
            caps: memif_caps(false),
        };
        let listener = match opts.role {
            MemifRole::Server => {
                let l = listen(&opts.socket).map_err(io_err("listen on the memif socket"))?;
                add(l.as_fd(), LISTENER)?;
                Some(l)
            }
            MemifRole::Client => None,
        };
        // Every second: a client retries the connection while the server is away; both
        // look at the receive ring once more, since a peer may miss our unmasking of
        // interrupts (DPDK reads the ring flags right after publishing, with no fence),
        // and a frame must not wait for the next one to be received.
        let timer = {
            use rustix::time::{Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec};
            let t = rustix::time::timerfd_create(
                TimerfdClockId::Monotonic,
                TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
            )
            .map_err(|e| io_err("create a timer")(e.into()))?;
            let every = Timespec { tv_sec: RETRY_EVERY.as_secs() as i64, tv_nsec: 0 };
            rustix::time::timerfd_settime(
                &t,
                TimerfdTimerFlags::empty(),
                &Itimerspec { it_interval: every, it_value: every },
            )
            .map_err(|e| io_err("arm a timer")(e.into()))?;
            add(t.as_fd(), TIMER)?;
            t
        };
        let mut port = MemifPort {
            info,
            opts: opts.clone(),
            epoll,
            listener,
            timer,
            state: State::Idle,
            stats: PortStats::default(),
            mstats: MemifStats::default(),
            polling: false,
            calls: 0,
        };
        if opts.role == MemifRole::Client {
            port.try_connect();
        }
        Ok(port)
    }

    /// The memif counters.
    pub fn memif_stats(&self) -> MemifStats {
        self.mstats
    }

    /// True while a peer is connected.
    pub fn is_connected(&self) -> bool {
        matches!(self.state, State::Up(_))
    }

    fn try_connect(&mut self) {
        let Ok(sock) = seqpacket() else { return };
        let Ok(addr) = unix_addr(&self.opts.socket) else { return };
        // A Unix socket connects at once or not at all (no server yet: retried by the timer).
        if rustix::net::connect(&sock, &addr).is_err() {
            return;
        }
        if epoll::add(&self.epoll, &sock, epoll::EventData::new_u64(CONTROL), epoll::EventFlags::IN).is_ok() {
            self.state = State::Handshake(Box::new(Handshake::new(sock)));
        }
    }

    /// Looks at everything the epoll set reports: connections, control messages, the
    /// receive ring's interrupt, the retry timer.
    fn service_control(&mut self) {
        let mut events = Vec::with_capacity(4);
        if epoll::wait(
            &self.epoll,
            rustix::buffer::spare_capacity(&mut events),
            Some(&rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 }),
        )
        .is_err()
        {
            return;
        }
        for ev in events {
            match ev.data.u64() {
                LISTENER => self.accept(),
                CONTROL => self.read_control(),
                RX_KICK => {
                    if let State::Up(link) = &self.state {
                        drain(link.rx_kick.as_fd());
                    }
                }
                TIMER => {
                    drain(self.timer.as_fd());
                    if matches!(self.state, State::Idle) && self.opts.role == MemifRole::Client {
                        self.try_connect();
                    }
                }
                _ => {}
            }
        }
    }

    fn accept(&mut self) {
        let Some(l) = &self.listener else { return };
        let Ok(sock) = rustix::net::accept_with(l, SocketFlags::NONBLOCK | SocketFlags::CLOEXEC) else {
            return;
        };
        if !matches!(self.state, State::Idle) {
            let _ = send_message(sock.as_fd(), &Message::disconnect("interface already connected"), None);
            return;
        }
        let hello = Message::Hello(proto::Hello {
            name: Name::new(APP_NAME),
            min_version: proto::VERSION,
            max_version: proto::VERSION,
            max_region: (MAX_REGIONS - 1) as u16,
            // One ring each way.
            max_c2s_ring: 0,
            max_s2c_ring: 0,
            max_log2_ring_size: ring::MAX_LOG2_RING_SIZE,
        });
        if send_message(sock.as_fd(), &hello, None).is_err()
            || epoll::add(&self.epoll, &sock, epoll::EventData::new_u64(CONTROL), epoll::EventFlags::IN)
                .is_err()
        {
            return;
        }
        self.state = State::Handshake(Box::new(Handshake::new(sock)));
    }

    fn read_control(&mut self) {
        loop {
            let sock = match &self.state {
                State::Idle => return,
                State::Handshake(h) => h.sock.as_fd(),
                State::Up(l) => l.sock.as_fd(),
            };
            let (msg, fd) = match recv_message(sock) {
                Ok(None) => return,
                Ok(Some(m)) => m,
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    return self.disconnect("the peer closed the control socket", false);
                }
                Err(e) => return self.disconnect(&format!("reading the control socket failed: {e}"), false),
            };
            let result = match msg {
                Ok(Message::Disconnect { reason, .. }) => {
                    return self.disconnect(&format!("the peer disconnected: {reason}"), false);
                }
                Ok(m) => self.handle(m, fd),
                Err(e) => Err(e.to_string()),
            };
            if let Err(why) = result {
                self.mstats.protocol_errors += 1;
                return self.disconnect(&why, true);
            }
        }
    }

    /// Ends the connection (telling the peer why when `tell`), back to waiting for one.
    fn disconnect(&mut self, why: &str, tell: bool) {
        let state = std::mem::replace(&mut self.state, State::Idle);
        let (sock, was_up) = match &state {
            State::Idle => return,
            State::Handshake(h) => (h.sock.as_fd(), false),
            State::Up(l) => {
                let _ = epoll::delete(&self.epoll, &l.rx_kick);
                (l.sock.as_fd(), true)
            }
        };
        let _ = epoll::delete(&self.epoll, sock);
        if tell {
            let _ = send_message(sock, &Message::disconnect(why), None);
        }
        if was_up {
            self.mstats.disconnects += 1;
            info!(port = %self.info.name, socket = %self.opts.socket.display(), reason = why, "memif disconnected");
        } else {
            warn!(port = %self.info.name, socket = %self.opts.socket.display(), reason = why, "memif connection failed");
        }
        self.info.caps = memif_caps(false);
        self.polling_flags(false);
    }

    fn handle(&mut self, msg: Message, fd: Option<OwnedFd>) -> Result<(), String> {
        let State::Handshake(h) = &mut self.state else {
            return Err(format!("unexpected message {msg:?} on a connected memif"));
        };
        match (self.opts.role, msg) {
            (MemifRole::Client, Message::Hello(hello)) if h.layout.is_none() => {
                client_prepare(h, &hello, &self.opts, &self.info.name)?;
                client_send_next(h)
            }
            (MemifRole::Client, Message::Ack) if !h.outbox.is_empty() => client_send_next(h),
            (MemifRole::Client, Message::Connected { .. }) if h.outbox.is_empty() && h.layout.is_some() => {
                self.up();
                Ok(())
            }
            (MemifRole::Server, Message::Init(init)) if !h.init => {
                if init.version != proto::VERSION {
                    return Err(format!("memif version {:#06x} is not supported (2.0 is)", init.version));
                }
                if init.id != self.opts.id {
                    return Err(format!(
                        "interface id {} is not served here (this port is id {})",
                        init.id, self.opts.id
                    ));
                }
                if init.mode != proto::MODE_ETHERNET {
                    return Err("only the Ethernet mode is supported".into());
                }
                h.init = true;
                h.peer_name = init.name;
                ack(h)
            }
            (MemifRole::Server, Message::AddRegion { index, size }) if h.init => {
                let fd = fd.ok_or("a region came without its memory file")?;
                if usize::from(index) != h.regions.len() || h.regions.len() >= MAX_REGIONS {
                    return Err(format!("region {index} is out of order or one too many"));
                }
                if size > MAX_REGION_LEN {
                    return Err(format!("region {index} is larger than 4 GiB"));
                }
                let region = Region::map_peers(fd.as_fd(), size as usize)
                    .map_err(|e| format!("mapping region {index}: {e}"))?;
                h.regions.push(region);
                ack(h)
            }
            (MemifRole::Server, Message::AddRing(r)) if h.init => {
                let fd = fd.ok_or("a ring came without its interrupt eventfd")?;
                server_add_ring(h, &r, fd)?;
                ack(h)
            }
            (MemifRole::Server, Message::Connect { .. }) if h.c2s.is_some() && h.s2c.is_some() => {
                for (ring, _) in [&h.c2s, &h.s2c].into_iter().flatten() {
                    ring.check(&h.regions)?;
                }
                send_message(
                    h.sock.as_fd(),
                    &Message::Connected { if_name: Name::new(&self.info.name) },
                    None,
                )
                .map_err(|e| format!("sending CONNECTED failed: {e}"))?;
                self.up();
                Ok(())
            }
            (_, m) => Err(format!("unexpected message {m:?} during the handshake")),
        }
    }

    /// The handshake is complete: the rings are ours to use.
    fn up(&mut self) {
        let State::Handshake(h) = std::mem::replace(&mut self.state, State::Idle) else { return };
        let Handshake { sock, peer_name, regions, c2s, s2c, layout, .. } = *h;
        let (Some((c2s, c2s_kick)), Some((s2c, s2c_kick))) = (c2s, s2c) else { return };
        let ((rx, rx_kick), (tx, tx_kick)) = match self.opts.role {
            MemifRole::Server => ((c2s, c2s_kick), (s2c, s2c_kick)),
            MemifRole::Client => ((s2c, s2c_kick), (c2s, c2s_kick)),
        };
        // Each side's own index: the client produces C2S at head and consumes S2C at
        // tail; the server the other way round. Both start where the ring stands.
        let (rx_next, tx_next) = match self.opts.role {
            MemifRole::Server => (rx.tail(&regions), tx.tail(&regions)),
            MemifRole::Client => (rx.tail(&regions), tx.head(&regions)),
        };
        let vnet = is_vmpls(&peer_name);
        if epoll::add(&self.epoll, &rx_kick, epoll::EventData::new_u64(RX_KICK), epoll::EventFlags::IN)
            .is_err()
        {
            let _ = epoll::delete(&self.epoll, &sock);
            return;
        }
        let region_lens = shm::region_lens(&regions);
        info!(
            port = %self.info.name,
            socket = %self.opts.socket.display(),
            peer = %peer_name,
            offloads = vnet,
            "memif connected"
        );
        self.state = State::Up(Box::new(Link {
            sock,
            regions,
            region_lens,
            rx,
            tx,
            rx_kick,
            tx_kick,
            rx_next,
            tx_next,
            vnet,
            layout,
        }));
        if let State::Up(link) = &self.state {
            // A DPDK server emptied the rings as it took our CONNECT: give it our
            // buffers now, not at the first receive, or it cannot send until then.
            link.refill();
        }
        self.info.caps = memif_caps(vnet);
        self.mstats.connects += 1;
        let polling = self.polling;
        self.polling_flags(polling);
    }

    /// Masks the receive ring's interrupts while polling.
    fn polling_flags(&mut self, on: bool) {
        if let State::Up(l) = &self.state {
            l.rx.set_flags(&l.regions, if on { ring::RING_FLAG_MASK_INT } else { 0 });
            // The flag's store before the ring's index is read again (`set_polling`):
            // else a frame the peer publishes meanwhile, seeing the old flag, would
            // come with no interrupt and go unseen until the next one.
            std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        }
    }
}

fn ack(h: &Handshake) -> Result<(), String> {
    send_message(h.sock.as_fd(), &Message::Ack, None).map_err(|e| format!("sending ACK failed: {e}"))
}

fn server_add_ring(h: &mut Handshake, r: &AddRing, fd: OwnedFd) -> Result<(), String> {
    if r.index != 0 {
        return Err(format!("ring {} refused: one ring each way (HELLO said so)", r.index));
    }
    if r.private_hdr_size != 0 {
        return Err("rings with a private header are not supported".into());
    }
    if r.log2_ring_size == 0 || r.log2_ring_size > ring::MAX_LOG2_RING_SIZE {
        return Err(format!("a ring of 2^{} descriptors is refused", r.log2_ring_size));
    }
    let at = RingAt { region: usize::from(r.region), offset: r.offset as usize, log2_size: r.log2_ring_size };
    let slot = if r.c2s { &mut h.c2s } else { &mut h.s2c };
    if slot.is_some() {
        return Err("a ring was added twice".into());
    }
    *slot = Some((at, fd));
    Ok(())
}

/// The peer is a vmpls router (its application name says so): frames carry virtio-net
/// headers, super-frames cross whole.
fn is_vmpls(peer_name: &Name) -> bool {
    peer_name.as_bytes().starts_with(APP_NAME.as_bytes())
}

/// The client's answer to HELLO: creates the region, its rings and eventfds, and queues
/// INIT, ADD_REGION, ADD_RING (C2S, S2C) and CONNECT.
fn client_prepare(
    h: &mut Handshake,
    hello: &proto::Hello,
    opts: &MemifOptions,
    if_name: &str,
) -> Result<(), String> {
    if hello.min_version > proto::VERSION || hello.max_version < proto::VERSION {
        return Err(format!(
            "the server speaks memif {:#06x}..{:#06x}, not 2.0",
            hello.min_version, hello.max_version
        ));
    }
    // Between two vmpls routers super-frames cross whole, up to 32 buffers each, and
    // DPDK's 1024-descriptor ring holds 32 of them: a vmpls server gets a bigger one.
    let log2_ring_size = if is_vmpls(&hello.name) {
        opts.log2_ring_size.max(VMPLS_PEER_LOG2_RING_SIZE)
    } else {
        opts.log2_ring_size
    };
    let layout = ClientLayout {
        log2_ring_size: log2_ring_size.min(hello.max_log2_ring_size).max(1),
        buffer_size: opts.buffer_size,
        rings_per_direction: 1,
    };
    let (region, region_fd) = Region::create("vmpls-memif", layout.region_len())
        .map_err(|e| format!("creating the shared memory failed: {e}"))?;
    let regions = vec![region];
    let ring_at =
        |c2s| RingAt { region: 0, offset: layout.ring_offset(c2s, 0), log2_size: layout.log2_ring_size };
    let (c2s, s2c) = (ring_at(true), ring_at(false));
    for (ring, is_c2s) in [(c2s, true), (s2c, false)] {
        ring.init(&regions);
        for slot in 0..layout.ring_size() {
            let d = Descriptor {
                region: 0,
                length: layout.buffer_size,
                offset: layout.buffer_offset(is_c2s, 0, slot) as u32,
                ..Descriptor::default()
            };
            ring.set_descriptor(&regions, slot, &d);
        }
    }
    // Every S2C buffer is handed to the server from the start.
    s2c.set_head(&regions, layout.ring_size());
    let kick = || eventfd().map_err(|e| format!("creating an eventfd failed: {e}"));
    let (c2s_kick, s2c_kick) = (kick()?, kick()?);
    let dup = |fd: &OwnedFd| fd.try_clone().map_err(|e| format!("duplicating an fd failed: {e}"));
    let add_ring = |c2s| AddRing {
        c2s,
        index: 0,
        region: 0,
        offset: layout.ring_offset(c2s, 0) as u32,
        log2_ring_size: layout.log2_ring_size,
        private_hdr_size: 0,
    };
    h.outbox = VecDeque::from([
        (
            Message::Init(proto::Init {
                version: proto::VERSION,
                id: opts.id,
                mode: proto::MODE_ETHERNET,
                secret: [0; proto::SECRET_LEN],
                name: Name::new(APP_NAME),
            }),
            None,
        ),
        (Message::AddRegion { index: 0, size: layout.region_len() as u64 }, Some(region_fd)),
        (Message::AddRing(add_ring(true)), Some(dup(&c2s_kick)?)),
        (Message::AddRing(add_ring(false)), Some(dup(&s2c_kick)?)),
        (Message::Connect { if_name: Name::new(if_name) }, None),
    ]);
    h.peer_name = hello.name;
    h.regions = regions;
    h.c2s = Some((c2s, c2s_kick));
    h.s2c = Some((s2c, s2c_kick));
    h.layout = Some(layout);
    Ok(())
}

/// Sends the client's next queued message (the server ACKs each before the next).
fn client_send_next(h: &mut Handshake) -> Result<(), String> {
    let Some((msg, fd)) = h.outbox.pop_front() else { return Ok(()) };
    send_message(h.sock.as_fd(), &msg, fd.as_ref().map(|f| f.as_fd()))
        .map_err(|e| format!("sending {msg:?} failed: {e}"))
}

impl Link {
    /// The receive ring's producer index: the client reads S2C up to `tail`, the server
    /// C2S up to `head`.
    fn rx_produced(&self) -> u16 {
        if self.layout.is_some() { self.rx.tail(&self.regions) } else { self.rx.head(&self.regions) }
    }

    /// Frames received, or the reason to disconnect.
    fn receive(
        &mut self,
        port: PortId,
        pool: &mut PacketPool,
        out: &mut Vec<Packet>,
        max: usize,
        stats: &mut PortStats,
        mstats: &mut MemifStats,
    ) -> Result<usize, String> {
        let size = self.rx.size();
        let ready = ring::ready(self.rx_next, self.rx_produced(), size).map_err(|e| e.to_string())?;
        let end = self.rx_next.wrapping_add(ready);
        let mut cur = self.rx_next;
        let mut got = 0;
        let skip = if self.vnet { virtio_net::HEADER_LEN } else { 0 };
        let first = out.len();
        let mut broken = false;
        while cur != end && got < max {
            let mut pkt = pool.get();
            // The header (a vmpls peer's) lands in the headroom, the frame after it: one
            // copy a buffer.
            let mut area = pkt.as_mut().map(|p| p.receive_area_after(skip));
            let (mut len, mut bad, mut truncated, mut runaway) = (0usize, false, false, false);
            loop {
                if cur == end {
                    runaway = true;
                    break;
                }
                let d = self.rx.descriptor(&self.regions, cur);
                cur = cur.wrapping_add(1);
                match d.buffer(d.length, &self.region_lens) {
                    Err(_) => bad = true,
                    Ok(range) => {
                        let region = &self.regions[usize::from(d.region)];
                        let n = range.end - range.start;
                        if let Some(area) = area.as_deref_mut() {
                            match area.get_mut(len..len + n) {
                                Some(to) => {
                                    region.read(range.start, to);
                                }
                                None => truncated = true,
                            }
                        }
                        len += n;
                    }
                }
                if !d.has_next() {
                    break;
                }
            }
            if runaway {
                if let Some(p) = pkt {
                    pool.put(p);
                }
                broken = true;
                break;
            }
            let Some(mut p) = pkt else {
                stats.rx_no_buffer += 1;
                continue;
            };
            let frame_len = len.saturating_sub(skip);
            if bad || truncated || len < skip + 14 {
                if bad {
                    mstats.rx_bad_descriptor += 1;
                } else {
                    stats.rx_truncated += 1;
                }
                pool.put(p);
                continue;
            }
            p.set_received(frame_len);
            p.port = port;
            out.push(p);
            got += 1;
        }
        // The headers, once every copy is done.
        let vnet = self.vnet;
        got = crate::keep_received(out, first, pool, |p| {
            let frame_len = p.len();
            let offload = match vnet {
                false => Ok(virtio_net::Repr::default()),
                true => gso::received_offload(p.received_prefix(skip), frame_len),
            };
            match offload {
                Ok(o) => {
                    p.offload = o;
                    stats.rx_packets += 1;
                    stats.rx_bytes += frame_len as u64;
                    true
                }
                Err(OffloadRefused::GsoSizeTooSmall) => {
                    stats.rx_gso_size_too_small += 1;
                    false
                }
                Err(OffloadRefused::BadHeader) => {
                    stats.rx_bad_vnet_hdr += 1;
                    false
                }
            }
        });
        if broken {
            // The frames before it are delivered; the link goes down.
            return Err("a frame's descriptor chain runs past the ring's ready descriptors".into());
        }
        self.rx_next = cur;
        match self.layout {
            // Server: the client may reuse what we read.
            None => self.rx.set_tail(&self.regions, cur),
            // Client: hand the read buffers back to the server, empty.
            Some(_) => self.refill(),
        }
        if cur != end {
            // More than one batch waits: stay readable so an interrupt-driven loop comes back.
            kick(self.rx_kick.as_fd());
        }
        Ok(got)
    }

    /// Client: hands every buffer of the server-to-client ring not holding an unread
    /// frame back to the server, empty (descriptors rewritten whole: what the server
    /// wrote there is not trusted), up to a ring's worth past what we read.
    fn refill(&self) {
        let Some(layout) = self.layout else { return };
        let target = self.rx_next.wrapping_add(layout.ring_size());
        let mut slot = self.rx.head(&self.regions);
        while slot != target {
            let d = Descriptor {
                region: 0,
                length: layout.buffer_size,
                offset: layout.buffer_offset(false, 0, slot & (layout.ring_size() - 1)) as u32,
                ..Descriptor::default()
            };
            self.rx.set_descriptor(&self.regions, slot, &d);
            slot = slot.wrapping_add(1);
        }
        self.rx.set_head(&self.regions, target);
    }

    /// Writes `bytes` (the header, then the frame) into descriptors from `slot` on, at
    /// most `free` of them. Returns the next slot, or `None` when they do not fit.
    fn write_chain(&self, mut slot: u16, free: u16, parts: [&[u8]; 2]) -> Result<Option<u16>, String> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let (mut done, mut used) = (0usize, 0u16);
        let (mut part, mut in_part) = (0usize, 0usize);
        while done < total || used == 0 {
            if used == free {
                return Ok(None);
            }
            let mut d = match self.layout {
                Some(layout) => Descriptor {
                    region: 0,
                    length: layout.buffer_size,
                    offset: layout.buffer_offset(true, 0, slot & (layout.ring_size() - 1)) as u32,
                    ..Descriptor::default()
                },
                None => self.tx.descriptor(&self.regions, slot),
            };
            let range = d
                .buffer(d.length, &self.region_lens)
                .map_err(|e| format!("the peer's transmit ring: {e}"))?;
            if range.is_empty() {
                return Err("the peer handed out an empty buffer".into());
            }
            let region = &self.regions[usize::from(d.region)];
            let mut at = range.start;
            while at < range.end && done < total {
                let src = &parts[part][in_part..];
                let n = src.len().min(range.end - at);
                region.write(at, &src[..n]);
                (at, done, in_part) = (at + n, done + n, in_part + n);
                if in_part == parts[part].len() && part + 1 < parts.len() {
                    (part, in_part) = (part + 1, 0);
                }
            }
            d.length = (at - range.start) as u32;
            d.flags = if done < total { ring::DESC_FLAG_NEXT } else { 0 };
            d.metadata = 0;
            self.tx.set_descriptor(&self.regions, slot, &d);
            slot = slot.wrapping_add(1);
            used += 1;
        }
        Ok(Some(slot))
    }

    /// Sends what fits; returns (sent, dropped for want of room, dropped for offloads),
    /// or the reason to disconnect.
    fn send(
        &mut self,
        pkts: &mut Vec<Packet>,
        pool: &mut PacketPool,
        stats: &mut PortStats,
        mstats: &mut MemifStats,
    ) -> Result<(), String> {
        let size = self.tx.size();
        // Our own index of the transmit ring (the client's head, the server's tail) is
        // ours alone to move, but DPDK's memif_connect sets both indices of both rings
        // to 0 when its side of the handshake completes: for a DPDK client, after our
        // CONNECTED went out and we may have sent already. Start again from where the
        // ring says (frames sent before the reset are lost; none are sent twice).
        let own =
            if self.layout.is_some() { self.tx.head(&self.regions) } else { self.tx.tail(&self.regions) };
        if own != self.tx_next {
            mstats.peer_ring_resets += 1;
            self.tx_next = own;
        }
        // Descriptors we may fill: the client up to the server's tail plus the ring, the
        // server up to the client's head.
        let mut free = match self.layout {
            Some(_) => {
                size - ring::ready(self.tx.tail(&self.regions), self.tx_next, size)
                    .map_err(|e| e.to_string())?
            }
            None => {
                ring::ready(self.tx_next, self.tx.head(&self.regions), size).map_err(|e| e.to_string())?
            }
        };
        let mut slot = self.tx_next;
        let mut sent = 0;
        let mut failure = None;
        for mut pkt in pkts.drain(..) {
            if failure.is_some() {
                stats.tx_dropped += 1;
                pool.put(pkt);
                continue;
            }
            let mut hdr = [0u8; virtio_net::HEADER_LEN];
            let hdr_len = if self.vnet {
                pkt.offload.emit(&mut virtio_net::Header::new_unchecked(&mut hdr[..]));
                virtio_net::HEADER_LEN
            } else {
                if pkt.offload.is_gso()
                    || (pkt.offload.needs_csum && gso::complete_checksum(&mut pkt).is_err())
                {
                    mstats.tx_offload_refused += 1;
                    stats.tx_dropped += 1;
                    pool.put(pkt);
                    continue;
                }
                0
            };
            match self.write_chain(slot, free, [&hdr[..hdr_len], pkt.frame()]) {
                Ok(Some(next)) => {
                    free -= next.wrapping_sub(slot);
                    slot = next;
                    sent += 1;
                    stats.tx_packets += 1;
                    stats.tx_bytes += pkt.len() as u64;
                }
                Ok(None) => {
                    mstats.tx_ring_full += 1;
                    stats.tx_dropped += 1;
                }
                Err(why) => {
                    stats.tx_dropped += 1;
                    failure = Some(why);
                }
            }
            pool.put(pkt);
        }
        if sent > 0 {
            self.tx_next = slot;
            match self.layout {
                Some(_) => self.tx.set_head(&self.regions, slot),
                None => self.tx.set_tail(&self.regions, slot),
            }
            if self.tx.flags(&self.regions) & ring::RING_FLAG_MASK_INT == 0 {
                kick(self.tx_kick.as_fd());
            }
        }
        failure.map_or(Ok(()), Err)
    }
}

impl AsFd for MemifPort {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.epoll.as_fd()
    }
}

impl Drop for MemifPort {
    fn drop(&mut self) {
        self.disconnect("the router closed the port", true);
        if self.listener.is_some() {
            let _ = std::fs::remove_file(&self.opts.socket);
        }
    }
}

impl Port for MemifPort {
    fn info(&self) -> &PortInfo {
        &self.info
    }

    fn recv_batch(&mut self, pool: &mut PacketPool, out: &mut Vec<Packet>, max: usize) -> io::Result<usize> {
        self.calls = self.calls.wrapping_add(1);
        if !self.polling || self.calls.is_multiple_of(CONTROL_CHECK_EVERY) {
            self.service_control();
        }
        let State::Up(link) = &mut self.state else { return Ok(0) };
        match link.receive(self.info.id, pool, out, max, &mut self.stats, &mut self.mstats) {
            Ok(n) => Ok(n),
            Err(why) => {
                self.mstats.protocol_errors += 1;
                self.disconnect(&why, true);
                Ok(0)
            }
        }
    }

    fn send_batch(&mut self, pkts: &mut Vec<Packet>, pool: &mut PacketPool) -> io::Result<usize> {
        let before = self.stats.tx_packets;
        let State::Up(link) = &mut self.state else {
            self.mstats.tx_not_connected += pkts.len() as u64;
            self.stats.tx_dropped += pkts.len() as u64;
            for p in pkts.drain(..) {
                pool.put(p);
            }
            return Ok(0);
        };
        if let Err(why) = link.send(pkts, pool, &mut self.stats, &mut self.mstats) {
            self.mstats.protocol_errors += 1;
            self.disconnect(&why, true);
        }
        Ok((self.stats.tx_packets - before) as usize)
    }

    fn stats(&self) -> PortStats {
        self.stats
    }

    fn set_polling(&mut self, on: bool) -> bool {
        self.polling = on;
        self.polling_flags(on);
        match &self.state {
            State::Up(l) if !on => ring::ready(l.rx_next, l.rx_produced(), l.rx.size()).is_ok_and(|n| n > 0),
            _ => false,
        }
    }

    fn polls_rings(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    //! A hostile client played by hand against a server port: what it sends or writes
    //! wrong is a counted drop or a disconnect, and the port serves the next client.

    use super::*;

    struct Fake {
        sock: OwnedFd,
    }

    impl Fake {
        fn connect(path: &Path) -> Fake {
            let sock = seqpacket().unwrap();
            rustix::net::connect(&sock, &unix_addr(path).unwrap()).unwrap();
            Fake { sock }
        }

        fn send(&self, msg: &Message, fd: Option<BorrowedFd<'_>>) {
            send_message(self.sock.as_fd(), msg, fd).unwrap();
        }

        /// The server's next message, turning the server meanwhile (within 2 s).
        fn expect(&self, server: &mut MemifPort, pool: &mut PacketPool) -> Message {
            let deadline = std::time::Instant::now() + Duration::from_secs(2);
            loop {
                turn(server, pool);
                if let Some((m, _)) = recv_message(self.sock.as_fd()).unwrap() {
                    return m.unwrap();
                }
                assert!(std::time::Instant::now() < deadline, "no answer from the server");
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }

    fn turn(server: &mut MemifPort, pool: &mut PacketPool) -> usize {
        let mut out = Vec::new();
        let n = server.recv_batch(pool, &mut out, 64).unwrap();
        for p in out {
            pool.put(p);
        }
        n
    }

    fn server(tag: &str) -> (MemifPort, PathBuf) {
        let dir = std::env::temp_dir().join(format!("vmpls-memif-unit-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.sock");
        (MemifPort::open(0, "s", &MemifOptions::new(&path, MemifRole::Server, 0)).unwrap(), path)
    }

    #[test]
    fn the_two_ends_of_one_memif_have_different_macs() {
        let (s, path) = server("macs");
        let c = MemifPort::open(1, "c", &MemifOptions::new(&path, MemifRole::Client, 0)).unwrap();
        assert_ne!(s.info().mac, c.info().mac, "both ends would answer ARP with the same MAC");
        // Derived, not random: a restarted router keeps its neighbours' caches valid.
        let again = MemifPort::open(2, "c", &MemifOptions::new(&path, MemifRole::Client, 0)).unwrap();
        assert_eq!(c.info().mac, again.info().mac);
        drop((s, c, again));
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn an_unknown_message_disconnects_and_the_next_client_is_served() {
        let (mut s, path) = server("unknown");
        let mut pool = PacketPool::new(8);
        let fake = Fake::connect(&path);
        assert!(matches!(fake.expect(&mut s, &mut pool), Message::Hello(_)));
        let mut junk = [0u8; proto::MESSAGE_LEN];
        junk[0] = 99;
        rustix::net::send(&fake.sock, &junk, rustix::net::SendFlags::empty()).unwrap();
        assert!(matches!(fake.expect(&mut s, &mut pool), Message::Disconnect { .. }));
        assert_eq!(s.memif_stats().protocol_errors, 1);
        // A message before INIT is refused too; a new client is greeted again.
        let fake = Fake::connect(&path);
        assert!(matches!(fake.expect(&mut s, &mut pool), Message::Hello(_)));
        fake.send(&Message::Connect { if_name: Name::new("x") }, None);
        assert!(matches!(fake.expect(&mut s, &mut pool), Message::Disconnect { .. }));
        assert_eq!(s.memif_stats().protocol_errors, 2);
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    /// A client played by hand, connected to `s` with one ring each way of 16 buffers in
    /// its one region, as `name` (a vmpls peer's name gets the virtio-net header).
    struct Connected {
        fake: Fake,
        layout: ClientLayout,
        regions: Vec<Region>,
        c2s: RingAt,
        _kicks: (OwnedFd, OwnedFd),
    }

    fn connected(s: &mut MemifPort, pool: &mut PacketPool, path: &Path, name: &str) -> Connected {
        let fake = Fake::connect(path);
        assert!(matches!(fake.expect(s, pool), Message::Hello(_)));
        let layout = ClientLayout { log2_ring_size: 4, buffer_size: 2048, rings_per_direction: 1 };
        let (region, region_fd) = Region::create("test", layout.region_len()).unwrap();
        let regions = vec![region];
        let ring = |c2s| RingAt { region: 0, offset: layout.ring_offset(c2s, 0), log2_size: 4 };
        let (c2s, s2c) = (ring(true), ring(false));
        c2s.init(&regions);
        s2c.init(&regions);
        let (k1, k2) = (eventfd().unwrap(), eventfd().unwrap());
        let init = proto::Init {
            version: proto::VERSION,
            id: 0,
            mode: proto::MODE_ETHERNET,
            secret: [0; proto::SECRET_LEN],
            name: Name::new(name),
        };
        let add_ring = |c2s| AddRing {
            c2s,
            index: 0,
            region: 0,
            offset: layout.ring_offset(c2s, 0) as u32,
            log2_ring_size: 4,
            private_hdr_size: 0,
        };
        for (msg, fd) in [
            (Message::Init(init), None),
            (Message::AddRegion { index: 0, size: layout.region_len() as u64 }, Some(region_fd.as_fd())),
            (Message::AddRing(add_ring(true)), Some(k1.as_fd())),
            (Message::AddRing(add_ring(false)), Some(k2.as_fd())),
        ] {
            fake.send(&msg, fd);
            assert_eq!(fake.expect(s, pool), Message::Ack, "after {msg:?}");
        }
        fake.send(&Message::Connect { if_name: Name::new("fake0") }, None);
        assert!(matches!(fake.expect(s, pool), Message::Connected { .. }));
        assert!(s.is_connected());
        Connected { fake, layout, regions, c2s, _kicks: (k1, k2) }
    }

    #[test]
    fn a_batch_keeps_its_good_frames_in_order_around_refused_headers() {
        let (mut s, path) = server("headers");
        let mut pool = PacketPool::new(16);
        let c = connected(&mut s, &mut pool, &path, APP_NAME);
        // Five frames of a vmpls peer, each with its virtio-net header in front: the
        // second with an unknown gso_type, the fourth a super-frame of 1-byte segments.
        let mut tso = [0u8; virtio_net::HEADER_LEN];
        tso[..8].copy_from_slice(&[1, 1, 66, 0, 1, 0, 34, 0]);
        tso[8] = 16;
        let mut unknown = [0u8; virtio_net::HEADER_LEN];
        unknown[1] = 2;
        for i in 0..5u16 {
            let hdr = match i {
                1 => unknown,
                3 => tso,
                _ => [0; virtio_net::HEADER_LEN],
            };
            let frame = vec![i as u8; 100 + usize::from(i)];
            let offset = c.layout.buffer_offset(true, 0, i);
            assert!(c.regions[0].write(offset, &hdr));
            assert!(c.regions[0].write(offset + hdr.len(), &frame));
            let length = (hdr.len() + frame.len()) as u32;
            c.c2s.set_descriptor(
                &c.regions,
                i,
                &Descriptor { region: 0, offset: offset as u32, length, ..Descriptor::default() },
            );
        }
        c.c2s.set_head(&c.regions, 5);
        // Another port's frame already in the output stays first.
        let mut out = vec![Packet::from_frame(9, &[0xaa; 64])];
        assert_eq!(s.recv_batch(&mut pool, &mut out, 64).unwrap(), 3);
        let got: Vec<(PortId, usize, u8)> = out.iter().map(|p| (p.port, p.len(), p.frame()[0])).collect();
        assert_eq!(got, [(9, 64, 0xaa), (0, 100, 0), (0, 102, 2), (0, 104, 4)]);
        let stats = s.stats();
        assert_eq!(
            (stats.rx_packets, stats.rx_bad_vnet_hdr, stats.rx_gso_size_too_small),
            (3, 1, 1),
            "{stats:?}"
        );
        drop(c.fake);
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn a_descriptor_outside_the_region_is_dropped_and_a_runaway_index_disconnects() {
        let (mut s, path) = server("hostile");
        let mut pool = PacketPool::new(8);
        let Connected { fake, layout, regions, c2s, _kicks } = connected(&mut s, &mut pool, &path, "fake");

        // A frame whose buffer runs past the end of the region: dropped, counted, read past.
        let outside = Descriptor {
            region: 0,
            offset: (layout.region_len() - 10) as u32,
            length: 100,
            ..Descriptor::default()
        };
        c2s.set_descriptor(&regions, 0, &outside);
        // And one naming a region that does not exist.
        c2s.set_descriptor(&regions, 1, &Descriptor { region: 3, length: 60, ..Descriptor::default() });
        c2s.set_head(&regions, 2);
        assert_eq!(turn(&mut s, &mut pool), 0);
        assert_eq!(s.memif_stats().rx_bad_descriptor, 2);
        assert_eq!(c2s.tail(&regions), 2, "the server moved past them");
        assert!(s.is_connected());

        // A head 17 ahead in a ring of 16: a broken peer, disconnected.
        c2s.set_head(&regions, 2 + 17);
        turn(&mut s, &mut pool);
        assert!(!s.is_connected());
        assert_eq!(s.memif_stats().protocol_errors, 1);
        assert!(matches!(fake.expect(&mut s, &mut pool), Message::Disconnect { .. }));
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }
}
