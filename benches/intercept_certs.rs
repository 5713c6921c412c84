//! What interception's certificates cost (issue 48, "Speed": "leaf minting for a new
//! host: time and the cache's bytes per host"), in process:
//!
//! - minting a leaf for a host not in the cache (`Leaves::get` of a new name: one P-256
//!   signature and the certificate's encoding; the leaf key is made once per CA load);
//! - a cached leaf (`Leaves::get` of a known name: one lock, one hash lookup);
//! - `FrontTls::config_for`, the per-connection server config (a copy of the shared one
//!   with its own resolver);
//! - the heap per cached leaf, from a counting allocator: 10,000 leaves minted, live bytes
//!   after less before, over 10,000;
//! - full TLS 1.3 handshakes per second on one core, rustls client and server over
//!   memory: the intercepting server (`config_for(host)` per connection, leaf by SNI from
//!   the cache) beside a floor, a rustls server with one fixed certificate of the same key
//!   type (P-256) and the same config otherwise. Their ratio is the cost of choosing a
//!   leaf per connection; the floor itself is what a TLS server handshake costs here.
//!   Cells alternate over rounds; each cell's median round is kept.
//!
//! Run: `cargo bench --bench intercept_certs`.

#[path = "../tests/common/counting.rs"]
mod counting;

use std::sync::Arc;
use std::time::{Duration, Instant};

use proxypool::config::CaFiles;
use proxypool::tls::{CertAuthority, FrontTls, LeafName, Leaves};
use rustls::pki_types::ServerName;
use rustls::{ClientConnection, ServerConnection};

use counting::{live, Counting};

#[global_allocator]
static A: Counting = Counting;

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Arc::new(CertAuthority::create(&CaFiles::in_dir(dir.path()), false).unwrap());
    println!("interception's certificates (median of rounds)\n");
    mint_and_lookup(&ca);
    bytes_per_leaf(&ca);
    handshakes(&ca);
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn mint_and_lookup(ca: &Arc<CertAuthority>) {
    let leaves = Leaves::new(ca.clone(), 100_000);
    let front = FrontTls::new(Arc::new(Leaves::new(ca.clone(), 1000))).unwrap();
    let (mut mint, mut hit, mut cfg) = (Vec::new(), Vec::new(), Vec::new());
    let mut next = 0usize;
    let known = LeafName::parse("known.example").unwrap();
    leaves.get(&known).unwrap();
    for _ in 0..7 {
        let names: Vec<LeafName> = (0..1000)
            .map(|i| LeafName::parse(&format!("h{}.mint.example", next + i)).unwrap())
            .collect();
        next += names.len();
        let t = Instant::now();
        for n in &names {
            leaves.get(n).unwrap();
        }
        mint.push(t.elapsed().as_secs_f64() / names.len() as f64);
        let t = Instant::now();
        for _ in 0..200_000 {
            std::hint::black_box(leaves.get(&known).unwrap());
        }
        hit.push(t.elapsed().as_secs_f64() / 200_000.0);
        let t = Instant::now();
        for _ in 0..200_000 {
            std::hint::black_box(front.config_for("shop.example"));
        }
        cfg.push(t.elapsed().as_secs_f64() / 200_000.0);
    }
    println!("| what | time |");
    println!("|---|---:|");
    println!(
        "| mint a leaf for a new host | {:.1} µs |",
        median(mint) * 1e6
    );
    println!("| a cached leaf | {:.0} ns |", median(hit) * 1e9);
    println!(
        "| `config_for` (per connection) | {:.0} ns |",
        median(cfg) * 1e9
    );
}

fn bytes_per_leaf(ca: &Arc<CertAuthority>) {
    let names: Vec<LeafName> = (0..10_000)
        .map(|i| LeafName::parse(&format!("site-{i}.bytes.example")).unwrap())
        .collect();
    let leaves = Leaves::new(ca.clone(), names.len());
    let before = live();
    for n in &names {
        leaves.get(n).unwrap();
    }
    let per = (live() - before) as f64 / names.len() as f64;
    println!("| heap per cached leaf (10,000 held) | {per:.0} bytes |\n");
}

/// A server config with one fixed P-256 certificate: the floor.
fn fixed_server(ca: &CertAuthority, front: &FrontTls) -> Arc<rustls::ServerConfig> {
    let minted = ca
        .mint(
            &LeafName::parse("shop.example").unwrap(),
            std::time::SystemTime::now(),
        )
        .unwrap();
    let mut cfg = (*front.sni_only()).clone();
    cfg.cert_resolver = Arc::new(Fixed(minted.key));
    Arc::new(cfg)
}

#[derive(Debug)]
struct Fixed(Arc<rustls::sign::CertifiedKey>);

impl rustls::server::ResolvesServerCert for Fixed {
    fn resolve(
        &self,
        _: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.0.clone())
    }
}

fn client_config(ca: &CertAuthority) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.certificate().der().clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    // Full handshakes only: no resumption.
    cfg.resumption = rustls::client::Resumption::disabled();
    Arc::new(cfg)
}

/// One full handshake between `client` and `server`, bytes moved in memory.
fn handshake(client: &Arc<rustls::ClientConfig>, server: Arc<rustls::ServerConfig>) {
    let name = ServerName::try_from("shop.example").unwrap();
    let mut c = ClientConnection::new(client.clone(), name).unwrap();
    let mut s = ServerConnection::new(server).unwrap();
    let mut buf = Vec::with_capacity(8192);
    while c.is_handshaking() || s.is_handshaking() {
        buf.clear();
        while c.wants_write() {
            c.write_tls(&mut buf).unwrap();
        }
        let mut rd = &buf[..];
        while !rd.is_empty() {
            s.read_tls(&mut rd).unwrap();
        }
        s.process_new_packets().unwrap();
        buf.clear();
        while s.wants_write() {
            s.write_tls(&mut buf).unwrap();
        }
        let mut rd = &buf[..];
        while !rd.is_empty() {
            c.read_tls(&mut rd).unwrap();
        }
        c.process_new_packets().unwrap();
    }
    assert_eq!(s.alpn_protocol(), Some(&b"h2"[..]));
}

fn handshakes(ca: &Arc<CertAuthority>) {
    let front = FrontTls::new(Arc::new(Leaves::new(ca.clone(), 1000))).unwrap();
    let fixed = fixed_server(ca, &front);
    let client = client_config(ca);
    handshake(&client, front.config_for("shop.example")); // the leaf is cached from here
    let cells: [(&str, &dyn Fn() -> Arc<rustls::ServerConfig>); 3] = [
        ("floor: one fixed P-256 certificate", &|| fixed.clone()),
        (
            "intercepting: `config_for(host)` (a config copy), leaf by SNI from the cache",
            &|| front.config_for("shop.example"),
        ),
        (
            "intercepting: `config_for_hello` with SNI (the shared config), leaf from the cache",
            &|| front.config_for_hello(Some("shop.example"), "shop.example"),
        ),
    ];
    // Short rounds, the cells taking turns: a load that drifts touches each alike.
    let round = Duration::from_millis(300);
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); cells.len()];
    for _ in 0..25 {
        for (i, (_, server)) in cells.iter().enumerate() {
            let (t, mut n) = (Instant::now(), 0u32);
            while t.elapsed() < round {
                handshake(&client, server());
                n += 1;
            }
            rates[i].push(f64::from(n) / t.elapsed().as_secs_f64());
        }
    }
    let rates: Vec<f64> = rates.into_iter().map(median).collect();
    println!(
        "| TLS 1.3 handshakes, client and server on one core | per second | ratio to the floor |"
    );
    println!("|---|---:|---:|");
    for ((name, _), r) in cells.iter().zip(&rates) {
        println!("| {name} | {r:.0} | {:.2} |", r / rates[0]);
    }
}
