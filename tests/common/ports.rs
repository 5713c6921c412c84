//! Ports on 127.0.0.1 for the tests, reserved for the test process.

/// A port on 127.0.0.1 that is free for a child (or a daemon under test) to listen on,
/// and refuses connections until one does.
///
/// The port stays bound (with `SO_REUSEADDR`, never listening) for the rest of the test
/// process. Released, it could be handed to another test's listener, or taken as the
/// local port of an outbound connection (one to the port itself connects to itself), and
/// a test would then talk to the wrong thing or find "refused" answered. Held, the
/// kernel's own choices of a port skip it, while a server that binds with `SO_REUSEADDR`
/// (every one these tests start) still can; after that server stops, it refuses again.
pub fn reserve() -> u16 {
    static HELD: std::sync::Mutex<Vec<socket2::Socket>> = std::sync::Mutex::new(Vec::new());
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.set_reuse_address(true).unwrap();
    let addr: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
    s.bind(&addr.into()).unwrap();
    let port = s.local_addr().unwrap().as_socket().unwrap().port();
    HELD.lock().unwrap().push(s);
    port
}
