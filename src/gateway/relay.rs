//! The byte relay of an open tunnel (CONNECT and SOCKS5), holding no buffer while idle.
//!
//! `tokio::io::copy_bidirectional` keeps an 8 KiB buffer per direction for the whole life
//! of a tunnel, and most tunnels a scraper opens sit idle most of the time (a browser
//! keeps dozens open). Here every read goes into a scratch buffer on the stack of the poll
//! call and is written on at once; only bytes the other side cannot take yet are copied
//! to the heap, and that copy is freed as soon as they are written. An idle tunnel costs
//! its two sockets and this small struct.
//!
//! Semantics are those of `copy_bidirectional`: an end of file is passed on as a
//! half-close (shutdown of the other side's write half), the relay ends when both
//! directions have ended, and the first error on either side ends both. One addition: once
//! one direction has ended, the relay also ends when the other moves nothing for
//! `half_close` (`half_close_timeout`), so a far side that ignores a FIN (or a client that
//! never closes after the server did) cannot hold the tunnel, its lease and its slot.
//!
//! A server that answers and closes (`Connection: close`) sends its last bytes and its
//! FIN back to back. A short read looks once more before it writes: finding the end there
//! costs no system call the next round would not have made, and the last bytes then go to
//! a TCP socket with `MSG_MORE`, so they and the FIN leave in one segment (as HAProxy
//! sends them) instead of two.

#[cfg(target_os = "linux")]
use std::any::Any;
use std::future::Future;
use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};
#[cfg(target_os = "linux")]
use tokio::{io::Interest, net::TcpStream};

/// Read size per poll: one loopback segment fits, and a bulk transfer makes few calls.
const SCRATCH: usize = 32 * 1024;

/// Relay between `a` and `b` until both directions end, or one has ended and the other
/// moved nothing for `half_close`; bytes moved `(a → b, b → a)`. `a_to_b` is sent to `b`
/// before anything else (bytes `a` sent ahead of the tunnel).
pub(super) fn relay<A, B>(a: A, b: B, a_to_b: Vec<u8>, half_close: Duration) -> Relay<A, B>
where
    A: AsyncRead + AsyncWrite + Unpin + 'static,
    B: AsyncRead + AsyncWrite + Unpin + 'static,
{
    Relay {
        a,
        b,
        ab: Half::with_pending(a_to_b),
        ba: Half::with_pending(Vec::new()),
        half_close,
        quiet: None,
    }
}

pub(super) struct Relay<A, B> {
    a: A,
    b: B,
    ab: Half,
    ba: Half,
    half_close: Duration,
    /// Once one direction has ended: the deadline for the other, and its byte count when
    /// the deadline was last moved. Boxed only then: an open tunnel carries no timer.
    quiet: Option<(Pin<Box<Sleep>>, u64)>,
}

/// One direction.
#[derive(Default)]
struct Half {
    /// Read but not yet written; empty (no capacity) while nothing waits.
    pending: Vec<u8>,
    /// How much of `pending` is written.
    at: usize,
    /// Written since the last flush (TLS streams hold bytes until flushed).
    unflushed: bool,
    read_eof: bool,
    /// A read error found right behind bytes read: returned once they are written.
    read_err: Option<io::Error>,
    done: bool,
    moved: u64,
}

impl Half {
    fn with_pending(pending: Vec<u8>) -> Half {
        // An empty buffer may still have capacity (a parser's leftovers): not kept.
        let pending = if pending.is_empty() {
            Vec::new()
        } else {
            pending
        };
        Half {
            pending,
            ..Half::default()
        }
    }

    /// Move bytes from `src` to `dst` until `src` has nothing or `dst` takes nothing.
    fn poll_move<S, D>(
        &mut self,
        cx: &mut Context<'_>,
        src: &mut S,
        dst: &mut D,
    ) -> Poll<io::Result<()>>
    where
        S: AsyncRead + Unpin,
        D: AsyncWrite + Unpin + 'static,
    {
        if self.done {
            return Poll::Ready(Ok(()));
        }
        loop {
            ready!(self.poll_pending(cx, dst))?;
            if let Some(end) = ready!(self.poll_end(cx, dst)) {
                return Poll::Ready(end);
            }
            let mut scratch = [MaybeUninit::<u8>::uninit(); SCRATCH];
            let mut rb = ReadBuf::uninit(&mut scratch);
            match Pin::new(&mut *src).poll_read(cx, &mut rb) {
                Poll::Pending => {
                    if self.unflushed {
                        ready!(Pin::new(&mut *dst).poll_flush(cx))?;
                        self.unflushed = false;
                    }
                    return Poll::Pending;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {}
            }
            if rb.filled().is_empty() {
                self.read_eof = true;
                continue;
            }
            if rb.remaining() > 0 {
                // A short read: is the end right behind it? (If not, this read finds the
                // socket drained, as the next round's would have.)
                let before = rb.filled().len();
                match Pin::new(&mut *src).poll_read(cx, &mut rb) {
                    Poll::Ready(Ok(())) if rb.filled().len() == before => self.read_eof = true,
                    Poll::Ready(Err(e)) => self.read_err = Some(e),
                    Poll::Ready(Ok(())) | Poll::Pending => {}
                }
            }
            ready!(self.poll_push(cx, dst, rb.filled()))?;
        }
    }

    /// Write what an earlier round could not; ready once nothing waits.
    #[inline]
    fn poll_pending<D>(&mut self, cx: &mut Context<'_>, dst: &mut D) -> Poll<io::Result<()>>
    where
        D: AsyncWrite + Unpin + 'static,
    {
        while self.at < self.pending.len() {
            let rest = &self.pending[self.at..];
            let n = ready!(poll_write(dst, cx, rest, self.read_eof))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.at += n;
            self.unflushed = true;
        }
        if self.at > 0 {
            // Everything waiting is written: give the memory back.
            self.pending = Vec::new();
            self.at = 0;
        }
        Poll::Ready(Ok(()))
    }

    /// After a read error or the end of `src`: flush, then pass the error on or shut `dst`
    /// down. `None`: neither happened, go on reading.
    #[inline]
    fn poll_end<D>(&mut self, cx: &mut Context<'_>, dst: &mut D) -> Poll<Option<io::Result<()>>>
    where
        D: AsyncWrite + Unpin + 'static,
    {
        if self.read_err.is_none() && !self.read_eof {
            return Poll::Ready(None);
        }
        // The bytes read before the error or the end go out first, buffered ones included.
        if self.unflushed {
            if let Err(e) = ready!(Pin::new(&mut *dst).poll_flush(cx)) {
                return Poll::Ready(Some(Err(e)));
            }
            self.unflushed = false;
        }
        if let Some(e) = self.read_err.take() {
            return Poll::Ready(Some(Err(e)));
        }
        if let Err(e) = ready!(Pin::new(&mut *dst).poll_shutdown(cx)) {
            return Poll::Ready(Some(Err(e)));
        }
        self.done = true;
        Poll::Ready(Some(Ok(())))
    }

    /// Write `data`, just read; what `dst` does not take now waits in `pending` (the write
    /// registered the waker).
    #[inline]
    fn poll_push<D>(
        &mut self,
        cx: &mut Context<'_>,
        dst: &mut D,
        data: &[u8],
    ) -> Poll<io::Result<()>>
    where
        D: AsyncWrite + Unpin + 'static,
    {
        self.moved += data.len() as u64;
        let mut off = 0;
        while off < data.len() {
            match poll_write(dst, cx, &data[off..], self.read_eof) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => {
                    off += n;
                    self.unflushed = true;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {
                    self.pending = data[off..].to_vec();
                    self.at = 0;
                    return Poll::Pending;
                }
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// Write `buf` to `dst`; `last`: nothing follows but the end of this direction. Then a TCP
/// socket on Linux holds the bytes (`MSG_MORE`) for the shutdown that comes next to send
/// them with its FIN; other streams write as usual.
fn poll_write<D>(
    dst: &mut D,
    cx: &mut Context<'_>,
    buf: &[u8],
    last: bool,
) -> Poll<io::Result<usize>>
where
    D: AsyncWrite + Unpin + 'static,
{
    #[cfg(target_os = "linux")]
    if last {
        if let Some(tcp) = (dst as &mut dyn Any).downcast_mut::<TcpStream>() {
            return poll_send_more(tcp, cx, buf);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = last;
    Pin::new(dst).poll_write(cx, buf)
}

#[cfg(target_os = "linux")]
fn poll_send_more(tcp: &TcpStream, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
    loop {
        ready!(tcp.poll_write_ready(cx))?;
        let sent = tcp.try_io(Interest::WRITABLE, || {
            socket2::SockRef::from(tcp).send_with_flags(buf, libc::MSG_MORE | libc::MSG_NOSIGNAL)
        });
        match sent {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            r => return Poll::Ready(r),
        }
    }
}

impl<A, B> Relay<A, B> {
    /// Bytes held on the heap for both directions (zero while the tunnel is idle).
    #[cfg(test)]
    fn held(&self) -> usize {
        self.ab.pending.capacity() + self.ba.pending.capacity()
    }
}

impl<A, B> Future for Relay<A, B>
where
    A: AsyncRead + AsyncWrite + Unpin + 'static,
    B: AsyncRead + AsyncWrite + Unpin + 'static,
{
    type Output = io::Result<(u64, u64)>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let ab = this.ab.poll_move(cx, &mut this.a, &mut this.b)?;
        let ba = this.ba.poll_move(cx, &mut this.b, &mut this.a)?;
        let done = Poll::Ready(Ok((this.ab.moved, this.ba.moved)));
        let open = match (ab.is_ready(), ba.is_ready()) {
            (true, true) => return done,
            (false, false) => return Poll::Pending,
            (true, false) => this.ba.moved,
            (false, true) => this.ab.moved,
        };
        let half_close = this.half_close;
        let (quiet, seen) = this
            .quiet
            .get_or_insert_with(|| (Box::pin(tokio::time::sleep(half_close)), open));
        if *seen != open {
            // The open direction moved bytes: its quiet time starts again.
            *seen = open;
            quiet.as_mut().reset(Instant::now() + half_close);
        }
        match quiet.as_mut().poll(cx) {
            Poll::Ready(()) => done,
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Long enough that no test here meets it unless it means to.
#[cfg(test)]
const HALF_CLOSE: Duration = Duration::from_secs(3600);

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;
    use tokio::io::{duplex, AsyncReadExt, AsyncWriteExt, DuplexStream};

    /// A relay between two in-memory pipes of `cap` bytes: (client end, upstream end, relay).
    fn pair(
        cap: usize,
        early: &[u8],
    ) -> (
        DuplexStream,
        DuplexStream,
        Relay<DuplexStream, DuplexStream>,
    ) {
        let (client, a) = duplex(cap);
        let (b, upstream) = duplex(cap);
        (client, upstream, relay(a, b, early.to_vec(), HALF_CLOSE))
    }

    /// Poll the relay once: it must not be finished.
    async fn step(r: &mut Relay<DuplexStream, DuplexStream>) {
        poll_fn(|cx| match Pin::new(&mut *r).poll(cx) {
            Poll::Pending => Poll::Ready(()),
            Poll::Ready(v) => panic!("relay ended early: {v:?}"),
        })
        .await
    }

    #[tokio::test]
    async fn bytes_cross_both_ways_and_half_closes_pass_on() {
        let (mut client, mut upstream, r) = pair(64 * 1024, b"");
        let task = tokio::spawn(r);
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let mut got = [0u8; 18];
        upstream.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"GET / HTTP/1.1\r\n\r\n");
        // The client is done sending; the upstream still answers after seeing the end.
        client.shutdown().await.unwrap();
        let mut rest = Vec::new();
        upstream.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        upstream
            .write_all(b"HTTP/1.1 200 OK\r\n\r\nhi")
            .await
            .unwrap();
        upstream.shutdown().await.unwrap();
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await.unwrap();
        assert_eq!(answer, b"HTTP/1.1 200 OK\r\n\r\nhi");
        assert_eq!(task.await.unwrap().unwrap(), (18, 21));
    }

    #[tokio::test]
    async fn bytes_sent_ahead_of_the_tunnel_go_first() {
        let (mut client, mut upstream, r) = pair(1024, b"early ");
        let task = tokio::spawn(r);
        client.write_all(b"late").await.unwrap();
        client.shutdown().await.unwrap();
        let mut got = Vec::new();
        upstream.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"early late");
        upstream.shutdown().await.unwrap();
        // The early bytes were read before the relay: only "late" counts as moved here.
        assert_eq!(task.await.unwrap().unwrap(), (4, 0));
    }

    #[tokio::test]
    async fn a_full_side_holds_only_what_it_cannot_take_and_frees_it_after() {
        // Pipes of 16 bytes: a 100-byte write from the client fills the relay's far side.
        let (mut client, mut upstream, mut r) = pair(16, b"");
        let data: Vec<u8> = (0..100u8).collect();
        client.write_all(&data[..16]).await.unwrap();
        step(&mut r).await;
        assert_eq!(r.held(), 0, "16 bytes fit the upstream pipe: nothing held");
        client.write_all(&data[16..32]).await.unwrap();
        step(&mut r).await;
        assert_eq!(
            r.held(),
            16,
            "the upstream pipe is full: the rest waits on the heap"
        );
        let mut got = vec![0u8; 16];
        upstream.read_exact(&mut got).await.unwrap();
        assert_eq!(got, &data[..16]);
        step(&mut r).await;
        assert_eq!(r.held(), 0, "written on: the memory is given back");
        upstream.read_exact(&mut got).await.unwrap();
        assert_eq!(got, &data[16..32]);
        // And the rest streams through the small pipes in order.
        let writer = tokio::spawn(async move {
            client.write_all(&data[32..]).await.unwrap();
            client.shutdown().await.unwrap();
            client
        });
        let task = tokio::spawn(r);
        let mut rest = Vec::new();
        upstream.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, (32..100u8).collect::<Vec<u8>>());
        upstream.shutdown().await.unwrap();
        drop(writer.await.unwrap());
        assert_eq!(task.await.unwrap().unwrap(), (100, 0));
    }

    #[tokio::test]
    async fn an_idle_tunnel_holds_no_buffer() {
        let (mut client, a) = duplex(1024);
        let (b, mut upstream) = duplex(1024);
        let mut r = relay(a, b, Vec::with_capacity(512), HALF_CLOSE);
        step(&mut r).await;
        assert_eq!(r.held(), 0, "an empty leftover buffer is not kept");
        client.write_all(b"ping").await.unwrap();
        step(&mut r).await;
        upstream.write_all(b"pong").await.unwrap();
        step(&mut r).await;
        assert_eq!(r.held(), 0);
        let mut got = [0u8; 4];
        upstream.read_exact(&mut got).await.unwrap();
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"pong");
        assert!(
            std::mem::size_of::<Half>() <= 64,
            "a direction is a few words"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn after_a_half_close_the_other_side_has_half_close_to_send_something() {
        let (client, a) = duplex(1024);
        let (b, mut upstream) = duplex(1024);
        let (mut client_r, mut client_w) = tokio::io::split(client);
        let task = tokio::spawn(relay(a, b, Vec::new(), Duration::from_secs(30)));
        // The client is done sending; the far side keeps its half open.
        client_w.shutdown().await.unwrap();
        let mut rest = Vec::new();
        upstream.read_to_end(&mut rest).await.unwrap();
        let t0 = Instant::now();
        // It still answers for a while: every byte gives it another 30 s.
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_secs(20)).await;
            upstream.write_all(b"x").await.unwrap();
            let mut got = [0u8; 1];
            client_r.read_exact(&mut got).await.unwrap();
        }
        assert!(!task.is_finished(), "closed while bytes were moving");
        let last = Instant::now();
        // Then silence: the tunnel ends 30 s after the last byte.
        assert_eq!(task.await.unwrap().unwrap(), (0, 3));
        assert_eq!(last.elapsed(), Duration::from_secs(30));
        assert_eq!(t0.elapsed(), Duration::from_secs(90));
    }

    #[tokio::test(start_paused = true)]
    async fn an_open_tunnel_never_times_out() {
        let (_client, a) = duplex(1024);
        let (b, _upstream) = duplex(1024);
        let mut r = relay(a, b, Vec::new(), Duration::from_secs(30));
        step(&mut r).await;
        tokio::time::sleep(Duration::from_secs(3600)).await;
        step(&mut r).await;
        assert!(r.quiet.is_none(), "no timer while both directions are open");
    }

    #[tokio::test]
    async fn an_error_on_one_side_ends_both() {
        let (client, mut upstream, r) = pair(1024, b"");
        let task = tokio::spawn(r);
        // The upstream writes into a client end that is gone: the relay fails (broken
        // pipe) although the client→upstream direction never saw an end of file.
        drop(client);
        upstream.write_all(b"x").await.unwrap();
        let r = task.await.unwrap();
        assert!(r.is_err(), "{r:?}");
    }
}

#[cfg(test)]
mod streams {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;
    use tokio::io::{duplex, AsyncReadExt, AsyncWriteExt, BufWriter};
    use tokio::net::{TcpListener, TcpStream};

    fn tls_pair() -> (tokio_rustls::TlsAcceptor, tokio_rustls::TlsConnector) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.der().clone()).unwrap();
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        (
            tokio_rustls::TlsAcceptor::from(Arc::new(server)),
            tokio_rustls::TlsConnector::from(Arc::new(client)),
        )
    }

    fn pattern(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    /// An `https://` upstream: client (pipe) ↔ relay ↔ TLS client stream ↔ TLS server over
    /// TCP. A small write must arrive while the tunnel is otherwise idle (flushed), then
    /// bulk both ways and a half-close each way.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tls_upstream_bulk_small_and_half_close() {
        let (acceptor, connector) = tls_pair();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let up_data = pattern(1 << 20, 7);
        let down_data = pattern(768 << 10, 11);
        let (up2, down2) = (up_data.clone(), down_data.clone());
        let server = tokio::spawn(async move {
            let (s, _) = listener.accept().await.unwrap();
            let mut s = acceptor.accept(s).await.unwrap();
            let mut ping = [0u8; 4];
            s.read_exact(&mut ping).await.unwrap();
            assert_eq!(&ping, b"ping");
            s.write_all(b"pong").await.unwrap();
            s.flush().await.unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).await.unwrap();
            assert!(got == up2, "upload corrupted: {} bytes", got.len());
            s.write_all(&down2).await.unwrap();
            s.shutdown().await.unwrap();
        });
        let tcp = TcpStream::connect(addr).await.unwrap();
        let tls = connector
            .connect("localhost".try_into().unwrap(), tcp)
            .await
            .unwrap();
        let (mut client, a) = duplex(64 * 1024);
        let relay_task = tokio::spawn(relay(a, tls, Vec::new(), HALF_CLOSE));
        client.write_all(b"ping").await.unwrap();
        let mut pong = [0u8; 4];
        tokio::time::timeout(Duration::from_secs(5), client.read_exact(&mut pong))
            .await
            .expect("small write through TLS never arrived (not flushed?)")
            .unwrap();
        let (mut cr, mut cw) = tokio::io::split(client);
        let writer = tokio::spawn(async move {
            cw.write_all(&up_data).await.unwrap();
            cw.shutdown().await.unwrap();
        });
        let mut got = Vec::new();
        tokio::time::timeout(Duration::from_secs(60), cr.read_to_end(&mut got))
            .await
            .unwrap()
            .unwrap();
        assert!(got == down_data, "download corrupted: {} bytes", got.len());
        writer.await.unwrap();
        server.await.unwrap();
        let r = relay_task.await.unwrap().unwrap();
        assert_eq!(r, (4 + (1 << 20), 4 + (768 << 10)));
    }

    /// A destination side that only sends on flush: idle data and the half-close must both
    /// be flushed.
    #[tokio::test]
    async fn a_buffering_writer_is_flushed_when_idle_and_at_eof() {
        let (mut client, a) = duplex(1024);
        let (b, mut upstream) = duplex(1024);
        let b = BufWriter::with_capacity(64 * 1024, b);
        let task = tokio::spawn(relay(a, b, b"early".to_vec(), HALF_CLOSE));
        client.write_all(b"ping").await.unwrap();
        let mut got = [0u8; 9];
        tokio::time::timeout(Duration::from_secs(5), upstream.read_exact(&mut got))
            .await
            .expect("buffered bytes never flushed")
            .unwrap();
        assert_eq!(&got, b"earlyping");
        client.write_all(b"tail").await.unwrap();
        client.shutdown().await.unwrap();
        let mut rest = Vec::new();
        upstream.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, b"tail");
        upstream.shutdown().await.unwrap();
        drop(client);
        assert_eq!(task.await.unwrap().unwrap(), (8, 0));
    }

    /// Segments a TCP socket has received so far (`TCP_INFO`).
    #[cfg(target_os = "linux")]
    fn segments_in(s: &TcpStream) -> u32 {
        use std::os::fd::AsRawFd;
        let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        let rc = unsafe {
            libc::getsockopt(
                s.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                (&mut info as *mut libc::tcp_info).cast(),
                &mut len,
            )
        };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
        info.tcpi_segs_in
    }

    /// Two loopback TCP connections: (the client's end, the relay's client side, the
    /// relay's upstream side, the upstream's end).
    async fn tcp_ends() -> (TcpStream, TcpStream, TcpStream, TcpStream) {
        let l1 = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let l2 = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(l1.local_addr().unwrap()).await.unwrap();
        let (a, _) = l1.accept().await.unwrap();
        let b = TcpStream::connect(l2.local_addr().unwrap()).await.unwrap();
        let (upstream, _) = l2.accept().await.unwrap();
        (client, a, b, upstream)
    }

    /// Wait (with a deadline) until `s` has received `n` segments.
    #[cfg(target_os = "linux")]
    async fn until_segments_in(s: &TcpStream, n: u32) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while segments_in(s) < n {
            assert!(
                Instant::now() < deadline,
                "{} of {n} segments",
                segments_in(s)
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// A server that answers and closes: its last bytes and its FIN reach the client in
    /// one segment, not two.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn the_last_bytes_and_the_end_leave_in_one_segment() {
        let (mut client, a, b, mut upstream) = tcp_ends().await;
        let at_start = segments_in(&client);
        // Both the answer and the end are waiting in the relay's socket before it runs.
        let b_before = segments_in(&b);
        upstream
            .write_all(b"HTTP/1.1 200 OK\r\n\r\nbye")
            .await
            .unwrap();
        upstream.shutdown().await.unwrap();
        until_segments_in(&b, b_before + 2).await;
        let task = tokio::spawn(relay(a, b, Vec::new(), HALF_CLOSE));
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"HTTP/1.1 200 OK\r\n\r\nbye");
        assert_eq!(
            segments_in(&client) - at_start,
            1,
            "the answer and the FIN in one segment"
        );
        client.shutdown().await.unwrap();
        assert_eq!(task.await.unwrap().unwrap(), (0, 22));
    }

    /// A reset right behind the last bytes: the bytes are delivered (flushed first, to a
    /// side that buffers), then the relay ends with the error.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn bytes_read_before_a_reset_are_delivered_before_the_error() {
        let (mut client, a, b, upstream) = tcp_ends().await;
        let b_before = segments_in(&b);
        let upstream = upstream.into_std().unwrap();
        socket2::SockRef::from(&upstream)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        std::io::Write::write_all(&mut &upstream, b"last").unwrap();
        drop(upstream);
        until_segments_in(&b, b_before + 2).await;
        let a = BufWriter::with_capacity(64 * 1024, a);
        let r = relay(a, b, Vec::new(), HALF_CLOSE).await;
        assert_eq!(
            r.map_err(|e| e.kind()).unwrap_err(),
            io::ErrorKind::ConnectionReset
        );
        let mut got = [0u8; 4];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"last");
    }

    /// Bytes moved per poll of the relay stay bounded (cooperative budget) on a bulk
    /// transfer over loopback TCP, and another task on the same single thread keeps running.
    #[tokio::test]
    async fn bulk_over_tcp_yields_to_other_tasks() {
        let l1 = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let l2 = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(l1.local_addr().unwrap()).await.unwrap();
        let (a, _) = l1.accept().await.unwrap();
        let b = TcpStream::connect(l2.local_addr().unwrap()).await.unwrap();
        let (mut upstream, _) = l2.accept().await.unwrap();
        let total = 64usize << 20;
        let writer = tokio::spawn(async move {
            let chunk = vec![7u8; 1 << 20];
            for _ in 0..64 {
                client.write_all(&chunk).await.unwrap();
            }
            client.shutdown().await.unwrap();
            client
        });
        let reader = tokio::spawn(async move {
            let mut buf = vec![0u8; 1 << 20];
            let mut n = 0;
            loop {
                let k = upstream.read(&mut buf).await.unwrap();
                if k == 0 {
                    break;
                }
                n += k;
            }
            upstream.shutdown().await.unwrap();
            n
        });
        let ticks = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let t2 = ticks.clone();
        let ticker = tokio::spawn(async move {
            loop {
                t2.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tokio::task::yield_now().await;
            }
        });
        let mut r = relay(a, b, Vec::new(), HALF_CLOSE);
        let mut max_per_poll = 0u64;
        let mut polls = 0u64;
        let res = std::future::poll_fn(|cx| {
            let before = r.ab.moved;
            let p = Pin::new(&mut r).poll(cx);
            max_per_poll = max_per_poll.max(r.ab.moved - before);
            polls += 1;
            p
        })
        .await
        .unwrap();
        assert_eq!(res.0 as usize, total);
        assert_eq!(reader.await.unwrap(), total);
        drop(writer.await.unwrap());
        ticker.abort();
        // tokio's budget (128 socket operations a poll) bounds a poll to 64 reads of
        // 32 KiB, and the other task on this one thread kept getting its turns.
        assert!(max_per_poll <= 4 << 20, "{max_per_poll} bytes in one poll");
        let ran = ticks.load(std::sync::atomic::Ordering::Relaxed) as u64;
        assert!(
            ran * 4 >= polls,
            "the other task ran {ran} times in {polls} relay polls"
        );
    }
}
