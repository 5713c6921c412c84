//! The HTTP front: CONNECT tunnels and absolute-form requests, one upstream per request.

use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tracing::debug;

use super::answer::{outcome, text};
use super::idle::Body;
use super::limits::{Activity, Holding, Watched};
use super::routing::Routing;
use super::target::Target;
use super::tunnel;
use super::{Shared, Slot};
use crate::metrics::GatewayProtocol;

/// Serve one client connection that starts with HTTP (`answered`: one of its requests
/// was answered already, on the quick CONNECT path).
pub(super) async fn serve(shared: Arc<Shared>, stream: TcpStream, slot: Slot, answered: bool) {
    let activity = Activity::new();
    if answered {
        activity.served_before();
    }
    let io = TokioIo::new(Watched::new(stream, activity.clone()));
    let svc_shared = shared.clone();
    let svc_activity = activity.clone();
    let svc = hyper::service::service_fn(move |req| {
        let shared = svc_shared.clone();
        let busy = svc_activity.busy();
        let activity = svc_activity.clone();
        let slot = slot.clone();
        async move {
            let resp = handle(shared, req, slot).await;
            // Until its body has gone out, what the client sends is not a late head.
            let responding = activity.responding();
            drop(busy);
            let resp = resp.map(|body| Holding::new(body, responding).boxed_unsync());
            Ok::<_, Infallible>(resp)
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .max_header_size(shared.limits.max_head)
        .serve_connection(io, svc)
        .with_upgrades();
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                debug!(error = %e, "gateway client connection ended with an error");
            }
        }
        why = activity.expired(&shared.limits) => {
            debug!(why, "gateway closed a client connection");
        }
    }
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>, slot: Slot) -> Response<Body> {
    let protocol = if req.method() == Method::CONNECT {
        GatewayProtocol::HttpConnect
    } else {
        GatewayProtocol::HttpForward
    };
    let metrics = shared.metrics.clone();
    let resp = answer(shared, req, slot).await;
    metrics.request(protocol, outcome(&resp));
    resp
}

async fn answer(shared: Arc<Shared>, req: Request<Incoming>, slot: Slot) -> Response<Body> {
    let auth = req
        .headers()
        .get(header::PROXY_AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let routing = match tunnel::route(&shared, auth) {
        Ok(r) => r,
        Err(denied) => return tunnel::refusal(denied),
    };
    // Each path's future is boxed where it is chosen: the state of a tunnel's dial and of
    // a forwarded exchange run to kilobytes, and unboxed they would size this future, and
    // so the one hyper boxes for every request, as the larger of both, copied whole at
    // every move.
    if req.method() == Method::CONNECT {
        return Box::pin(connect(shared, req, routing, slot)).await;
    }
    match req.uri().scheme_str() {
        Some("http") => Box::pin(super::forward::forward(shared, req, routing)).await,
        Some(_) => text(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "only http:// URLs are forwarded; use CONNECT for https",
        ),
        None => text(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "this is a proxy: send CONNECT host:port or an absolute-form request (GET http://host/...)",
        ),
    }
}

/// A CONNECT that hyper read (a head that came in pieces, or one after other requests on
/// the connection): answered through hyper, the tunnel run in a task of its own once
/// hyper hands the connection over.
async fn connect(
    shared: Arc<Shared>,
    req: Request<Incoming>,
    routing: Routing,
    slot: Slot,
) -> Response<Body> {
    let target = match Target::connect(req.uri()) {
        Ok(t) => t,
        Err(e) => return text(StatusCode::BAD_REQUEST, "bad_request", &e.to_string()),
    };
    if shared.intercepts(&target) {
        return intercepted(shared, req, target, routing, slot);
    }
    let opened = match tunnel::open(&shared, &routing, &target).await {
        Ok(v) => v,
        Err(failure) => return failure,
    };
    let resp = opened.answer();
    let tunnel_shared = shared.clone();
    shared.tracker.spawn(async move {
        match hyper::upgrade::on(req).await {
            Ok(up) => match up.downcast::<TokioIo<Watched<TcpStream>>>() {
                // The client's own socket back from hyper, and what it sent after its
                // CONNECT: hyper's read buffer is freed, not kept for the tunnel's life.
                Ok(parts) => {
                    let client = parts.io.into_inner().into_inner();
                    let early = parts.read_buf.to_vec();
                    opened.run(&tunnel_shared, client, early).await
                }
                Err(up) => {
                    // Only if the type given to `serve_connection` above changed: still
                    // correct (hyper's wrapper replays what it read), but the tunnel keeps
                    // hyper's buffer. Loud in tests.
                    if cfg!(debug_assertions) {
                        panic!("hyper gave back an IO type the tunnel does not expect");
                    }
                    opened
                        .run(&tunnel_shared, TokioIo::new(up), Vec::new())
                        .await
                }
            },
            Err(e) => {
                debug!(error = %e, "hyper did not hand the connection over");
                opened.abandon().await
            }
        }
        drop(slot);
    });
    resp
}

/// A CONNECT to a host the gateway intercepts: answered at once (no upstream is chosen
/// before the first request inside), its TLS ended here once hyper hands the connection
/// over.
fn intercepted(
    shared: Arc<Shared>,
    req: Request<Incoming>,
    target: Target,
    routing: Routing,
    slot: Slot,
) -> Response<Body> {
    let task_shared = shared.clone();
    shared.tracker.spawn(async move {
        match hyper::upgrade::on(req).await {
            Ok(up) => match up.downcast::<TokioIo<Watched<TcpStream>>>() {
                Ok(parts) => {
                    let client = parts.io.into_inner().into_inner();
                    let early = parts.read_buf.to_vec();
                    super::intercept::serve(task_shared, client, early, target, routing).await
                }
                Err(up) => {
                    super::intercept::serve(
                        task_shared,
                        TokioIo::new(up),
                        Vec::new(),
                        target,
                        routing,
                    )
                    .await
                }
            },
            Err(e) => debug!(error = %e, "hyper did not hand the connection over"),
        }
        drop(slot);
    });
    Response::new(super::answer::empty())
}
