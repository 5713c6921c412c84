//! The read-only HTTP listener (docs/observability.md, "HTTP listener"): `/metrics`, the
//! status page, the JSON API and `/healthz`, served by hyper (HTTP/1.1).
//!
//! The data comes from a [`StatusSource`] (the daemon implements it over the engine and
//! the store), so this module owns no pool state and can be tested with a fake source.

mod auth;
mod daemons;
mod page;
mod view;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CACHE_CONTROL, CONNECTION, CONTENT_TYPE};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::health::State;
use crate::metrics::Metrics;
use crate::protocol::EndpointView;
use crate::protocol::{self, DaemonRow, ErrorCode, Payload, PoolStatus};

pub use auth::{check_bind, HttpConfigError, TOKEN_ENV};
pub(crate) use page::render_page;
pub use view::{minute_buckets, EndpointLine, PageLimits, PageModel, PoolPage};

/// Default `[server] http` address.
pub const DEFAULT_ADDR: &str = "127.0.0.1:9464";
/// Seconds between the status page's own reloads.
pub const REFRESH_SECS: u32 = 5;
/// Connections served at once; more wait in the kernel's backlog.
pub const MAX_CONNECTIONS: usize = 256;
/// The paths the listener answers.
const PAGES: [&str; 6] = [
    "/",
    "/metrics",
    "/healthz",
    "/api/status",
    "/api/endpoints",
    "/ca.pem",
];
/// A client that has not sent its request head by then is dropped.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a source could not answer; `code` picks the HTTP status and the JSON error.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct StatusError {
    /// Protocol error code (`unknown_pool`, `bad_request`, `internal`).
    pub code: ErrorCode,
    /// Human message (never a password).
    pub message: String,
}

impl StatusError {
    /// Shorthand.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        StatusError {
            code,
            message: message.into(),
        }
    }
}

/// What the listener shows. The daemon implements it over the engine and the store; every
/// call is read-only and should hold the engine's lock only to copy what it needs.
pub trait StatusSource: Send + Sync + 'static {
    /// The socket's `status` answer: counts by state per pool (one pool, or all).
    fn status(
        &self,
        pool: Option<&str>,
    ) -> impl Future<Output = Result<Vec<PoolStatus>, StatusError>> + Send;

    /// The socket's `endpoints` answer, passwords redacted.
    fn endpoints(
        &self,
        pool: Option<&str>,
        state: Option<State>,
    ) -> impl Future<Output = Result<Vec<EndpointView>, StatusError>> + Send;

    /// The endpoints of a pool (or all) with each one's state for `destination`
    /// (normalised): its own unless it is available, then its pair's.
    fn endpoints_for(
        &self,
        pool: Option<&str>,
        destination: &str,
    ) -> impl Future<Output = Result<Vec<(EndpointView, State)>, StatusError>> + Send;

    /// Everything the status page shows.
    fn page(
        &self,
        limits: PageLimits,
    ) -> impl Future<Output = Result<PageModel, StatusError>> + Send;

    /// Whether the store answers (PostgreSQL can be away, docs/fleet.md, "Faults").
    fn store_up(&self) -> bool {
        true
    }

    /// A fleet's daemons as they registered (None on SQLite).
    fn daemons(&self) -> Option<Vec<DaemonRow>> {
        None
    }

    /// A fleet's database as `status` says it: `up` or `unavailable` (None on SQLite).
    fn store_state(&self) -> Option<&'static str> {
        None
    }
}

/// The listener's shared state.
pub struct HttpApp<S> {
    source: Arc<S>,
    metrics: Arc<Metrics>,
    token: Option<String>,
    /// The CA certificate served at `/ca.pem` (never its key).
    ca_pem: Option<Bytes>,
}

impl<S: StatusSource> HttpApp<S> {
    /// `token`: when set, every request needs `Authorization: Bearer <token>`, on
    /// loopback too (an operator who sets one asks for it).
    pub fn new(source: Arc<S>, metrics: Arc<Metrics>, token: Option<String>) -> Self {
        HttpApp {
            source,
            metrics,
            token: token.filter(|t| !t.is_empty()),
            ca_pem: None,
        }
    }

    /// Serve this CA certificate (PEM) at `/ca.pem`; `None`: a 404 saying how to make one.
    pub fn with_ca_pem(mut self, pem: Option<String>) -> Self {
        self.ca_pem = pem.map(Bytes::from);
        self
    }

    /// Answer one request.
    pub async fn handle<B>(&self, req: Request<B>) -> Response<Full<Bytes>> {
        if let Some(t) = &self.token {
            if !auth::bearer_matches(req.headers(), t) {
                let mut r = text(StatusCode::UNAUTHORIZED, "a bearer token is required\n");
                let h = r.headers_mut();
                h.insert("www-authenticate", HeaderValue::from_static("Bearer"));
                // One answer per connection without the token: a stranger cannot hold one
                // of the listener's slots by asking now and then.
                h.insert(CONNECTION, HeaderValue::from_static("close"));
                return r;
            }
        }
        let path = req.uri().path();
        if !PAGES.contains(&path) {
            return text(StatusCode::NOT_FOUND, "not found\n");
        }
        if req.method() != Method::GET && req.method() != Method::HEAD {
            let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "read-only: use GET\n");
            r.headers_mut()
                .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
            return r;
        }
        let query = match view::parse_query(req.uri().query()) {
            Ok(q) => q,
            Err(e) => return api_error(&StatusError::new(ErrorCode::BadRequest, e)),
        };
        let mut resp = match path {
            "/healthz" if !self.source.store_up() => {
                text(StatusCode::SERVICE_UNAVAILABLE, "store_unavailable\n")
            }
            "/healthz" => text(StatusCode::OK, "ok\n"),
            "/ca.pem" => self.ca_pem(),
            "/metrics" => with_type(
                Response::new(Full::new(Bytes::from(self.metrics.encode()))),
                crate::metrics::CONTENT_TYPE,
            ),
            "/api/status" => match query.only(&["pool"]) {
                Err(e) => api_error(&e),
                Ok(()) => self.api_status(query.get("pool")).await,
            },
            "/api/endpoints" => match query
                .only(&["pool", "state", "destination"])
                .and_then(|()| query.state())
            {
                Err(e) => api_error(&e),
                Ok(state) => match query.get("destination") {
                    Some(d) => self.endpoints_for(query.get("pool"), state, d).await,
                    None => match self.source.endpoints(query.get("pool"), state).await {
                        Ok(endpoints) => api_ok(Payload::Endpoints {
                            endpoints,
                            // The source answered from memory: say why.
                            store: (!self.source.store_up()).then(|| "unavailable".into()),
                        }),
                        Err(e) => api_error(&e),
                    },
                },
            },
            _ => match query.only(&[]) {
                Err(e) => api_error(&e),
                Ok(()) => match self.source.page(PageLimits::default()).await {
                    Ok(model) => with_type(
                        Response::new(Full::new(Bytes::from(render_page(&model)))),
                        "text/html; charset=utf-8",
                    ),
                    Err(e) => text(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        &format!("status unavailable: {e}\n"),
                    ),
                },
            },
        };
        resp.headers_mut()
            .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        resp
    }
}

impl<S: StatusSource> HttpApp<S> {
    /// `/api/status`: the socket's `status` answer, without the database's name.
    async fn api_status(&self, pool: Option<&str>) -> Response<Full<Bytes>> {
        match self.source.status(pool).await {
            Ok(pools) => api_ok(Payload::Status {
                pools,
                database: None,
                daemons: self.source.daemons(),
                store: self.source.store_state().map(str::to_string),
            }),
            Err(e) => api_error(&e),
        }
    }

    /// `/ca.pem`: the certificate clients trust for intercepted HTTPS.
    fn ca_pem(&self) -> Response<Full<Bytes>> {
        match &self.ca_pem {
            Some(pem) => with_type(
                Response::new(Full::new(pem.clone())),
                "application/x-pem-file",
            ),
            None => text(
                StatusCode::NOT_FOUND,
                "no CA: this daemon has none loaded; create one with `proxypool ca init` and \
                 restart the daemon (its log says why when one is there but unusable)\n",
            ),
        }
    }

    /// `/api/endpoints?destination=D`: each endpoint with `destination` and
    /// `destination_state`; `state` filters on the state for D.
    async fn endpoints_for(
        &self,
        pool: Option<&str>,
        state: Option<State>,
        raw: &str,
    ) -> Response<Full<Bytes>> {
        let d = match crate::pool::destinations::normalize(raw) {
            Ok(d) => d,
            Err(e) => {
                let e = StatusError::new(ErrorCode::BadRequest, format!("destination: {e}"));
                return api_error(&e);
            }
        };
        let rows = match self.source.endpoints_for(pool, &d).await {
            Ok(rows) => rows,
            Err(e) => return api_error(&e),
        };
        let endpoints: Vec<serde_json::Value> = rows
            .into_iter()
            .filter(|(_, st)| state.is_none_or(|s| s == *st))
            .map(|(view, st)| {
                let mut v = serde_json::to_value(view).unwrap_or_default();
                v["destination"] = serde_json::json!(d);
                v["destination_state"] = serde_json::json!(st);
                v
            })
            .collect();
        let body = serde_json::json!({"ok": true, "endpoints": endpoints}).to_string();
        with_type(
            Response::new(Full::new(Bytes::from(body))),
            "application/json",
        )
    }
}

fn with_type(mut r: Response<Full<Bytes>>, ty: &'static str) -> Response<Full<Bytes>> {
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(ty));
    r
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut r = with_type(
        Response::new(Full::new(Bytes::from(body.to_string()))),
        "text/plain; charset=utf-8",
    );
    *r.status_mut() = status;
    r
}

fn api_ok(body: Payload) -> Response<Full<Bytes>> {
    let json = protocol::Response::ok(None, body).to_json();
    with_type(
        Response::new(Full::new(Bytes::from(json))),
        "application/json",
    )
}

fn api_error(e: &StatusError) -> Response<Full<Bytes>> {
    let json = protocol::Response::err(None, e.code, e.message.clone()).to_json();
    let mut r = with_type(
        Response::new(Full::new(Bytes::from(json))),
        "application/json",
    );
    *r.status_mut() = match e.code {
        ErrorCode::UnknownPool => StatusCode::NOT_FOUND,
        ErrorCode::BadRequest => StatusCode::BAD_REQUEST,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    r
}

/// Bind the listener (after [`check_bind`] approved the address).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serve until `shutdown`; open connections finish their current request.
pub async fn serve<S: StatusSource>(
    listener: TcpListener,
    app: Arc<HttpApp<S>>,
    shutdown: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = tokio::select! {
            _ = shutdown.cancelled() => return,
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
        };
        let stream = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    // Out of descriptors and the like: back off instead of spinning.
                    tracing::warn!("http accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let app = app.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let svc = service_fn(move |req: Request<Incoming>| {
                let app = app.clone();
                async move { Ok::<_, Infallible>(app.handle(req).await) }
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT);
            let conn = builder.serve_connection(TokioIo::new(stream), svc);
            tokio::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!("http connection: {e}");
                    }
                }
                _ = shutdown.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
}

#[cfg(test)]
mod tests;
