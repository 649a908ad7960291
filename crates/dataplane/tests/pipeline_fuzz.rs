//! No panic on arbitrary input: random bytes, random offload metadata and random mutations
//! of valid frames through `process` (and `poll`) on a P and a PE configuration. Whatever
//! comes out must be a frame the port can send.

mod fixtures;

use std::time::Duration;

use fixtures::*;
use proptest::prelude::*;
use vmpls_dataplane::{DropReason, Packet};
use vmpls_wire::virtio_net::{self, GsoType};

/// Which router a case runs on.
#[derive(Debug, Clone, Copy)]
enum Role {
    Pe1,
    P,
    Pe2,
}

/// The router of `role`, answering for its own addresses or leaving them to the kernel.
fn router(role: Role, kernel: bool) -> Router {
    match (role, kernel) {
        (Role::Pe1, false) => Router::pe1(),
        (Role::P, false) => Router::p(),
        (Role::Pe2, false) => Router::pe2(),
        (Role::Pe1, true) => Router::pe1_kernel(),
        (Role::P, true) => Router::p_kernel(),
        (Role::Pe2, true) => Router::pe2_kernel(),
    }
}

fn role() -> impl Strategy<Value = Role> {
    prop_oneof![Just(Role::Pe1), Just(Role::P), Just(Role::Pe2)]
}

fn gso_type() -> impl Strategy<Value = GsoType> {
    prop_oneof![
        4 => Just(GsoType::None),
        1 => Just(GsoType::TcpV4),
        1 => Just(GsoType::TcpV6),
        1 => Just(GsoType::UdpL4),
        1 => Just(GsoType::Udp),
    ]
}

prop_compose! {
    fn offload()(
        needs_csum in any::<bool>(),
        data_valid in any::<bool>(),
        gso_type in gso_type(),
        gso_ecn in any::<bool>(),
        hdr_len in 0u16..200,
        gso_size in prop_oneof![Just(0u16), 1u16..100, 1000u16..1500, any::<u16>()],
        csum_start in prop_oneof![0u16..120, any::<u16>()],
        csum_offset in prop_oneof![Just(16u16), Just(6u16), 0u16..64, any::<u16>()],
    ) -> virtio_net::Repr {
        virtio_net::Repr { needs_csum, data_valid, gso_type, gso_ecn, hdr_len, gso_size, csum_start, csum_offset }
    }
}

/// Valid frames each router forwards, to mutate.
fn seeds() -> Vec<(Role, u16, Vec<u8>)> {
    let tcp = ipv4_tcp(CE1, CE2, 64, 40000, 5201, &pattern(1400, 1), false);
    let tcp6 = ipv6_tcp(CE1_V6, CE2_V6, 64, 40000, 5201, &pattern(300, 2));
    vec![
        (Role::Pe1, PE1_CE1, ipv4_frame(PE1_CE1_MAC, CE1_MAC, &tcp)),
        (Role::Pe1, PE1_CE1, ipv6_frame(PE1_CE1_MAC, CE1_MAC, &tcp6)),
        (Role::Pe1, PE1_CE1, ipv4_frame(PE1_CE1_MAC, CE1_MAC, &icmpv4_echo(CE1, "198.18.1.1", 64))),
        (Role::P, P_WEST, mpls_frame(P_WEST_MAC, PE1_CORE_MAC, &[(1002, 64)], &tcp)),
        (Role::P, P_WEST, mpls_frame(P_WEST_MAC, PE1_CORE_MAC, &[(1002, 2), (7, 3), (99_999, 4)], &tcp6)),
        (Role::P, P_WEST, mpls_frame(P_WEST_MAC, PE1_CORE_MAC, &[(1002, 1)], &tcp)),
        (Role::Pe2, PE2_CORE, mpls_frame(PE2_CORE_MAC, P_EAST_MAC, &[(2002, 64)], &tcp)),
        (Role::Pe2, PE2_CORE, mpls_frame(PE2_CORE_MAC, P_EAST_MAC, &[(0, 64), (2002, 1)], &tcp6)),
        (
            Role::Pe2,
            PE2_CORE,
            neighbor_solicit(P_EAST_MAC, v6("2001:db8:20::1"), v6("2001:db8:20::2"), PE2_CORE_MAC, false),
        ),
    ]
}

/// Every frame out fits its port (or is a super-frame the port takes whole) and carries
/// the port's MAC as source.
fn check_output(r: &Router, out: &[Sent]) {
    for s in out {
        let info = &r.dp.ports()[usize::from(s.port)];
        assert!(s.frame.len() >= 14, "runt frame out: {} bytes", s.frame.len());
        assert_eq!(&s.frame[6..12], &info.mac, "source MAC of port {}", s.port);
        if !s.offload.is_gso() {
            assert!(
                s.frame.len() - 14 <= info.mtu as usize,
                "{} bytes over MTU {}",
                s.frame.len() - 14,
                info.mtu
            );
        }
    }
}

fn run(r: &mut Router, port: u16, frame: &[u8], off: virtio_net::Repr) {
    let mut pkt = Packet::from_frame(port, frame);
    pkt.offload = off;
    let out = r.send_packet(pkt);
    check_output(r, &out);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(
        role in role(),
        kernel in any::<bool>(),
        frames in prop::collection::vec(
            (0u16..3, prop::collection::vec(any::<u8>(), 0..300), offload()),
            1..8,
        ),
    ) {
        let mut r = router(role, kernel);
        for (port, mut bytes, off) in frames {
            // Address half the frames to the port's MAC so they get past the MAC filter.
            if bytes.len() >= 6 && bytes[0] & 1 == 0 {
                let mac = r.dp.ports().get(usize::from(port)).map(|p| p.mac).unwrap_or([0; 6]);
                bytes[..6].copy_from_slice(&mac);
            }
            run(&mut r, port, &bytes, off);
        }
        let out = r.poll(Duration::from_secs(2));
        check_output(&r, &out);
    }

    #[test]
    fn mutated_valid_frames_never_panic(
        seed in 0usize..9,
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8),
        cut in prop::option::of(any::<prop::sample::Index>()),
        off in prop_oneof![3 => Just(virtio_net::Repr::default()), 1 => offload()],
        kernel in any::<bool>(),
    ) {
        let seeds = seeds();
        let (role, port, mut frame) = seeds[seed % seeds.len()].clone();
        // Keep the Ethernet header mostly intact so the mutations reach deeper layers.
        for (at, v) in flips {
            let i = at.index(frame.len());
            if i >= 12 || v & 0x80 != 0 {
                frame[i] ^= v | 1;
            }
        }
        if let Some(at) = cut {
            frame.truncate(at.index(frame.len() + 1));
        }
        let mut r = router(role, kernel);
        run(&mut r, port, &frame, off);
        let out = r.poll(Duration::from_secs(5));
        check_output(&r, &out);
    }
}

#[test]
fn frame_for_a_port_that_does_not_exist_is_dropped() {
    let mut r = Router::p();
    assert!(r.send(7, &mpls_frame(P_WEST_MAC, PE1_CORE_MAC, &[(1002, 64)], &[0x45])).is_empty());
    r.assert_only_drop(DropReason::NoSuchPort, 1);
}
