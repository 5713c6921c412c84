//! `ExitSite`: a plain-HTTP site on 127.0.0.1 that answers the caller's address and bans
//! by address or by /24, for the exit-identity tests (each upstream proxy leaving from a
//! loopback address of its own, `upstreams::tinyproxy_bound`). Runs on a thread of its
//! own, so synchronous tests (CLI runs) never starve it.
//!
//! | path | answer |
//! |---|---|
//! | `/ip` | the caller's address and `\n` |
//! | `/ip.json` | `{"ip":"…"}` |
//! | `/header` | `ok`, with `X-Exit-Ip: <caller>` |
//! | `/garbage` | an HTML page with no address |
//! | `/huge` | 1 MiB of digits |
//! | `/rotating` | a new address at each request (10.9.0.1, 10.9.0.2, …) |
//! | `/guarded` | 403 to a banned address or an address of a banned /24, else 200 `ok` |

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Default)]
struct State {
    banned: HashSet<IpAddr>,
    /// /24s by their first three octets.
    banned_subnets: HashSet<[u8; 3]>,
    /// (path, caller) of each request, in order.
    seen: Vec<(String, IpAddr)>,
}

pub struct ExitSite {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl ExitSite {
    pub fn start() -> ExitSite {
        let state = Arc::new(Mutex::new(State::default()));
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let st = state.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
                addr_tx.send(l.local_addr().unwrap()).unwrap();
                let rotation = Arc::new(AtomicU32::new(0));
                let serve = async {
                    loop {
                        let Ok((s, peer)) = l.accept().await else {
                            continue;
                        };
                        let (st, rotation) = (st.clone(), rotation.clone());
                        tokio::spawn(answer(s, peer.ip(), st, rotation));
                    }
                };
                tokio::select! {
                    _ = serve => {}
                    _ = stop_rx => {}
                }
            });
        });
        ExitSite {
            addr: addr_rx.recv().unwrap(),
            state,
            _stop: stop_tx,
        }
    }

    /// `http://127.0.0.1:PORT/PATH`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn ban(&self, ip: IpAddr) {
        self.state.lock().unwrap().banned.insert(ip);
    }

    /// Ban the /24 of `ip`.
    pub fn ban_subnet(&self, ip: std::net::Ipv4Addr) {
        let o = ip.octets();
        self.state
            .lock()
            .unwrap()
            .banned_subnets
            .insert([o[0], o[1], o[2]]);
    }

    /// The callers of `path`, in order.
    pub fn callers(&self, path: &str) -> Vec<IpAddr> {
        let st = self.state.lock().unwrap();
        st.seen
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, ip)| *ip)
            .collect()
    }
}

fn refused(st: &State, ip: IpAddr) -> bool {
    let subnet = match ip {
        IpAddr::V4(a) => {
            let o = a.octets();
            st.banned_subnets.contains(&[o[0], o[1], o[2]])
        }
        IpAddr::V6(_) => false,
    };
    subnet || st.banned.contains(&ip)
}

async fn answer(mut s: TcpStream, peer: IpAddr, st: Arc<Mutex<State>>, rotation: Arc<AtomicU32>) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&head);
    let target = text.split_whitespace().nth(1).unwrap_or("/").to_string();
    // An absolute-form target (a proxy that forwards it as it came) names the path last.
    let path = match target.find("://") {
        Some(i) => target[i + 3..]
            .find('/')
            .map_or("/".to_string(), |j| target[i + 3 + j..].to_string()),
        None => target,
    };
    let (status, extra, body): (u16, String, Vec<u8>) = {
        let mut g = st.lock().unwrap();
        g.seen.push((path.clone(), peer));
        match path.as_str() {
            "/ip" => (200, String::new(), format!("{peer}\n").into_bytes()),
            "/ip.json" => (
                200,
                String::new(),
                format!("{{\"ip\":\"{peer}\"}}").into_bytes(),
            ),
            "/header" => (200, format!("X-Exit-Ip: {peer}\r\n"), b"ok".to_vec()),
            "/garbage" => (200, String::new(), b"<html>no address here</html>".to_vec()),
            "/huge" => (200, String::new(), vec![b'1'; 1 << 20]),
            "/rotating" => {
                let n = rotation.fetch_add(1, Ordering::SeqCst) + 1;
                let body = format!("10.9.{}.{}\n", n / 256, n % 256);
                (200, String::new(), body.into_bytes())
            }
            "/guarded" if refused(&g, peer) => (403, String::new(), b"banned".to_vec()),
            "/guarded" => (200, String::new(), b"ok".to_vec()),
            _ => (404, String::new(), b"no such page".to_vec()),
        }
    };
    let reply = format!(
        "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n{extra}\r\n",
        body.len()
    );
    let _ = s.write_all(reply.as_bytes()).await;
    let _ = s.write_all(&body).await;
    let _ = s.shutdown().await;
}
