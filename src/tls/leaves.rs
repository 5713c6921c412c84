//! Leaf certificates by name, minted on first use and kept in memory (never on disk) in a
//! bounded cache: the least recently used is dropped beyond the cap, and a leaf is minted
//! again a day before it ends. Two handshakes asking for the same new name at once mint
//! it once: the second waits for the first's result.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use lru::LruCache;
use rustls::sign::CertifiedKey;

use super::{CertAuthority, LeafError, LeafName};

/// Leaves kept at most when the caller does not say.
pub const DEFAULT_CAPACITY: usize = 10_000;
/// A cached leaf is replaced once it has less than this left.
const RENEW_BEFORE_END: Duration = Duration::from_secs(24 * 3600);

/// The wall clock leaves are minted by (a test's own in tests).
pub type Clock = fn() -> SystemTime;

/// One name's leaf: being minted (the cell is empty), minted, or failed.
struct Slot {
    cell: OnceLock<Result<CachedLeaf, LeafError>>,
}

struct CachedLeaf {
    key: Arc<CertifiedKey>,
    renew_at: SystemTime,
}

/// The cache of leaves of one CA.
pub struct Leaves {
    ca: Arc<CertAuthority>,
    slots: Mutex<LruCache<Box<str>, Arc<Slot>>>,
    clock: Clock,
}

impl Leaves {
    /// At most `capacity` leaves (at least one).
    pub fn new(ca: Arc<CertAuthority>, capacity: usize) -> Leaves {
        Leaves::with_clock(ca, capacity, SystemTime::now)
    }

    /// As [`Leaves::new`], reading the time from `clock`.
    pub fn with_clock(ca: Arc<CertAuthority>, capacity: usize, clock: Clock) -> Leaves {
        let cap = NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN);
        Leaves {
            ca,
            slots: Mutex::new(LruCache::new(cap)),
            clock,
        }
    }

    /// The CA it mints from.
    pub fn authority(&self) -> &Arc<CertAuthority> {
        &self.ca
    }

    /// The leaf for `name`: from the cache (one lock, no signing), else minted now.
    pub fn get(&self, name: &LeafName) -> Result<Arc<CertifiedKey>, LeafError> {
        let key = name.key();
        let key = key.as_ref();
        let now = (self.clock)();
        let slot = self.slot(key, now);
        let minted = slot.cell.get_or_init(|| {
            self.ca.mint(name, now).map(|m| CachedLeaf {
                renew_at: m.not_after.checked_sub(RENEW_BEFORE_END).unwrap_or(now),
                key: m.key,
            })
        });
        match minted {
            Ok(f) => Ok(f.key.clone()),
            Err(e) => {
                // Not kept: the next handshake for the name tries again.
                let mut slots = self.lock();
                if slots.peek(key).is_some_and(|s| Arc::ptr_eq(s, &slot)) {
                    slots.pop(key);
                }
                Err(e.clone())
            }
        }
    }

    /// The slot for `key`: the cached one while it is being minted or still fresh, else
    /// a new empty one in its place.
    fn slot(&self, key: &str, now: SystemTime) -> Arc<Slot> {
        let mut slots = self.lock();
        if let Some(s) = slots.get(key) {
            let usable = match s.cell.get() {
                None => true,
                Some(Ok(f)) => now < f.renew_at,
                Some(Err(_)) => false,
            };
            if usable {
                return s.clone();
            }
        }
        let s = Arc::new(Slot {
            cell: OnceLock::new(),
        });
        slots.put(key.into(), s.clone());
        s
    }

    /// Leaves held (the cache's size, as a gauge shows it).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no leaf is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most leaves held.
    pub fn capacity(&self) -> usize {
        self.lock().cap().get()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LruCache<Box<str>, Arc<Slot>>> {
        // A panic while holding it leaves a consistent cache: use it.
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl std::fmt::Debug for Leaves {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leaves")
            .field("len", &self.len())
            .field("capacity", &self.capacity())
            .finish()
    }
}
