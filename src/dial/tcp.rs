//! TCP to the proxy (its first bytes sent with the connect, `TCP_QUICKACK` re-armed after
//! every read on a connection that carries more than one exchange), client-side name
//! resolution for SOCKS variants without remote DNS, and which failures are this
//! machine's own.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::{Carries, Dest, DialFailure};
use crate::endpoint::ProxyUrl;
use crate::health::{Phase, Reason};

/// Whether `e` is this machine running out of something (descriptors, memory, buffers,
/// local ports) rather than anything the far side did.
pub(super) fn is_local_failure(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM | libc::ENOBUFS | libc::EADDRNOTAVAIL)
    )
}

/// TCP to `proxy`, with `opening` (the first bytes the proxy reads, when they are known
/// before the connection is up) sent as soon as the socket can take them; how many of
/// them went.
pub(super) async fn connect(
    proxy: &ProxyUrl,
    opening: &[u8],
    carries: Carries,
) -> Result<(QuickAck, usize), DialFailure> {
    let phase = Phase::Connect;
    // Walked as resolved: an address literal (most proxies) costs no list.
    let mut addrs = match tokio::net::lookup_host((proxy.host.as_str(), proxy.port)).await {
        Ok(a) => a.peekable(),
        Err(e) if is_local_failure(&e) => {
            return Err(DialFailure::on_this_machine(
                phase,
                format!("resolving proxy host {:?}: {e}", proxy.host),
            ))
        }
        Err(e) => {
            return Err(DialFailure::new(
                Reason::DnsFailed,
                phase,
                format!("resolving proxy host {:?}: {e}", proxy.host),
            ))
        }
    };
    if addrs.peek().is_none() {
        return Err(DialFailure::new(
            Reason::DnsFailed,
            phase,
            format!("proxy host {:?} has no address", proxy.host),
        ));
    }
    let mut last = None;
    for addr in addrs {
        match connect_sending(addr, opening).await {
            Ok((s, sent)) => {
                let rearm = carries == Carries::More;
                return Ok((QuickAck { stream: s, rearm }, sent));
            }
            // Another address would meet the same shortage.
            Err(e) if is_local_failure(&e) => {
                return Err(DialFailure::on_this_machine(
                    phase,
                    format!("TCP connect to {addr}: {e} (on this machine)"),
                ))
            }
            Err(e) => last = Some((addr, e)),
        }
    }
    let Some((addr, e)) = last else {
        return Err(DialFailure::new(
            Reason::ConnectRefused,
            phase,
            "no address tried",
        ));
    };
    let reason = match e.kind() {
        io::ErrorKind::TimedOut => Reason::ConnectTimeout,
        _ => Reason::ConnectRefused,
    };
    Err(DialFailure::new(
        reason,
        phase,
        format!("TCP connect to {addr}: {e}"),
    ))
}

/// Connect to `addr` and send what of `opening` the socket takes at once.
///
/// A connection to a proxy on this host (or a near one) is often up by the time the
/// non-blocking `connect` returns: the opening then goes straight away, as HAProxy sends
/// its first bytes, with no wait for the runtime's first writability event and no
/// `SO_ERROR` check (a send that succeeds proves the connection is up, and one that fails
/// carries the connect's error, unless the proxy took the connection and cut it at once:
/// then the caller's write meets that, as it did before). Otherwise (`EAGAIN`: the
/// handshake is still on its way) this waits for the connection as `TcpStream::connect`
/// does and sends nothing; the caller writes the opening then.
async fn connect_sending(addr: SocketAddr, opening: &[u8]) -> io::Result<(TcpStream, usize)> {
    use socket2::{Domain, Protocol, SockAddr, Socket, Type};
    let socket = Socket::new(
        Domain::for_address(addr),
        Type::STREAM.nonblocking(),
        Some(Protocol::TCP),
    )?;
    let _ = socket.set_tcp_nodelay(true);
    match socket.connect(&SockAddr::from(addr)) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    let sent = if opening.is_empty() {
        0
    } else {
        // No SIGPIPE from a connection already cut (std and mio send so too).
        #[cfg(target_os = "linux")]
        let flags = libc::MSG_NOSIGNAL;
        #[cfg(not(target_os = "linux"))]
        let flags = 0;
        match socket.send_with_flags(opening, flags) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
            // Up, and already cut by the proxy: the request's own write meets that, in
            // the handshake's phase, as it would have without this send (its detail then
            // says "Broken pipe": this send took the reset).
            Err(e) if matches!(e.raw_os_error(), Some(libc::ECONNRESET | libc::EPIPE)) => 0,
            // The connect's own failure (refused, unreachable).
            Err(e) => return Err(e),
        }
    };
    let stream = TcpStream::from_std(std::net::TcpStream::from(socket))?;
    if sent == 0 {
        stream.writable().await?;
        if let Some(e) = stream.take_error()? {
            return Err(e);
        }
    }
    Ok((stream, sent))
}

/// A TCP stream to a proxy that re-arms `TCP_QUICKACK` after every read with data.
///
/// Linux delays the ACK of a segment (up to 40 ms) once a connection looks interactive,
/// hoping to carry it on data of its own. A request sent and its answer read is exactly
/// that shape, so on a kept connection the ACK of a response's head waits; an upstream
/// that relays without `TCP_NODELAY` (tinyproxy) then holds the body back under Nagle
/// until that ACK comes, when the destination wrote head and body apart (nginx without
/// `tcp_nopush`): 40 ms per request. Quick-ack mode is left again by the kernel on its
/// own, hence after every read. One `setsockopt` a read; elsewhere than Linux, nothing.
///
/// A new connection starts in quick-ack mode and is not interactive yet: one whose first
/// bytes are a single request, read back as one answer (the gateway's default forward
/// path to an `http://` proxy), is not re-armed, which saves the call and the separate ACK
/// segment it sends for every response. Through the same tinyproxy and an nginx that
/// writes head and body apart, such connections ran with no 40 ms stall.
pub(super) struct QuickAck {
    stream: TcpStream,
    rearm: bool,
}

impl QuickAck {
    fn rearm(&self) {
        // A failure only costs the delayed ACK this works around.
        #[cfg(target_os = "linux")]
        if self.rearm {
            let _ = socket2::SockRef::from(&self.stream).set_tcp_quickack(true);
        }
    }
}

impl AsyncRead for QuickAck {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.rearm();
        }
        r
    }
}

impl AsyncWrite for QuickAck {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, data)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// Resolve the destination here, for the SOCKS variants that carry addresses only.
pub(super) async fn resolve_destination(
    t: &Dest,
    v4_only: bool,
) -> Result<SocketAddr, DialFailure> {
    let phase = Phase::ProxyHandshake;
    let addrs = tokio::net::lookup_host((t.host.as_str(), t.port))
        .await
        .map_err(|e| {
            DialFailure::new(
                Reason::DnsFailed,
                phase,
                format!("resolving destination {:?}: {e}", t.host),
            )
        })?;
    let mut addrs = addrs.filter(|a| !v4_only || a.is_ipv4());
    addrs.next().ok_or_else(|| {
        let what = if v4_only {
            "IPv4 address (SOCKS4)"
        } else {
            "address"
        };
        DialFailure::new(
            Reason::DnsFailed,
            phase,
            format!("destination {:?} has no {what}", t.host),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn local_shortages_are_told_from_the_far_side() {
        for (errno, local) in [
            (libc::EMFILE, true),
            (libc::ENFILE, true),
            (libc::ENOMEM, true),
            (libc::ENOBUFS, true),
            (libc::EADDRNOTAVAIL, true),
            (libc::ECONNREFUSED, false),
            (libc::ETIMEDOUT, false),
            (libc::EHOSTUNREACH, false),
            (libc::ENETUNREACH, false),
            (libc::ECONNRESET, false),
        ] {
            let e = io::Error::from_raw_os_error(errno);
            assert_eq!(is_local_failure(&e), local, "{e}");
        }
        assert!(!is_local_failure(&io::Error::other("no errno")));
    }

    /// A loopback connection is nearly always up when `connect` returns (the kernel runs
    /// the handshake on the way out of the call), but that is timing, not a promise: each
    /// try writes what did not go, the far end reads the request exactly once, and one try
    /// in twenty at least sent it all with the connect.
    #[tokio::test]
    async fn the_opening_goes_with_a_connect_that_is_up_at_once() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let req = b"CONNECT a:1 HTTP/1.1\r\n\r\n";
        let mut at_once = 0;
        for _ in 0..20 {
            let (mut s, sent) = connect_sending(l.local_addr().unwrap(), req).await.unwrap();
            assert!(sent == 0 || sent == req.len(), "{sent}");
            at_once += usize::from(sent == req.len());
            s.write_all(&req[sent..]).await.unwrap();
            s.shutdown().await.unwrap();
            let (mut far, _) = l.accept().await.unwrap();
            let mut got = Vec::new();
            far.read_to_end(&mut got).await.unwrap();
            assert_eq!(got, req, "the request, once");
        }
        assert!(at_once > 0, "no try sent the opening with the connect");
    }

    /// A connection still on its way (here: a listener whose accept queue is full drops
    /// the SYN until there is room) sends nothing and is waited for; the caller writes.
    #[tokio::test]
    async fn a_connect_still_on_its_way_sends_nothing_and_is_waited_for() {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let l = socket.listen(0).unwrap();
        let addr = l.local_addr().unwrap();
        // Fill the queue: a connect that does not complete in half a second found it full.
        let mut queued = Vec::new();
        loop {
            let c = tokio::time::timeout(
                std::time::Duration::from_millis(500),
                TcpStream::connect(addr),
            );
            match c.await {
                Ok(s) => queued.push(s.unwrap()),
                Err(_) => break,
            }
            assert!(queued.len() < 64, "the accept queue never filled");
        }
        assert!(!queued.is_empty(), "the listener took no connection at all");
        let dial = tokio::spawn(async move { connect_sending(addr, b"hello").await });
        // Its first poll sends the SYN (dropped) and tries the opening; only then is there
        // room. (This test's runtime has one thread: the yield runs it.)
        tokio::task::yield_now().await;
        for _ in &queued {
            let _ = l.accept().await.unwrap();
        }
        // The retransmitted SYN (a second later, then three) gets through.
        let (mut s, sent) = tokio::time::timeout(std::time::Duration::from_secs(10), dial)
            .await
            .expect("the connection came up after the SYN's retransmit")
            .unwrap()
            .unwrap();
        assert_eq!(sent, 0, "nothing could go before the connection was up");
        assert!(s.peer_addr().is_ok(), "returned only once connected");
        s.write_all(b"hello").await.unwrap();
        let (mut far, _) = l.accept().await.unwrap();
        let mut got = [0u8; 5];
        far.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"hello");
    }

    #[tokio::test]
    async fn a_refused_connect_fails_as_before() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        let e = connect_sending(addr, b"x").await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{e}");
    }

    /// `TCP_QUICKACK` is on while the socket acknowledges at once.
    #[cfg(target_os = "linux")]
    fn quickack(s: &TcpStream) -> bool {
        socket2::SockRef::from(s).tcp_quickack().unwrap()
    }

    /// A request out on `ours`, its answer in, as on a kept connection; 20 times.
    #[cfg(target_os = "linux")]
    async fn kept_connection_rhythm<S: AsyncRead + AsyncWrite + Unpin>(
        ours: &mut S,
        far: &mut TcpStream,
    ) {
        let mut buf = [0u8; 18];
        for _ in 0..20 {
            ours.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
            far.read_exact(&mut buf).await.unwrap();
            far.write_all(b"HTTP/1.1 200 OK\r\n").await.unwrap();
            ours.read_exact(&mut buf[..17]).await.unwrap();
        }
    }

    /// That rhythm puts a plain socket in delayed-ACK mode (what upstream sockets were
    /// before); through `QuickAck`, every read leaves it acknowledging at once.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn reads_leave_the_socket_in_quick_ack_mode() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut ours = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (mut far, _) = l.accept().await.unwrap();
        // (Under heavy load a pause between two messages can leave the mode: a few
        // rounds, so the contrast never depends on the scheduler.)
        let mut delayed = false;
        for _ in 0..5 {
            kept_connection_rhythm(&mut ours, &mut far).await;
            if !quickack(&ours) {
                delayed = true;
                break;
            }
        }
        assert!(delayed, "a plain socket delays its ACKs");
        let mut ours = QuickAck {
            stream: ours,
            rearm: true,
        };
        kept_connection_rhythm(&mut ours, &mut far).await;
        assert!(quickack(&ours.stream), "re-armed after the read");
    }

    /// A connection dialed for one exchange is left as the kernel has it: its reads
    /// re-arm nothing, so the rhythm puts it in delayed-ACK mode as it does a plain one.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_connection_for_one_exchange_is_not_re_armed() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let ours = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (mut far, _) = l.accept().await.unwrap();
        let mut ours = QuickAck {
            stream: ours,
            rearm: false,
        };
        let mut delayed = false;
        for _ in 0..5 {
            kept_connection_rhythm(&mut ours, &mut far).await;
            if !quickack(&ours.stream) {
                delayed = true;
                break;
            }
        }
        assert!(delayed, "no re-arm after the reads");
    }
}
