//! Opening the port a `[[port]]` describes.

use vmpls_dataplane::PortId;
use vmpls_ports::{AfPacketPort, Port, PortError};

use crate::links::Relink;

/// Opens the port a `[[port]]` describes, by its kind: an AF_PACKET socket on an existing
/// interface, a TAP the router creates, or a vhost-user socket QEMU connects to (its
/// directory is created if missing). For an AF_PACKET port, also how to find its
/// interface again should it be deleted and created anew.
pub(crate) fn open_port(
    id: PortId,
    p: &vmpls_control::PortConfig,
) -> Result<(Box<dyn Port>, Option<Relink>), PortError> {
    use vmpls_control::PortKind as K;
    use vmpls_ports::PortKind as P;
    let port = match &p.kind {
        K::AfPacket => {
            let port = AfPacketPort::open(id, &p.name, &p.interface, p.mtu)?;
            let relink = Relink {
                ifname: p.interface.clone(),
                ifindex: port.ifindex(),
                offloads: p.offloads,
                mtu: p.mtu,
            };
            return Ok((Box::new(port), Some(relink)));
        }
        K::Tap { mac: None } => {
            vmpls_ports::open_port(id, &p.name, &P::Tap { ifname: p.interface.clone() }, p.mtu)
        }
        K::Tap { mac: Some(mac) } => {
            let opts = vmpls_ports::TapOptions { mtu: p.mtu, mac: Some(*mac), ..Default::default() };
            Ok(Box::new(vmpls_ports::TapPort::create(id, &p.name, &p.interface, &opts)?) as Box<dyn Port>)
        }
        K::Udp { local, remote, port, netns } => {
            let opts = vmpls_ports::MplsUdpOptions {
                local: *local,
                remote: *remote,
                udp_port: *port,
                netns: netns.clone(),
                mtu: p.mtu,
            };
            vmpls_ports::open_port(id, &p.name, &P::MplsUdp(opts), p.mtu)
        }
        K::VhostUser { socket, mac } => {
            if let Some(dir) = socket.parent().filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
                std::fs::create_dir_all(dir).map_err(|source| PortError::Io {
                    ifname: socket.display().to_string(),
                    op: "create the socket's directory",
                    source,
                })?;
            }
            match mac {
                None => vmpls_ports::open_port(id, &p.name, &P::VhostUser { socket: socket.clone() }, p.mtu),
                Some(mac) => {
                    let opts = vmpls_ports::VhostUserOptions { mtu: p.mtu, mac: Some(*mac) };
                    Ok(Box::new(vmpls_ports::VhostUserPort::open(id, &p.name, socket, &opts)?)
                        as Box<dyn Port>)
                }
            }
        }
    };
    Ok((port?, None))
}
