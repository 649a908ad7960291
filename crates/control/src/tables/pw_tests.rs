//! The pseudowires' labels in `route show table mpls`, between the label routes.

use std::path::Path;

use super::Tables;
use crate::Config;
use crate::api::{Family, PwSpec, PwType, ShowRows};
use crate::tables::bulk::ShowCursor;

const PE: &str = r#"
[router]
name = "pe1"
addresses = ["198.18.255.1"]

[[port]]
name = "ac"
interface = "pe1-ce1"

[[port]]
name = "ac2"
interface = "pe1-ce2"

[[port]]
name = "core"
interface = "pe1-p"
addresses = ["198.18.10.1/24"]

[[route]]
prefix = "198.18.255.2/32"
push = [3000]
via = "198.18.10.2"
port = "core"

[[label]]
in = 900
action = "pop"

[[label]]
in = 2001
action = "pop"

[[pseudowire]]
name = "pw1"
attachment = "ac"
local-label = 1000
remote-label = 2000
peer = "198.18.255.2"
"#;

fn lines(t: &Tables, after: Option<u32>, max: usize) -> (Vec<String>, Option<u32>) {
    let c = t.show_chunk(Family::Mpls, None, None, after.map(ShowCursor::Label), max).unwrap();
    let ShowRows::Mpls(rows) = c.rows else { panic!("not label rows") };
    let next = c.next.map(|n| match n {
        ShowCursor::Label(l) => l,
        ShowCursor::Prefix(..) => panic!("a prefix cursor"),
    });
    (rows.iter().map(ToString::to_string).collect(), next)
}

#[test]
fn pseudowire_labels_show_as_a_pop_to_the_attachment_in_label_order() {
    let (mut t, _) = Tables::built(Config::from_str(PE, Path::new("pe1.toml")).unwrap()).unwrap();
    let (all, next) = lines(&t, None, usize::MAX);
    assert_eq!(next, None);
    assert_eq!(all.len(), 3, "{all:?}");
    assert!(all[0].starts_with("900 "), "{all:?}");
    assert!(all[1].starts_with("1000 dev ac") && all[1].contains("proto static"), "{all:?}");
    assert!(all[2].starts_with("2001 "), "{all:?}");

    // a PW of the CLI: its label too, with the CLI's protocol (boot, not printed)
    let spec = PwSpec {
        name: "pw2".into(),
        local_label: 1500,
        remote_label: 2500,
        peer: "198.18.255.2".parse().unwrap(),
        control_word: true,
        pw_type: PwType::Ethernet,
    };
    t.pw_replace_cli(spec, Some("ac2")).unwrap();
    let (all, _) = lines(&t, None, usize::MAX);
    assert_eq!(all.len(), 4, "{all:?}");
    assert!(all[2].starts_with("1500 dev ac2") && !all[2].contains("proto"), "{all:?}");

    // a chunk at a time: every row once, in order, whatever the chunk size
    for max in 1..=4 {
        let (mut got, mut after) = (Vec::new(), None);
        for _ in 0..10 {
            let (rows, next) = lines(&t, after, max);
            got.extend(rows);
            after = next;
            if after.is_none() {
                break;
            }
        }
        assert_eq!(got, all, "chunks of {max}");
    }

    // one label asked for
    let one = t.show_chunk(Family::Mpls, None, Some("1500"), None, usize::MAX).unwrap();
    assert!(matches!(one.rows, ShowRows::Mpls(ref r) if r.len() == 1 && r[0].label == 1500));

    // removed: its label is gone from the table
    t.pw_del_cli("pw2").unwrap();
    assert_eq!(lines(&t, None, usize::MAX).0.len(), 3);
}
