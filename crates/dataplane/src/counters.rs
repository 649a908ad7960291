//! Counters: every frame the pipeline does not forward is counted under a named reason,
//! and so is every notable thing it does (segmenting, punting, answering).

macro_rules! reasons {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(usize)]
        pub enum $name { $($(#[$vmeta])* $variant,)* }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];
            /// The snake_case name shown in stats output.
            pub fn name(self) -> &'static str {
                match self { $($name::$variant => $text,)* }
            }
        }
    };
}

reasons! {
    /// Why a frame was dropped.
    DropReason {
        /// Shorter than an Ethernet header.
        TruncatedEthernet => "truncated_ethernet",
        /// A pseudowire's control word is not one (first nibble not 0: an associated
        /// channel, or a pseudowire configured with a control word the far PE does not send).
        PwBadControlWord => "pw_bad_control_word",
        /// A pseudowire frame ends inside its control word or inner Ethernet header.
        PwTruncated => "pw_truncated",
        /// A pseudowire's label arrived with more labels under it (S=0).
        PwLabelNotBottom => "pw_label_not_bottom",
        /// A frame that does not fit the link toward the far PE (or the attachment circuit
        /// at the far end): there is no ICMP for a pseudowire.
        PwTooBig => "pw_too_big",
        /// No route (or only a local or blackhole one) to a pseudowire's far PE.
        PwNoRoute => "pw_no_route_to_peer",
        /// A frame from the attachment circuit of a pseudowire not in force (not
        /// signalled, or its local label held by a route).
        PwDown => "pw_down",
        /// A frame for a pseudowire without an attachment circuit.
        PwNoAttachment => "pw_no_attachment",
        /// A VPLS frame for a MAC learned on the member it came from (a bridge filters it).
        VplsFiltered => "vpls_filtered",
        /// A VPLS frame from a pseudowire for a MAC learned on another pseudowire: split
        /// horizon (the ingress PE sends to every PE itself).
        VplsSplitHorizon => "vpls_split_horizon",
        /// A VPLS frame to flood (unknown unicast, broadcast, multicast) over the
        /// instance's flood rate.
        VplsFloodRate => "vpls_flood_rate",
        /// A VPLS frame to flood with no other member in force to flood it to.
        VplsNoMember => "vpls_no_member",
        /// Addressed to another station's MAC.
        OtherHost => "other_host",
        /// 802.1Q tagged: no VLAN sub-interfaces are configured.
        Vlan => "vlan_tagged",
        /// An ethertype the router does not handle.
        UnknownEthertype => "unknown_ethertype",
        /// The label stack ends before its bottom-of-stack entry, or an entry is cut short.
        TruncatedLabelStack => "truncated_label_stack",
        /// No label route for the top label.
        UnknownLabel => "unknown_label",
        /// A labelled frame on a port that does not accept labels (`mpls = false`: by
        /// default a port in a VRF other than the default, a customer's): the label table
        /// is global, and a label that pops into another VRF would reach into it.
        MplsNotAccepted => "mpls_not_accepted",
        /// Implicit null (3) may not appear on the wire.
        ImplicitNullOnWire => "implicit_null_on_wire",
        /// A reserved label (4..=15 except 7 and 14, and GAL 13) this router does not handle.
        ReservedLabel => "reserved_label",
        /// A label stack entry's TTL ran out (an ICMP error is sent when possible).
        LabelTtlExpired => "label_ttl_expired",
        /// Below the bottom of the stack is neither IPv4 nor IPv6.
        UnknownPayload => "unknown_mpls_payload",
        /// More labels than fit the headroom.
        LabelStackTooDeep => "label_stack_too_deep",
        /// IPv4 header malformed (version, header length, total length).
        BadIpv4Header => "bad_ipv4_header",
        /// IPv4 header checksum wrong.
        BadIpv4Checksum => "bad_ipv4_checksum",
        /// IPv6 header malformed.
        BadIpv6Header => "bad_ipv6_header",
        /// IP TTL or hop limit ran out (an ICMP error is sent when possible).
        IpTtlExpired => "ip_ttl_expired",
        /// No route for the destination (ICMP unreachable sent).
        NoRoute => "no_route",
        /// A blackhole route matched.
        Blackhole => "blackhole",
        /// An `unreachable` route matched (ICMP host unreachable sent).
        UnreachableRoute => "unreachable_route",
        /// A `prohibit` route matched (ICMP administratively prohibited sent).
        ProhibitedRoute => "prohibited_route",
        /// Multicast or broadcast IP destination: not routed.
        IpMulticast => "ip_multicast",
        /// Addressed to the router, but not something it answers.
        LocalUnhandled => "local_unhandled",
        /// Addressed to the router and received under labels (explicit null to one of
        /// its addresses, or a pop-and-lookup whose IP destination is local) while the
        /// kernel owns the host stack ([`HostStack::Kernel`](crate::HostStack::Kernel)):
        /// the kernel on these machines has no MPLS, so it dropped its copy of the
        /// labelled frame, and the pipeline has no way to hand it the popped packet.
        /// The router's own traffic must reach it unlabelled (penultimate-hop popping:
        /// implicit null for its own addresses, not explicit null).
        LocalAfterPop => "local_after_pop",
        /// Too big for the output MTU with DF set (ICMP frag needed / packet too big sent).
        MtuExceeded => "mtu_exceeded",
        /// Malformed ARP.
        BadArp => "bad_arp",
        /// Malformed ICMP / ICMPv6 / neighbour discovery message.
        BadIcmp => "bad_icmp",
        /// The next hop's address could not be resolved in time.
        NeighborUnresolved => "neighbor_unresolved",
        /// Too many frames waiting for one neighbour's address.
        NeighborQueueFull => "neighbor_queue_full",
        /// No packet buffer free for a generated frame or a segment.
        NoBuffer => "no_buffer",
        /// A super-frame that cannot be segmented (bad headers, unsupported GSO type).
        BadGso => "bad_gso",
        /// A frame could not be fragmented (bad header, no buffer).
        FragmentFailed => "fragment_failed",
        /// A partial checksum that cannot be completed: offsets outside the frame, or a
        /// checksum start in front of the IP header (it would overwrite the Ethernet header
        /// or the label stack).
        BadChecksumOffload => "bad_checksum_offload",
        /// An ICMP error was due but the rate limit was reached, or no source address.
        IcmpSuppressed => "icmp_suppressed",
        /// An ARP request or neighbour solicitation was due but the request rate limit
        /// was reached: not sent (the frames waiting for the address stay held until
        /// the next retransmission or until they expire).
        NeighborRequestSuppressed => "neighbor_request_suppressed",
        /// The next hop's port does not exist (stale route).
        NoSuchPort => "no_such_port",
        /// The frame would exceed the port's MTU at output (should not happen: a bug).
        OversizeAtOutput => "oversize_at_output",
    }
}

reasons! {
    /// Things the pipeline did, counted.
    Event {
        /// Labels pushed at an ingress PE.
        LabelPush => "label_push",
        /// Frames from an attachment circuit sent into their pseudowire.
        PwEncap => "pw_encapsulated",
        /// Frames from a pseudowire sent out of its attachment circuit.
        PwDecap => "pw_decapsulated",
        /// Source MACs a VPLS instance learned.
        VplsMacLearned => "vpls_mac_learned",
        /// Source MACs seen on another member of their VPLS instance than before.
        VplsMacMoved => "vpls_mac_moved",
        /// Frames whose new source MAC was not learned: the instance holds its MAC
        /// limit (the frame is forwarded all the same).
        VplsMacLimit => "vpls_mac_limit",
        /// VPLS frames flooded (each once, whatever the number of copies).
        VplsFlooded => "vpls_flooded",
        /// MACs withdrawn: their attachment circuit went down, their pseudowire went
        /// down or left the instance.
        VplsMacWithdrawn => "vpls_mac_withdrawn",
        /// Top label swapped.
        LabelSwap => "label_swap",
        /// Label popped (PHP, egress, explicit null).
        LabelPop => "label_pop",
        /// IP packet forwarded without labels.
        IpForward => "ip_forward",
        /// Router-alert label (1) punted to the control plane.
        PuntRouterAlert => "punt_router_alert",
        /// OAM-alert label (14) punted to the control plane.
        PuntOamAlert => "punt_oam_alert",
        /// Super-frames segmented in software.
        GsoSegmented => "gso_superframes_segmented",
        /// Segments produced by software segmentation.
        GsoSegments => "gso_segments_out",
        /// Super-frames passed whole to a port that takes them.
        GsoPassed => "gso_superframes_passed",
        /// Labelled super-frames sent whole as one jumbo frame on a link whose MTU holds
        /// them (between vmpls routers).
        GsoJumbo => "superframes_sent_as_jumbo",
        /// Super-frames rebuilt at the egress from a jumbo frame, for the customer port.
        GsoRebuilt => "gso_superframes_rebuilt",
        /// Super-frames built by receive coalescing (MPLS GRO).
        GroMerged => "gro_superframes_built",
        /// Segments absorbed into them.
        GroAbsorbed => "gro_segments_absorbed",
        /// Partial checksums completed in software.
        ChecksumCompleted => "checksum_completed",
        /// IPv4 packets fragmented at ingress.
        Fragmented => "ipv4_fragmented",
        /// ICMP time exceeded sent.
        IcmpTimeExceeded => "icmp_time_exceeded_sent",
        /// ICMP error (time exceeded, too big) sent forward along the LSP (P router).
        IcmpAlongLsp => "icmp_sent_along_lsp",
        /// ICMP fragmentation needed / packet too big sent.
        IcmpTooBig => "icmp_too_big_sent",
        /// ICMP unreachable sent.
        IcmpUnreachable => "icmp_unreachable_sent",
        /// Echo requests answered.
        EchoReply => "echo_reply_sent",
        /// ARP requests sent.
        ArpRequest => "arp_request_sent",
        /// ARP replies sent.
        ArpReply => "arp_reply_sent",
        /// Neighbour solicitations sent.
        NdSolicit => "nd_solicit_sent",
        /// Neighbour advertisements sent.
        NdAdvert => "nd_advert_sent",
        /// Frames for the router itself left unanswered because the kernel owns the host
        /// stack ([`HostStack::Kernel`](crate::HostStack::Kernel)) and received its own
        /// copy: ARP requests and neighbour solicitations for the router's addresses,
        /// packets to them (ping, traceroute probes, routing sessions), broadcast and
        /// multicast IP (OSPF, LDP hellos, IPv6 neighbour discovery and MLD), IPv6
        /// link-local destinations. Not lost: the kernel answers them.
        LeftToKernel => "left_to_kernel",
        /// New neighbour entries refused: the port's share of the table, the half of it
        /// open to entries learned from hosts' requests, or the whole table was full
        /// (`[limits] neighbor-entries-per-port`). A refused request is still answered;
        /// a frame toward a refused address is dropped as `neighbor_queue_full`.
        NeighborEntryRefused => "neighbor_entry_refused",
    }
}

/// Per-router counters. One forwarding thread owns them; snapshots are copied out.
#[derive(Debug, Clone)]
pub struct Counters {
    drops: [u64; DropReason::ALL.len()],
    events: [u64; Event::ALL.len()],
    /// Frames received per port.
    pub rx_frames: Vec<u64>,
    /// Frames handed to each port for sending.
    pub tx_frames: Vec<u64>,
    /// Per incoming label with a route: [frames, bytes], indexed by label, grown on
    /// demand up to the largest label seen (labels are at most 2^20).
    labels: Vec<[u64; 2]>,
    /// Per port that is a pseudowire's attachment circuit: [frames, bytes] sent into
    /// the pseudowire (the customer's frames, before the labels).
    pub pw_tx: Vec<[u64; 2]>,
}

impl Counters {
    /// Zeroed counters for `ports` ports.
    pub fn new(ports: usize) -> Counters {
        Counters {
            drops: [0; DropReason::ALL.len()],
            events: [0; Event::ALL.len()],
            rx_frames: vec![0; ports],
            tx_frames: vec![0; ports],
            labels: Vec::new(),
            pw_tx: vec![[0; 2]; ports],
        }
    }

    /// Counts a frame of `bytes` switched by the route of `label`.
    #[inline(always)]
    pub fn label(&mut self, label: u32, bytes: usize) {
        self.label_add(label, 1, bytes as u64);
    }

    /// Counts `frames` frames of `bytes` bytes in all switched by the route of `label`
    /// (several at once: the in-kernel fast path's, read from the kernel).
    #[inline(always)]
    pub fn label_add(&mut self, label: u32, frames: u64, bytes: u64) {
        let i = label as usize;
        let c = match self.labels.get_mut(i) {
            Some(c) => c,
            None => self.grow_labels(i),
        };
        c[0] += frames;
        c[1] += bytes;
    }

    /// The counters of `label`, past the end of the table: out of line, as it runs once
    /// per new highest label, and keeping it out of [`Counters::label`] lets that be
    /// inlined in the per-frame path.
    #[cold]
    fn grow_labels(&mut self, label: usize) -> &mut [u64; 2] {
        self.labels.resize(label + 1, [0; 2]);
        &mut self.labels[label]
    }

    /// Frames and bytes switched by the route of `label` so far.
    pub fn label_count(&self, label: u32) -> [u64; 2] {
        self.labels.get(label as usize).copied().unwrap_or([0; 2])
    }

    /// Labels that switched frames, as (label, frames, bytes), in label order.
    pub fn label_list(&self) -> impl Iterator<Item = (u32, u64, u64)> + '_ {
        self.labels.iter().enumerate().filter(|(_, c)| c[0] > 0).map(|(l, c)| (l as u32, c[0], c[1]))
    }

    /// Counts one drop.
    #[inline]
    pub fn drop(&mut self, reason: DropReason) {
        self.drops[reason as usize] += 1;
    }

    /// Counts `n` events.
    #[inline]
    pub fn event(&mut self, event: Event, n: u64) {
        self.events[event as usize] += n;
    }

    /// Drops counted under `reason`.
    pub fn drops(&self, reason: DropReason) -> u64 {
        self.drops[reason as usize]
    }

    /// Events counted.
    pub fn events(&self, event: Event) -> u64 {
        self.events[event as usize]
    }

    /// All drops, summed.
    pub fn total_drops(&self) -> u64 {
        self.drops.iter().sum()
    }

    /// Non-zero drop counters as (name, count).
    pub fn drop_list(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        DropReason::ALL.iter().map(|d| (d.name(), self.drops(*d))).filter(|(_, n)| *n > 0)
    }

    /// Non-zero event counters as (name, count).
    pub fn event_list(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        Event::ALL.iter().map(|e| (e.name(), self.events(*e))).filter(|(_, n)| *n > 0)
    }
}
