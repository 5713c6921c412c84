//! Checks a request line (parse, token, transport) and routes it to its op.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use super::error::OpError;
use super::ops;
use crate::config::Config;
use crate::pool::engine::Engine;
use crate::probe::Prober;
use serde_json::Value;

use crate::protocol::{parse_line, Body, ErrorCode, Request, Response};

/// Answers requests; shared by every connection.
pub struct Handler {
    pub(super) engine: Arc<Engine>,
    token: Option<String>,
    /// Swapped whole by a config reload; requests in flight keep the one they started with.
    live: RwLock<Live>,
}

/// What a config reload replaces.
#[derive(Clone)]
pub(super) struct Live {
    pub(super) config: Arc<Config>,
    pub(super) probers: Arc<HashMap<String, Prober>>,
}

impl Handler {
    /// A handler over a running engine.
    pub fn new(engine: Arc<Engine>, config: Arc<Config>, token: Option<String>) -> Self {
        Handler {
            engine,
            token,
            live: RwLock::new(Live {
                config,
                probers: Arc::new(HashMap::new()),
            }),
        }
    }

    /// Probers per pool, for the `probe` op.
    pub fn with_probers(self, probers: HashMap<String, Prober>) -> Self {
        self.write_live().probers = Arc::new(probers);
        self
    }

    /// Use a reloaded config and its probers from the next request on.
    pub fn reconfigure(&self, config: Arc<Config>, probers: HashMap<String, Prober>) {
        *self.write_live() = Live {
            config,
            probers: Arc::new(probers),
        };
    }

    pub(super) fn live(&self) -> Live {
        self.live.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn write_live(&self) -> std::sync::RwLockWriteGuard<'_, Live> {
        self.live.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Answer one request line.
    pub async fn handle_line(&self, line: &str, tcp: bool) -> Response {
        self.answer(line, tcp).await.0
    }

    /// Answer one request line; also says whether it carried the valid token (always
    /// true off TCP). Before that, a TCP peer learns nothing but that its token is wrong.
    pub(super) async fn answer(&self, line: &str, tcp: bool) -> (Response, bool) {
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
        (self.checked(line, tcp).await, true)
    }

    async fn checked(&self, line: &str, tcp: bool) -> Response {
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
        if tcp && matches!(req, Request::Import { .. }) {
            // It reads a file of the daemon's: only for local clients.
            return Response::err(
                id,
                ErrorCode::BadRequest,
                "import is only accepted on the Unix socket",
            );
        }
        match self.dispatch(req).await {
            Ok(body) => Response::ok(id, body),
            Err(e) => {
                let mut r = Response::err(id, e.code, e.message);
                if e.code == ErrorCode::PoolExhausted {
                    r.retry_after_ms = Some(e.retry_after_ms);
                    if let Some(err) = r.error.as_mut() {
                        err.retry_after_ms = Some(e.retry_after_ms);
                    }
                }
                r
            }
        }
    }

    /// The one place each verb is routed.
    async fn dispatch(&self, req: Request) -> Result<Body, OpError> {
        match req {
            Request::Ping => Ok(ops::ping()),
            Request::Lease {
                pool,
                ttl,
                wait,
                session,
                destination,
                schemes,
            } => {
                let want = ops::want(destination, schemes)?;
                ops::lease(self, pool, ttl, wait, session, want).await
            }
            Request::Report {
                lease,
                pool,
                session,
                destination,
                outcome,
                reason,
                phase,
                status,
                retry_after,
                detail,
                duration_ms,
            } => {
                let target = ops::ReportTarget::new(lease, pool, session)?;
                let report = ops::Report {
                    outcome,
                    reason,
                    phase,
                    status,
                    retry_after,
                    detail,
                    destination,
                    duration_ms,
                };
                ops::report(self, target, report).await
            }
            Request::Release { lease } => ops::release(self, &lease).await,
            Request::Status { pool } => ops::status(self, pool),
            Request::Endpoints {
                pool,
                state,
                endpoint,
            } => ops::endpoints(self, pool, state, endpoint).await,
            Request::Disable { endpoint, reason } => ops::disable(self, &endpoint, reason).await,
            Request::Enable {
                endpoint,
                now,
                destination: Some(d),
            } => ops::enable_pair(self, &endpoint, now, &d).await,
            Request::Enable {
                endpoint,
                now,
                destination: None,
            } => ops::enable(self, &endpoint, now).await,
            Request::Add {
                urls,
                pool,
                label,
                source,
            } => ops::add(self, &urls, pool, label, source).await,
            Request::Import { path, pool, label } => ops::import(self, &path, pool, label).await,
            Request::Probe {
                endpoints,
                pool,
                all,
                concurrency,
            } => ops::probe(self, &endpoints, pool, all, concurrency).await,
            Request::Remove { endpoints } => ops::remove(self, &endpoints).await,
            Request::Edit {
                endpoint,
                url,
                label,
            } => ops::edit(self, &endpoint, url, label).await,
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
