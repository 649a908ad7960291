//! The `pw_channel` target's checks, shared by the fuzz target and the stable replay
//! test (`crates/frr/tests/fuzz_corpus.rs`): a byte stream as the zebra module would send
//! it on the pseudowire channel is split into lines and each line decoded. Every input
//! ends in messages and errors, never a panic; a line over the limit ends the stream;
//! every PW read is valid (label range, interface name) and survives serde both ways as
//! the control API's `PwSpec` does; a status line for any name read parses as JSON.

use vmpls_frr::pw::{self, FromModule, LineBuffer, PwSpec};

/// Replays `data`; returns the messages read and the number of bad lines.
pub fn replay(data: &[u8]) -> (Vec<FromModule>, usize) {
    let mut lb = LineBuffer::new();
    let (mut msgs, mut bad) = (Vec::new(), 0);
    // two pushes: the framing must not depend on where reads split the stream
    let (a, b) = data.split_at(data.len() / 2);
    for part in [a, b] {
        let r = lb.push(part, |line| match pw::decode_line(line) {
            Ok(m) => {
                check(&m);
                msgs.push(m);
            }
            Err(_) => bad += 1,
        });
        if r.is_err() {
            assert_eq!(lb.pending(), 0);
            break;
        }
    }
    assert!(lb.pending() <= pw::MAX_LINE);
    (msgs, bad)
}

fn check_pw(p: &PwSpec) {
    assert!((pw::MIN_LABEL..=pw::MAX_LABEL).contains(&p.local_label));
    assert!((pw::MIN_LABEL..=pw::MAX_LABEL).contains(&p.remote_label));
    assert!(pw::check_name(&p.name).is_ok());
    let v = serde_json::to_value(p).expect("serialises");
    assert_eq!(&pw::decode_pw(&v).expect("decodes again"), p);
    let line = pw::encode_status(&p.name, false, Some(&p.name));
    let s: serde_json::Value = serde_json::from_slice(&line).expect("status is JSON");
    assert_eq!(s["name"], p.name.as_str());
}

fn check(m: &FromModule) {
    match m {
        FromModule::Sync(pws) => pws.iter().for_each(check_pw),
        FromModule::Install(p) => check_pw(p),
        FromModule::Uninstall(name) => assert!(pw::check_name(name).is_ok()),
        FromModule::Hello { .. } => {}
    }
}
