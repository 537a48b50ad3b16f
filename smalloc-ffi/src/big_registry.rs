//! The set of live big allocations, so that `free` can tell one of them
//! from a foreign pointer without reading memory it may not own.
//!
//! # Why a registry and not a magic number
//!
//! A big allocation carries a header just below the pointer it returns, but
//! reading below a *foreign* pointer to look for a magic number may fault
//! (the foreign block may start a mapping) or mis-identify (the bytes may
//! happen to match). So membership is decided here, by address only: a
//! fixed table of the user pointers of the live big allocations. The header
//! is read only after the table said the pointer is ours.
//!
//! Big allocations are larger than the largest slot (2 GiB; 32 MiB when the
//! regions are mapped on demand, under an address-space or commit limit),
//! so few can be live at once (the address space holds at most 64 Ki of
//! the first kind, a limit of 128 GiB 4 Ki of the second); the table
//! has [`CAPACITY`] entries and an allocation that finds it full fails with
//! `ENOMEM`. Lookups scan only up to the highest entry ever used, and skip
//! the scan entirely while no big allocation is live, so freeing foreign
//! pointers stays cheap in programs that never make a big allocation.
//!
//! The table is lock-free (compare-and-swap on each entry), so a `fork`
//! taken at any moment leaves it consistent in the child.

use core::sync::atomic::{AtomicUsize, Ordering};

/// Maximum number of live big allocations.
pub const CAPACITY: usize = 4096;

/// User pointers of live big allocations; 0 marks a free entry.
static ENTRIES: [AtomicUsize; CAPACITY] = [const { AtomicUsize::new(0) }; CAPACITY];
/// One past the highest entry index ever used: lookups scan below it.
static HIGH: AtomicUsize = AtomicUsize::new(0);
/// Number of live entries.
static LIVE: AtomicUsize = AtomicUsize::new(0);

// Orderings: a pointer looked up (by free, realloc, malloc_usable_size) was
// inserted by the allocation that returned it, and that allocation happens
// before the lookup through whatever the program used to hand the pointer
// over. By coherence a load that happens after a store sees that store or a
// later one, so every access here can be Relaxed: the lookup sees its entry,
// a `HIGH` that covers it and a `LIVE` of at least one (each removal's
// decrement follows its own insertion's increment). The header written
// before the insertion is visible through the same happens-before edge.

/// Records the big allocation at `user`. False when the table is full.
pub fn insert(user: usize) -> bool {
    debug_assert!(user != 0);
    // Relaxed: see the module comment.
    LIVE.fetch_add(1, Ordering::Relaxed);
    for (i, entry) in ENTRIES.iter().enumerate() {
        // Relaxed: see the module comment; a lost race just moves on.
        if entry
            .compare_exchange(0, user, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            // Relaxed: see the module comment.
            HIGH.fetch_max(i + 1, Ordering::Relaxed);
            return true;
        }
    }
    // Relaxed: undoes our own increment.
    LIVE.fetch_sub(1, Ordering::Relaxed);
    false
}

/// Index of the entry holding `user`, if it is a live big allocation.
fn find(user: usize) -> Option<usize> {
    // Relaxed: see the module comment.
    if user == 0 || LIVE.load(Ordering::Relaxed) == 0 {
        return None;
    }
    // Relaxed: see the module comment.
    let high = HIGH.load(Ordering::Relaxed).min(CAPACITY);
    ENTRIES[..high]
        .iter()
        // Relaxed: see the module comment.
        .position(|e| e.load(Ordering::Relaxed) == user)
}

/// Whether `user` is a live big allocation.
pub fn contains(user: usize) -> bool {
    find(user).is_some()
}

/// Forgets the big allocation at `user`. False if it is not one.
pub fn remove(user: usize) -> bool {
    let Some(i) = find(user) else {
        return false;
    };
    // Relaxed: the caller owns `user`, so nobody else changes this entry;
    // a second free of the same pointer would be a double free.
    ENTRIES[i].store(0, Ordering::Relaxed);
    // Relaxed: see the module comment.
    LIVE.fetch_sub(1, Ordering::Relaxed);
    true
}

/// The big allocation at `old` moved to `new` (a `realloc`).
pub fn replace(old: usize, new: usize) {
    if let Some(i) = find(old) {
        // Relaxed: the caller owns the allocation (see `remove`).
        ENTRIES[i].store(new, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_find_replace_remove() {
        assert!(!contains(0x1000));
        assert!(insert(0x1000));
        assert!(insert(0x2000));
        assert!(contains(0x1000) && contains(0x2000));
        replace(0x1000, 0x3000);
        assert!(!contains(0x1000) && contains(0x3000));
        assert!(remove(0x3000));
        assert!(!remove(0x3000));
        assert!(remove(0x2000));
        assert!(!contains(0x2000));
    }
}
