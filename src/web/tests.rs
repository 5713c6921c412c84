use std::sync::Mutex;

use http_body_util::BodyExt;

use super::*;
use crate::health::State;

struct Fake {
    pools: Vec<PoolStatus>,
    seen: Mutex<Vec<String>>,
}

impl StatusSource for Fake {
    async fn status(&self, pool: Option<&str>) -> Result<Vec<PoolStatus>, StatusError> {
        self.seen.lock().unwrap().push(format!("status {pool:?}"));
        match pool {
            None => Ok(self.pools.clone()),
            Some(p) => self
                .pools
                .iter()
                .find(|s| s.pool == p)
                .map(|s| vec![s.clone()])
                .ok_or_else(|| {
                    StatusError::new(ErrorCode::UnknownPool, format!("unknown pool {p:?}"))
                }),
        }
    }

    async fn endpoints(
        &self,
        pool: Option<&str>,
        state: Option<State>,
    ) -> Result<Vec<EndpointView>, StatusError> {
        self.seen
            .lock()
            .unwrap()
            .push(format!("endpoints {pool:?} {state:?}"));
        Ok(page::tests::model().pools[0]
            .endpoints
            .iter()
            .map(|e| e.view.clone())
            .filter(|v| state.is_none_or(|s| v.state == s))
            .collect())
    }

    async fn endpoints_for(
        &self,
        pool: Option<&str>,
        destination: &str,
    ) -> Result<Vec<(EndpointView, State)>, StatusError> {
        self.seen
            .lock()
            .unwrap()
            .push(format!("endpoints_for {pool:?} {destination}"));
        // Endpoint 1 is available but banned on shop.example.
        let views = self.endpoints(pool, None).await?;
        Ok(views
            .into_iter()
            .map(|v| {
                let st = match (v.id, destination) {
                    (1, "shop.example") => State::Cooling,
                    _ => v.state,
                };
                (v, st)
            })
            .collect())
    }

    async fn page(&self, limits: PageLimits) -> Result<PageModel, StatusError> {
        assert_eq!(limits, PageLimits::default());
        Ok(page::tests::model())
    }
}

fn app(token: Option<&str>) -> HttpApp<Fake> {
    let fake = Fake {
        pools: page::tests::model()
            .pools
            .iter()
            .map(|p| p.status.clone())
            .collect(),
        seen: Mutex::new(Vec::new()),
    };
    HttpApp::new(
        Arc::new(fake),
        Arc::new(Metrics::new()),
        token.map(Into::into),
    )
}

async fn get(
    app: &HttpApp<Fake>,
    method: Method,
    uri: &str,
    auth: Option<&str>,
) -> (StatusCode, String, String) {
    let mut b = Request::builder().method(method).uri(uri);
    if let Some(a) = auth {
        b = b.header("authorization", a);
    }
    let r = app.handle(b.body(()).unwrap()).await;
    let ty = r
        .headers()
        .get(CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let status = r.status();
    let body = r.into_body().collect().await.unwrap().to_bytes();
    (status, ty, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test]
async fn routes() {
    let a = app(None);
    // (method, uri, status, content type prefix, body contains)
    let cases = [
        (Method::GET, "/healthz", 200, "text/plain", "ok\n"),
        (
            Method::GET,
            "/metrics",
            200,
            "text/plain; version=0.0.4",
            "",
        ),
        (Method::GET, "/", 200, "text/html", "Pool default"),
        (
            Method::GET,
            "/api/status",
            200,
            "application/json",
            r#"{"ok":true,"pools":[{"pool":"default","mode":"static","available":1"#,
        ),
        (
            Method::GET,
            "/api/status?pool=nope",
            404,
            "application/json",
            r#"{"ok":false,"error":{"code":"unknown_pool","message":"unknown pool \"nope\""}}"#,
        ),
        (
            Method::GET,
            "/api/status?bogus=1",
            400,
            "application/json",
            r#""code":"bad_request""#,
        ),
        (
            Method::GET,
            "/api/endpoints?state=cooling",
            200,
            "application/json",
            r#"{"ok":true,"endpoints":[{"id":2,"#,
        ),
        (
            Method::GET,
            "/api/endpoints?state=sleepy",
            400,
            "application/json",
            "unknown State \\\"sleepy\\\"",
        ),
        (
            Method::GET,
            "/api/endpoints?destination=Shop.Example.&state=cooling",
            200,
            "application/json",
            r#""destination":"shop.example","destination_state":"cooling""#,
        ),
        (
            Method::GET,
            "/api/endpoints?destination=bad%20host",
            400,
            "application/json",
            "destination: ",
        ),
        (Method::GET, "/?x=1", 400, "application/json", "takes none"),
        (Method::GET, "/nope", 404, "text/plain", "not found"),
        (Method::POST, "/metrics", 405, "text/plain", "read-only"),
        (
            Method::DELETE,
            "/api/endpoints",
            405,
            "text/plain",
            "read-only",
        ),
        (Method::POST, "/nope", 404, "text/plain", "not found"),
    ];
    for (m, uri, status, ty, body) in cases {
        let (s, t, b) = get(&a, m.clone(), uri, None).await;
        assert_eq!(s.as_u16(), status, "{m} {uri}: {b}");
        assert!(t.starts_with(ty), "{m} {uri}: {t}");
        assert!(b.contains(body), "{m} {uri}: {b}");
    }
    let (_, _, b) = get(&a, Method::GET, "/api/endpoints", None).await;
    let v: serde_json::Value = serde_json::from_str(&b).unwrap();
    assert_eq!(v["endpoints"].as_array().unwrap().len(), 2);
    assert_eq!(v["endpoints"][0]["url"], "http://user:***@10.0.0.1:3128");
    // By destination: each endpoint's state for it; `state` filters on that state.
    let (_, _, b) = get(
        &a,
        Method::GET,
        "/api/endpoints?destination=shop.example&state=cooling",
        None,
    )
    .await;
    let v: serde_json::Value = serde_json::from_str(&b).unwrap();
    let ids: Vec<_> = v["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["id"].clone(), e["state"].clone()))
        .collect();
    assert_eq!(
        ids,
        vec![
            (serde_json::json!(1), serde_json::json!("available")),
            (serde_json::json!(2), serde_json::json!("cooling"))
        ],
        "{b}"
    );
    let seen = a.source.seen.lock().unwrap().clone();
    assert!(
        seen.contains(&"endpoints None Some(Cooling)".to_string()),
        "{seen:?}"
    );
}

#[tokio::test]
async fn token_required_when_set() {
    let a = app(Some("s3cret"));
    for uri in ["/healthz", "/metrics", "/", "/api/status", "/nope"] {
        let (s, _, _) = get(&a, Method::GET, uri, None).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{uri}");
        let (s, _, _) = get(&a, Method::GET, uri, Some("Bearer wrong")).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{uri}");
    }
    let (s, _, b) = get(&a, Method::GET, "/healthz", Some("Bearer s3cret")).await;
    assert_eq!((s, b.as_str()), (StatusCode::OK, "ok\n"));
    // An empty token is no token.
    let (s, _, _) = get(&app(Some("")), Method::GET, "/healthz", None).await;
    assert_eq!(s, StatusCode::OK);
}

#[tokio::test]
async fn serves_over_tcp_and_stops() {
    let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let task = tokio::spawn(serve(listener, Arc::new(app(None)), stop.clone()));
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
    assert!(out.ends_with("\r\n\r\nok\n"), "{out}");
    stop.cancel();
    task.await.unwrap();
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn a_request_without_the_token_gets_its_401_and_the_connection_closes() {
    let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let task = tokio::spawn(serve(listener, Arc::new(app(Some("s3cret"))), stop.clone()));
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    // Keep-alive asked for: a stranger must not keep the slot anyway.
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut out))
        .await
        .expect("the connection stayed open after its 401")
        .unwrap();
    assert!(out.starts_with("HTTP/1.1 401"), "{out}");
    assert!(out.contains("connection: close"), "{out}");
    // With the token, keep-alive as usual: a second request on the same connection.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    for _ in 0..2 {
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 1024];
        let n = s.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &buf[..n]);
    }
    stop.cancel();
    drop(s);
    task.await.unwrap();
}

#[tokio::test]
async fn the_ca_certificate_is_served_when_there_is_one() {
    let none = app(None);
    let (status, ty, body) = get(&none, Method::GET, "/ca.pem", None).await;
    assert_eq!(
        (status.as_u16(), ty.as_str()),
        (404, "text/plain; charset=utf-8")
    );
    assert!(body.contains("proxypool ca init"), "{body}");
    let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    let with = app(None).with_ca_pem(Some(pem.into()));
    let (status, ty, body) = get(&with, Method::GET, "/ca.pem", None).await;
    assert_eq!(
        (status.as_u16(), ty.as_str(), body.as_str()),
        (200, "application/x-pem-file", pem)
    );
    let (status, _, _) = get(&with, Method::POST, "/ca.pem", None).await;
    assert_eq!(status.as_u16(), 405);
    // Behind the listener's token like every page.
    let locked = app(Some("s3cret")).with_ca_pem(Some(pem.into()));
    let (status, _, _) = get(&locked, Method::GET, "/ca.pem", None).await;
    assert_eq!(status.as_u16(), 401);
    let (status, _, body) = get(&locked, Method::GET, "/ca.pem", Some("Bearer s3cret")).await;
    assert_eq!((status.as_u16(), body.as_str()), (200, pem));
}
