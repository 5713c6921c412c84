//! The status page's fleet: the banner while the database is away, and the daemons that
//! registered in it (docs/fleet.md, "The fleet as one").

use maud::{html, Markup};

use crate::protocol::DaemonRow;

/// What the page says while a fleet's database is away.
pub(super) fn store_down_banner() -> Markup {
    html! {
        section.store-down id="store-down" {
            strong { "The database is unavailable." }
            " This page shows what this daemon's memory holds: states, leases and statistics; "
            "no events, no transitions chart, no labels or times. It reconnects on its own."
        }
    }
}

/// The fleet's daemons, live ones first.
pub(super) fn daemons_section(daemons: &[DaemonRow]) -> Markup {
    let live = daemons.iter().filter(|d| d.live).count();
    html! {
        section id="daemons" {
            h2 { "Daemons of the fleet" }
            p.muted { (live) " live, " (daemons.len() - live) " gone (no heartbeat for 10 s)" }
            table.daemons {
                thead { tr {
                    th { "host" } th { "pid" } th { "version" } th { "listeners" }
                    th { "leases" } th { "started" } th { "last heartbeat" }
                } }
                tbody {
                    @for d in daemons {
                        tr class=[(!d.live).then_some("down")] {
                            td { (d.host) }
                            td.num { (d.pid) }
                            td { (d.version) }
                            td { (d.addresses.join(", ")) }
                            td.num { (d.leases) }
                            td { (d.started_at) }
                            td.num { (format!("{:.1} s ago", d.heartbeat_ms_ago as f64 / 1000.0)) }
                        }
                    }
                }
            }
        }
    }
}
