//! The control socket's requests for tables at scale: `route-show-stream` writes a table
//! a chunk at a time, holding the tables only while it copies a chunk out (a slow reader
//! holds up no one); `route-batch` reads a client's changes without holding them, then
//! applies them as one table change.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;

use tracing::info;
use vmpls_control::api::{self, Reply};
use vmpls_control::batch::{BatchOp, MAX_BATCH, SHOW_CHUNK};
use vmpls_control::tables::Change;

use super::{Server, send};

impl Server {
    /// `route-show-stream`: one reply line a chunk, `more` on all but the last.
    pub(super) fn route_stream(
        &self,
        w: &mut impl Write,
        family: api::Family,
        vrf: Option<&str>,
        dst: Option<&str>,
    ) -> anyhow::Result<()> {
        let mut after = None;
        let mut line = Vec::with_capacity(256 * 1024);
        loop {
            // The lock is held for this statement only: copying out one chunk.
            let chunk = self.tables().show_chunk(family, vrf, dst, after, SHOW_CHUNK);
            let chunk = match chunk {
                Ok(c) => c,
                Err(e) => return send(w, &Reply::<()>::error(e)),
            };
            line.clear();
            let more = chunk.next.is_some();
            serde_json::to_writer(&mut line, &Reply { more, ..Reply::data(&chunk.rows) })?;
            line.push(b'\n');
            w.write_all(&line)?;
            match chunk.next {
                Some(next) => after = Some(next),
                None => return Ok(()),
            }
        }
    }

    /// `route-batch`: reads the changes up to `commit` (a client that goes away before
    /// it changes nothing), applies them as one table change, answers with the summary.
    /// The connection ends with the batch.
    pub(super) fn route_batch(
        &self,
        reader: &mut BufReader<UnixStream>,
        w: &mut impl Write,
        force: bool,
    ) -> anyhow::Result<()> {
        let mut changes: Vec<(Change, api::RouteSpec)> = Vec::new();
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = reader.take(api::MAX_REQUEST_LINE as u64 + 1).read_until(b'\n', &mut line)?;
            let at = changes.len() + 1;
            if n == 0 {
                info!(changes = changes.len(), "route batch abandoned by the client before its commit");
                return Ok(());
            }
            if line.len() > api::MAX_REQUEST_LINE {
                return send(w, &Reply::<()>::error(format!("batch line {at} too long; nothing applied")));
            }
            let op: BatchOp = match serde_json::from_slice(&line) {
                Ok(op) => op,
                Err(e) => {
                    return send(
                        w,
                        &Reply::<()>::error(format!("bad batch line {at}: {e}; nothing applied")),
                    );
                }
            };
            match op.into_change() {
                Some(_) if changes.len() == MAX_BATCH => {
                    return send(
                        w,
                        &Reply::<()>::error(format!(
                            "a batch holds at most {MAX_BATCH} changes; split it (nothing applied)"
                        )),
                    );
                }
                Some(c) => changes.push(c),
                None => break,
            }
        }
        let start = std::time::Instant::now();
        let mut t = self.tables();
        let reply = match t.change_many(&changes, force) {
            Ok((fib, sum)) => {
                if let Some(fib) = fib {
                    self.fib.store(fib);
                    self.in_force();
                }
                drop(t);
                info!(
                    changes = changes.len(),
                    applied = sum.applied,
                    failed = sum.failed.len(),
                    force,
                    ms = start.elapsed().as_millis() as u64,
                    "route batch applied"
                );
                Reply::data(sum)
            }
            Err(e) => Reply::error(e),
        };
        send(w, &reply)
    }
}
