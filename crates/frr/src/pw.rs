//! The zebra module's pseudowire channel, without I/O.
//!
//! zebra's pseudowires (signalled by ldpd, or `pseudowire` static config) never reach
//! FPM; the vmpls zebra module (`frr/zebra-module/vmpls_zebra.c`) exports them on a TCP
//! connection of its own to the router (default `127.0.0.1:2621`): line-delimited JSON,
//! one object a line, both ways.
//!
//! Module to vmpls ([`FromModule`]):
//! ```text
//! {"op":"hello","frr":"8.4.4"}
//! {"op":"sync","pws":[PW...]}           after each (re)connect: the whole set
//! {"op":"install","pw":PW}              add or change
//! {"op":"uninstall","name":"mpw0"}
//! PW = {"name":"mpw0","local-label":16,"remote-label":17,"peer":"198.18.255.2",
//!       "control-word":true,"pw-type":"ethernet"}
//! ```
//! vmpls to module ([`encode_status`]):
//! ```text
//! {"op":"status","name":"mpw0","up":false,"reason":"attachment down"}
//! ```
//! Decoding is strict about what it reads (a label outside 16..2^20, a name no Linux
//! interface could have, a peer that is no unicast address, a PW named twice in one sync
//! are errors, each with what was wrong) and ignores members it does not know, so that a
//! newer module's additions do not break an older router. A bad line is one error; the
//! next line is read as usual ([`LineBuffer`] keeps the framing). Only a line longer than
//! [`MAX_LINE`] ends the stream.

use std::collections::HashSet;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The longest line read (a sync of thousands of PWs fits; each is under 200 bytes).
pub const MAX_LINE: usize = 1 << 20;
/// The channel's default address (module argument `pw=ADDR:PORT`, `[frr] pw-channel`).
pub const DEFAULT_PORT: u16 = 2621;
/// The lowest label a PW may use (0..15 are reserved, RFC 3032).
pub const MIN_LABEL: u32 = 16;
/// The highest 20-bit label.
pub const MAX_LABEL: u32 = (1 << 20) - 1;
/// Linux's IFNAMSIZ less the NUL: the PW's name is an interface's name in zebra.
pub const MAX_NAME: usize = 15;

/// A point-to-point Ethernet pseudowire: what the config file, the CLI or ldpd (through
/// zebra and this channel) says of it. The one type for it: the control API
/// (`vmpls_control::api::PwSpec`) and the tables use this one (kebab-case in JSON).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct PwSpec {
    /// Its name: ldpd's `member pseudowire NAME` (an interface's name in zebra), the
    /// key everywhere.
    pub name: String,
    /// The label the far PE pushes: popped here, control word off, out of the attachment.
    pub local_label: u32,
    /// The label pushed under the transport labels toward the far PE.
    pub remote_label: u32,
    /// The far PE's address; the transport is the router's route to it.
    pub peer: IpAddr,
    /// RFC 4385 control word on the wire.
    pub control_word: bool,
    /// The encapsulation (RFC 4446 PW type).
    #[serde(default)]
    pub pw_type: PwType,
}

/// The PW types of RFC 4446 that vmpls carries (RFC 4448 Ethernet).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PwType {
    /// Type 5, raw mode: the frame as it came, VLAN tags and all.
    #[default]
    Ethernet,
    /// Type 4, tagged mode; carried as raw mode here.
    EthernetTagged,
}

impl PwType {
    /// The name on the channel.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            PwType::Ethernet => "ethernet",
            PwType::EthernetTagged => "ethernet-tagged",
        }
    }
}

/// One message from the module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FromModule {
    /// First on each connection: the module's FRR version.
    Hello {
        /// FRR's version as the module was built for it.
        frr: String,
    },
    /// The whole set, after each (re)connect: every other PW from zebra is gone.
    Sync(Vec<PwSpec>),
    /// A PW added or changed.
    Install(PwSpec),
    /// A PW removed (by name).
    Uninstall(String),
}

/// Why a line is not a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Not UTF-8 JSON.
    #[error("not JSON: {0}")]
    NotJson(String),
    /// JSON, but not an object.
    #[error("not a JSON object")]
    NotObject,
    /// No `op` string member.
    #[error("no \"op\"")]
    NoOp,
    /// An `op` this router does not know.
    #[error("unknown op {0:?}")]
    UnknownOp(String),
    /// A member missing or of the wrong JSON type.
    #[error("{op}: member {member:?} missing or not {want}")]
    Member {
        /// The message.
        op: &'static str,
        /// The member.
        member: &'static str,
        /// The JSON type wanted.
        want: &'static str,
    },
    /// A member's value is not valid.
    #[error("{what}: {why}")]
    Invalid {
        /// Which member (with the PW's name when known).
        what: String,
        /// What is wrong.
        why: String,
    },
}

fn member<'a>(
    obj: &'a Map<String, Value>,
    op: &'static str,
    name: &'static str,
    want: &'static str,
) -> Result<&'a Value, DecodeError> {
    obj.get(name).ok_or(DecodeError::Member { op, member: name, want })
}

fn string<'a>(
    obj: &'a Map<String, Value>,
    op: &'static str,
    name: &'static str,
) -> Result<&'a str, DecodeError> {
    member(obj, op, name, "a string")?.as_str().ok_or(DecodeError::Member {
        op,
        member: name,
        want: "a string",
    })
}

/// Checks a PW's name as Linux checks an interface's (`dev_valid_name`).
///
/// # Errors
/// Empty, longer than [`MAX_NAME`], `.` or `..`, or with `/`, `:`, whitespace or a
/// control character.
pub fn check_name(name: &str) -> Result<(), DecodeError> {
    let bad = |why: &str| DecodeError::Invalid { what: format!("name {name:?}"), why: why.into() };
    if name.is_empty() {
        return Err(bad("empty"));
    }
    if name.len() > MAX_NAME {
        return Err(bad(&format!("longer than {MAX_NAME} bytes (an interface name)")));
    }
    if name == "." || name == ".." {
        return Err(bad("not an interface name"));
    }
    if name.chars().any(|c| c == '/' || c == ':' || c.is_whitespace() || c.is_control()) {
        return Err(bad("has '/', ':', whitespace or a control character"));
    }
    Ok(())
}

fn label(obj: &Map<String, Value>, pw: &str, key: &'static str) -> Result<u32, DecodeError> {
    let v = member(obj, "pw", key, "a number")?;
    let n =
        v.as_u64().ok_or(DecodeError::Member { op: "pw", member: key, want: "a non-negative integer" })?;
    u32::try_from(n).ok().filter(|l| (MIN_LABEL..=MAX_LABEL).contains(l)).ok_or_else(|| {
        DecodeError::Invalid {
            what: format!("PW {pw}: {key}"),
            why: format!("{n} is not a label vmpls can use ({MIN_LABEL}..={MAX_LABEL})"),
        }
    })
}

/// Decodes one PW object (`install`'s `pw`, an element of `sync`'s `pws`).
///
/// # Errors
/// A member missing, of the wrong type, or not valid.
pub fn decode_pw(v: &Value) -> Result<PwSpec, DecodeError> {
    let obj = v.as_object().ok_or(DecodeError::Member { op: "pw", member: "pw", want: "an object" })?;
    let name = string(obj, "pw", "name")?;
    check_name(name)?;
    let local_label = label(obj, name, "local-label")?;
    let remote_label = label(obj, name, "remote-label")?;
    let peer_s = string(obj, "pw", "peer")?;
    let peer: IpAddr = peer_s.parse().map_err(|_| DecodeError::Invalid {
        what: format!("PW {name}: peer"),
        why: format!("{peer_s:?} is not an IP address"),
    })?;
    if peer.is_unspecified() || peer.is_multicast() || matches!(peer, IpAddr::V4(a) if a.is_broadcast()) {
        return Err(DecodeError::Invalid {
            what: format!("PW {name}: peer"),
            why: format!("{peer} is not a unicast address"),
        });
    }
    let control_word = member(obj, "pw", "control-word", "a boolean")?
        .as_bool()
        .ok_or(DecodeError::Member { op: "pw", member: "control-word", want: "a boolean" })?;
    let pw_type = match string(obj, "pw", "pw-type")? {
        "ethernet" => PwType::Ethernet,
        "ethernet-tagged" => PwType::EthernetTagged,
        other => {
            return Err(DecodeError::Invalid {
                what: format!("PW {name}: pw-type"),
                why: format!("{other:?} is not a type vmpls carries (ethernet, ethernet-tagged)"),
            });
        }
    };
    Ok(PwSpec { name: name.to_owned(), local_label, remote_label, peer, control_word, pw_type })
}

/// Decodes one line (without its `\n`).
///
/// # Errors
/// See [`DecodeError`]; the stream goes on with the next line.
pub fn decode_line(line: &[u8]) -> Result<FromModule, DecodeError> {
    let v: Value = serde_json::from_slice(line).map_err(|e| DecodeError::NotJson(e.to_string()))?;
    let obj = v.as_object().ok_or(DecodeError::NotObject)?;
    let op = obj.get("op").and_then(Value::as_str).ok_or(DecodeError::NoOp)?;
    match op {
        "hello" => Ok(FromModule::Hello { frr: string(obj, "hello", "frr")?.to_owned() }),
        "sync" => {
            let pws = member(obj, "sync", "pws", "an array")?.as_array().ok_or(DecodeError::Member {
                op: "sync",
                member: "pws",
                want: "an array",
            })?;
            let mut names = HashSet::new();
            let mut out = Vec::with_capacity(pws.len());
            for p in pws {
                let pw = decode_pw(p)?;
                if !names.insert(pw.name.clone()) {
                    return Err(DecodeError::Invalid {
                        what: format!("sync: PW {}", pw.name),
                        why: "named twice".into(),
                    });
                }
                out.push(pw);
            }
            Ok(FromModule::Sync(out))
        }
        "install" => Ok(FromModule::Install(decode_pw(member(obj, "install", "pw", "an object")?)?)),
        "uninstall" => {
            let name = string(obj, "uninstall", "name")?;
            check_name(name)?;
            Ok(FromModule::Uninstall(name.to_owned()))
        }
        other => Err(DecodeError::UnknownOp(other.chars().take(40).collect())),
    }
}

/// The status line vmpls sends for a PW (with its `\n`).
#[must_use]
pub fn encode_status(name: &str, up: bool, reason: Option<&str>) -> Vec<u8> {
    #[derive(Serialize)]
    struct Status<'a> {
        op: &'static str,
        name: &'a str,
        up: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<&'a str>,
    }
    let mut out = serde_json::to_vec(&Status { op: "status", name, up, reason }).unwrap_or_default();
    out.push(b'\n');
    out
}

/// The channel's framing: bytes in, whole lines out.
#[derive(Debug, Default)]
pub struct LineBuffer {
    buf: Vec<u8>,
}

/// A line longer than [`MAX_LINE`]: the stream cannot be read on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a line longer than {MAX_LINE} bytes")]
pub struct LineTooLong;

impl LineBuffer {
    /// An empty buffer.
    #[must_use]
    pub fn new() -> LineBuffer {
        LineBuffer::default()
    }

    /// Adds `bytes` and calls `line` for each whole line (without its `\n`; empty lines
    /// and a `\r` before the `\n` are dropped).
    ///
    /// # Errors
    /// What is buffered of a line passes [`MAX_LINE`]; the buffer is emptied.
    pub fn push(&mut self, bytes: &[u8], mut line: impl FnMut(&[u8])) -> Result<(), LineTooLong> {
        let mut rest = bytes;
        while let Some(i) = rest.iter().position(|&b| b == b'\n') {
            let (head, tail) = rest.split_at(i);
            if self.buf.len() + head.len() > MAX_LINE {
                self.buf.clear();
                return Err(LineTooLong);
            }
            let whole: &[u8] = if self.buf.is_empty() {
                head
            } else {
                self.buf.extend_from_slice(head);
                &self.buf
            };
            let whole = whole.strip_suffix(b"\r").unwrap_or(whole);
            if !whole.is_empty() {
                line(whole);
            }
            self.buf.clear();
            rest = &tail[1..];
        }
        if self.buf.len() + rest.len() > MAX_LINE {
            self.buf.clear();
            return Err(LineTooLong);
        }
        self.buf.extend_from_slice(rest);
        Ok(())
    }

    /// Bytes of an unfinished line held.
    #[must_use]
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// Forgets an unfinished line (a new connection).
    pub fn clear(&mut self) {
        self.buf.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the module sent on pe1's channel in `frr/zebra-module/tools/pw-two-pe.sh`
    /// (FRR 8.4.4, ldpd), connection 1 then the replay after the listener restarted.
    const CAPTURED: &[u8] = include_bytes!("../tests/data/pw-channel-pe1.jsonl");

    fn mpw0(peer: &str) -> PwSpec {
        PwSpec {
            name: "mpw0".into(),
            local_label: 16,
            remote_label: 16,
            peer: peer.parse().unwrap(),
            control_word: true,
            pw_type: PwType::Ethernet,
        }
    }

    #[test]
    fn the_captured_stream_decodes() {
        let mut lb = LineBuffer::new();
        let mut msgs = Vec::new();
        // byte by byte: framing does not depend on how reads split the stream
        for b in CAPTURED {
            lb.push(std::slice::from_ref(b), |l| msgs.push(decode_line(l).unwrap())).unwrap();
        }
        assert_eq!(lb.pending(), 0);
        let pw = mpw0("198.18.255.2");
        assert_eq!(
            msgs,
            vec![
                FromModule::Hello { frr: "8.4.4".into() },
                FromModule::Sync(vec![]),
                FromModule::Install(pw.clone()),
                FromModule::Uninstall("mpw0".into()),
                FromModule::Install(pw.clone()),
                FromModule::Hello { frr: "8.4.4".into() },
                FromModule::Sync(vec![pw.clone()]),
                FromModule::Install(pw.clone()),
                FromModule::Install(pw),
                FromModule::Uninstall("mpw0".into()),
            ]
        );
    }

    #[test]
    fn a_spec_round_trips_through_serde_as_the_module_writes_it() {
        let line = br#"{"name":"mpw0","local-label":16,"remote-label":16,"peer":"198.18.255.1","control-word":true,"pw-type":"ethernet"}"#;
        let v: Value = serde_json::from_slice(line).unwrap();
        let pw = decode_pw(&v).unwrap();
        assert_eq!(pw, mpw0("198.18.255.1"));
        assert_eq!(serde_json::to_value(&pw).unwrap(), v);
        assert_eq!(serde_json::from_value::<PwSpec>(v).unwrap(), pw);
    }

    #[test]
    fn status_lines_are_what_the_module_parses() {
        assert_eq!(encode_status("mpw0", true, None), b"{\"op\":\"status\",\"name\":\"mpw0\",\"up\":true}\n");
        assert_eq!(
            encode_status("mpw0", false, Some("attachment \"ce1\" down")),
            b"{\"op\":\"status\",\"name\":\"mpw0\",\"up\":false,\"reason\":\"attachment \\\"ce1\\\" down\"}\n"
        );
    }

    #[test]
    fn ipv6_peers_tagged_type_and_unknown_members_are_fine() {
        let m = decode_line(
            br#"{"op":"install","later":1,"pw":{"name":"pw-6","local-label":1048575,"remote-label":16,"peer":"2001:db8::2","control-word":false,"pw-type":"ethernet-tagged","mtu":1500}}"#,
        )
        .unwrap();
        assert_eq!(
            m,
            FromModule::Install(PwSpec {
                name: "pw-6".into(),
                local_label: MAX_LABEL,
                remote_label: MIN_LABEL,
                peer: "2001:db8::2".parse().unwrap(),
                control_word: false,
                pw_type: PwType::EthernetTagged,
            })
        );
    }

    fn err(line: &str) -> String {
        decode_line(line.as_bytes()).unwrap_err().to_string()
    }

    #[test]
    fn bad_lines_say_what_is_wrong() {
        let pw = |f: &str| {
            format!(
                r#"{{"op":"install","pw":{{"name":"mpw0","local-label":16,"remote-label":17,"peer":"198.18.255.2","control-word":true,"pw-type":"ethernet"{f}}}}}"#
            )
        };
        assert!(err("{").starts_with("not JSON"));
        assert!(err("\u{7f}garbage").starts_with("not JSON"));
        assert_eq!(err("[1]"), "not a JSON object");
        assert_eq!(err(r#"{"op":1}"#), "no \"op\"");
        assert_eq!(err(r#"{"op":"reboot"}"#), "unknown op \"reboot\"");
        assert_eq!(err(r#"{"op":"hello"}"#), "hello: member \"frr\" missing or not a string");
        assert_eq!(err(r#"{"op":"sync","pws":{}}"#), "sync: member \"pws\" missing or not an array");
        assert_eq!(err(r#"{"op":"install"}"#), "install: member \"pw\" missing or not an object");
        assert_eq!(err(r#"{"op":"uninstall","name":""}"#), "name \"\": empty");
        assert_eq!(
            err(r#"{"op":"uninstall","name":"a-very-long-name0"}"#),
            "name \"a-very-long-name0\": longer than 15 bytes (an interface name)"
        );
        assert_eq!(
            err(r#"{"op":"uninstall","name":"../x"}"#),
            "name \"../x\": has '/', ':', whitespace or a control character"
        );
        // a field overridden by a later duplicate key (serde_json keeps the last)
        assert_eq!(
            err(&pw(r#","local-label":3"#)),
            "PW mpw0: local-label: 3 is not a label vmpls can use (16..=1048575)"
        );
        assert_eq!(
            err(&pw(r#","remote-label":1048576"#)),
            "PW mpw0: remote-label: 1048576 is not a label vmpls can use (16..=1048575)"
        );
        assert_eq!(
            err(&pw(r#","remote-label":-1"#)),
            "pw: member \"remote-label\" missing or not a non-negative integer"
        );
        assert_eq!(err(&pw(r#","peer":"pe2""#)), "PW mpw0: peer: \"pe2\" is not an IP address");
        assert_eq!(err(&pw(r#","peer":"0.0.0.0""#)), "PW mpw0: peer: 0.0.0.0 is not a unicast address");
        assert_eq!(err(&pw(r#","peer":"ff02::1""#)), "PW mpw0: peer: ff02::1 is not a unicast address");
        assert_eq!(err(&pw(r#","control-word":1"#)), "pw: member \"control-word\" missing or not a boolean");
        assert_eq!(
            err(&pw(r#","pw-type":"atm""#)),
            "PW mpw0: pw-type: \"atm\" is not a type vmpls carries (ethernet, ethernet-tagged)"
        );
        let one = r#"{"name":"mpw0","local-label":16,"remote-label":17,"peer":"198.18.255.2","control-word":true,"pw-type":"ethernet"}"#;
        assert_eq!(err(&format!(r#"{{"op":"sync","pws":[{one},{one}]}}"#)), "sync: PW mpw0: named twice");
    }

    #[test]
    fn framing_survives_bad_lines_and_bounds_long_ones() {
        let mut lb = LineBuffer::new();
        let mut got = Vec::new();
        lb.push(b"junk\r\n\n{\"op\":\"uninstall\",\"name\":\"mpw0\"}\r\n{\"op\"", |l| {
            got.push(decode_line(l))
        })
        .unwrap();
        assert_eq!(got.len(), 2);
        assert!(got[0].is_err());
        assert_eq!(got[1], Ok(FromModule::Uninstall("mpw0".into())));
        assert_eq!(lb.pending(), 5);
        lb.push(b":\"uninstall\",\"name\":\"mpw1\"}\n", |l| got.push(decode_line(l))).unwrap();
        assert_eq!(got[2], Ok(FromModule::Uninstall("mpw1".into())));

        let big = vec![b'x'; MAX_LINE];
        lb.push(&big, |_| panic!("no line yet")).unwrap();
        assert_eq!(lb.push(b"x", |_| {}), Err(LineTooLong));
        assert_eq!(lb.pending(), 0);
        let mut big = vec![b'x'; MAX_LINE + 1];
        big.push(b'\n');
        assert_eq!(lb.push(&big, |_| {}), Err(LineTooLong));
    }
}
