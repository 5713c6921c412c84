//! Jobs one daemon of the fleet does for all (docs/fleet.md, "Sources in a fleet"): the
//! row of a job in `fleet_jobs` names the daemon that holds it, until when, and when the job
//! last ran. A daemon runs a job only when [`Postgres::take_turn`] says so, which it says
//! to one daemon at a time.

use std::time::Duration;

use super::Postgres;
use crate::store::daemons::GONE_AFTER;
use crate::store::StoreError;

impl Postgres {
    /// Whether daemon `me` runs `job` now. It holds the job, or takes it (nobody holds
    /// it, its hold lapsed, or its holder's heartbeat is older than [`GONE_AFTER`]), and
    /// holds it `hold` more; it runs it when the job last ran at least `every` ago. All
    /// by the database's clock, in one statement: two daemons asking at once never both
    /// hear yes.
    pub fn take_turn(
        &self,
        job: &str,
        me: &str,
        every: Duration,
        hold: Duration,
    ) -> Result<bool, StoreError> {
        let rows = self.rows(
            "INSERT INTO fleet_jobs AS j (job, holder, held_until, last_run) \
             VALUES ($1, $2, now() + $4 * interval '1 second', now()) \
             ON CONFLICT (job) DO UPDATE SET holder = EXCLUDED.holder, \
               held_until = EXCLUDED.held_until, \
               last_run = CASE WHEN j.last_run <= now() - $3 * interval '1 second' \
                          THEN now() ELSE j.last_run END \
             WHERE j.holder = EXCLUDED.holder OR j.held_until < now() \
               OR NOT EXISTS (SELECT 1 FROM fleet_daemons d WHERE d.id = j.holder \
                 AND d.heartbeat_at >= now() - $5 * interval '1 second') \
             RETURNING last_run = now()",
            &[
                &job,
                &me,
                &every.as_secs_f64(),
                &hold.as_secs_f64(),
                &GONE_AFTER.as_secs_f64(),
            ],
        )?;
        Ok(rows.first().is_some_and(|r| r.get::<_, bool>(0)))
    }
}
