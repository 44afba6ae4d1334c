//! The memory a thread holds, as the allocator counts it: `CountingAllocator` wraps the
//! process's allocator and keeps, for each thread, the bytes allocated there less the bytes
//! freed there; `thread_bytes` reads the current thread's count. The sandbox bounds a run by how
//! far its thread's count grows during the run (`Limits::max_memory`).
//!
//! A binary that runs scripts declares the wrapper as its global allocator (the `tokenops`
//! binary, this crate's unit tests, the behaviour suite); where it does not, the count stays at
//! zero and no run is ever stopped for its memory (`counting` tells which).
//!
//! The count is per thread, not per allocation's owner: memory allocated on one thread and
//! freed on another counts up on the first and down on the second. A run is made on one thread
//! from start to end, and what crosses threads during it (the host's calls) is settled by the
//! sandbox (`RunState::call_host`).
//!
//! Unsafe code: `GlobalAlloc` is an unsafe trait, and its methods only forward to the wrapped
//! allocator with the caller's own arguments; the workspace forbids unsafe code, this crate
//! denies it, and this module alone allows it.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;

thread_local! {
    /// Bytes allocated less bytes freed on this thread. Const-initialised and without a
    /// destructor, so the allocator can touch it without allocating, and at any point of a
    /// thread's life.
    static HELD: Cell<isize> = const { Cell::new(0) };
}

/// Adds `bytes` (negative when freed) to the current thread's count. Wrapping and `try_with`:
/// the allocator must never panic, not even in a thread's teardown.
#[inline]
fn count(bytes: isize) {
    let _ = HELD.try_with(|held| held.set(held.get().wrapping_add(bytes)));
}

/// A `Layout`'s size as a signed count. `Layout` guarantees its size, rounded up to its
/// alignment, fits in `isize`, and `realloc`'s caller the same of `new_size`.
#[inline]
fn signed(size: usize) -> isize {
    size as isize
}

/// The bytes the current thread has allocated less those it has freed, since it started (or
/// zero without the counting allocator). Only differences between two readings on one thread
/// mean something.
pub fn thread_bytes() -> isize {
    HELD.try_with(Cell::get).unwrap_or(0)
}

/// Whether the process's global allocator is a `CountingAllocator`: one allocation, counted or
/// not.
pub fn counting() -> bool {
    let before = thread_bytes();
    let probe = std::hint::black_box(Vec::<u8>::with_capacity(64));
    let counted = thread_bytes() != before;
    drop(probe);
    counted
}

/// Wraps the allocator `A`, counting each thread's allocations (see the module's note). The
/// cost is one thread-local add per allocation, free or reallocation.
#[derive(Debug, Default, Clone, Copy)]
pub struct CountingAllocator<A> {
    inner: A,
}

impl<A> CountingAllocator<A> {
    pub const fn new(inner: A) -> CountingAllocator<A> {
        CountingAllocator { inner }
    }
}

// SAFETY: every method forwards its arguments unchanged to `A`, which upholds `GlobalAlloc`'s
// contract, and returns what `A` returned; the counting touches no memory of the allocation.
unsafe impl<A: GlobalAlloc> GlobalAlloc for CountingAllocator<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's guarantees about `layout` are passed on as they are.
        let ptr = unsafe { self.inner.alloc(layout) };
        if !ptr.is_null() {
            count(signed(layout.size()));
        }
        ptr
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        let ptr = unsafe { self.inner.alloc_zeroed(layout) };
        if !ptr.is_null() {
            count(signed(layout.size()));
        }
        ptr
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by this allocator, hence by `A`, with `layout`.
        unsafe { self.inner.dealloc(ptr, layout) };
        count(-signed(layout.size()));
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` was allocated by `A` with `layout`; `new_size` is the caller's, valid.
        let moved = unsafe { self.inner.realloc(ptr, layout, new_size) };
        // On failure the old block stays allocated, and the count as it was.
        if !moved.is_null() {
            count(signed(new_size).wrapping_sub(signed(layout.size())));
        }
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::{counting, thread_bytes};

    #[test]
    fn the_unit_tests_count_with_the_counting_allocator() {
        assert!(counting(), "lib.rs declares the counting allocator for the unit tests");
    }

    #[test]
    fn a_thread_counts_what_it_holds_and_not_what_it_freed() {
        let before = thread_bytes();
        let held = std::hint::black_box(vec![0u8; 1 << 20]);
        assert!(thread_bytes() - before >= 1 << 20);
        let mut grown = std::hint::black_box(Vec::<u8>::with_capacity(16));
        grown.reserve_exact(1 << 20);
        assert!(thread_bytes() - before >= 2 << 20, "a reallocation counts its new size");
        drop(held);
        drop(grown);
        assert!(thread_bytes() - before < 4096, "freed: {}", thread_bytes() - before);
        // Another thread's allocations are its own.
        let here = thread_bytes();
        let elsewhere = std::thread::spawn(|| std::hint::black_box(vec![0u8; 1 << 20])).join().expect("thread");
        assert!(thread_bytes() - here < 1 << 20);
        drop(elsewhere);
    }
}
