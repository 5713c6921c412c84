//! How a fleet's group commit is made durable (docs/fleet.md, "Propagation"): committed
//! apart from its flush, a small transaction behind it waiting for the flush; and, for a
//! role that may not write that transaction's WAL record, whole commits instead. Real
//! binary, a private PostgreSQL cluster.

mod common;

use serde_json::json;

use common::fleet::{home, LONG_COOLDOWN};
use common::postgres;

/// A daemon whose role may not call `pg_logical_emit_message` still writes: every failure
/// is answered, committed and followed by its events, and the log says once why commits
/// are whole. A role that may call it gets no such line.
#[test]
fn a_role_that_may_not_write_the_flush_record_gets_whole_commits() {
    let Some(pg) = postgres::shared() else { return };
    // A login of its own that owns its database, as a fleet's role would.
    let n = std::process::id();
    let (role, db) = (format!("plain{n}"), format!("plain{n}"));
    pg.sql(
        "postgres",
        &format!("CREATE ROLE {role} LOGIN PASSWORD 'Plain-pw-1'"),
    );
    pg.sql("postgres", &format!("CREATE DATABASE {db} OWNER {role}"));
    pg.sql(
        &db,
        "REVOKE EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, text) FROM PUBLIC",
    );
    let url = format!(
        "postgresql://{role}:Plain-pw-1@127.0.0.1:{}/{db}",
        pg.port()
    );
    let refused = home(&url, LONG_COOLDOWN);
    let ids = refused.add(&["http://10.80.0.1:3128", "http://10.80.0.2:3128"]);
    let allowed = home(&pg.database(), LONG_COOLDOWN);
    allowed.add(&["http://10.80.1.1:3128", "http://10.80.1.2:3128"]);
    for (h, warned) in [(&refused, true), (&allowed, false)] {
        let d = h.serve();
        for _ in 0..2 {
            let g = d.req(json!({"op": "lease", "pool": "default", "ttl": "30s"}));
            assert_eq!(g["ok"], json!(true), "{g}");
            let r = d.req(
                json!({"op": "report", "lease": g["lease"], "outcome": "failure",
                "reason": "connect_refused", "phase": "connect"}),
            );
            assert_eq!(r["state"], "cooling", "{r}\n{}", d.log_tail(10));
        }
        let log = d.log_text();
        let lines = log.matches("refuses pg_logical_emit_message").count();
        assert_eq!(lines, usize::from(warned), "{}", d.log_tail(10));
        assert!(!log.contains("Plain-pw-1"), "{log}");
    }
    // What the refused role's daemon answered is in the database.
    let changed = pg.sql(
        &db,
        "SELECT count(*) FROM events WHERE kind = 'state_changed' AND to_state = 'cooling'",
    );
    assert_eq!(changed, "2");
    let cooling = pg.sql(
        &db,
        &format!(
            "SELECT count(*) FROM endpoints WHERE state = 'cooling' AND id IN ({}, {})",
            ids[0], ids[1]
        ),
    );
    assert_eq!(cooling, "2");
}
