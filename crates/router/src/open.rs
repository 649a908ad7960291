//! Opening the port a `[[port]]` describes.

use vmpls_dataplane::PortId;
use vmpls_ports::{
    AfPacketPort, MemifOptions, MemifPort, MemifRole, MplsUdpOptions, MplsUdpPort, Port, PortError,
    TapOptions, TapPort, VhostUserOptions, VhostUserPort,
};

use crate::links::Relink;
use crate::vrfs::VrfNetns;

/// Opens the port a `[[port]]` describes, by its kind, with the port type's own
/// constructor: an AF_PACKET socket on an existing interface, a TAP the router creates,
/// an MPLS-in-UDP tunnel, a vhost-user socket QEMU connects to, or a memif (the
/// directory of either socket is created if missing). For an AF_PACKET port, also how to find its interface again
/// should it be deleted and created anew.
/// An AF_PACKET port in a VRF's namespace (`netns`) is opened there: its socket stays
/// bound to that namespace's interface. `receive_every_frame`: a pseudowire's attachment
/// circuit, whose socket puts the interface in promiscuous mode while it is open.
pub(crate) fn open_port(
    id: PortId,
    p: &vmpls_control::PortConfig,
    netns: Option<&VrfNetns>,
    receive_every_frame: bool,
) -> Result<(Box<dyn Port>, Option<Relink>), PortError> {
    use vmpls_control::PortKind as K;
    let port: Box<dyn Port> = match &p.kind {
        K::AfPacket => {
            let mut port =
                crate::vrfs::run_in(netns, || AfPacketPort::open(id, &p.name, &p.interface, p.mtu))
                    .map_err(|source| PortError::Io {
                        ifname: p.interface.clone(),
                        op: "enter the VRF's network namespace",
                        source,
                    })??;
            if receive_every_frame {
                port.receive_every_frame()?;
            }
            let relink = Relink {
                ifname: p.interface.clone(),
                ifindex: port.ifindex(),
                offloads: p.offloads,
                mtu: p.mtu,
                netns: netns.cloned(),
                receive_every_frame,
            };
            return Ok((Box::new(port), Some(relink)));
        }
        K::Tap { mac } => {
            let opts = TapOptions { mtu: p.mtu, mac: *mac, ..TapOptions::default() };
            Box::new(TapPort::create(id, &p.name, &p.interface, &opts)?)
        }
        K::Udp { local, remote, port, netns } => {
            let opts = MplsUdpOptions {
                local: *local,
                remote: *remote,
                udp_port: *port,
                netns: netns.clone(),
                mtu: p.mtu,
            };
            Box::new(MplsUdpPort::open(id, &p.name, &opts)?)
        }
        K::VhostUser { socket, mac, socket_group } => {
            create_socket_dir(socket)?;
            let opts = VhostUserOptions {
                mtu: p.mtu,
                mac: *mac,
                socket_group: socket_group.as_ref().map(|g| g.name.clone()),
            };
            Box::new(VhostUserPort::open(id, &p.name, socket, &opts)?)
        }
        K::Memif { socket, role, id: memif_id, mac } => {
            create_socket_dir(socket)?;
            let role = match role {
                vmpls_control::MemifRole::Client => MemifRole::Client,
                vmpls_control::MemifRole::Server => MemifRole::Server,
            };
            let opts = MemifOptions { mtu: p.mtu, mac: *mac, ..MemifOptions::new(socket, role, *memif_id) };
            Box::new(MemifPort::open(id, &p.name, &opts)?)
        }
    };
    Ok((port, None))
}

/// Creates the directory of a socket the router listens on (or a client's, harmlessly)
/// if it is missing.
fn create_socket_dir(socket: &std::path::Path) -> Result<(), PortError> {
    if let Some(dir) = socket.parent().filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
        std::fs::create_dir_all(dir).map_err(|source| PortError::Io {
            ifname: socket.display().to_string(),
            op: "create the socket's directory",
            source,
        })?;
    }
    Ok(())
}
