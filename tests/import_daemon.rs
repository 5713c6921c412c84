//! `import` through a running daemon (issue 13, scale): the file streams through a spill
//! file the daemon reads line by line, one transaction, all or nothing, while leases keep
//! being answered. Correctness only: the timing goals are measured by
//! `benches/import/run.sh`.

mod common;

use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::daemon::*;
use serde_json::json;

const SECRET: &str = "s3cr3t-import-pw";

fn lines(n: usize, second_octet: usize) -> String {
    let mut text = String::from("# provider list\n\n");
    for i in 0..n {
        text.push_str(&format!(
            "http://u{i}:{SECRET}{i}@10.{second_octet}.{}.{}:{}\n",
            i / 250,
            i % 250,
            1024 + i % 50_000
        ));
    }
    text
}

fn leftovers(h: &Home) -> Vec<String> {
    std::fs::read_dir(h.db.parent().unwrap())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".import-"))
        .collect()
}

fn available(d: &Daemon) -> serde_json::Value {
    ok(d.conn().req(&json!({"op": "status"})))["pools"][0]["available"].clone()
}

#[test]
fn a_bad_line_at_the_end_of_a_large_file_changes_nothing() {
    let h = Home::new(None);
    let d = h.serve();
    h.add(&["http://kept.example:8080"]);
    let (endpoints, events) = (h.count("endpoints"), h.count("events"));
    let mut text = lines(20_000, 1);
    text.push_str(&format!("http://u:{SECRET}@10.9.9.9:0\n"));
    let file = h.path("bad.txt");
    std::fs::write(&file, &text).unwrap();
    let out = h.run(&["import", file.to_str().unwrap()]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("line 20003"), "{}", out.stderr);
    assert!(
        out.stderr.contains("nothing was imported"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains(SECRET), "{}", out.stderr);
    assert_eq!(
        (h.count("endpoints"), h.count("events")),
        (endpoints, events)
    );
    assert_eq!(available(&d), json!(1), "the daemon holds nothing new");
    assert!(leftovers(&h).is_empty(), "{:?}", leftovers(&h));
    assert!(!d.log_text().contains(SECRET));
}

#[test]
fn a_duplicate_late_in_the_file_rolls_back_every_earlier_batch() {
    let h = Home::new(None);
    let d = h.serve();
    let mut text = lines(10_000, 2);
    // The same endpoint as line 3 (the first URL), far beyond the first insert batches.
    text.push_str("http://u0:other@10.2.0.0:1024\n");
    let file = h.path("dup.txt");
    std::fs::write(&file, &text).unwrap();
    let out = h.run(&["import", file.to_str().unwrap()]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("listed twice"), "{}", out.stderr);
    assert!(!out.stderr.contains("other"), "{}", out.stderr);
    assert_eq!((h.count("endpoints"), h.count("events")), (0, 0));
    assert_eq!(available(&d), json!(0));
    assert!(leftovers(&h).is_empty(), "{:?}", leftovers(&h));
}

#[test]
fn stdin_streams_through_the_daemon_with_an_added_event_each() {
    let h = Home::new(None);
    let d = h.serve();
    let n = 5_000;
    h.cli()
        .args(["import", "-", "--label", "piped"])
        .write_stdin(lines(n, 3))
        .assert()
        .success()
        .stderr(predicates::str::contains(format!("imported {n} endpoints")));
    assert_eq!(available(&d), json!(n));
    let db = h.sqlite();
    let (added, labelled): (i64, i64) = db
        .query_row(
            "SELECT (SELECT COUNT(DISTINCT endpoint) FROM events WHERE kind='added' AND detail='cli'), \
             (SELECT COUNT(*) FROM endpoints WHERE label='piped' AND password LIKE ?1)",
            [format!("{SECRET}%")],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((added, labelled), (n as i64, n as i64));
    // Ids are consecutive and every one is leasable from the daemon.
    let ids: Vec<i64> = h.list().iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, (1..=n as i64).collect::<Vec<_>>());
    assert!(leftovers(&h).is_empty(), "{:?}", leftovers(&h));
}

#[test]
fn leases_keep_being_answered_while_an_import_runs() {
    let h = Home::new(None);
    let d = h.serve();
    h.add(&["http://first.example:8080"]);
    let stop = Arc::new(AtomicBool::new(false));
    let leaser = {
        let (stop, sock) = (stop.clone(), h.socket.clone());
        std::thread::spawn(move || {
            let mut c = Conn::connect(&sock);
            let mut answered = 0;
            while !stop.load(Ordering::Relaxed) {
                let g = ok(c.req(&json!({"op": "lease", "ttl": "5s"})));
                ok(c.req(&json!({"op": "release", "lease": lease_id(&g)})));
                answered += 1;
            }
            answered
        })
    };
    let file = h.path("many.txt");
    let mut f = std::fs::File::create(&file).unwrap();
    f.write_all(lines(30_000, 4).as_bytes()).unwrap();
    drop(f);
    let out = h.run(&["import", file.to_str().unwrap()]);
    stop.store(true, Ordering::Relaxed);
    let answered = leaser.join().expect("every lease was answered ok");
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(answered > 0);
    assert_eq!(available(&d), json!(30_001));
    assert_eq!(h.count("endpoints"), 30_001);
}
