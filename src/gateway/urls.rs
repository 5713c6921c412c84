//! Each leased endpoint's proxy URL, parsed once. A lease names its endpoint's URL as
//! text (what the socket sends a client too); parsing that text again for every request
//! cost the gateway more than the lease itself. An endpoint whose URL was edited comes
//! back with other text and is parsed anew.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::endpoint::{EndpointError, EndpointId, ProxyUrl};

/// Past this many endpoints the table starts over: endpoints removed from the pool are
/// never looked up again, and nothing else would drop them.
const MOST: usize = 16_384;

/// The text a URL was parsed from, and what it gave.
type Parsed = (Arc<str>, Arc<ProxyUrl>);

#[derive(Default)]
pub(super) struct ParsedUrls {
    by_endpoint: Mutex<HashMap<EndpointId, Parsed>>,
}

impl ParsedUrls {
    /// The parsed form of `text`, the URL the pool gave for endpoint `id`.
    pub(super) fn get(
        &self,
        id: EndpointId,
        text: &Arc<str>,
    ) -> Result<Arc<ProxyUrl>, EndpointError> {
        if let Some((seen, url)) = self.lock().get(&id) {
            if **seen == **text {
                return Ok(url.clone());
            }
        }
        // Parsed without the lock: other leases go on meanwhile.
        let url = Arc::new(ProxyUrl::parse(text)?);
        let mut t = self.lock();
        if t.len() >= MOST && !t.contains_key(&id) {
            t.clear();
        }
        t.insert(id, (text.clone(), url.clone()));
        Ok(url)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<EndpointId, Parsed>> {
        // A panic elsewhere while holding it leaves only a cache.
        self.by_endpoint.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_parsed_once_and_again_when_its_text_changes() {
        let urls = ParsedUrls::default();
        let first: Arc<str> = Arc::from("http://u:p@127.0.0.1:3128");
        let a = urls.get(7, &first).unwrap();
        // The same text in another allocation: the parsed URL is the one kept.
        let b = urls
            .get(7, &Arc::from("http://u:p@127.0.0.1:3128"))
            .unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        // Edited (new credentials): parsed anew, never the old one.
        let c = urls
            .get(7, &Arc::from("http://u:new@127.0.0.1:3128"))
            .unwrap();
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(c.password.as_deref(), Some("new"));
        // Another endpoint with the same text has its own entry.
        let d = urls.get(8, &first).unwrap();
        assert!(!Arc::ptr_eq(&a, &d));
        assert!(urls.get(9, &Arc::from("not a url")).is_err());
    }
}
