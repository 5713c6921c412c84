//! SQLite's sources table: the last sniff of each source (written by `Write::SourceResult`).

use rusqlite::params;

use super::Sqlite;
use crate::store::{SourceRow, StoreError};

impl Sqlite {
    /// The last sniff of each source.
    pub fn sources(&self, pool: Option<&str>) -> Result<Vec<SourceRow>, StoreError> {
        let mut st = self.conn.prepare_cached(
            "SELECT pool, name, last_at, last_ok, last_detail, last_count FROM sources \
             WHERE (?1 IS NULL OR pool=?1) ORDER BY pool, name",
        )?;
        let rows = st.query_map(params![pool], |r| {
            Ok(SourceRow {
                pool: r.get(0)?,
                name: r.get(1)?,
                last_at: r.get(2)?,
                last_ok: r.get::<_, Option<i64>>(3)?.map(|v| v != 0),
                last_detail: r.get(4)?,
                last_count: r.get(5)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}
