//! A port's action chain: TC filters after `fp_tc` at the port's ingress where the
//! kernel's own MPLS action (`act_mpls`) does what no BPF helper can (see `fp_acting` in
//! the program):
//! - push labels onto a TCP super-frame bound for a device without MPLS segmentation
//!   (virtio-net, TAP, most NICs) so that it leaves whole and the out device's MPLS GSO
//!   cuts it, as after the kernel's own MPLS push: `bpf_skb_adjust_room` inserts the
//!   entries but cannot mark the skb as MPLS with its inner protocol and network header,
//!   which MPLS GSO (`mpls_gso`) needs; `act_mpls push` (`skb_mpls_push`) does;
//! - pop the label of a frame some device sent (`skb->protocol` MPLS, which adjust_room
//!   refuses) in place, where the programs would send it through the port's ingress a
//!   second time.
//!
//! On a port of a kernel with MPLS GSO (the guests of `vmpls lab seed --vm-routers`:
//! Debian's kernel builds it in and has `act_mpls` and `cls_fw` as modules, which the
//! kernel loads when a filter asks for them), the clsact qdisc at the port's ingress gets
//! - in chain 0, after `fp_tc` (its own filter before tcx, its own hook after): `fw`
//!   filters on the marks fp_tc sets: for a push of `n` labels (1 to 4), `n` `act_mpls
//!   push` of label 0 (replaced later); for a pop, `act_mpls pop` to IPv4 or IPv6; the
//!   last action of each goes to chain 1;
//! - in chain 1: `fp_act` (`cls_bpf`, direct action), which writes the pushed entries
//!   fp_tc decided and redirects to the out port.
//!
//! The messages are built here as bytes (no crate speaks `act_mpls`); the unit tests
//! hold them against what iproute2's `tc` sends for the same filter.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

/// `FP_MARK_PUSH` of the program: `skb->mark` for a push is this plus the number of labels.
const MARK_PUSH: u32 = 0x766d_7000;
/// `FP_MARK_POP`: for a pop, this plus the IP version under the label.
const MARK_POP: u32 = 0x766d_7010;
/// The filters' preference in both chains: after `fp_tc`, which the kernel gives 0xc000
/// (its first automatic preference) before tcx.
const PREF: u16 = 0xff00;
/// `fp_act`'s handle in chain 1.
const ACT_HANDLE: u32 = 1;
/// Labels the chain pushes at most (`FP_MAX_PUSH`).
const MAX_DEPTH: u32 = 4;

const RTM_NEWTFILTER: u16 = 44;
const RTM_DELTFILTER: u16 = 45;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const NLA_F_NESTED: u16 = 0x8000;
/// `TC_H_MAKE(TC_H_CLSACT, TC_H_MIN_INGRESS)`: the clsact qdisc's ingress.
const PARENT_INGRESS: u32 = 0xffff_fff2;
/// `htons(ETH_P_ALL)` as `tcm_info`'s low half holds it.
const PROTO_ALL: u32 = 0x0300;

const TCA_KIND: u16 = 1;
const TCA_OPTIONS: u16 = 2;
const TCA_CHAIN: u16 = 11;
const TCA_FW_ACT: u16 = 4;
const TCA_FW_MASK: u16 = 5;
const TCA_ACT_KIND: u16 = 1;
const TCA_ACT_OPTIONS: u16 = 2;
const TCA_MPLS_PARMS: u16 = 2;
const TCA_MPLS_PROTO: u16 = 4;
const TCA_MPLS_LABEL: u16 = 5;
const TCA_MPLS_TTL: u16 = 7;
const TCA_MPLS_ACT_POP: i32 = 1;
const TCA_MPLS_ACT_PUSH: i32 = 2;
const TCA_BPF_FD: u16 = 6;
const TCA_BPF_NAME: u16 = 7;
const TCA_BPF_FLAGS: u16 = 8;
const TCA_BPF_FLAG_ACT_DIRECT: u32 = 1;
const TC_ACT_PIPE: i32 = 3;
const TC_ACT_GOTO_CHAIN: i32 = 0x2000_0000;
const ETH_P_MPLS_UC: u16 = 0x8847;
const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;

/// Whether this kernel can cut labelled super-frames (MPLS GSO): `mpls_gso` loaded or
/// built in (Debian's kernels build it in). The kernel loads `act_mpls` and `cls_fw`
/// itself when the chain asks for them, but nothing loads `mpls_gso`, and without it a
/// labelled super-frame is dropped at the out device.
pub(crate) fn kernel_has_mpls_gso() -> Result<(), String> {
    if Path::new("/sys/module/mpls_gso").exists() {
        return Ok(());
    }
    // A built-in module without parameters has no /sys/module entry; its function is in
    // the kernel's symbols all the same.
    let symbols = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
    if has_symbol(&symbols, "mpls_gso_segment") {
        return Ok(());
    }
    Err("the kernel has no MPLS GSO (modprobe mpls_gso)".into())
}

/// Whether `/proc/kallsyms` text names the function `name` (`ADDR TYPE NAME [MODULE]`).
fn has_symbol(kallsyms: &str, name: &str) -> bool {
    kallsyms.lines().any(|l| l.split_whitespace().nth(2) == Some(name))
}

/// A netlink message under construction: attributes are appended, nests closed by
/// patching their length.
struct Msg(Vec<u8>);

impl Msg {
    fn new(kind: u16, flags: u16, ifindex: u32, handle: u32, info: u32) -> Msg {
        let mut b = Vec::with_capacity(256);
        b.extend_from_slice(&0u32.to_ne_bytes()); // length, set by finish
        b.extend_from_slice(&kind.to_ne_bytes());
        b.extend_from_slice(&flags.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes()); // sequence
        b.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel's
        b.extend_from_slice(&[0, 0, 0, 0]); // family AF_UNSPEC, padding
        b.extend_from_slice(&ifindex.to_ne_bytes());
        b.extend_from_slice(&handle.to_ne_bytes());
        b.extend_from_slice(&PARENT_INGRESS.to_ne_bytes());
        b.extend_from_slice(&info.to_ne_bytes());
        Msg(b)
    }

    fn attr(&mut self, kind: u16, payload: &[u8]) {
        let len = 4 + payload.len();
        self.0.extend_from_slice(&(len as u16).to_ne_bytes());
        self.0.extend_from_slice(&kind.to_ne_bytes());
        self.0.extend_from_slice(payload);
        self.0.resize(self.0.len().next_multiple_of(4), 0);
    }

    fn nest(&mut self, kind: u16) -> usize {
        let at = self.0.len();
        self.0.extend_from_slice(&0u16.to_ne_bytes());
        self.0.extend_from_slice(&kind.to_ne_bytes());
        at
    }

    fn end(&mut self, at: usize) {
        let len = (self.0.len() - at) as u16;
        self.0[at..at + 2].copy_from_slice(&len.to_ne_bytes());
    }

    fn finish(mut self, seq: u32) -> Vec<u8> {
        let len = self.0.len() as u32;
        self.0[0..4].copy_from_slice(&len.to_ne_bytes());
        self.0[8..12].copy_from_slice(&seq.to_ne_bytes());
        self.0
    }
}

fn info(pref: u16) -> u32 {
    (u32::from(pref) << 16) | PROTO_ALL
}

/// One `act_mpls` action: its `tc_mpls` parameters, then the attributes given.
fn mpls_action(m: &mut Msg, order: u16, control: i32, m_action: i32, attrs: &[(u16, &[u8])]) {
    let action = m.nest(order);
    m.attr(TCA_ACT_KIND, b"mpls\0");
    let opts = m.nest(TCA_ACT_OPTIONS | NLA_F_NESTED);
    // struct tc_mpls: tc_gen (index, capab, action, refcnt, bindcnt), m_action.
    let mut parms = Vec::with_capacity(24);
    for v in [0i32, 0, control, 0, 0, m_action] {
        parms.extend_from_slice(&v.to_ne_bytes());
    }
    m.attr(TCA_MPLS_PARMS, &parms);
    for (kind, payload) in attrs {
        m.attr(*kind, payload);
    }
    m.end(opts);
    m.end(action);
}

/// A new filter at the chain's preference with `handle`, as `tc filter add` makes it.
fn new_filter(ifindex: u32, handle: u32) -> Msg {
    Msg::new(
        RTM_NEWTFILTER,
        NLM_F_REQUEST | NLM_F_ACK | NLM_F_EXCL | NLM_F_CREATE,
        ifindex,
        handle,
        info(PREF),
    )
}

/// A `fw` filter on `mark` (all 32 bits) in chain 0 with the actions `add` appends.
fn fw_filter(ifindex: u32, mark: u32, seq: u32, add: impl FnOnce(&mut Msg)) -> Vec<u8> {
    let mut m = new_filter(ifindex, mark);
    m.attr(TCA_KIND, b"fw\0");
    let options = m.nest(TCA_OPTIONS);
    m.attr(TCA_FW_MASK, &u32::MAX.to_ne_bytes());
    let actions = m.nest(TCA_FW_ACT);
    add(&mut m);
    m.end(actions);
    m.end(options);
    m.finish(seq)
}

/// The filter for a push of `depth` labels: `depth` pushes of label 0, the last to chain 1.
fn push_filter(ifindex: u32, depth: u32, seq: u32) -> Vec<u8> {
    fw_filter(ifindex, MARK_PUSH + depth, seq, |m| {
        for i in 1..=depth {
            let control = if i == depth { TC_ACT_GOTO_CHAIN | 1 } else { TC_ACT_PIPE };
            let attrs: [(u16, &[u8]); 3] = [
                (TCA_MPLS_LABEL, &0u32.to_ne_bytes()),
                (TCA_MPLS_PROTO, &ETH_P_MPLS_UC.to_be_bytes()),
                (TCA_MPLS_TTL, &[1]),
            ];
            mpls_action(m, i as u16, control, TCA_MPLS_ACT_PUSH, &attrs);
        }
    })
}

/// The filter for a pop with an IP packet of version `ip_version` (4 or 6) under the
/// label, then chain 1.
fn pop_filter(ifindex: u32, ip_version: u32, seq: u32) -> Vec<u8> {
    let proto = if ip_version == 4 { ETH_P_IP } else { ETH_P_IPV6 };
    fw_filter(ifindex, MARK_POP + ip_version, seq, |m| {
        let attrs: [(u16, &[u8]); 1] = [(TCA_MPLS_PROTO, &proto.to_be_bytes())];
        mpls_action(m, 1, TC_ACT_GOTO_CHAIN | 1, TCA_MPLS_ACT_POP, &attrs);
    })
}

/// `fp_act` (the program `prog_fd`, named `name`) as chain 1's filter, direct action.
fn act_filter(ifindex: u32, prog_fd: u32, name: &str, seq: u32) -> Vec<u8> {
    let mut m = new_filter(ifindex, ACT_HANDLE);
    m.attr(TCA_KIND, b"bpf\0");
    m.attr(TCA_CHAIN, &1u32.to_ne_bytes());
    let options = m.nest(TCA_OPTIONS);
    m.attr(TCA_BPF_FD, &prog_fd.to_ne_bytes());
    let mut n = name.as_bytes().to_vec();
    n.push(0);
    m.attr(TCA_BPF_NAME, &n);
    m.attr(TCA_BPF_FLAGS, &TCA_BPF_FLAG_ACT_DIRECT.to_ne_bytes());
    m.end(options);
    m.finish(seq)
}

/// Deletes the filters at the chain's preference in `chain`.
fn delete_filters(ifindex: u32, chain: u32, seq: u32) -> Vec<u8> {
    let mut m = Msg::new(RTM_DELTFILTER, NLM_F_REQUEST | NLM_F_ACK, ifindex, 0, info(PREF));
    m.attr(TCA_CHAIN, &chain.to_ne_bytes());
    m.finish(seq)
}

/// A netlink route socket of the namespace it was opened in, whatever thread uses it.
struct Rtnl {
    fd: OwnedFd,
    seq: u32,
}

impl Rtnl {
    fn open() -> io::Result<Rtnl> {
        // SAFETY: socket(2) with constant arguments; the result is checked.
        let fd = unsafe {
            libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::NETLINK_ROUTE)
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let timeout = libc::timeval { tv_sec: 5, tv_usec: 0 };
        // SAFETY: fd is open; the option value is a timeval of the size given.
        let r = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&raw const timeout).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Rtnl { fd, seq: 1 })
    }

    /// Sends the request `build` makes with the next sequence number and waits for its
    /// acknowledgement: the kernel's error, if any.
    fn request(&mut self, build: impl FnOnce(u32) -> Vec<u8>) -> io::Result<()> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let msg = build(seq);
        // SAFETY: fd is open; msg is a readable buffer of the length given.
        let sent = unsafe { libc::send(self.fd.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut buf = vec![0u8; 8192];
        loop {
            // SAFETY: fd is open; buf is writable for its length.
            let n = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            if let Some(result) = ack_of(&buf[..n as usize], seq) {
                return result;
            }
        }
    }
}

/// The acknowledgement (`NLMSG_ERROR`) for `seq` among the messages in `buf`: `Ok` for
/// error 0, else the error.
fn ack_of(mut buf: &[u8], seq: u32) -> Option<io::Result<()>> {
    const NLMSG_ERROR: u16 = 2;
    while buf.len() >= 20 {
        let len = u32::from_ne_bytes(buf[0..4].try_into().ok()?) as usize;
        let kind = u16::from_ne_bytes(buf[4..6].try_into().ok()?);
        let s = u32::from_ne_bytes(buf[8..12].try_into().ok()?);
        if len < 16 || len > buf.len() {
            return None;
        }
        if kind == NLMSG_ERROR && s == seq {
            let err = i32::from_ne_bytes(buf[16..20].try_into().ok()?);
            return Some(if err == 0 { Ok(()) } else { Err(io::Error::from_raw_os_error(-err)) });
        }
        buf = &buf[len.next_multiple_of(4).min(buf.len())..];
    }
    None
}

/// The action chain on one port's ingress; dropping it removes the filters, through the
/// netlink socket of the namespace it was installed in.
pub(crate) struct ActionChain {
    rtnl: Rtnl,
    ifindex: u32,
}

impl ActionChain {
    /// Installs the chain on `ifindex` (in the calling thread's namespace, whose clsact
    /// qdisc must exist), replacing one a previous router left there.
    pub(crate) fn install(ifindex: u32, act_prog_fd: u32, act_prog_name: &str) -> io::Result<ActionChain> {
        let mut chain = ActionChain { rtnl: Rtnl::open()?, ifindex };
        chain.remove();
        chain.rtnl.request(|seq| act_filter(ifindex, act_prog_fd, act_prog_name, seq))?;
        for depth in 1..=MAX_DEPTH {
            chain.rtnl.request(|seq| push_filter(ifindex, depth, seq))?;
        }
        for version in [4, 6] {
            chain.rtnl.request(|seq| pop_filter(ifindex, version, seq))?;
        }
        Ok(chain)
    }

    /// Removes both chains' filters (those that are there).
    fn remove(&mut self) {
        for chain in [0, 1] {
            let _ = self.rtnl.request(|seq| delete_filters(self.ifindex, chain, seq));
        }
    }
}

impl Drop for ActionChain {
    fn drop(&mut self) {
        self.remove();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What iproute2 6.1's `tc` sent (strace) for `tc filter add dev vmplscap0 ingress
    /// pref 65280 protocol all handle 0x766d7002/0xffffffff fw action mpls push protocol
    /// mpls_uc label 0 ttl 1 pipe action mpls push protocol mpls_uc label 0 ttl 1 goto
    /// chain 1`, ifindex 23, sequence 1796599304 (after the 16-byte netlink header and the
    /// 20-byte tcmsg, which the test compares field by field).
    const TC_FW_DEPTH2_ATTRS: &[u8] = b"\x07\x00\x01\x00\x66\x77\x00\x00\xa0\x00\x02\x00\
\x08\x00\x05\x00\xff\xff\xff\xff\x94\x00\x04\x00\x48\x00\x01\x00\x09\x00\x01\x00\x6d\x70\x6c\x73\
\x00\x00\x00\x00\x38\x00\x02\x80\x1c\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\
\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x08\x00\x05\x00\x00\x00\x00\x00\x06\x00\x04\x00\
\x88\x47\x00\x00\x05\x00\x07\x00\x01\x00\x00\x00\x48\x00\x02\x00\x09\x00\x01\x00\x6d\x70\x6c\x73\
\x00\x00\x00\x00\x38\x00\x02\x80\x1c\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x20\
\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x08\x00\x05\x00\x00\x00\x00\x00\x06\x00\x04\x00\
\x88\x47\x00\x00\x05\x00\x07\x00\x01\x00\x00\x00";

    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_ne_bytes(b[at..at + 4].try_into().unwrap())
    }

    #[test]
    fn the_fw_filter_is_what_tc_sends_for_the_same_pushes() {
        let m = push_filter(23, 2, 1_796_599_304);
        assert_eq!(u32_at(&m, 0) as usize, m.len());
        assert_eq!(m.len(), 204, "tc's nlmsg_len");
        assert_eq!(u16::from_ne_bytes([m[4], m[5]]), 0x2c);
        assert_eq!(u16::from_ne_bytes([m[6], m[7]]), 0x605);
        assert_eq!(u32_at(&m, 8), 1_796_599_304);
        // tcmsg: family 0, ifindex 23, handle 0x766d7002, parent ffff:fff2, info.
        assert_eq!(&m[16..20], &[0, 0, 0, 0]);
        assert_eq!(
            (u32_at(&m, 20), u32_at(&m, 24), u32_at(&m, 28), u32_at(&m, 32)),
            (23, 1_986_883_586, 4_294_967_282, 4_278_190_848)
        );
        assert_eq!(&m[36..], TC_FW_DEPTH2_ATTRS);
    }

    #[test]
    fn the_pop_filter_is_what_tc_sends_for_the_same_pop() {
        // `tc filter add dev vmplscap0 ingress pref 65280 protocol all handle
        // 0x766d7016/0xffffffff fw action mpls pop protocol ipv6 goto chain 1` (ifindex 25):
        // nlmsg_len 116, then these attributes.
        const TC_POP6_ATTRS: &[u8] = b"\x07\x00\x01\x00\x66\x77\x00\x00\x48\x00\x02\x00\
\x08\x00\x05\x00\xff\xff\xff\xff\x3c\x00\x04\x00\x38\x00\x01\x00\x09\x00\x01\x00\x6d\x70\x6c\x73\
\x00\x00\x00\x00\x28\x00\x02\x80\x1c\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x20\
\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x06\x00\x04\x00\x86\xdd\x00\x00";
        let m = pop_filter(25, 6, 9);
        assert_eq!((u32_at(&m, 0), m.len()), (116, 116));
        assert_eq!((u32_at(&m, 20), u32_at(&m, 24), u32_at(&m, 28)), (25, 1_986_883_606, 4_294_967_282));
        assert_eq!(u32_at(&m, 32), 4_278_190_848);
        assert_eq!(&m[36..], TC_POP6_ATTRS);
        // IPv4: its own mark and protocol, the rest alike.
        let m4 = pop_filter(25, 4, 9);
        assert_eq!(u32_at(&m4, 24), MARK_POP + 4);
        assert_eq!(&m4[m4.len() - 4..m4.len() - 2], &[0x08, 0x00]);
    }

    #[test]
    fn each_depth_pushes_that_many_labels_and_only_the_last_leaves_for_chain_1() {
        for depth in 1..=MAX_DEPTH {
            let m = push_filter(7, depth, 1);
            assert_eq!(u32_at(&m, 24), MARK_PUSH + depth);
            let kinds = m.windows(5).filter(|w| w == b"mpls\0").count();
            assert_eq!(kinds as u32, depth);
            let gotos = m.windows(4).filter(|w| *w == (TC_ACT_GOTO_CHAIN | 1).to_ne_bytes()).count();
            assert_eq!(gotos, 1);
            let pipes = m.windows(4).filter(|w| *w == TC_ACT_PIPE.to_ne_bytes()).count();
            assert!(pipes as u32 >= depth - 1);
        }
    }

    #[test]
    fn the_push_filter_is_a_direct_action_bpf_filter_in_chain_1() {
        let m = act_filter(9, 42, "fp_act_", 3);
        assert_eq!(u32_at(&m, 0) as usize, m.len());
        assert_eq!((u32_at(&m, 20), u32_at(&m, 24), u32_at(&m, 28)), (9, ACT_HANDLE, PARENT_INGRESS));
        let attrs = &m[36..];
        // TCA_KIND "bpf", TCA_CHAIN 1, TCA_OPTIONS { FD 42, NAME "fp_act_", FLAGS 1 }.
        assert_eq!(&attrs[..8], b"\x08\x00\x01\x00bpf\0");
        assert_eq!(&attrs[8..16], b"\x08\x00\x0b\x00\x01\x00\x00\x00");
        assert_eq!(u16::from_ne_bytes([attrs[18], attrs[19]]), TCA_OPTIONS);
        assert_eq!(&attrs[20..28], b"\x08\x00\x06\x00\x2a\x00\x00\x00");
        assert_eq!(&attrs[28..40], b"\x0c\x00\x07\x00fp_act_\0");
        assert_eq!(&attrs[40..48], b"\x08\x00\x08\x00\x01\x00\x00\x00");
        assert_eq!(u16::from_ne_bytes([attrs[16], attrs[17]]) as usize, attrs.len() - 16);
    }

    #[test]
    fn mpls_gso_is_found_built_in_or_as_a_module() {
        let builtin = "ffffffff81a0c3d0 t mpls_gso_segment\nffffffff81a0c5e0 t mpls_gso_init\n";
        let module = "0000000000000000 t mpls_gso_segment\t[mpls_gso]\n";
        assert!(has_symbol(builtin, "mpls_gso_segment") && has_symbol(module, "mpls_gso_segment"));
        assert!(!has_symbol("ffffffff81a0c3d0 t mpls_gso_segment_x\n", "mpls_gso_segment"));
        assert!(!has_symbol("", "mpls_gso_segment"));
    }

    #[test]
    fn acknowledgements_are_found_by_sequence_and_carry_the_error() {
        let ack = |seq: u32, err: i32| {
            let mut b = Vec::new();
            b.extend_from_slice(&36u32.to_ne_bytes());
            b.extend_from_slice(&2u16.to_ne_bytes());
            b.extend_from_slice(&0u16.to_ne_bytes());
            b.extend_from_slice(&seq.to_ne_bytes());
            b.extend_from_slice(&0u32.to_ne_bytes());
            b.extend_from_slice(&err.to_ne_bytes());
            b.extend_from_slice(&[0; 16]);
            b
        };
        let mut two = ack(4, 0);
        two.extend(ack(5, -libc::ENOENT));
        assert!(matches!(ack_of(&two, 4), Some(Ok(()))));
        assert_eq!(ack_of(&two, 5).unwrap().unwrap_err().raw_os_error(), Some(libc::ENOENT));
        assert!(ack_of(&two, 6).is_none());
        assert!(ack_of(&two[..10], 4).is_none());
        assert!(ack_of(&[], 4).is_none());
    }
}
