//! The leaf-certificate cache under 100,000 distinct names (a client cycling SNI names):
//! it stays at its cap, least recently used dropped, and the heap grows by at most
//! 64 MiB, measured with a counting global allocator. One test in this binary, so no
//! other test allocates while it measures.

mod common;

use std::sync::Arc;

use proxypool::config::CaFiles;
use proxypool::tls::{CertAuthority, LeafName, Leaves, DEFAULT_CAPACITY};

use common::counting::{live, Counting};

#[global_allocator]
static A: Counting = Counting;

#[test]
fn a_hundred_thousand_names_keep_the_cache_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Arc::new(CertAuthority::create(&CaFiles::in_dir(dir.path()), false).unwrap());
    let names: Vec<LeafName> = (0..100_000)
        .map(|i| LeafName::parse(&format!("h{i}.sni-flood.example")).unwrap())
        .collect();
    let leaves = Arc::new(Leaves::new(ca, DEFAULT_CAPACITY));
    let before = live();
    // Two threads, as handshakes on two cores would ask.
    let half = names.len() / 2;
    let names = Arc::new(names);
    let workers: Vec<_> = [0..half, half..names.len()]
        .into_iter()
        .map(|range| {
            let (leaves, names) = (leaves.clone(), names.clone());
            std::thread::spawn(move || {
                for i in range {
                    leaves.get(&names[i]).unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let grown = live() - before;
    assert_eq!(leaves.len(), DEFAULT_CAPACITY);
    let per_leaf = grown as f64 / DEFAULT_CAPACITY as f64;
    eprintln!(
        "100,000 names: {} leaves held, heap +{:.1} MiB ({per_leaf:.0} bytes a leaf)",
        leaves.len(),
        grown as f64 / (1 << 20) as f64
    );
    assert!(grown <= 64 << 20, "heap grew by {grown} bytes");
    // The most recent names are the ones kept.
    let last = &names[names.len() - 1];
    let k = leaves.get(last).unwrap();
    assert!(Arc::ptr_eq(&k, &leaves.get(last).unwrap()));
    assert_eq!(leaves.len(), DEFAULT_CAPACITY);
}
