//! Netlink requests (links, addresses, routes) inside a network namespace.
//!
//! A netlink socket belongs to the network namespace of the thread that opens it, so
//! [`session`] opens one on a thread inside the namespace, with a current-thread tokio
//! runtime that lives for the session only.

use std::future::Future;
use std::net::IpAddr;
use std::os::fd::RawFd;

use anyhow::{Context, anyhow};
use futures::TryStreamExt;
use rtnetlink::packet_route::link::{InfoData, InfoKind, InfoVeth};
use rtnetlink::{Handle, LinkMessageBuilder, LinkUnspec, LinkVeth, RouteMessageBuilder};

use crate::IpPrefix;
use crate::netns;

/// Runs `f` with a netlink handle whose socket lives in the namespace `ns`.
pub(crate) fn session<R, F, Fut>(ns: &str, f: F) -> anyhow::Result<R>
where
    R: Send,
    F: FnOnce(Handle) -> Fut + Send,
    Fut: Future<Output = anyhow::Result<R>>,
{
    netns::in_netns(ns, move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .context("building a tokio runtime")?;
        runtime.block_on(async move {
            let (connection, handle, _) = rtnetlink::new_connection().context("opening a netlink socket")?;
            let task = tokio::spawn(connection);
            let result = f(handle).await;
            task.abort();
            result
        })
    })?
}

/// The errno of a netlink error reply, if `e` is one.
pub(crate) fn errno(e: &rtnetlink::Error) -> Option<i32> {
    match e {
        rtnetlink::Error::NetlinkError(m) => m.code.map(|c| -c.get()),
        _ => None,
    }
}

/// The index of the interface `name`.
pub(crate) async fn link_index(handle: &Handle, name: &str) -> anyhow::Result<u32> {
    let mut links = handle.link().get().match_name(name.to_string()).execute();
    match links.try_next().await {
        Ok(Some(msg)) => Ok(msg.header.index),
        Ok(None) => Err(anyhow!("no interface {name}")),
        Err(e) if errno(&e) == Some(libc::ENODEV) => Err(anyhow!("no interface {name}")),
        Err(e) => Err(e).with_context(|| format!("looking up interface {name}")),
    }
}

/// Creates a veth pair in this session's namespace: `name` here, `peer` in the
/// namespace open as `peer_ns` (or here too if `None`), each with its MTU, both down.
pub(crate) async fn add_veth(
    handle: &Handle,
    name: &str,
    mtu: u32,
    peer: &str,
    peer_mtu: u32,
    peer_ns: Option<RawFd>,
) -> anyhow::Result<()> {
    let mut peer_msg = LinkMessageBuilder::<LinkUnspec>::new().name(peer.to_string()).mtu(peer_mtu);
    if let Some(fd) = peer_ns {
        peer_msg = peer_msg.setns_by_fd(fd);
    }
    let msg = LinkMessageBuilder::<LinkVeth>::new_with_info_kind(InfoKind::Veth)
        .name(name.to_string())
        .mtu(mtu)
        .set_info_data(InfoData::Veth(InfoVeth::Peer(peer_msg.build())))
        .build();
    handle.link().add(msg).execute().await.with_context(|| format!("creating veth pair {name} -- {peer}"))
}

/// Sets the interface `name` up or down.
pub(crate) async fn set_up(handle: &Handle, name: &str, up: bool) -> anyhow::Result<()> {
    let index = link_index(handle, name).await?;
    let builder = LinkUnspec::new_with_index(index);
    let msg = if up { builder.up() } else { builder.down() }.build();
    handle
        .link()
        .set(msg)
        .execute()
        .await
        .with_context(|| format!("setting {name} {}", if up { "up" } else { "down" }))
}

/// Sets the MTU of the interface `name`.
pub(crate) async fn set_mtu(handle: &Handle, name: &str, mtu: u32) -> anyhow::Result<()> {
    let index = link_index(handle, name).await?;
    let msg = LinkUnspec::new_with_index(index).mtu(mtu).build();
    handle.link().set(msg).execute().await.with_context(|| format!("setting the MTU of {name} to {mtu}"))
}

/// The MTU of the interface `name`.
pub(crate) async fn mtu(handle: &Handle, name: &str) -> anyhow::Result<u32> {
    use rtnetlink::packet_route::link::LinkAttribute;
    let mut links = handle.link().get().match_name(name.to_string()).execute();
    let msg = links
        .try_next()
        .await
        .with_context(|| format!("looking up interface {name}"))?
        .ok_or_else(|| anyhow!("no interface {name}"))?;
    msg.attributes
        .iter()
        .find_map(|a| if let LinkAttribute::Mtu(m) = a { Some(*m) } else { None })
        .ok_or_else(|| anyhow!("interface {name} has no MTU attribute"))
}

/// Adds `addr` (with its prefix length) to the interface `name`.
pub(crate) async fn add_address(handle: &Handle, name: &str, addr: IpPrefix) -> anyhow::Result<()> {
    let index = link_index(handle, name).await?;
    handle
        .address()
        .add(index, addr.addr(), addr.len())
        .execute()
        .await
        .with_context(|| format!("adding address {addr} to {name}"))
}

/// The addresses on the interface `name` (IPv6 link-local ones included).
pub(crate) async fn addresses(handle: &Handle, name: &str) -> anyhow::Result<Vec<IpPrefix>> {
    use rtnetlink::packet_route::address::AddressAttribute;
    let index = link_index(handle, name).await?;
    let msgs: Vec<_> = handle
        .address()
        .get()
        .set_link_index_filter(index)
        .execute()
        .try_collect()
        .await
        .with_context(|| format!("listing the addresses of {name}"))?;
    let mut out = Vec::new();
    for msg in msgs {
        let addr = msg.attributes.iter().find_map(|a| match a {
            AddressAttribute::Local(ip) => Some(*ip),
            _ => None,
        });
        let addr = addr.or_else(|| {
            msg.attributes.iter().find_map(|a| match a {
                AddressAttribute::Address(ip) => Some(*ip),
                _ => None,
            })
        });
        if let Some(addr) = addr {
            out.push(IpPrefix::new(addr, msg.header.prefix_len)?);
        }
    }
    Ok(out)
}

/// Removes every address from the interface `name`, except IPv6 link-local ones
/// (IPv6 needs them to resolve neighbours for forwarded packets).
pub(crate) async fn flush_addresses(handle: &Handle, name: &str) -> anyhow::Result<()> {
    use rtnetlink::packet_route::address::AddressAttribute;
    let index = link_index(handle, name).await?;
    let msgs: Vec<_> = handle
        .address()
        .get()
        .set_link_index_filter(index)
        .execute()
        .try_collect()
        .await
        .with_context(|| format!("listing the addresses of {name}"))?;
    for msg in msgs {
        let link_local = msg.attributes.iter().any(
            |a| matches!(a, AddressAttribute::Address(IpAddr::V6(v6)) if v6.segments()[0] & 0xffc0 == 0xfe80),
        );
        if link_local {
            continue;
        }
        match handle.address().del(msg).execute().await {
            Ok(()) => {}
            // Already gone (e.g. removed with its primary address).
            Err(e) if errno(&e) == Some(libc::EADDRNOTAVAIL) => {}
            Err(e) => return Err(e).with_context(|| format!("removing an address of {name}")),
        }
    }
    Ok(())
}

fn route_message(
    dest: IpPrefix,
    via: Option<IpAddr>,
    dev: Option<u32>,
) -> anyhow::Result<rtnetlink::packet_route::route::RouteMessage> {
    let net = dest.network();
    let mut builder = RouteMessageBuilder::<IpAddr>::new()
        .destination_prefix(net.addr(), net.len())
        .map_err(|e| anyhow!("{e}"))?;
    if let Some(via) = via {
        if via.is_ipv4() != dest.addr().is_ipv4() {
            anyhow::bail!("route {dest} via {via}: address families differ");
        }
        builder = builder.gateway(via).map_err(|e| anyhow!("{e}"))?;
    }
    if let Some(index) = dev {
        builder = builder.output_interface(index);
    }
    Ok(builder.build())
}

/// Adds (or replaces) a route to `dest` via the gateway `via` and/or out of `dev`.
pub(crate) async fn add_route(
    handle: &Handle,
    dest: IpPrefix,
    via: Option<IpAddr>,
    dev: Option<&str>,
) -> anyhow::Result<()> {
    let index = match dev {
        Some(d) => Some(link_index(handle, d).await?),
        None => None,
    };
    let msg = route_message(dest, via, index)?;
    handle.route().add(msg).replace().execute().await.with_context(|| {
        format!("adding route {}{}", dest.network(), via.map(|v| format!(" via {v}")).unwrap_or_default())
    })
}

/// Deletes the route to `dest`; returns whether one was there.
pub(crate) async fn del_route(handle: &Handle, dest: IpPrefix) -> anyhow::Result<bool> {
    let msg = route_message(dest, None, None)?;
    match handle.route().del(msg).execute().await {
        Ok(()) => Ok(true),
        Err(e) if matches!(errno(&e), Some(libc::ESRCH) | Some(libc::ENOENT)) => Ok(false),
        Err(e) => Err(e).with_context(|| format!("deleting route {}", dest.network())),
    }
}
