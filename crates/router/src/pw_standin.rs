//! The interfaces standing for pseudowires in FRR mode.
//!
//! ldpd's `member pseudowire mpw0` (and zebra's `pseudowire mpw0`) name an interface
//! zebra must know; Linux has no pseudowire device, and the PW's frames never touch it
//! (vmpls carries them). So the router makes one per `[[pseudowire]]` of its config when
//! it starts in FRR mode, up, and removes them when it stops: a `dummy` device where the
//! kernel has the module, else an `ifb` (this project's CI kernel has no `dummy`; `ifb`
//! sits idle without traffic redirected to it). An interface of that name that exists
//! already is left alone and not removed (someone else's, or a previous run's that the
//! next FRR start may be using).

use anyhow::Context;
use netlink_packet_core::{
    NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_packet_route::link::{InfoKind, LinkAttribute, LinkFlags, LinkInfo, LinkMessage};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_ROUTE};
use tracing::{info, warn};

/// The device kinds tried, in order.
const KINDS: [(InfoKind, &str); 2] = [(InfoKind::Dummy, "dummy"), (InfoKind::Ifb, "ifb")];

/// The stand-in interfaces this router made; removed on drop.
#[derive(Debug, Default)]
pub struct StandIns {
    made: Vec<String>,
}

impl StandIns {
    /// Makes (up) an interface for each name that has none yet, in this network
    /// namespace.
    ///
    /// # Errors
    /// The kernel refused every kind of device for a name (those made so far are
    /// removed).
    pub fn create(names: &[String]) -> anyhow::Result<StandIns> {
        let mut s = StandIns::default();
        for name in names {
            if vmpls_sys::if_nametoindex(name).is_some() {
                info!(pw = name, "the pseudowire's interface exists already; left as it is");
                continue;
            }
            let mut errors = Vec::new();
            for (kind, kind_name) in KINDS {
                match request(new_link(name, kind), NLM_F_CREATE | NLM_F_EXCL) {
                    Ok(()) => {
                        info!(
                            pw = name,
                            kind = kind_name,
                            "made the interface standing for the pseudowire (for zebra and ldpd)"
                        );
                        s.made.push(name.clone());
                        break;
                    }
                    Err(e) => errors.push(format!("{kind_name}: {e:#}")),
                }
            }
            if errors.len() == KINDS.len() {
                anyhow::bail!(
                    "cannot make the interface {name:?} standing for the pseudowire (zebra and ldpd need it): {}",
                    errors.join("; ")
                );
            }
        }
        Ok(s)
    }

    /// The names made.
    #[must_use]
    pub fn names(&self) -> &[String] {
        &self.made
    }
}

impl Drop for StandIns {
    fn drop(&mut self) {
        for name in self.made.drain(..) {
            let Some(index) = vmpls_sys::if_nametoindex(&name) else { continue };
            let mut msg = LinkMessage::default();
            msg.header.index = index;
            if let Err(e) = request(RouteNetlinkMessage::DelLink(msg), 0) {
                warn!(pw = name, "could not remove the pseudowire's interface: {e:#}");
            }
        }
    }
}

fn new_link(name: &str, kind: InfoKind) -> RouteNetlinkMessage {
    let mut msg = LinkMessage::default();
    msg.header.flags = LinkFlags::Up;
    msg.header.change_mask = LinkFlags::Up;
    msg.attributes.push(LinkAttribute::IfName(name.to_owned()));
    msg.attributes.push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(kind)]));
    RouteNetlinkMessage::NewLink(msg)
}

/// Sends one request and waits for the kernel's acknowledgement.
fn request(msg: RouteNetlinkMessage, flags: u16) -> anyhow::Result<()> {
    let mut sock = Socket::new(NETLINK_ROUTE).context("opening an rtnetlink socket")?;
    sock.bind_auto().context("binding the rtnetlink socket")?;
    sock.connect(&SocketAddr::new(0, 0)).context("connecting the rtnetlink socket")?;
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | NLM_F_ACK | flags;
    let mut req = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(msg));
    req.finalize();
    let mut buf = vec![0; req.buffer_len()];
    req.serialize(&mut buf);
    sock.send(&buf, 0).context("sending to rtnetlink")?;
    let mut rx = Vec::with_capacity(8192);
    // the acknowledgement is the only answer to this socket's one request
    sock.recv(&mut rx, 0).context("reading rtnetlink's answer")?;
    let answer =
        NetlinkMessage::<RouteNetlinkMessage>::deserialize(&rx).context("decoding rtnetlink's answer")?;
    match answer.payload {
        NetlinkPayload::Error(e) if e.code.is_some() => Err(anyhow::anyhow!("{}", e.to_io())),
        NetlinkPayload::Error(_) => Ok(()),
        other => anyhow::bail!("unexpected rtnetlink answer {other:?}"),
    }
}
