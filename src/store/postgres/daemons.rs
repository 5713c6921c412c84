//! The fleet's daemons in `fleet_daemons` (docs/fleet.md, "The fleet as one"): each writes
//! its row at every heartbeat, by the database's clock, and deletes it when it stops.

use std::collections::BTreeMap;

use super::Postgres;
use crate::protocol::DaemonRow;
use crate::store::daemons::{DaemonInfo, GONE_AFTER};
use crate::store::StoreError;

/// Rows of daemons gone this long are deleted by the others.
const FORGET_AFTER_S: f64 = 3600.0;

impl Postgres {
    /// Write this daemon's row: who it is and its live leases by pool.
    pub fn heartbeat(
        &self,
        me: &DaemonInfo,
        pool_leases: &BTreeMap<String, u64>,
    ) -> Result<(), StoreError> {
        let addresses = serde_json::to_string(&me.addresses).unwrap_or_default();
        let by_pool = serde_json::to_string(pool_leases).unwrap_or_default();
        let total: u64 = pool_leases.values().sum();
        let total = i64::try_from(total).unwrap_or(i64::MAX);
        let pid = i32::try_from(me.pid).unwrap_or(i32::MAX);
        self.block(async {
            let c = self.client().await?;
            let r: Result<(), tokio_postgres::Error> = async {
                let st = c
                    .prepare_cached(
                        "INSERT INTO fleet_daemons (id, host, pid, version, addresses, leases, pool_leases) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO UPDATE SET \
                         addresses = EXCLUDED.addresses, leases = EXCLUDED.leases, \
                         pool_leases = EXCLUDED.pool_leases, heartbeat_at = now()",
                    )
                    .await?;
                c.execute(
                    &st,
                    &[&me.id, &me.host, &pid, &me.version, &addresses, &total, &by_pool],
                )
                .await?;
                let forget = c
                    .prepare_cached(
                        "DELETE FROM fleet_daemons \
                         WHERE heartbeat_at < now() - $1 * interval '1 second'",
                    )
                    .await?;
                c.execute(&forget, &[&FORGET_AFTER_S]).await?;
                Ok(())
            }
            .await;
            r.map_err(|e| self.err(e))
        })
    }

    /// Delete this daemon's row (it stops): its jobs go to another daemon at once.
    pub fn unregister(&self, id: &str) -> Result<(), StoreError> {
        self.block(async {
            let c = self.client().await?;
            c.execute("DELETE FROM fleet_daemons WHERE id = $1", &[&id])
                .await
                .map(|_| ())
                .map_err(|e| self.err(e))
        })
    }

    /// The daemons of the fleet, live ones first, then by host and start.
    pub fn daemons(&self) -> Result<Vec<DaemonRow>, StoreError> {
        let rows = self.rows(
            "SELECT id, host, pid, version, addresses, leases, pool_leases, started_at, \
             GREATEST(0, EXTRACT(EPOCH FROM now() - heartbeat_at) * 1000)::bigint \
             FROM fleet_daemons ORDER BY heartbeat_at < now() - $1 * interval '1 second', \
             host, started_at",
            &[&GONE_AFTER.as_secs_f64()],
        )?;
        Ok(rows
            .iter()
            .map(|r| {
                let ago = u64::try_from(r.get::<_, i64>(8)).unwrap_or(0);
                DaemonRow {
                    id: r.get(0),
                    host: r.get(1),
                    pid: u32::try_from(r.get::<_, i32>(2)).unwrap_or(0),
                    version: r.get(3),
                    addresses: serde_json::from_str(r.get(4)).unwrap_or_default(),
                    leases: u64::try_from(r.get::<_, i64>(5)).unwrap_or(0),
                    pool_leases: serde_json::from_str(r.get(6)).unwrap_or_default(),
                    started_at: crate::store::fmt_time(r.get(7)),
                    heartbeat_ms_ago: ago,
                    live: u128::from(ago) < GONE_AFTER.as_millis(),
                }
            })
            .collect())
    }
}
