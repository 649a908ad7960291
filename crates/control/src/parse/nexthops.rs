//! Next hops, shared by `[[route]]` and `[[label]]`: a next hop as written ([`RawNh`],
//! inline or one of `nexthops = [...]`) and its resolution against the ports
//! ([`Validator`]): the port by name or by the gateway's subnet, the gateway directly
//! connected and not the router's own, the label stack and the weight.

use std::ops::Range;

use vmpls_fib::{IMPLICIT_NULL, MAX_NEXTHOPS, PortId};

use super::S;
use super::ctx::Ctx;

use super::values::{parse_host, parse_stack, parse_weight};
use crate::nexthop::{NexthopError, port_index, resolve_port};
use crate::{ConfigError, NexthopConfig, PortConfig};

/// A next hop as written, inline or in `nexthops = [...]`, before resolution.
pub(super) struct RawNh<'a> {
    pub(super) via: Option<&'a S<String>>,
    pub(super) port: Option<&'a S<String>>,
    pub(super) labels: Option<&'a S<Vec<S<i64>>>>,
    pub(super) weight: Option<&'a S<i64>>,
}

/// The first inline next-hop key present, as (`table.key`, span).
pub(super) fn inline_first(nh: &RawNh, table: &str, labels_key: &str) -> Option<(String, Range<usize>)> {
    let f = |k: &str| format!("{table}.{k}");
    nh.via
        .map(|s| (f("via"), s.span()))
        .or_else(|| nh.port.map(|s| (f("port"), s.span())))
        .or_else(|| nh.labels.map(|s| (f(labels_key), s.span())))
        .or_else(|| nh.weight.map(|s| (f("weight"), s.span())))
}

/// Checks of next hops against the ports.
pub(super) struct Validator<'a> {
    ctx: &'a Ctx<'a>,
    ports: &'a [PortConfig],
}

impl<'a> Validator<'a> {
    pub(super) fn new(ctx: &'a Ctx<'a>, ports: &'a [PortConfig]) -> Validator<'a> {
        Validator { ctx, ports }
    }

    pub(super) fn check_count(&self, n: usize, span: &Range<usize>, field: &str) -> Result<(), ConfigError> {
        if n == 0 {
            return Err(self.ctx.err(span, field, "the list is empty; give at least one next hop"));
        }
        if n > MAX_NEXTHOPS {
            return Err(self.ctx.err(
                span,
                field,
                format!("{n} next hops; at most {MAX_NEXTHOPS} are allowed"),
            ));
        }
        Ok(())
    }

    /// Resolves one next hop: the port by name or by `via`'s subnet, the gateway on it,
    /// the label stack (required non-empty when `need_labels`; `ipv4_payload` as in
    /// [`crate::check_out_stack`]), the weight.
    pub(super) fn nexthop(
        &self,
        nh: &RawNh,
        table: &str,
        labels_key: &str,
        need_labels: bool,
        ipv4_payload: Option<bool>,
        line: usize,
    ) -> Result<NexthopConfig, ConfigError> {
        let ctx = self.ctx;
        let is_label = table.starts_with("label");
        let field = |k: &str| format!("{table}.{k}");
        let port = match nh.port {
            None => None,
            Some(s) => match port_index(self.ports, s.get_ref()) {
                Some(i) => Some(i),
                None => {
                    let names: Vec<&str> = self.ports.iter().map(|p| p.name.as_str()).collect();
                    let known = if names.is_empty() {
                        "none are defined".to_string()
                    } else {
                        format!("ports are: {}", names.join(", "))
                    };
                    return Err(ctx.err(
                        &s.span(),
                        &field("port"),
                        format!("no port named \"{}\" ({known})", s.get_ref()),
                    ));
                }
            },
        };
        let via = match nh.via {
            None => None,
            Some(s) => Some((parse_host(ctx, s, &field("via"), "198.18.10.2 or 2001:db8:10::2")?, s.span())),
        };
        if via.is_none() && port.is_some() && is_label {
            let span = nh.port.map(|s| s.span()).unwrap_or_default();
            return Err(ctx.err(
                &span,
                &field("port"),
                "a labelled packet needs a gateway on the port: add via = \"...\"",
            ));
        }
        let port = resolve_port(self.ports, port, via.as_ref().map(|(a, _)| *a)).map_err(|e| {
            let via_span = via.as_ref().map(|(_, span)| span.clone()).unwrap_or_default();
            match e {
                NexthopError::NoGatewayNoPort => ctx.err_line(
                    line,
                    &field("via"),
                    "the next hop needs via = \"...\" (a gateway) and/or port = \"...\"",
                ),
                NexthopError::NotOnAnySubnet { addr } => ctx.err(
                    &via_span,
                    &field("via"),
                    format!("{addr} is not on any port's subnet; a next hop must be directly connected (check the address, or the port's addresses)"),
                ),
                e @ NexthopError::OnManySubnets { .. } => {
                    ctx.err(&via_span, &field("via"), format!("{e}; add port = \"...\" to choose one"))
                }
                e => ctx.err(&via_span, &field("via"), e.to_string()),
            }
        })?;
        let via = via.map(|(a, _)| a);
        let labels = match nh.labels {
            Some(stack) => parse_stack(ctx, stack, &field(labels_key), ipv4_payload)?,
            None => Vec::new(),
        };
        if need_labels && labels.is_empty() {
            let span = nh.labels.map(|s| s.span()).or(nh.via.map(|s| s.span())).or(nh.port.map(|s| s.span()));
            let msg = "swap needs the outgoing label: out = [label] (out = [3] for penultimate-hop popping)";
            return Err(match span {
                Some(span) => ctx.err(&span, &field(labels_key), msg),
                None => ctx.err_line(line, &field(labels_key), msg),
            });
        }
        let weight = parse_weight(ctx, nh.weight, &field("weight"))?;
        // Implicit null alone: no label (penultimate-hop pop, or push nothing).
        let labels = if labels == [IMPLICIT_NULL] { Vec::new() } else { labels };
        Ok(NexthopConfig { port: port as PortId, via, labels, weight })
    }
}
