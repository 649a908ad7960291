//! Next hops, shared by `[[route]]` and `[[label]]`: a next hop as written ([`RawNh`],
//! inline or one of `nexthops = [...]`) and its resolution against the ports
//! ([`Validator`]): the port by name or by the gateway's subnet, the gateway directly
//! connected and not the router's own, the label stack and the weight.

use std::ops::Range;

use vmpls_fib::{IMPLICIT_NULL, MAX_NEXTHOPS, PortId};

use super::S;
use super::ctx::Ctx;
use vmpls_wire::prefix::mask;

use super::values::{contains, parse_host, parse_stack, parse_weight};
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

    fn subnets(&self, p: &PortConfig) -> String {
        if p.addresses.is_empty() {
            return "it has no addresses".to_string();
        }
        let nets: Vec<String> = p.addresses.iter().map(|&(a, l)| format!("{}/{l}", mask(a, l))).collect();
        nets.join(", ")
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
            Some(s) => match self.ports.iter().position(|p| p.name == *s.get_ref()) {
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
        let (via, port) = match (via, port) {
            (None, None) => {
                return Err(ctx.err_line(
                    line,
                    &field("via"),
                    "the next hop needs via = \"...\" (a gateway) and/or port = \"...\"",
                ));
            }
            (None, Some(p)) => {
                if is_label {
                    let span = nh.port.map(|s| s.span()).unwrap_or_default();
                    return Err(ctx.err(
                        &span,
                        &field("port"),
                        "a labelled packet needs a gateway on the port: add via = \"...\"",
                    ));
                }
                (None, p)
            }
            (Some((a, span)), Some(p)) => {
                let port = &self.ports[p];
                if port.addresses.iter().any(|&(b, _)| b == a) {
                    return Err(ctx.err(
                        &span,
                        &field("via"),
                        format!("{a} is this router's own address on port \"{}\"; the next hop must be a neighbour", port.name),
                    ));
                }
                if !port.addresses.iter().any(|&(net, len)| contains(net, len, a)) {
                    return Err(ctx.err(
                        &span,
                        &field("via"),
                        format!(
                            "{a} is not on any subnet of port \"{}\" ({}); a next hop must be directly connected",
                            port.name,
                            self.subnets(port)
                        ),
                    ));
                }
                (Some(a), p)
            }
            (Some((a, span)), None) => {
                let on: Vec<usize> = (0..self.ports.len())
                    .filter(|&i| self.ports[i].addresses.iter().any(|&(net, len)| contains(net, len, a)))
                    .collect();
                match on.as_slice() {
                    [] => {
                        return Err(ctx.err(
                            &span,
                            &field("via"),
                            format!("{a} is not on any port's subnet; a next hop must be directly connected (check the address, or the port's addresses)"),
                        ));
                    }
                    [p] => {
                        let port = &self.ports[*p];
                        if port.addresses.iter().any(|&(b, _)| b == a) {
                            return Err(ctx.err(
                                &span,
                                &field("via"),
                                format!("{a} is this router's own address on port \"{}\"; the next hop must be a neighbour", port.name),
                            ));
                        }
                        (Some(a), *p)
                    }
                    many => {
                        let names: Vec<String> =
                            many.iter().map(|&i| format!("\"{}\"", self.ports[i].name)).collect();
                        return Err(ctx.err(
                            &span,
                            &field("via"),
                            format!(
                                "{a} is on the subnets of ports {}; add port = \"...\" to choose one",
                                names.join(" and ")
                            ),
                        ));
                    }
                }
            }
        };
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
