//! What the daemons' PostgreSQL sessions are doing, sampled while a cell runs: where a
//! fleet's commits wait (issue 49: three daemons wrote half as fast as one). Every 2 ms,
//! one query of `pg_stat_activity` for the client sessions of the bench's database; the
//! share of samples in each state or wait event.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A sampler running on a thread of its own until `stop`.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<BTreeMap<String, u64>>,
}

impl Sampler {
    /// Sample the sessions of the database at `url` (not the sampler's own).
    pub fn start(url: &str) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let (url, flag) = (url.to_string(), stop.clone());
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                    .await
                    .unwrap();
                tokio::spawn(conn);
                let mut seen = BTreeMap::new();
                let sql = "SELECT CASE WHEN wait_event IS NOT NULL \
                             THEN wait_event_type || ':' || wait_event ELSE 'running' END \
                           FROM pg_stat_activity WHERE datname = current_database() \
                           AND backend_type = 'client backend' AND pid <> pg_backend_pid() \
                           AND state <> 'idle'";
                while !flag.load(Ordering::Relaxed) {
                    for r in client.query(sql, &[]).await.unwrap() {
                        *seen.entry(r.get::<_, String>(0)).or_insert(0) += 1;
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                seen
            })
        });
        Sampler { stop, thread }
    }

    /// Stop; the share of each state among the samples of busy sessions, most first.
    pub fn finish(self) -> Vec<(String, f64)> {
        self.stop.store(true, Ordering::Relaxed);
        let seen = self.thread.join().unwrap();
        let total: u64 = seen.values().sum();
        let mut v: Vec<(String, f64)> = seen
            .into_iter()
            .map(|(k, n)| (k, n as f64 / total.max(1) as f64))
            .collect();
        v.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap());
        v
    }
}

/// The top `n` shares as one line: `Lock:advisory 41% · IO:WALSync 22% · ...`.
pub fn line(shares: &[(String, f64)], n: usize) -> String {
    shares
        .iter()
        .take(n)
        .map(|(k, s)| format!("{k} {:.0}%", s * 100.0))
        .collect::<Vec<_>>()
        .join(" · ")
}
