//! `vmpls capture PORT [-w FILE.pcap] [-c COUNT] [--filter label=N]`: what a running router
//! receives and sends on a port, as a pcap file (Ethernet link type, frames as on the
//! wire, super-frames whole) or one summary line per frame.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use vmpls_control::api::{CaptureStart, CapturedFrame, Direction, Request, base64_decode};
use vmpls_wire::ethernet::{EtherType, Frame};

use crate::session::{self, CliError, Globals};

/// The pcap snapshot length: the largest super-frame plus headers, whole.
pub const SNAPLEN: u32 = 262_144;
/// The pcap magic number of files whose timestamps are in nanoseconds.
const PCAP_NANOSECOND_MAGIC: u32 = 0xa1b2_3c4d;
/// pcap link type of Ethernet frames.
pub const LINKTYPE_ETHERNET: u32 = 1;

/// A pcap writer (libpcap 2.4 with nanosecond timestamps, magic `a1b23c4d`: the
/// router stamps frames in nanoseconds, and tcpdump, tshark and Wireshark read it).
pub struct PcapWriter<W: Write> {
    w: W,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the file header.
    ///
    /// # Errors
    /// The writer failed.
    pub fn new(mut w: W) -> std::io::Result<Self> {
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&PCAP_NANOSECOND_MAGIC.to_le_bytes());
        h.extend_from_slice(&2u16.to_le_bytes());
        h.extend_from_slice(&4u16.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes());
        h.extend_from_slice(&SNAPLEN.to_le_bytes());
        h.extend_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        w.write_all(&h)?;
        w.flush()?;
        Ok(PcapWriter { w })
    }

    /// Writes one frame and flushes, so the file is valid at every frame boundary.
    ///
    /// # Errors
    /// The writer failed.
    pub fn write(&mut self, ts_ns: u64, frame: &[u8]) -> std::io::Result<()> {
        let len = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        let incl = len.min(SNAPLEN);
        let mut rec = Vec::with_capacity(16 + incl as usize);
        rec.extend_from_slice(&((ts_ns / 1_000_000_000) as u32).to_le_bytes());
        rec.extend_from_slice(&((ts_ns % 1_000_000_000) as u32).to_le_bytes());
        rec.extend_from_slice(&incl.to_le_bytes());
        rec.extend_from_slice(&len.to_le_bytes());
        rec.extend_from_slice(&frame[..incl as usize]);
        self.w.write_all(&rec)?;
        self.w.flush()
    }
}

/// `HH:MM:SS.uuuuuu` (UTC) of a timestamp.
fn clock(ts_ns: u64) -> String {
    let s = ts_ns / 1_000_000_000;
    let us = ts_ns % 1_000_000_000 / 1000;
    format!("{:02}:{:02}:{:02}.{us:06}", s / 3600 % 24, s / 60 % 60, s % 60)
}

fn proto_name(p: u8) -> String {
    match p {
        1 => "ICMP".into(),
        6 => "TCP".into(),
        17 => "UDP".into(),
        58 => "ICMP6".into(),
        other => format!("proto {other}"),
    }
}

/// An IP packet's addresses and protocol, tcpdump-like.
fn ip_summary(p: &[u8]) -> String {
    match p.first().map(|b| b >> 4) {
        Some(4) => match vmpls_wire::ipv4::Packet::new_checked(p) {
            Ok(ip) => format!(
                "IP {} > {}: {}, length {}",
                ip.src_addr(),
                ip.dst_addr(),
                proto_name(ip.protocol()),
                ip.total_len()
            ),
            Err(_) => format!("IP (malformed), {} bytes", p.len()),
        },
        Some(6) => match vmpls_wire::ipv6::Packet::new_checked(p) {
            Ok(ip) => format!(
                "IP6 {} > {}: {}, payload length {}",
                ip.src_addr(),
                ip.dst_addr(),
                proto_name(ip.next_header()),
                ip.payload_len()
            ),
            Err(_) => format!("IP6 (malformed), {} bytes", p.len()),
        },
        _ => format!("{} bytes", p.len()),
    }
}

/// One line about a frame: time, direction, length, Ethernet addresses, label stack,
/// inner IP addresses and protocol.
pub fn summary(ts_ns: u64, dir: Direction, frame: &[u8]) -> String {
    let d = match dir {
        Direction::Rx => "rx",
        Direction::Tx => "tx",
    };
    let head = format!("{} {d} {} bytes", clock(ts_ns), frame.len());
    let Ok(eth) = Frame::new_checked(frame) else {
        return format!("{head}: truncated Ethernet frame");
    };
    let mut s = format!("{head} {} > {}, ", eth.src_addr(), eth.dst_addr());
    match eth.ethertype() {
        EtherType::Mpls | EtherType::MplsMulticast => {
            s.push_str("MPLS");
            let mut stack = vmpls_wire::mpls::Stack::new(eth.payload());
            let mut bottom = false;
            for e in stack.by_ref() {
                s.push_str(&format!(
                    " (label {}, tc {}, {}ttl {})",
                    e.label,
                    e.tc,
                    if e.bottom { "[S], " } else { "" },
                    e.ttl
                ));
                bottom = e.bottom;
            }
            if bottom {
                s.push_str(", ");
                s.push_str(&ip_summary(stack.remaining()));
            } else {
                s.push_str(", truncated label stack");
            }
        }
        EtherType::Ipv4 | EtherType::Ipv6 => s.push_str(&ip_summary(eth.payload())),
        EtherType::Arp => s.push_str("ARP"),
        other => s.push_str(&format!("ethertype 0x{:04x}", u16::from(other))),
    }
    s
}

/// `--filter`'s value: `label=N`.
///
/// # Errors
/// Anything else.
pub fn parse_filter(f: &str) -> Result<u32, String> {
    let bad = || format!("unknown filter \"{f}\"; expected label=N (N from 0 to 1048575)");
    let n = f.strip_prefix("label=").ok_or_else(bad)?;
    let l: u32 = n.parse().map_err(|_| bad())?;
    if l > vmpls_wire::mpls::MAX_LABEL {
        return Err(bad());
    }
    Ok(l)
}

/// A capture file's permissions: it holds customers' payloads.
pub const CAPTURE_FILE_MODE: u32 = 0o600;

/// Opens `-w FILE`: created 0600, or an existing regular file of the user's
/// overwritten (as tcpdump does) and made 0600; never written through a symbolic link,
/// a second hard link, a FIFO or device, or into another user's file.
///
/// # Errors
/// [`CliError::Usage`] saying why, and that `-w -` writes to standard output.
pub fn open_capture_file(path: &std::path::Path) -> Result<std::fs::File, CliError> {
    vmpls_sys::fs::create_private(path, CAPTURE_FILE_MODE).map_err(|e| {
        CliError::Usage(format!(
            "cannot write {}: {e} (give a new file name, or -w - for standard output)",
            path.display()
        ))
    })
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::Relaxed);
}

fn catch_interrupts() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // The handler only stores to an atomic. Without SA_RESTART, reads return EINTR.
        let _ = vmpls_sys::signal::set_handler(sig, on_interrupt, false);
    }
}

/// What `vmpls capture` was asked.
#[derive(Debug, Clone)]
pub struct CaptureArgs {
    /// The port.
    pub port: String,
    /// `-w FILE` (`-` for standard output).
    pub write: Option<PathBuf>,
    /// `-c COUNT`.
    pub count: Option<u64>,
    /// `--filter label=N`.
    pub filter: Option<String>,
}

/// Runs a capture until COUNT frames, Ctrl-C, or the router goes away; reports the
/// frames captured and lost on standard error.
///
/// # Errors
/// See [`CliError`].
pub fn run(g: &Globals, args: &CaptureArgs) -> Result<(), CliError> {
    let label = args.filter.as_deref().map(parse_filter).transpose().map_err(CliError::Usage)?;
    // The file is opened first: one refused starts no capture on the router.
    let file = match &args.write {
        Some(p) if p.as_os_str() != "-" => Some(open_capture_file(p)?),
        _ => None,
    };
    let mut conn = session::connect(g)?;
    let start: CaptureStart = serde_json::from_value(
        conn.request(&Request::Capture { port: args.port.clone(), label, count: args.count })?
            .unwrap_or_default(),
    )
    .map_err(|e| CliError::Usage(format!("bad reply from the router: {e}")))?;
    let io = |e: std::io::Error| CliError::Usage(e.to_string());
    let out: Option<Box<dyn Write>> = match (file, &args.write) {
        (Some(f), _) => Some(Box::new(std::io::BufWriter::new(f))),
        (None, Some(_)) => Some(Box::new(std::io::stdout())),
        (None, None) => None,
    };
    let mut pcap = out.map(PcapWriter::new).transpose().map_err(io)?;
    eprintln!(
        "capturing on {} ({}){}",
        start.port,
        start.interface,
        label.map_or(String::new(), |l| format!(", label {l}"))
    );
    if start.fast_path {
        eprintln!(
            "note: the in-kernel fast path serves {}: the frames it forwards bypass the router and this capture; \
             tcpdump -i {} in the router's namespace sees them",
            start.port, start.interface
        );
    }
    catch_interrupts();
    conn.stream.set_read_timeout(Some(Duration::from_millis(200))).map_err(io)?;
    // Lines are read by hand: with a read timeout (to see Ctrl-C), a partial line must
    // stay buffered across reads.
    let mut buf: Vec<u8> = conn.reader.buffer().to_vec();
    let mut raw = conn.reader.into_inner();
    let mut chunk = vec![0u8; 256 * 1024];
    let (mut frames, mut lost) = (0u64, 0u64);
    let mut done = args.count.is_some_and(|c| c == 0);
    while !done && !INTERRUPTED.load(Ordering::Relaxed) {
        while let Some(pos) = buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            let f: CapturedFrame = serde_json::from_slice(&line)
                .map_err(|e| CliError::Usage(format!("bad frame from the router: {e}")))?;
            let data = base64_decode(&f.data)
                .ok_or_else(|| CliError::Usage("bad frame data from the router".into()))?;
            lost = f.lost;
            match &mut pcap {
                Some(w) => w.write(f.ts_ns, &data).map_err(io)?,
                None => println!("{}", summary(f.ts_ns, f.dir, &data)),
            }
            frames += 1;
            if args.count.is_some_and(|c| frames >= c) {
                done = true;
                break;
            }
        }
        if done {
            break;
        }
        match raw.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(io(e)),
        }
    }
    if lost > 0 {
        eprintln!("{frames} frames captured, {lost} lost (the reader was too slow)");
    } else {
        eprintln!("{frames} frames captured, 0 lost");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ce1 -> ce2 ICMP echo in one label, as pe1 sends it toward p.
    fn labelled_frame() -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x88, 0x47];
        f.extend_from_slice(&(1002u32 << 12 | 1 << 8 | 63).to_be_bytes());
        let mut ip = vec![0x45, 0, 0, 28, 0, 1, 0x40, 0, 63, 1, 0, 0, 198, 18, 1, 2, 198, 18, 2, 2];
        ip.extend_from_slice(&[8, 0, 0, 0, 0, 1, 0, 1]);
        f.extend_from_slice(&ip);
        f
    }

    #[test]
    fn pcap_file_has_the_libpcap_layout() {
        let mut out = Vec::new();
        let mut w = PcapWriter::new(&mut out).unwrap();
        let f = labelled_frame();
        w.write(1_700_000_000_123_456_789, &f).unwrap();
        assert_eq!(&out[..4], &[0x4d, 0x3c, 0xb2, 0xa1], "nanosecond pcap");
        assert_eq!(u32::from_le_bytes(out[20..24].try_into().unwrap()), 1);
        let rec = &out[24..];
        assert_eq!(u32::from_le_bytes(rec[0..4].try_into().unwrap()), 1_700_000_000);
        assert_eq!(u32::from_le_bytes(rec[4..8].try_into().unwrap()), 123_456_789, "nanoseconds kept");
        assert_eq!(u32::from_le_bytes(rec[8..12].try_into().unwrap()) as usize, f.len());
        assert_eq!(&rec[16..], &f[..]);
    }

    #[test]
    fn summary_shows_labels_and_inner_addresses() {
        let s = summary(3_600_000_000_000 + 1_500, Direction::Tx, &labelled_frame());
        assert!(s.starts_with("01:00:00.000001 tx 46 bytes 02:00:00:00:00:01 > 02:00:00:00:00:02"), "{s}");
        assert!(
            s.contains("MPLS (label 1002, tc 0, [S], ttl 63), IP 198.18.1.2 > 198.18.2.2: ICMP, length 28"),
            "{s}"
        );
        assert!(summary(0, Direction::Rx, &[1, 2]).contains("truncated"));
    }

    #[test]
    fn capture_files_are_private_and_never_written_through_a_link() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("vmpls-capture-w-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let path = dir.join("core.pcap");
        PcapWriter::new(open_capture_file(&path).unwrap()).unwrap();
        assert_eq!(mode(&path), 0o600);
        // An existing file of the user's is overwritten, as tcpdump does, and made private.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        PcapWriter::new(open_capture_file(&path).unwrap()).unwrap();
        assert_eq!((mode(&path), std::fs::metadata(&path).unwrap().len()), (0o600, 24));
        // A link planted where the capture goes: refused, what it points at untouched.
        let target = dir.join("precious");
        std::fs::write(&target, b"not yours").unwrap();
        let link = dir.join("planted.pcap");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let CliError::Usage(e) = open_capture_file(&link).unwrap_err() else { panic!("not a usage error") };
        assert!(e.contains("symbolic link") && e.contains("-w -"), "{e}");
        assert_eq!(std::fs::read(&target).unwrap(), b"not yours");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn filters_are_label_only() {
        assert_eq!(parse_filter("label=1002"), Ok(1002));
        assert!(parse_filter("port=80").unwrap_err().contains("label=N"));
        assert!(parse_filter("label=1048576").is_err());
    }
}
