//! vmpls's one OS layer: every socket, ioctl and namespace call the router, its ports,
//! its fast path and its lab make, behind small typed functions.
//!
//! Built on [`rustix`] where rustix has the call (sockets, `poll`, `eventfd`, `readv`,
//! `setns`, mounts), so most of it is safe code. What rustix lacks (the `ifreq` and TUN
//! ioctls, `SOL_PACKET` options and `sockaddr_ll`, a signal handler, a `pre_exec` hook, `malloc_trim`, `getpwnam_r`)
//! is a few small `unsafe` blocks here, each with a `// SAFETY:` comment; the crates
//! above see safe functions only.
//!
//! - [`cpu`]: the prefetch instruction.
//! - [`cred`]: the process and user of a Unix socket's peer (`SO_PEERCRED`), the owner
//!   of a local TCP peer's socket (socket diagnostics), users by name.
//! - [`iface`]: interface names, indexes, flags, MAC, MTU, ethtool driver name.
//! - [`ip`]: raw ICMP sockets, TCP socket details.
//! - [`packet`]: `AF_PACKET` sockets: open, bind, send and receive single frames, the
//!   `SOL_PACKET` options vmpls uses.
//! - [`sockopt`]: plain `setsockopt`/`getsockopt` for options without a typed wrapper.
//! - [`udp`]: `UDP_SEGMENT` sends and `UDP_GRO` receives.
//! - [`tun`]: TUN/TAP devices: create, virtio-net header size, offloads, `readv`/`writev`.
//! - [`event`]: [`event::EventFd`] and `poll` helpers for forwarding loops.
//! - [`fs`]: private files written whole ([`fs::replace_file`]) or from the start
//!   ([`fs::create_private`]), never through a symbolic link.
//! - [`netns`]: entering and creating network namespaces, and spawning processes in one.
//! - [`signal`], [`process`]: signal handlers, root check, signals to processes, file
//!   locks, umask, giving freed heap memory back.

pub mod cpu;
pub mod cred;
pub mod event;
pub mod fs;
pub mod iface;
pub mod ip;
pub mod netns;
pub mod packet;
pub mod process;
pub mod signal;
pub mod sockopt;
pub mod tun;
pub mod udp;
pub mod unix;

pub use event::{EventFd, wait_readable};
pub use iface::{IfDetails, IfName, control_socket, if_indextoname, if_nametoindex};
