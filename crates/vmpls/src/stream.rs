//! `route show` printed as the router streams it: a chunk at a time, text or JSON, never
//! the whole table in memory.

use std::io::{self, BufWriter, Write};

use vmpls_control::api::{Family, IpRoute, MplsRoute, Reply, Request, RequestLine};
use vmpls_control::batch::JsonArrayWriter;

use crate::session::{CliError, Globals, connect, read_reply, send_line, usage};

/// Where the routes go: lines of text, or one JSON array.
enum Out<W: Write> {
    Text(W),
    Json(JsonArrayWriter<W>),
}

/// `route show` (`req` is a `RouteShow`): asks for the stream and prints each chunk as
/// it comes. A router from before streams gets the one-reply request.
///
/// # Errors
/// See [`CliError`].
pub fn route_show(g: &Globals, req: &Request) -> Result<(), CliError> {
    let Request::RouteShow { family, vrf, dst } = req.clone() else {
        return Err(usage("not a route show"));
    };
    let mut conn = connect(g)?;
    let stream = Request::RouteShowStream { family, vrf, dst };
    let stdout = io::stdout().lock();
    let mut out = if g.json {
        Out::Json(JsonArrayWriter::new(BufWriter::new(stdout), g.pretty))
    } else {
        Out::Text(BufWriter::new(stdout))
    };
    let printed = (|| -> Result<(), CliError> {
        send_line(&mut conn, &RequestLine::new(stream.clone()))?;
        let first = read_reply(&mut conn)?;
        let mut reply = match first {
            Reply { ok: false, error: Some(e), .. }
                if e.message.starts_with("bad request: unknown variant") =>
            {
                // An older router: the whole table in one reply.
                send_line(&mut conn, &RequestLine::new(req.clone()))?;
                read_reply(&mut conn)?
            }
            r => r,
        };
        loop {
            if !reply.ok {
                return Err(CliError::Router(
                    reply.error.map_or_else(|| "the router refused".into(), |e| e.message),
                ));
            }
            match print_chunk(&mut out, family, reply.data.take()) {
                // `| head`: the reader has what it wanted.
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
                Err(e) => return Err(usage(e.to_string())),
                Ok(()) => {}
            }
            if !reply.more {
                return Ok(());
            }
            reply = read_reply(&mut conn)?;
        }
    })();
    let finished = match out {
        Out::Text(mut w) => w.flush(),
        // A refusal before any route prints nothing; an array cut short by an error
        // later is still closed, so that what was printed parses.
        Out::Json(w) if w.is_empty() && printed.is_err() => Ok(()),
        Out::Json(w) => w.finish().map(drop),
    };
    printed?;
    match finished {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(usage(e.to_string())),
        _ => Ok(()),
    }
}

fn print_chunk<W: Write>(
    out: &mut Out<W>,
    family: Family,
    data: Option<serde_json::Value>,
) -> io::Result<()> {
    let data = data.unwrap_or(serde_json::Value::Array(Vec::new()));
    let bad = |e: serde_json::Error| {
        io::Error::new(io::ErrorKind::InvalidData, format!("bad reply from the router: {e}"))
    };
    match out {
        Out::Json(w) => {
            let serde_json::Value::Array(list) = data else {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "bad reply from the router: not a list",
                ));
            };
            for r in &list {
                w.push(r)?;
            }
        }
        Out::Text(w) if family == Family::Mpls => {
            for r in serde_json::from_value::<Vec<MplsRoute>>(data).map_err(bad)? {
                writeln!(w, "{r}")?;
            }
        }
        Out::Text(w) => {
            for r in serde_json::from_value::<Vec<IpRoute>>(data).map_err(bad)? {
                writeln!(w, "{r}")?;
            }
        }
    }
    Ok(())
}
