//! A new set of pool configs for running pools (SIGHUP): policies, modes, probe settings
//! and lease caps change in place, new pools appear, and nothing is lost.

use std::collections::HashSet;

use super::Pools;
use crate::config::PoolConfig;

/// Why a new config was not applied; nothing changed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReconfigureError {
    /// Dropping the pool would strand its endpoints.
    #[error(
        "pool {pool:?} is missing from the new config but still has {endpoints} endpoint(s); \
         remove them first (`proxypool remove`) or keep the pool in the config"
    )]
    PoolInUse { pool: String, endpoints: usize },
}

impl Pools {
    /// Apply `configs` (all or nothing). Returns the names of the pools that are new.
    /// Each pool of `dropped` (configured before, not any more) is retired, which is
    /// refused while it holds endpoints. Pools in neither list (the built-in config of
    /// endpoints whose pool was never configured) are left as they are.
    pub fn reconfigure(
        &mut self,
        configs: Vec<PoolConfig>,
        dropped: &[String],
    ) -> Result<Vec<String>, ReconfigureError> {
        let keep: HashSet<&str> = configs.iter().map(|c| c.name.as_str()).collect();
        let mut retire = Vec::new();
        for name in dropped {
            let Some(&i) = self.by_name.get(name) else {
                continue;
            };
            if keep.contains(name.as_str()) {
                continue;
            }
            let endpoints: usize = self.pools[i].index.counts().total();
            if endpoints > 0 {
                return Err(ReconfigureError::PoolInUse {
                    pool: name.clone(),
                    endpoints,
                });
            }
            retire.push(name.clone());
        }
        // The slot stays (indices are positions), but the name no longer finds it.
        for name in retire {
            self.by_name.remove(&name);
        }
        let mut added = Vec::new();
        for cfg in configs {
            if !self.by_name.contains_key(&cfg.name) {
                added.push(cfg.name.clone());
            }
            self.ensure_pool(cfg);
        }
        Ok(added)
    }

    /// Whether slot `i` is a pool known by its name (not one retired by a reload).
    pub(super) fn is_current(&self, i: usize) -> bool {
        self.by_name.get(&self.pools[i].cfg.name) == Some(&i)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::*;
    use crate::config::Mode;
    use crate::store::EndpointRow;

    fn row(id: i64, pool: &str) -> EndpointRow {
        EndpointRow::fixture(id, &format!("http://10.0.0.{id}:3128"), pool)
    }

    fn cfg(name: &str, base_secs: u64) -> PoolConfig {
        let mut c = PoolConfig::builtin(name);
        c.policy.cooldown.base = Duration::from_secs(base_secs);
        c
    }

    /// Pools `default` and `a` (one endpoint each), `empty` (none), and `legacy`: an
    /// endpoint whose pool was never configured.
    fn pools() -> Pools {
        let mut p = Pools::new([cfg("default", 60), cfg("a", 60), cfg("empty", 60)]);
        let now = Instant::now();
        p.insert_row(&row(1, "default"), now);
        p.insert_row(&row(2, "a"), now);
        p.insert_row(&row(3, "legacy"), now);
        p
    }

    #[test]
    fn reconfigure_table() {
        struct Case {
            name: &'static str,
            configs: Vec<PoolConfig>,
            dropped: Vec<&'static str>,
            want: Result<Vec<&'static str>, &'static str>,
            known_after: Vec<&'static str>,
        }
        let cases = [
            Case {
                name: "same pools, new policy",
                configs: vec![cfg("default", 5), cfg("a", 5), cfg("empty", 5)],
                dropped: vec![],
                want: Ok(vec![]),
                known_after: vec!["default", "a", "empty", "legacy"],
            },
            Case {
                name: "a new pool",
                configs: vec![cfg("default", 5), cfg("a", 5), cfg("empty", 5), cfg("b", 5)],
                dropped: vec![],
                want: Ok(vec!["b"]),
                known_after: vec!["default", "a", "empty", "legacy", "b"],
            },
            Case {
                name: "dropping an empty pool retires it",
                configs: vec![cfg("default", 5), cfg("a", 5)],
                dropped: vec!["empty"],
                want: Ok(vec![]),
                known_after: vec!["default", "a", "legacy"],
            },
            Case {
                name: "dropping a pool with endpoints is refused",
                configs: vec![cfg("default", 5), cfg("empty", 5)],
                dropped: vec!["a"],
                want: Err("pool \"a\" is missing from the new config but still has 1 endpoint(s)"),
                known_after: vec!["default", "a", "empty", "legacy"],
            },
        ];
        for c in cases {
            let mut p = pools();
            let dropped: Vec<String> = c.dropped.iter().map(|s| s.to_string()).collect();
            let got = p.reconfigure(c.configs, &dropped);
            match (&got, &c.want) {
                (Ok(added), Ok(want)) => assert_eq!(added, want, "{}", c.name),
                (Err(e), Err(want)) => assert!(e.to_string().starts_with(want), "{}: {e}", c.name),
                _ => panic!("{}: got {got:?}", c.name),
            }
            let names = p.pool_names();
            for n in &c.known_after {
                assert!(p.pool_config(n).is_some(), "{}: {n} unknown", c.name);
                assert!(names.contains(&n.to_string()), "{}: {names:?}", c.name);
            }
            assert_eq!(names.len(), c.known_after.len(), "{}: {names:?}", c.name);
            assert_eq!(p.status(None, Instant::now()).unwrap().len(), names.len());
            // A refused change left every policy as it was.
            let base = p.pool_config("default").unwrap().policy.cooldown.base;
            let want_base = if got.is_ok() { 5 } else { 60 };
            assert_eq!(base, Duration::from_secs(want_base), "{}", c.name);
        }
        // The mode and cap of a pool change in place.
        let mut p = pools();
        let mut a = cfg("a", 60);
        a.mode = Mode::Static;
        a.max_leases_per_endpoint = 1;
        p.reconfigure(vec![cfg("default", 60), a, cfg("empty", 60)], &[])
            .unwrap();
        assert_eq!(p.pool_config("a").unwrap().mode, Mode::Static);
        assert_eq!(p.ids(Some("a")), vec![2]);
    }
}
