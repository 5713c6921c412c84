//! Jobs one daemon of the fleet does for all (docs/fleet.md, "Sources in a fleet"): the
//! row of a job in `fleet_jobs` names the daemon that does it and when it last ran. A daemon
//! runs a job only through [`Postgres::take_turn`], which says yes to one daemon at a time.

use std::time::Duration;

use super::Postgres;
use crate::store::daemons::GONE_AFTER;
use crate::store::StoreError;

impl Postgres {
    /// Whether daemon `me` runs `job` now: it holds the job (or takes it: nobody held it,
    /// or its holder's heartbeat is older than [`GONE_AFTER`]) and the job last ran at
    /// least `every` ago by the database's clock. A yes is recorded as the job's run, in
    /// the same statement, so that two daemons asking at once never both hear it.
    pub fn take_turn(&self, job: &str, me: &str, every: Duration) -> Result<bool, StoreError> {
        let every = every.as_secs_f64();
        let gone = GONE_AFTER.as_secs_f64();
        let rows = self.rows(
            "INSERT INTO fleet_jobs AS j (job, holder, last_run) VALUES ($1, $2, now()) \
             ON CONFLICT (job) DO UPDATE SET holder = EXCLUDED.holder, last_run = now() \
             WHERE (j.holder = EXCLUDED.holder OR NOT EXISTS (SELECT 1 FROM fleet_daemons d \
               WHERE d.id = j.holder AND d.heartbeat_at >= now() - $4 * interval '1 second')) \
             AND j.last_run <= now() - $3 * interval '1 second' \
             RETURNING holder",
            &[&job, &me, &every, &gone],
        )?;
        Ok(!rows.is_empty())
    }

    /// Whether another daemon holds `job` and is alive.
    pub fn held_elsewhere(&self, job: &str, me: &str) -> Result<bool, StoreError> {
        let rows = self.rows(
            "SELECT 1 FROM fleet_jobs j JOIN fleet_daemons d ON d.id = j.holder \
             WHERE j.job = $1 AND j.holder <> $2 \
             AND d.heartbeat_at >= now() - $3 * interval '1 second'",
            &[&job, &me, &GONE_AFTER.as_secs_f64()],
        )?;
        Ok(!rows.is_empty())
    }
}
