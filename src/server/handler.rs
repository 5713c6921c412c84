//! Checks a request line (parse, token) and hands it to its op.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::context::{Context, Live, LiveCell};
use super::ops::{self, Transport};
use crate::config::Config;
use crate::pool::engine::Engine;
use crate::probe::Prober;
use crate::protocol::{parse_line, ErrorCode, Response};

/// Answers requests; shared by every connection.
pub struct Handler {
    engine: Arc<Engine>,
    token: Option<String>,
    /// Swapped whole by a config reload; requests in flight keep the one they started with.
    live: LiveCell,
}

impl Handler {
    /// A handler over a running engine.
    pub fn new(engine: Arc<Engine>, config: Arc<Config>, token: Option<String>) -> Self {
        Handler {
            engine,
            token,
            live: LiveCell::new(config),
        }
    }

    /// Probers per pool, for the `probe` op.
    pub fn with_probers(self, probers: HashMap<String, Prober>) -> Self {
        self.live.set_probers(probers);
        self
    }

    /// Use a reloaded config and its probers from the next request on.
    pub fn reconfigure(&self, config: Arc<Config>, probers: HashMap<String, Prober>) {
        self.live.set(Live {
            config,
            probers: Arc::new(probers),
        });
    }

    /// The config in force now.
    pub(super) fn config(&self) -> Arc<Config> {
        self.live.get().config
    }

    /// Answer one request line.
    pub async fn handle_line(&self, line: &str, tcp: bool) -> Response {
        self.answer(line, tcp, &CancellationToken::new()).await.0
    }

    /// Answer one request line; also says whether it carried the valid token (always
    /// true off TCP). Before that, a TCP peer learns nothing but that its token is wrong.
    /// `gone` is cancelled when the client has closed its connection.
    pub(super) async fn answer(
        &self,
        line: &str,
        tcp: bool,
        gone: &CancellationToken,
    ) -> (Response, bool) {
        if tcp {
            let (id, token) = peek(line);
            let ok = match (&self.token, &token) {
                (Some(want), Some(got)) => constant_time_eq(want.as_bytes(), got.as_bytes()),
                _ => false,
            };
            if !ok {
                let r = Response::err(id, ErrorCode::BadRequest, "missing or wrong token");
                return (r, false);
            }
        }
        let via = if tcp { Transport::Tcp } else { Transport::Unix };
        (self.checked(line, via, gone).await, true)
    }

    async fn checked(&self, line: &str, via: Transport, gone: &CancellationToken) -> Response {
        if line.trim().is_empty() {
            return Response::err(
                None,
                ErrorCode::BadRequest,
                "empty line: send one JSON object per line",
            );
        }
        let (id, req, _) = match parse_line(line) {
            Ok(v) => v,
            Err(resp) => return *resp,
        };
        let cx = Context::new(&self.engine, &self.live, gone);
        match ops::route(req, via, &cx).await {
            Ok(payload) => Response::ok(id, payload),
            Err(e) => Response::failure(id, e.into_body()),
        }
    }
}

/// The `id` and `token` of a line, if it is a JSON object that has them.
fn peek(line: &str) -> (Option<Value>, Option<String>) {
    match serde_json::from_str::<Value>(line) {
        Ok(Value::Object(mut m)) => {
            let token = match m.remove("token") {
                Some(Value::String(t)) => Some(t),
                _ => None,
            };
            (m.remove("id"), token)
        }
        _ => (None, None),
    }
}

/// The `id` of a request line, to echo in an answer that never parsed it fully.
pub(super) fn request_id(line: &str) -> Option<Value> {
    peek(line).0
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PoolConfig;
    use crate::store::Store;

    const TOKEN: &str = "t0ken-xyz-0123456789";

    #[tokio::test]
    async fn import_is_refused_off_the_unix_socket_before_its_file_is_opened() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("h.db")).unwrap();
        let engine = Engine::open(store, [PoolConfig::builtin("default")]).unwrap();
        let h = Handler::new(engine, Arc::new(Config::default()), Some(TOKEN.into()));
        let missing = dir.path().join("missing.txt");
        let line = serde_json::json!({"op": "import", "path": missing, "token": TOKEN});
        let over_tcp = h.handle_line(&line.to_string(), true).await;
        let e = over_tcp.error.expect("refused");
        assert_eq!(
            (e.code, e.message.as_str()),
            (
                ErrorCode::BadRequest,
                "import is only accepted on the Unix socket"
            )
        );
        // On the Unix socket the same request gets as far as opening the file.
        let local = h.handle_line(&line.to_string(), false).await;
        let e = local.error.expect("no such file");
        assert!(e.message.contains("missing.txt"), "{}", e.message);
    }
}
