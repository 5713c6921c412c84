//! Checks a request line (parse, token) and hands it to its op.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::context::{Context, Live, LiveCell};
use super::ops::{self, Caller, Transport};
use super::token::{Role, Tokens};
use crate::config::Config;
use crate::pool::engine::Engine;
use crate::probe::Prober;
use crate::protocol::{parse_line, ErrorCode, Response};

/// Answers requests; shared by every connection.
pub struct Handler {
    engine: Arc<Engine>,
    tokens: Tokens,
    /// The database served, as `status` names it.
    database: Option<String>,
    /// Swapped whole by a config reload; requests in flight keep the one they started with.
    live: LiveCell,
}

impl Handler {
    /// A handler over a running engine; `tokens` are what a TCP peer must send (with
    /// none, every TCP request is refused).
    pub fn new(engine: Arc<Engine>, config: Arc<Config>, tokens: Tokens) -> Self {
        Handler {
            engine,
            tokens,
            database: None,
            live: LiveCell::new(config),
        }
    }

    /// Name the database in `status` answers (a path; never a password).
    pub fn with_database(mut self, database: impl Into<String>) -> Self {
        self.database = Some(database.into());
        self
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

    /// Answer one request line; also says whether it carried a valid token (always true
    /// off TCP). Before that, a TCP peer learns nothing but that its token is wrong.
    /// `gone` is cancelled when the client has closed its connection.
    pub(super) async fn answer(
        &self,
        line: &str,
        tcp: bool,
        gone: &CancellationToken,
    ) -> (Response, bool) {
        let caller = if tcp {
            let (id, token) = peek(line);
            match token.and_then(|t| self.tokens.role_of(&t)) {
                Some(role) => Caller {
                    via: Transport::Tcp,
                    role,
                },
                None => {
                    let r = Response::err(id, ErrorCode::BadRequest, "missing or wrong token");
                    return (r, false);
                }
            }
        } else {
            // The Unix socket is this user's own (mode 0600): its clients are operators.
            Caller {
                via: Transport::Unix,
                role: Role::Admin,
            }
        };
        (self.checked(line, caller, gone).await, true)
    }

    async fn checked(&self, line: &str, caller: Caller, gone: &CancellationToken) -> Response {
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
        let cx = Context::new(&self.engine, self.database.as_deref(), &self.live, gone);
        match ops::route(req, caller, &cx).await {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PoolConfig;
    use crate::health::State;
    use crate::protocol::{Payload, OPS};
    use crate::server::token::{Secret, ADMIN_ENV, LEASE_ENV};
    use crate::store::Store;
    use serde_json::json;

    const TOKEN: &str = "t0ken-xyz-0123456789";
    const LEASE: &str = "lease-t0ken-0123456789";

    fn tokens() -> Tokens {
        let s = |value: &str, from: &str| Secret {
            value: value.into(),
            from: from.into(),
        };
        Tokens::new(Some(s(TOKEN, ADMIN_ENV)), Some(s(LEASE, LEASE_ENV))).unwrap()
    }

    fn handler(dir: &std::path::Path) -> Handler {
        let store = Store::open(&dir.join("h.db")).unwrap();
        let engine = Engine::open(store, [PoolConfig::builtin("default")]).unwrap();
        Handler::new(engine, Arc::new(Config::default()), tokens())
    }

    /// One request per op, each valid on its own (the ids name endpoint 1).
    fn request(op: &str, token: &str) -> Value {
        let mut v = match op {
            "lease" | "status" | "ping" | "endpoints" => json!({}),
            "report" => json!({"lease": "l-1", "outcome": "success"}),
            "release" => json!({"lease": "l-1"}),
            "disable" | "enable" => json!({"endpoint": 1}),
            "remove" => json!({"endpoints": [1]}),
            "add" => json!({"urls": ["http://10.9.0.2:3128"]}),
            "import" => json!({"path": "/nonexistent/import.txt"}),
            "probe" => json!({"endpoints": [1]}),
            "edit" => json!({"endpoint": 1, "label": "changed"}),
            other => panic!("no request for op {other}: add one here"),
        };
        v["op"] = json!(op);
        v["token"] = json!(token);
        v
    }

    #[tokio::test]
    async fn a_lease_token_may_send_only_the_lease_ops_and_changes_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let h = handler(dir.path());
        let add = json!({"op": "add", "urls": ["http://10.9.0.1:3128"]});
        assert!(h.handle_line(&add.to_string(), false).await.ok);
        let lease_ops = ["ping", "lease", "report", "release", "status"];
        for op in OPS {
            let r = h.handle_line(&request(op, LEASE).to_string(), true).await;
            let code = r.error.as_ref().map(|e| e.code);
            if lease_ops.contains(op) {
                assert_ne!(code, Some(ErrorCode::Forbidden), "{op}: {r:?}");
            } else {
                let e = r.error.expect("refused");
                assert_eq!(e.code, ErrorCode::Forbidden, "{op}");
                assert_eq!(
                    e.message,
                    format!("{op} needs the admin role; this token has the lease role (nothing changed)")
                );
                assert!(!e.message.contains(LEASE), "{}", e.message);
            }
        }
        // Nothing an operator op would have done happened.
        let all = json!({"op": "endpoints"});
        let r = h.handle_line(&all.to_string(), false).await;
        let Some(Payload::Endpoints { endpoints, .. }) = r.body else {
            panic!("{r:?}")
        };
        let urls: Vec<_> = endpoints
            .iter()
            .map(|e| (e.url.as_str(), e.state, e.label.clone()))
            .collect();
        assert_eq!(urls, [("http://10.9.0.1:3128", State::Available, None)]);
        // The admin token may send them all (an operator op answers, forbidden or not).
        let r = h
            .handle_line(&request("disable", TOKEN).to_string(), true)
            .await;
        assert!(r.ok, "{r:?}");
    }

    #[tokio::test]
    async fn a_token_that_is_neither_is_refused_before_anything_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let h = handler(dir.path());
        for token in ["", "wrong", "lease-t0ken-012345678", &format!("{LEASE}x")] {
            let r = h
                .handle_line(&request("ping", token).to_string(), true)
                .await;
            let e = r.error.expect("refused");
            assert_eq!(
                (e.code, e.message.as_str()),
                (ErrorCode::BadRequest, "missing or wrong token")
            );
        }
    }

    #[tokio::test]
    async fn import_is_refused_off_the_unix_socket_before_its_file_is_opened() {
        let dir = tempfile::tempdir().unwrap();
        let h = handler(dir.path());
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
