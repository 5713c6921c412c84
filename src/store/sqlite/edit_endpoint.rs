//! `Sqlite::edit_endpoint`: a new URL or label for a stored endpoint.

use std::collections::BTreeMap;

use rusqlite::{params, OptionalExtension, TransactionBehavior};

use super::endpoints::{read_endpoint, ENDPOINT_COLS};
use super::events::insert_event;
use super::Sqlite;
use crate::endpoint::{EndpointId, ProxyUrl};
use crate::event_kind::EventKind;
use crate::store::rows::edit_detail;
use crate::store::{EndpointRow, NewEvent, StoreError};

impl Sqlite {
    /// Replace an endpoint's URL, label and/or tags, keeping its id, state and history,
    /// with an `edited` event (passwords redacted). `label: Some(None)` clears the label;
    /// `tags` sets each key given, an empty value removes it. The new URL may not take the
    /// identity of another endpoint of the pool.
    pub fn edit_endpoint(
        &mut self,
        id: EndpointId,
        url: Option<&ProxyUrl>,
        label: Option<Option<String>>,
        tags: &BTreeMap<String, String>,
    ) -> Result<EndpointRow, StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let old = {
            let sql = format!("SELECT {ENDPOINT_COLS} FROM endpoints WHERE id=?1");
            let mut st = tx.prepare_cached(&sql)?;
            st.query_row([id], read_endpoint)
                .optional()?
                .transpose()?
                .ok_or_else(|| StoreError::NotFound(format!("with id {id}")))?
        };
        let new_url = url.cloned().unwrap_or_else(|| old.url.clone());
        let new_label = label.unwrap_or_else(|| old.label.clone());
        let new_tags = old.tags.edited(tags)?;
        let clash: Option<i64> = tx
            .query_row(
                "SELECT id FROM endpoints WHERE pool=?1 AND scheme=?2 AND host=?3 AND port=?4 AND user=?5 AND id<>?6",
                params![
                    old.pool,
                    new_url.scheme.as_str(),
                    new_url.host,
                    new_url.port,
                    new_url.user_key(),
                    id
                ],
                |r| r.get(0),
            )
            .optional()?;
        if let Some(other) = clash {
            return Err(StoreError::Duplicate {
                url: new_url.to_redacted_string(),
                pool: old.pool.clone(),
                id: other,
                line: None,
            });
        }
        tx.execute(
            "UPDATE endpoints SET scheme=?2, host=?3, port=?4, user=?5, password=?6, label=?7, tags=?8 WHERE id=?1",
            params![
                id,
                new_url.scheme.as_str(),
                new_url.host,
                new_url.port,
                new_url.user_key(),
                new_url.password,
                super::text(&new_label),
                new_tags.to_column()
            ],
        )?;
        insert_event(
            &tx,
            &NewEvent {
                endpoint: Some(id),
                detail: Some(edit_detail(&old, &new_url, new_label.as_deref(), &new_tags)),
                ..NewEvent::new(EventKind::Edited)
            },
        )?;
        tx.commit()?;
        Ok(EndpointRow {
            url: new_url,
            label: new_label,
            tags: new_tags,
            ..old
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tags::Tags;

    fn row(url: &str, label: Option<&str>) -> EndpointRow {
        EndpointRow {
            label: label.map(str::to_string),
            tags: Tags::parse_args(&["country=us"]).unwrap(),
            ..EndpointRow::fixture(1, url, "default")
        }
    }

    #[test]
    fn edit_detail_says_what_changed_and_never_a_password() {
        let cases = [
            (
                "http://u:old@h:1",
                None,
                "http://u:new@h:1",
                None,
                "password changed",
            ),
            (
                "http://u:old@h:1",
                None,
                "http://u:new@h:2",
                None,
                "url http://u:***@h:1 -> http://u:***@h:2; password changed",
            ),
            (
                "http://h:1",
                Some("a"),
                "http://h:1",
                None,
                "label \"a\" -> none",
            ),
            (
                "http://h:1",
                None,
                "http://h:1",
                Some("b"),
                "label none -> \"b\"",
            ),
            (
                "socks5://u:p@h:1",
                None,
                "socks5://u:p@h:1",
                None,
                "nothing changed",
            ),
        ];
        for (old, old_label, new, new_label, want) in cases {
            let old = row(old, old_label);
            let got = edit_detail(&old, &ProxyUrl::parse(new).unwrap(), new_label, &old.tags);
            assert_eq!(got, want, "{new}");
            assert!(!got.contains("old") && !got.contains("new"), "{got}");
        }
        let r = row("http://h:1", None);
        let tags = Tags::parse_args(&["country=de", "tier=dc"]).unwrap();
        assert_eq!(
            edit_detail(&r, &r.url, None, &tags),
            "tags country=us -> country=de,tier=dc"
        );
        assert_eq!(
            edit_detail(&r, &r.url, None, &Tags::default()),
            "tags country=us -> none"
        );
    }
}
