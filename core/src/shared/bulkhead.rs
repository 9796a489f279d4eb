//! Bulkhead (docs/contract.md#bulkhead): at most `max_concurrent` permits out at once, and at most
//! `max_waiting` callers waiting for one, served first in, first out.
//!
//! A permit handed to a waiter by [`Bulkhead::release`] belongs to that waiter from then
//! on ("granted"); the waiter confirms with [`Bulkhead::claim`]. A waiter that goes away
//! ([`Bulkhead::cancel_waiter`]) before or after its grant leaves nothing behind: queued, it
//! leaves the queue; granted but not claimed, its permit passes on to the next waiter or
//! back to the pool.

use std::collections::{HashSet, VecDeque};
use std::fmt;

use super::{at_least, SharedError};

/// The answer to [`Bulkhead::try_acquire`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acquire {
    /// A permit is taken; give it back with [`Bulkhead::release`].
    Granted,
    /// All permits are out; the caller waits as waiter `id` until `release` names it.
    Queued(u64),
    /// All permits are out and `max_waiting` callers already wait: fail with `BulkheadFull`.
    Rejected,
}

/// The answer to [`Bulkhead::cancel_waiter`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelWaiter {
    /// The waiter was still queued; it is removed.
    Removed,
    /// The waiter had been granted a permit it never claimed; the permit went to the
    /// waiter named here (wake it), or back to the pool (`None`).
    PassedOn(Option<u64>),
    /// No such waiter (already claimed, cancelled, or never queued): nothing changed.
    Unknown,
}

/// [`Bulkhead::release`] without a permit out: a caller bug, reported rather than let
/// the count go wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BulkheadError;

impl fmt::Display for BulkheadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Bulkhead.release() called with no permit taken")
    }
}

impl std::error::Error for BulkheadError {}

/// See the module documentation.
#[derive(Clone, Debug)]
pub struct Bulkhead {
    max_concurrent: u64,
    max_waiting: u64,
    /// Permits out, granted-but-unclaimed ones included.
    in_use: u64,
    queue: VecDeque<u64>,
    granted: HashSet<u64>,
    next_id: u64,
}

impl Bulkhead {
    /// `max_concurrent >= 1`, `max_waiting >= 0` (docs/contract.md#shared-objects).
    pub fn new(max_concurrent: i64, max_waiting: i64) -> Result<Self, SharedError> {
        let max_concurrent =
            at_least(max_concurrent, 1).ok_or(SharedError::MaxConcurrent(max_concurrent))?;
        let max_waiting = at_least(max_waiting, 0).ok_or(SharedError::MaxWaiting(max_waiting))?;
        Ok(Bulkhead {
            max_concurrent,
            max_waiting,
            in_use: 0,
            queue: VecDeque::new(),
            granted: HashSet::new(),
            next_id: 0,
        })
    }

    pub fn max_concurrent(&self) -> u64 {
        self.max_concurrent
    }

    pub fn max_waiting(&self) -> u64 {
        self.max_waiting
    }

    /// Permits out (granted to a waiter but not yet claimed included).
    pub fn in_use(&self) -> u64 {
        self.in_use
    }

    /// Callers waiting for a permit.
    pub fn waiting(&self) -> u64 {
        self.queue.len() as u64
    }

    /// Take a permit, or queue behind the current waiters, or be refused. A caller never
    /// jumps the queue: with waiters queued, a free permit cannot exist (every release
    /// hands its permit to the head).
    pub fn try_acquire(&mut self) -> Acquire {
        if self.try_acquire_free() {
            Acquire::Granted
        } else if (self.queue.len() as u64) < self.max_waiting {
            let id = self.next_id;
            self.next_id = self.next_id.wrapping_add(1);
            self.queue.push_back(id);
            Acquire::Queued(id)
        } else {
            Acquire::Rejected
        }
    }

    /// Take a permit only if [`Bulkhead::try_acquire`] would grant one; otherwise change
    /// nothing (`false`): the caller then asks `try_acquire`, which queues or refuses. What
    /// an attempt carried out without a chance to wait uses (src/carry.rs).
    pub fn try_acquire_free(&mut self) -> bool {
        if self.in_use < self.max_concurrent && self.queue.is_empty() {
            self.in_use += 1;
            true
        } else {
            false
        }
    }

    /// Give a permit back. With waiters queued the permit goes to the first of them, whose
    /// id is returned (the caller wakes it); otherwise it returns to the pool.
    pub fn release(&mut self) -> Result<Option<u64>, BulkheadError> {
        if self.in_use == 0 {
            return Err(BulkheadError);
        }
        Ok(self.pass_on())
    }

    /// The permit of a releasing holder goes to the queue's head, or back to the pool.
    fn pass_on(&mut self) -> Option<u64> {
        match self.queue.pop_front() {
            Some(id) => {
                self.granted.insert(id);
                Some(id)
            }
            None => {
                self.in_use -= 1;
                None
            }
        }
    }

    /// The waiter `id`, woken by a release, takes its permit. `false`: it holds none
    /// (never granted, or cancelled meanwhile) and must not release one.
    pub fn claim(&mut self, id: u64) -> bool {
        self.granted.remove(&id)
    }

    /// Whether waiter `id` has been granted a permit it has not claimed yet.
    pub fn is_granted(&self, id: u64) -> bool {
        self.granted.contains(&id)
    }

    /// The waiter `id` goes away (its caller was cancelled, its run failed or ran out of
    /// time). Nothing of it stays behind.
    pub fn cancel_waiter(&mut self, id: u64) -> CancelWaiter {
        if let Some(pos) = self.queue.iter().position(|&w| w == id) {
            self.queue.remove(pos);
            return CancelWaiter::Removed;
        }
        if self.granted.remove(&id) {
            return CancelWaiter::PassedOn(self.pass_on());
        }
        CancelWaiter::Unknown
    }
}
