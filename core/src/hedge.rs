//! One hedged round of a node's calls (docs/contract.md#hedged-rounds), as a state machine
//! handed the clock: when the next call is due, which call won, when the round has failed,
//! and when it is complete (every loser drained). Not yet driven by runs.
//!
//! A round starts with call 0. While no call has succeeded, fewer than `1 + hedges` calls
//! have started and the round is not over, another call is due `hedge_after` seconds after
//! the latest call started (or after the latest skipped hedge: a skipped hedge was never
//! started, and the next one is due `hedge_after` later, not at once). The first call to
//! succeed wins: every other running call is to be cancelled, and the round completes once
//! each has ended (drained). A call failing while others run ends nothing; when every call
//! started has failed the round has failed, with the exception of call 0 (the others noted).
//! An abort (the caller's cancellation, the run stopping) cancels every running call; the
//! round completes aborted once they have all ended.
//!
//! Calls are numbered from 0 in start order. Reports about a call that never started, or
//! a second report about one, change nothing (they answer [`Report::Ignored`]): no input
//! makes the machine panic or break its invariants.

/// Where one call of the round stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    Running,
    /// Told to stop (it lost, or the round was aborted); still unwinding.
    Cancelling,
    /// Returned a value that passed the output check, first of the round.
    Won,
    /// Failed on its own (before the round was decided).
    Failed,
    /// Ended after it was told to stop, whatever it raised or returned meanwhile.
    Drained,
}

/// How a finished round ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Completion {
    /// Call `winner` won; every other call has ended.
    Won { winner: usize },
    /// Every call failed: the round raises call 0's exception and notes `others`.
    Failed { others: Vec<usize> },
    /// Aborted; every call has ended.
    Aborted,
}

/// What a report changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Report {
    /// The call won: cancel `cancel` (the other running calls), then wait for them.
    Won { cancel: Vec<usize> },
    /// Recorded; the round goes on.
    Recorded,
    /// The report was about a call that never started, or was already reported.
    Ignored,
}

/// See the module documentation.
#[derive(Clone, Debug)]
pub struct Round {
    hedges: u32,
    calls: Vec<Call>,
    /// When the latest call started, or the latest hedge was skipped.
    latest: f64,
    winner: Option<usize>,
    aborted: bool,
}

impl Round {
    /// A round whose first call (call 0) starts at `now`, allowed `hedges` extra calls.
    pub fn new(now: f64, hedges: u32) -> Self {
        Round {
            hedges,
            calls: vec![Call::Running],
            latest: if now.is_nan() { 0.0 } else { now },
            winner: None,
            aborted: false,
        }
    }

    /// Calls started so far (never more than `1 + hedges`).
    pub fn started(&self) -> usize {
        self.calls.len()
    }

    pub fn call(&self, call: usize) -> Option<Call> {
        self.calls.get(call).copied()
    }

    pub fn winner(&self) -> Option<usize> {
        self.winner
    }

    fn may_hedge(&self) -> bool {
        self.winner.is_none()
            && !self.aborted
            && self.calls.len() < 1 + self.hedges as usize
            && self.calls.contains(&Call::Running)
    }

    /// When the next hedge is due (`None`: no further call will start). A `hedge_after`
    /// that is NaN or below 0 never makes one due.
    pub fn next_due(&self, hedge_after: f64) -> Option<f64> {
        if !self.may_hedge() || hedge_after.is_nan() || hedge_after < 0.0 {
            return None;
        }
        Some(self.latest + hedge_after)
    }

    /// Whether a hedge is due at `now`.
    pub fn due(&self, now: f64, hedge_after: f64) -> bool {
        self.next_due(hedge_after).is_some_and(|at| now >= at)
    }

    /// Start the due hedge at `now`: its call number, or `None` (and nothing changes) when
    /// no hedge is due.
    pub fn start_hedge(&mut self, now: f64, hedge_after: f64) -> Option<usize> {
        if !self.due(now, hedge_after) {
            return None;
        }
        self.calls.push(Call::Running);
        self.latest = self.latest.max(now);
        Some(self.calls.len() - 1)
    }

    /// The due hedge was skipped at `now` (no bulkhead permit, the budget refused it, the
    /// circuit is open): no call starts; the next one is due `hedge_after` after `now`.
    /// `false` (and nothing changes) when no hedge was due.
    pub fn skip_hedge(&mut self, now: f64, hedge_after: f64) -> bool {
        if !self.due(now, hedge_after) {
            return false;
        }
        self.latest = self.latest.max(now);
        true
    }

    fn running(&self, call: usize) -> bool {
        matches!(self.calls.get(call), Some(Call::Running))
    }

    /// Call `call` returned a value that passed the output check.
    pub fn succeeded(&mut self, call: usize) -> Report {
        match self.calls.get(call) {
            Some(Call::Running) if self.winner.is_none() && !self.aborted => {
                self.calls[call] = Call::Won;
                self.winner = Some(call);
                let mut cancel = Vec::new();
                for (i, state) in self.calls.iter_mut().enumerate() {
                    if *state == Call::Running {
                        *state = Call::Cancelling;
                        cancel.push(i);
                    }
                }
                Report::Won { cancel }
            }
            // Told to stop, it returned all the same: a loser, drained.
            Some(Call::Cancelling) => {
                self.calls[call] = Call::Drained;
                Report::Recorded
            }
            _ => Report::Ignored,
        }
    }

    /// Call `call` failed (raised, timed out, or returned a value failing its check).
    pub fn failed(&mut self, call: usize) -> Report {
        if self.running(call) {
            self.calls[call] = Call::Failed;
            Report::Recorded
        } else if matches!(self.calls.get(call), Some(Call::Cancelling)) {
            self.calls[call] = Call::Drained;
            Report::Recorded
        } else {
            Report::Ignored
        }
    }

    /// Call `call`, told to stop, has ended.
    pub fn drained(&mut self, call: usize) -> Report {
        if matches!(self.calls.get(call), Some(Call::Cancelling)) {
            self.calls[call] = Call::Drained;
            Report::Recorded
        } else {
            Report::Ignored
        }
    }

    /// The caller cancelled or the run is stopping: the running calls to cancel.
    pub fn abort(&mut self) -> Vec<usize> {
        if self.winner.is_some() || self.aborted {
            // Decided already (the losers are being drained), or aborted before.
            self.aborted = true;
            return Vec::new();
        }
        self.aborted = true;
        let mut cancel = Vec::new();
        for (i, state) in self.calls.iter_mut().enumerate() {
            if *state == Call::Running {
                *state = Call::Cancelling;
                cancel.push(i);
            }
        }
        cancel
    }

    /// How the round ended, once every call has ended; `None` while any call runs or drains.
    pub fn completion(&self) -> Option<Completion> {
        if self
            .calls
            .iter()
            .any(|c| matches!(c, Call::Running | Call::Cancelling))
        {
            return None;
        }
        if let Some(winner) = self.winner {
            return Some(Completion::Won { winner });
        }
        if self.calls.iter().all(|c| *c == Call::Failed) {
            return Some(Completion::Failed {
                others: (1..self.calls.len()).collect(),
            });
        }
        Some(Completion::Aborted)
    }
}

/// `execution(hedge_after=, hedges=)` validated (docs/contract.md#hedging), in argument
/// order: `hedge_after` a finite number `>= 0` (`None` when it is absent or a `Latency`,
/// whose own rules were checked when it was made), `hedges` an integer `>= 1` (saturated at
/// `u32::MAX`, more calls than a round can ever start).
pub fn hedging(
    hedge_after: Option<f64>,
    hedges: i64,
) -> Result<(Option<f64>, u32), crate::shared::SharedError> {
    use crate::shared::SharedError;
    if let Some(after) = hedge_after {
        if !(after.is_finite() && after >= 0.0) {
            return Err(SharedError::HedgeAfter(after));
        }
    }
    if hedges < 1 {
        return Err(SharedError::Hedges(hedges));
    }
    Ok((hedge_after, u32::try_from(hedges).unwrap_or(u32::MAX)))
}
