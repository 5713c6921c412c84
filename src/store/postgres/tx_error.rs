//! What a step inside a PostgreSQL transaction can fail with: the database (mapped to a
//! `StoreError` by the store, its URL redacted, once the transaction is over) or what a row
//! or an argument holds. Either ends the transaction, which rolls back when dropped.

use super::Postgres;
use crate::store::StoreError;

pub(super) enum TxError {
    Pg(tokio_postgres::Error),
    Store(StoreError),
}

impl From<tokio_postgres::Error> for TxError {
    fn from(e: tokio_postgres::Error) -> Self {
        TxError::Pg(e)
    }
}

impl From<StoreError> for TxError {
    fn from(e: StoreError) -> Self {
        TxError::Store(e)
    }
}

impl TxError {
    /// The store's error for it.
    pub(super) fn into_store(self, pg: &Postgres) -> StoreError {
        match self {
            TxError::Pg(e) => pg.err(e),
            TxError::Store(e) => e,
        }
    }
}
