use std::time::Duration;

use serde_json::Value;

use super::*;
use crate::health::State;

#[test]
fn parses_and_classifies() {
    let (id, req, _) = parse_line(r#"{"op":"lease","id":7,"ttl":"30s","wait":1.5}"#).unwrap();
    assert_eq!(id, Some(Value::from(7)));
    assert_eq!(
        req,
        Request::Lease(LeaseMessage {
            ttl: Some(Dur(Duration::from_secs(30))),
            wait: Some(Dur(Duration::from_millis(1500))),
            ..LeaseMessage::default()
        })
    );
    let (_, req, _) =
        parse_line(r#"{"op":"report","lease":"x","outcome":"failure","retry_after":"120"}"#)
            .unwrap();
    match req {
        Request::Report(m) => {
            assert_eq!(
                m.retry_after,
                Some(RetryAfter::After(Duration::from_secs(120)))
            )
        }
        other => panic!("{other:?}"),
    }
    let cases = [
        ("nope", ErrorCode::BadRequest),
        ("[1]", ErrorCode::BadRequest),
        (r#"{"id":1}"#, ErrorCode::BadRequest),
        (r#"{"op":"fly"}"#, ErrorCode::UnknownOp),
        (r#"{"op":"lease","ttl":"soon"}"#, ErrorCode::BadRequest),
        (r#"{"op":"lease","bogus":1}"#, ErrorCode::BadRequest),
        (r#"{"op":"report","lease":"x"}"#, ErrorCode::BadRequest),
        (
            r#"{"op":"report","lease":"x","outcome":"success","duration_ms":-1}"#,
            ErrorCode::BadRequest,
        ),
        (r#"{"op":"lease","schemes":"http"}"#, ErrorCode::BadRequest),
    ];
    for (line, code) in cases {
        let err = parse_line(line).unwrap_err();
        assert_eq!(err.error.as_ref().unwrap().code, code, "{line}");
    }
}

#[test]
fn response_shapes() {
    let r = Response::ok(
        Some(Value::from("a")),
        Payload::Ping {
            version: "1".into(),
        },
    );
    assert_eq!(
        r.to_line(),
        "{\"ok\":true,\"id\":\"a\",\"version\":\"1\"}\n"
    );
    let r = Response::ok(None, Payload::Empty {});
    assert_eq!(r.to_line(), "{\"ok\":true}\n");
}

#[test]
fn a_line_written_into_a_buffer_is_the_line_appended() {
    let mut buf = bytes::BytesMut::from(&b"held\n"[..]);
    let a = Response::ok(Some(Value::from(7)), Payload::Empty {});
    let b = Response::err(None, ErrorCode::UnknownLease, "no lease \"x\"");
    a.write_line(&mut buf);
    b.write_line(&mut buf);
    let want = format!("held\n{}{}", a.to_line(), b.to_line());
    assert_eq!(std::str::from_utf8(&buf).unwrap(), want);
}

#[test]
fn requests_round_trip() {
    let reqs = [
        Request::Lease(LeaseMessage {
            pool: Some("p".into()),
            ttl: Some(Dur(Duration::from_millis(1500))),
            wait: None,
            session: Some("s".into()),
            destination: Some("shop.example".into()),
            schemes: Some(vec!["http".into(), "https".into()]),
            tags: None,
        }),
        Request::Report(ReportMessage {
            lease: None,
            pool: Some("p".into()),
            session: Some("s".into()),
            destination: Some("shop.example".into()),
            duration_ms: Some(1250.0),
            outcome: ReportOutcome::Failure,
            reason: Some("destination_status".into()),
            phase: Some("response_head".into()),
            status: Some(403),
            retry_after: None,
            detail: None,
        }),
        Request::Report(ReportMessage {
            lease: Some("l".into()),
            pool: None,
            session: None,
            destination: None,
            outcome: ReportOutcome::Failure,
            reason: Some("timeout".into()),
            phase: None,
            status: Some(503),
            retry_after: Some(RetryAfter::After(Duration::from_secs(120))),
            detail: None,
            duration_ms: Some(120.5),
        }),
        Request::Enable(EnableMessage {
            endpoint: Some(EndpointRef::Id(3)),
            pool: None,
            now: Some(true),
            destination: None,
            target: None,
        }),
        Request::Enable(EnableMessage {
            endpoint: Some(EndpointRef::Id(3)),
            pool: Some("shops".into()),
            now: None,
            destination: Some("shop.example".into()),
            target: None,
        }),
        Request::Enable(EnableMessage {
            endpoint: None,
            pool: Some("shops".into()),
            now: None,
            destination: None,
            target: Some("shop.example:443".into()),
        }),
        Request::Remove(RemoveMessage {
            endpoints: vec![EndpointRef::Id(1), EndpointRef::Url("http://h:1".into())],
            pool: Some("default".into()),
        }),
        Request::Probe(ProbeMessage {
            all: true,
            concurrency: Some(4),
            ..ProbeMessage::default()
        }),
        Request::Edit(EditMessage {
            endpoint: EndpointRef::Id(9),
            pool: None,
            url: Some("socks5://u:new@h:1".into()),
            label: None,
            tags: None,
        }),
        Request::Ping(PingMessage {}),
    ];
    for req in reqs {
        let line = serde_json::to_string(&req).unwrap();
        let (_, back, _) = parse_line(&line).unwrap();
        assert_eq!(back, req, "{line}");
    }
    assert_eq!(
        serde_json::to_string(&Request::Release(ReleaseMessage { lease: "x".into() })).unwrap(),
        r#"{"op":"release","lease":"x"}"#
    );
}

#[test]
fn responses_round_trip() {
    let exhausted = Response::failure(
        Some(Value::from(1)),
        ErrorBody::new(ErrorCode::PoolExhausted, "none").retry_after_ms(None),
    );
    assert_eq!(
        exhausted.retry_after_ms,
        Some(None),
        "repeated at the top level"
    );
    let cases = [
        exhausted,
        Response::ok(
            None,
            Payload::Added {
                ids: vec![1, 2],
                skipped: None,
            },
        ),
        Response::ok(
            None,
            Payload::Lease(Grant {
                lease: "ab-1".into(),
                proxy: "http://h:1".into(),
                endpoint: 1,
                trial: true,
                expires_in_ms: 30_000,
                scope: Some("destination".into()),
                pool: "p".into(),
            }),
        ),
        Response::ok(
            None,
            Payload::State {
                endpoint: Some(4),
                state: State::Cooling,
                blame: None,
            },
        ),
        Response::ok(
            None,
            Payload::State {
                endpoint: None,
                state: State::Available,
                blame: Some(crate::health::blame::Blame::Pending),
            },
        ),
        Response::ok(
            None,
            Payload::Ping {
                version: "1".into(),
            },
        ),
        Response::ok(None, Payload::Empty {}),
    ];
    for r in cases {
        let line = r.to_json();
        let back: Response = serde_json::from_str(&line).unwrap();
        assert_eq!(back, r, "{line}");
        assert_eq!(back.to_json(), line);
    }
    let err = Response::err(None, ErrorCode::Internal, "disk full");
    let back: Response = serde_json::from_str(&err.to_json()).unwrap();
    assert_eq!(back.into_result().unwrap_err().code, ErrorCode::Internal);
}
/// Request lines exactly as the Python client and older CLIs send them: each parses, and
/// serializes back to the same bytes.
const WIRE_REQUESTS: &[&str] = &[
    r#"{"op":"lease","pool":"p","ttl":1.5,"wait":2.0,"session":"s","destination":"shop.example","schemes":["http","https"]}"#,
    r#"{"op":"lease"}"#,
    r#"{"op":"report","lease":"l","outcome":"success"}"#,
    r#"{"op":"report","pool":"p","session":"s","destination":"shop.example","outcome":"failure","reason":"destination_status","phase":"response_head","status":403,"retry_after":120.0,"detail":"banned","duration_ms":1250.0}"#,
    r#"{"op":"report","lease":"l","outcome":"failure","reason":"timeout","retry_after":"soon"}"#,
    r#"{"op":"release","lease":"x"}"#,
    r#"{"op":"status"}"#,
    r#"{"op":"status","pool":"p"}"#,
    r#"{"op":"endpoints","pool":"p","state":"cooling","endpoint":3}"#,
    r#"{"op":"disable","endpoint":3,"reason":"maintenance"}"#,
    r#"{"op":"enable","endpoint":"http://h:1","now":true}"#,
    r#"{"op":"enable","endpoint":3,"destination":"shop.example"}"#,
    r#"{"op":"add","urls":["http://h:1","socks5://u:p@h:2"],"pool":"p","label":"x","source":"cli"}"#,
    r#"{"op":"import","path":"/tmp/f","pool":"p","label":"x"}"#,
    r#"{"op":"remove","endpoints":[1,"http://h:1"]}"#,
    r#"{"op":"probe","endpoints":[1],"pool":"p","all":false,"concurrency":4}"#,
    r#"{"op":"probe","endpoints":[],"all":true}"#,
    r#"{"op":"edit","endpoint":9,"url":"socks5://u:new@h:1","label":""}"#,
    r#"{"op":"ping"}"#,
];

#[test]
fn wire_requests_read_and_write_the_same_bytes() {
    for line in WIRE_REQUESTS {
        let (_, req, _) = parse_line(line).unwrap_or_else(|e| panic!("{line}: {e:?}"));
        assert_eq!(&serde_json::to_string(&req).unwrap(), line);
    }
}

/// Response lines as the daemon writes them: each reads back, and writes the same bytes.
const WIRE_RESPONSES: &[&str] = &[
    r#"{"ok":true,"id":7,"lease":"ab-1","proxy":"http://u:p@h:1","endpoint":1,"trial":true,"expires_in_ms":30000,"scope":"destination","pool":"default"}"#,
    r#"{"ok":true,"state":"cooling"}"#,
    r#"{"ok":true,"endpoint":4,"state":"available"}"#,
    r#"{"ok":true,"pools":[{"pool":"default","mode":"static","available":1,"cooling":0,"probe_allowed":0,"disabled":0,"leases":0,"next_deadline_ms":null,"targets_down":0}]}"#,
    r#"{"ok":true,"ids":[1,2]}"#,
    r#"{"ok":true,"id":"a","version":"0.1.0"}"#,
    r#"{"ok":true}"#,
    r#"{"ok":false,"id":1,"error":{"code":"pool_exhausted","message":"pool \"default\" has no endpoint available","retry_after_ms":1500},"retry_after_ms":1500}"#,
    r#"{"ok":false,"error":{"code":"pool_exhausted","message":"none","retry_after_ms":null},"retry_after_ms":null}"#,
    r#"{"ok":false,"error":{"code":"unknown_lease","message":"unknown lease \"x\""}}"#,
    r#"{"ok":false,"error":{"code":"too_large","message":"request line longer than 65536 bytes; closing"}}"#,
];

#[test]
fn wire_responses_read_and_write_the_same_bytes() {
    for line in WIRE_RESPONSES {
        let r: Response = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        assert_eq!(&r.to_json(), line);
    }
}

#[test]
fn every_op_is_named_once_in_ops_and_parses_under_its_name() {
    let mut names: Vec<&str> = WIRE_REQUESTS
        .iter()
        .map(|l| parse_line(l).unwrap().1.op())
        .collect();
    names.sort_unstable();
    names.dedup();
    let mut ops = OPS.to_vec();
    ops.sort_unstable();
    assert_eq!(
        names, ops,
        "WIRE_REQUESTS covers every op, and `op()` agrees with OPS"
    );
    for line in WIRE_REQUESTS {
        let v: Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["op"], parse_line(line).unwrap().1.op(), "{line}");
    }
}

#[test]
fn an_error_code_is_written_as_serde_writes_it() {
    use ErrorCode::*;
    for c in [
        BadRequest,
        UnknownOp,
        UnknownPool,
        UnknownLease,
        LeaseExpired,
        PoolExhausted,
        PoolEmpty,
        DestinationDown,
        Paced,
        Forbidden,
        TooLarge,
        StaleClaim,
        StoreUnavailable,
        Internal,
    ] {
        assert_eq!(serde_json::to_value(c).unwrap(), Value::from(c.as_str()));
    }
}
