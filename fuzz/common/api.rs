//! What the control API fuzz target checks, shared by the cargo-fuzz target
//! (`fuzz/fuzz_targets/control_api.rs`) and the stable replay of the saved corpus
//! (`crates/control/tests/fuzz_corpus.rs`), both of which include this file with `#[path]`.
//!
//! The first byte picks the door a request comes in by: even, one line of the JSON
//! protocol the router's control socket reads (`serde_json` into `RequestLine`: a request
//! and its protocol version); odd, the
//! words of an iproute2-style `vmpls route ...` command line (`cli::parse_route`, the
//! family from bits 1-2). A request that parses must survive a JSON round trip, and a
//! route change is applied to the tables of a router configured like the seed's pe1 plus
//! VRFs and label routes of every kind:
//! - a change either fails with a message and leaves the tables as they were, or gives
//!   tables that build;
//! - an `add` that succeeded fails when repeated, and a `del` of the same route then
//!   gives back the tables shown before;
//! - every table can be shown after every change.
#![allow(dead_code)]

use std::path::Path;

use vmpls_control::Config;
use vmpls_control::api::{Family, Request, RequestLine};
use vmpls_control::cli;
use vmpls_control::tables::{Change, Tables};

/// The router the requests go to.
pub const CONFIG: &str = r#"[router]
name = "api"
addresses = ["198.18.255.1", "2001:db8:ff::1"]

[[vrf]]
name = "cust"

[[port]]
name = "ce1"
interface = "api-ce1"
vrf = "cust"
addresses = ["198.18.1.1/24", "2001:db8:1::1/64"]

[[port]]
name = "core"
interface = "api-core"
addresses = ["198.18.10.1/24", "2001:db8:10::1/64"]

[[route]]
prefix = "198.18.2.0/24"
vrf = "cust"
push = [1002]
via = "198.18.10.2"
port = "core"

[[route]]
prefix = "2001:db8:2::/64"
push = [1002, 5000]
via = "2001:db8:10::2"
port = "core"

[[label]]
in = 2001
action = "pop"
vrf = "cust"

[[label]]
in = 3000
action = "swap"
out = [3001]
via = "198.18.10.2"
"#;

fn tables() -> Tables {
    Tables::new(Config::from_str(CONFIG, Path::new("api.toml")).expect("the API fuzz config validates"))
}

fn shown(t: &Tables) -> Vec<String> {
    let mut out = Vec::new();
    for family in [Family::Inet, Family::Inet6, Family::Mpls] {
        for vrf in [None, Some("cust")] {
            match t.show(family, vrf) {
                Ok(v) => out.push(v.to_string()),
                Err(e) => {
                    let e = e.message();
                    assert!(!e.is_empty(), "a show error without a message");
                    out.push(e);
                }
            }
        }
    }
    out
}

/// Checks one input; panics on a broken promise.
pub fn api(data: &[u8]) {
    let Some((&door, rest)) = data.split_first() else { return };
    let request = if door & 1 == 0 {
        match serde_json::from_slice::<RequestLine>(rest) {
            Ok(line) => line.request,
            Err(e) => {
                assert!(!e.to_string().is_empty());
                return;
            }
        }
    } else {
        let Ok(text) = std::str::from_utf8(rest) else { return };
        let family =
            [None, Some(Family::Inet), Some(Family::Inet6), Some(Family::Mpls)][usize::from(door >> 1 & 3)];
        let words: Vec<String> = text.split_whitespace().map(str::to_string).collect();
        match cli::parse_route(family, &words) {
            Ok(r) => r,
            Err(e) => {
                assert!(!e.is_empty(), "a CLI error without a message");
                return;
            }
        }
    };
    let json = serde_json::to_vec(&request).expect("a request serializes");
    let again: Request = serde_json::from_slice(&json).unwrap_or_else(|e| {
        panic!("a request does not parse back from its own JSON {}: {e}", String::from_utf8_lossy(&json))
    });
    assert_eq!(again, request, "JSON round trip");

    let (change, route) = match &request {
        Request::RouteAdd { route } => (Change::Add, route),
        Request::RouteDel { route } => (Change::Delete, route),
        Request::RouteReplace { route } => (Change::Replace, route),
        Request::RouteShow { family, vrf, .. } => {
            let _ = tables().show(*family, vrf.as_deref());
            return;
        }
        Request::RouteGet { addr, vrf } => {
            let _ = tables().get(*addr, vrf.as_deref());
            return;
        }
        _ => return,
    };
    let mut t = tables();
    let before = shown(&t);
    match t.change(change, route) {
        Err(e) => {
            let e = e.message();
            assert!(!e.is_empty(), "a change refused without a message");
            assert_eq!(shown(&t), before, "a refused change changed the tables: {e}");
        }
        Ok(_) => {
            t.build_fib().expect("tables after a change build");
            let after = shown(&t);
            if change == Change::Add {
                assert!(t.change(Change::Add, route).is_err(), "the same route added twice: {route:?}");
                let deleted = t.change(Change::Delete, route);
                assert!(deleted.is_ok(), "an added route cannot be deleted: {deleted:?} {route:?}");
                assert_eq!(shown(&t), before, "add then delete does not restore the tables");
            }
            std::hint::black_box(after);
        }
    }
}
