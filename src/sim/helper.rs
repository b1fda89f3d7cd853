//! A second thread for the epochs of an autoscaled fleet (sim/autoscale.rs). Between two looks of
//! the router (50 ms of simulated time) every replica runs on its own, a few microseconds of work
//! each; a day is 1.7 million such epochs. A thread pool's sleeping workers cost more to wake than
//! an epoch's work (rayon: 54 s of system time over a day), so the helper spins briefly, then
//! yields, then parks between epochs, and the caller hands it the upper part of the replicas.
//!
//! The one unsafe block: the helper runs the replicas of `slots[from..to]` through a raw pointer
//! while the caller works on `slots[..from]`. The caller posts a job only from a split borrow, does
//! not touch the upper part or move the vector until [`Helper::wait`] returns, and [`InFlight`]
//! waits for a posted job before anything is dropped if the caller unwinds.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

/// What the caller and the helper share.
pub(super) struct Shared<T> {
    posted: AtomicU64,
    done: AtomicU64,
    stop: AtomicBool,
    parked: AtomicBool,
    ptr: AtomicPtr<T>,
    len: AtomicUsize,
    end: AtomicU64,
}

impl<T> Default for Shared<T> {
    fn default() -> Self {
        Shared {
            posted: AtomicU64::new(0),
            done: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            parked: AtomicBool::new(false),
            ptr: AtomicPtr::new(std::ptr::null_mut()),
            len: AtomicUsize::new(0),
            end: AtomicU64::new(0),
        }
    }
}

/// Spin, then yield, then (when `park` allows) park until `ready` holds.
fn wait_until(ready: impl Fn() -> bool, park: Option<&AtomicBool>) {
    for _ in 0..4096 {
        if ready() {
            return;
        }
        std::hint::spin_loop();
    }
    for _ in 0..256 {
        if ready() {
            return;
        }
        std::thread::yield_now();
    }
    while !ready() {
        match park {
            Some(flag) => {
                flag.store(true, Ordering::SeqCst);
                if !ready() {
                    std::thread::park();
                }
                flag.store(false, Ordering::SeqCst);
            }
            None => std::thread::yield_now(),
        }
    }
}

/// The helper thread's loop: run each posted job's items with `work`, until stopped.
pub(super) fn serve<T: Send>(shared: &Shared<T>, work: impl Fn(&mut T, u64)) {
    let mut seen = 0;
    loop {
        wait_until(
            || shared.posted.load(Ordering::SeqCst) != seen || shared.stop.load(Ordering::SeqCst),
            Some(&shared.parked),
        );
        let posted = shared.posted.load(Ordering::SeqCst);
        if posted == seen {
            return; // stopped, nothing posted
        }
        seen = posted;
        let (ptr, len, end) =
            (shared.ptr.load(Ordering::SeqCst), shared.len.load(Ordering::SeqCst), shared.end.load(Ordering::SeqCst));
        // SAFETY: the caller posted `ptr..ptr + len` from an exclusive borrow it does not use, and
        // keeps alive and in place, until `done` says this job is finished (module docs).
        let items = unsafe { std::slice::from_raw_parts_mut(ptr, len) };
        for item in items {
            work(item, end);
        }
        shared.done.store(seen, Ordering::SeqCst);
    }
}

/// The caller's side.
pub(super) struct Helper<'s, T> {
    pub(super) shared: &'s Shared<T>,
    pub(super) thread: std::thread::Thread,
}

impl<T: Send> Helper<'_, T> {
    /// Hand `items` to the helper for one job at `end`; the caller must call [`Helper::wait`]
    /// before it touches them again (the borrow is given up here for the job's length).
    pub(super) fn post(&self, items: &mut [T], end: u64) {
        let s = self.shared;
        s.ptr.store(items.as_mut_ptr(), Ordering::SeqCst);
        s.len.store(items.len(), Ordering::SeqCst);
        s.end.store(end, Ordering::SeqCst);
        s.posted.fetch_add(1, Ordering::SeqCst);
        if s.parked.load(Ordering::SeqCst) {
            self.thread.unpark();
        }
    }

    /// Until the last posted job is done.
    pub(super) fn wait(&self) {
        let s = self.shared;
        let posted = s.posted.load(Ordering::SeqCst);
        wait_until(|| s.done.load(Ordering::SeqCst) == posted, None);
    }
}

/// Waits for a posted job and stops the helper when dropped (the end of a run, or an unwinding
/// caller, before the items the job points into are dropped).
pub(super) struct InFlight<'h, 's, T: Send>(pub(super) &'h Helper<'s, T>);

impl<T: Send> Drop for InFlight<'_, '_, T> {
    fn drop(&mut self) {
        self.0.wait();
        self.0.shared.stop.store(true, Ordering::SeqCst);
        self.0.thread.unpark();
    }
}
