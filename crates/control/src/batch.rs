//! Route-table operations at the size of real networks, the parts without I/O:
//!
//! - `vmpls -batch FILE` (as `ip -batch`): the file's lines read into commands
//!   ([`BatchReader`], [`parse_batch_line`]) and the lines of the `route-batch` request
//!   that carry route changes to the router ([`BatchOp`], answered by an
//!   [`api::BatchSummary`](crate::api::BatchSummary));
//! - `route show` streamed: the size of a chunk ([`SHOW_CHUNK`]) and a writer that prints
//!   a JSON array one element at a time, byte for byte as `serde_json` prints the whole
//!   array ([`JsonArrayWriter`]).
//!
//! The router side is `Tables::change_many` and `Tables::show_chunk`.

use std::io::{self, BufRead, Write};

use serde::{Deserialize, Serialize};

use crate::api::{Family, Request, RouteSpec};
use crate::tables::Change;

/// Routes in one chunk of a `route-show-stream` reply: about 100 KiB of JSON, and the
/// time the router holds its tables to copy them out (well under a millisecond).
pub const SHOW_CHUNK: usize = 1024;

/// The most changes one `route-batch` request carries (a full Internet table and then
/// some); a longer batch is refused as a whole.
pub const MAX_BATCH: usize = 4 << 20;

/// One line of a `route-batch` request after the request itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum BatchOp {
    /// `route add`.
    Add {
        /// The route.
        route: RouteSpec,
    },
    /// `route del`.
    Del {
        /// The route.
        route: RouteSpec,
    },
    /// `route replace`.
    Replace {
        /// The route.
        route: RouteSpec,
    },
    /// The end of the changes: apply them.
    Commit,
}

impl BatchOp {
    /// The line for a change.
    pub fn new(change: Change, route: RouteSpec) -> BatchOp {
        match change {
            Change::Add => BatchOp::Add { route },
            Change::Delete => BatchOp::Del { route },
            Change::Replace => BatchOp::Replace { route },
        }
    }

    /// The change it carries; `None` for `commit`.
    pub fn into_change(self) -> Option<(Change, RouteSpec)> {
        match self {
            BatchOp::Add { route } => Some((Change::Add, route)),
            BatchOp::Del { route } => Some((Change::Delete, route)),
            BatchOp::Replace { route } => Some((Change::Replace, route)),
            BatchOp::Commit => None,
        }
    }
}

/// One command of a batch file: its words and the line it starts on (from 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchLine {
    /// The line number, from 1.
    pub line: usize,
    /// The words, quotes removed.
    pub words: Result<Vec<String>, String>,
}

/// Reads a batch file as `ip -batch` does: a `#` starts a comment to the end of the
/// line, a line ending in `\` goes on on the next, words are separated by blanks and
/// may be quoted with `"` or `'`; blank lines are skipped.
pub struct BatchReader<R> {
    input: R,
    line: usize,
}

impl<R: BufRead> BatchReader<R> {
    /// A reader over `input`.
    pub fn new(input: R) -> BatchReader<R> {
        BatchReader { input, line: 0 }
    }

    /// The next command; `None` at the end of the input. A line that cannot be split
    /// into words (not UTF-8, an unterminated quote) comes back with the reason.
    ///
    /// # Errors
    /// Reading failed.
    pub fn next_command(&mut self) -> io::Result<Option<BatchLine>> {
        loop {
            let mut text = Vec::new();
            let mut start = None;
            loop {
                let mut part = Vec::new();
                if self.input.read_until(b'\n', &mut part)? == 0 {
                    break;
                }
                self.line += 1;
                start.get_or_insert(self.line);
                while part.last().is_some_and(|b| matches!(b, b'\n' | b'\r')) {
                    part.pop();
                }
                match part.strip_suffix(b"\\") {
                    Some(head) => {
                        text.extend_from_slice(head);
                        text.push(b' ');
                    }
                    None => {
                        text.extend_from_slice(&part);
                        break;
                    }
                }
            }
            let Some(line) = start else { return Ok(None) };
            let words = match String::from_utf8(text) {
                Ok(t) => split_words(&t),
                Err(_) => Err("the line is not UTF-8 text".to_string()),
            };
            if words.as_ref().is_ok_and(Vec::is_empty) {
                continue;
            }
            return Ok(Some(BatchLine { line, words }));
        }
    }
}

/// iproute2's `makeargs` after `getcmdline`: comment cut, blanks split, quotes.
fn split_words(text: &str) -> Result<Vec<String>, String> {
    let text = text.split_once('#').map_or(text, |(t, _)| t);
    let mut words = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        if let Some(quote) = rest.chars().next().filter(|c| matches!(c, '"' | '\'')) {
            let body = &rest[1..];
            let end = body.find(quote).ok_or("unterminated quoted string")?;
            words.push(body[..end].to_string());
            rest = body[end + 1..].trim_start();
        } else {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            words.push(rest[..end].to_string());
            rest = rest[end..].trim_start();
        }
    }
    Ok(words)
}

/// The objects a batch line may name, as on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Object {
    /// `route`.
    Route,
    /// `link`.
    Link,
    /// `neigh`.
    Neigh,
    /// `stats`.
    Stats,
    /// `reload`.
    Reload,
}

/// A command of a batch file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchCommand {
    /// `route add|del|replace ...`: goes to the router with the changes next to it, as
    /// one table change.
    Change(Change, RouteSpec),
    /// Anything else (`route show`, `route flush`, `link show`, ...): run on its own,
    /// once the changes before it are in force.
    Other {
        /// The family (`-4`, `-6`, `-f` of the line, else of the command line).
        family: Option<Family>,
        /// What it is about.
        object: Object,
        /// The words after the object.
        args: Vec<String>,
    },
}

/// Parses one line of a batch file: `[-4 | -6 | -f FAMILY] OBJECT COMMAND ...`, as on
/// the command line after the global options (`ip -batch` takes no options on its
/// lines; the family ones are accepted here so that one file can hold IPv4, IPv6 and
/// label routes). `family` is the command line's.
///
/// # Errors
/// A message for `Error: ...`.
pub fn parse_batch_line(words: &[String], family: Option<Family>) -> Result<BatchCommand, String> {
    let mut family = family;
    let mut i = 0;
    loop {
        match words.get(i).map(String::as_str) {
            Some("-4") => family = Some(Family::Inet),
            Some("-6") => family = Some(Family::Inet6),
            Some("-M") => family = Some(Family::Mpls),
            Some("-f" | "-family" | "--family") => {
                let f = words.get(i + 1).ok_or("\"-f\" needs a family after it (inet, inet6, mpls)")?;
                family = Some(crate::cli::parse_family(f)?);
                i += 1;
            }
            Some(o) if o.starts_with('-') => {
                return Err(format!(
                    "option \"{o}\" is not allowed in a batch line (only -4, -6 and -f FAMILY); give it on the command line"
                ));
            }
            _ => break,
        }
        i += 1;
    }
    let Some(object) = words.get(i) else {
        return Err("a command is needed after the options".into());
    };
    let object = match object.as_str() {
        "route" | "ro" | "r" => Object::Route,
        "link" | "l" => Object::Link,
        "neigh" | "neighbor" | "neighbour" | "n" => Object::Neigh,
        "stats" => Object::Stats,
        "reload" => Object::Reload,
        other => {
            return Err(format!(
                "object \"{other}\" is unknown in a batch; expected route, link, neigh, stats or reload"
            ));
        }
    };
    let args = words[i + 1..].to_vec();
    if object == Object::Route
        && matches!(
            args.first().map(String::as_str),
            Some("add" | "a" | "del" | "delete" | "d" | "replace" | "repl")
        )
    {
        return match crate::cli::parse_route(family, &args)? {
            Request::RouteAdd { route } => Ok(BatchCommand::Change(Change::Add, route)),
            Request::RouteDel { route } => Ok(BatchCommand::Change(Change::Delete, route)),
            Request::RouteReplace { route } => Ok(BatchCommand::Change(Change::Replace, route)),
            other => Err(format!("unexpected request {other:?} for a route change")),
        };
    }
    Ok(BatchCommand::Other { family, object, args })
}

/// Writes a JSON array one element at a time: the bytes are those `serde_json` writes
/// for the whole array (`pretty`: `to_string_pretty`'s), followed by a newline.
pub struct JsonArrayWriter<W: Write> {
    out: W,
    pretty: bool,
    count: u64,
}

impl<W: Write> JsonArrayWriter<W> {
    /// A writer of one array onto `out`.
    pub fn new(out: W, pretty: bool) -> JsonArrayWriter<W> {
        JsonArrayWriter { out, pretty, count: 0 }
    }

    /// Writes the next element.
    ///
    /// # Errors
    /// Writing failed.
    pub fn push<T: Serialize>(&mut self, item: &T) -> io::Result<()> {
        let sep: &[u8] = match (self.count, self.pretty) {
            (0, false) => b"[",
            (0, true) => b"[\n  ",
            (_, false) => b",",
            (_, true) => b",\n  ",
        };
        self.out.write_all(sep)?;
        if self.pretty {
            let text = serde_json::to_string_pretty(item)?;
            self.out.write_all(text.replace('\n', "\n  ").as_bytes())?;
        } else {
            serde_json::to_writer(&mut self.out, item)?;
        }
        self.count += 1;
        Ok(())
    }

    /// Whether no element was written yet (nothing at all was).
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Ends the array and returns the output.
    ///
    /// # Errors
    /// Writing failed.
    pub fn finish(mut self) -> io::Result<W> {
        let end: &[u8] = match (self.count, self.pretty) {
            (0, _) => b"[]\n",
            (_, false) => b"]\n",
            (_, true) => b"\n]\n",
        };
        self.out.write_all(end)?;
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{BatchFailure, BatchSummary, IpRoute, Nexthop, Protocol, RouteType};

    fn read_all(text: &str) -> Vec<(usize, Result<Vec<String>, String>)> {
        let mut r = BatchReader::new(text.as_bytes());
        let mut out = Vec::new();
        while let Some(l) = r.next_command().unwrap() {
            out.push((l.line, l.words));
        }
        out
    }

    fn words(w: &[&str]) -> Result<Vec<String>, String> {
        Ok(w.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn batch_files_read_like_ip_batch_comments_continuations_and_quotes() {
        let text = "# routes toward pe2\n\nroute add 198.18.5.0/24 via 198.18.10.2 # trailing\n  \t\nroute add \\\n  198.18.6.0/24 \\\n  dev core\r\nlink show \"core\"\nroute add 'unterminated\n";
        assert_eq!(
            read_all(text),
            vec![
                (3, words(&["route", "add", "198.18.5.0/24", "via", "198.18.10.2"])),
                (5, words(&["route", "add", "198.18.6.0/24", "dev", "core"])),
                (8, words(&["link", "show", "core"])),
                (9, Err("unterminated quoted string".to_string())),
            ]
        );
        let bad = BatchReader::new(&b"route add \xff\n"[..]).next_command().unwrap().unwrap();
        assert_eq!(bad.words, Err("the line is not UTF-8 text".to_string()));
        assert!(read_all("").is_empty());
        assert_eq!(read_all("stats")[0], (1, words(&["stats"])), "a last line without newline");
    }

    fn line(text: &str, family: Option<Family>) -> Result<BatchCommand, String> {
        let w: Vec<String> = text.split_whitespace().map(String::from).collect();
        parse_batch_line(&w, family)
    }

    #[test]
    fn batch_lines_are_route_changes_or_other_commands() {
        let BatchCommand::Change(Change::Add, RouteSpec::Inet(r)) =
            line("route add 198.18.5.0/24 via 198.18.10.2 dev core encap mpls 1002", None).unwrap()
        else {
            panic!("not an IPv4 add")
        };
        assert_eq!((r.dst.as_str(), r.nexthops[0].labels.as_slice()), ("198.18.5.0/24", &[1002][..]));
        assert!(matches!(
            line("ro del 2001:db8:5::/64", None),
            Ok(BatchCommand::Change(Change::Delete, RouteSpec::Inet6(_)))
        ));
        assert!(matches!(
            line("-f mpls route replace 100 as 200 via inet 198.18.10.2", None),
            Ok(BatchCommand::Change(Change::Replace, RouteSpec::Mpls(_)))
        ));
        assert!(matches!(
            line("route add 100 as 200 via inet 198.18.10.2", Some(Family::Mpls)),
            Ok(BatchCommand::Change(Change::Add, RouteSpec::Mpls(_)))
        ));
        assert_eq!(
            line("-6 route show", None).unwrap(),
            BatchCommand::Other {
                family: Some(Family::Inet6),
                object: Object::Route,
                args: vec!["show".into()]
            }
        );
        assert!(matches!(
            line("route flush all", None),
            Ok(BatchCommand::Other { object: Object::Route, .. })
        ));
        assert!(matches!(line("link show core", None), Ok(BatchCommand::Other { object: Object::Link, .. })));
        // Mistakes, each with its reason.
        assert!(line("route add 198.18.5.0/24 bogus", None).unwrap_err().contains("\"bogus\""));
        assert!(line("addr show", None).unwrap_err().contains("object \"addr\" is unknown"));
        assert!(line("-j route show", None).unwrap_err().contains("not allowed in a batch line"));
        assert!(line("-f", None).unwrap_err().contains("needs a family"));
        assert!(line("-4", None).unwrap_err().contains("command is needed"));
    }

    #[test]
    fn batch_ops_have_the_documented_json_form() {
        let op: BatchOp =
            serde_json::from_str(r#"{"op":"del","route":{"family":"inet","dst":"198.18.9.0/24"}}"#).unwrap();
        let Some((Change::Delete, RouteSpec::Inet(r))) = op.into_change() else { panic!() };
        assert_eq!(r.dst, "198.18.9.0/24");
        assert_eq!(serde_json::to_string(&BatchOp::Commit).unwrap(), r#"{"op":"commit"}"#);
        let s = BatchSummary { applied: 1, failed: vec![BatchFailure { index: 1, error: "x".into() }] };
        assert_eq!(serde_json::to_string(&s).unwrap(), r#"{"applied":1,"failed":[{"index":1,"error":"x"}]}"#);
    }

    #[test]
    fn a_streamed_json_array_is_byte_for_byte_serde_jsons() {
        let route = |dst: &str| IpRoute {
            dst: dst.into(),
            vrf: "default".into(),
            kind: RouteType::Unicast,
            nexthops: vec![Nexthop {
                gateway: Some("198.18.10.2".parse().unwrap()),
                dev: Some("core".into()),
                labels: vec![1002, 3],
                weight: 1,
            }],
            ttl_propagate: true,
            protocol: Protocol::Boot,
            prefsrc: None,
        };
        for n in [0, 1, 3] {
            let list: Vec<IpRoute> = (0..n).map(|i| route(&format!("198.18.{i}.0/24"))).collect();
            for pretty in [false, true] {
                let mut w = JsonArrayWriter::new(Vec::new(), pretty);
                for r in &list {
                    w.push(r).unwrap();
                }
                let got = String::from_utf8(w.finish().unwrap()).unwrap();
                let want = if pretty {
                    serde_json::to_string_pretty(&list).unwrap()
                } else {
                    serde_json::to_string(&list).unwrap()
                };
                assert_eq!(got, want + "\n", "n = {n}, pretty = {pretty}");
            }
        }
    }
}
