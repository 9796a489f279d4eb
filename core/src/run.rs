//! The per-run scheduling state machine.
//!
//! A [`Run`] is driven by events (an attempt succeeded / failed, a retry wait elapsed, a
//! cancelled attempt drained, a START was never carried out, a node's input was rejected
//! before its first attempt, the caller cancelled) and
//! answers each with the [`Command`]s to carry out, in order. It never looks at a clock:
//! time is the driver's business, which keeps the machine deterministic given its seed.
//! A run with a deadline ([`Run::set_deadline`]) is told the time instead ([`Run::clock`],
//! before each event), and decides from it each attempt's clipped timeout and whether a
//! retry's wait still fits.
//!
//! Job ids: forward job `i` is active node `i` of the [`Plan`]; the release of node `i` is
//! job `n + i` where `n = plan.len()`.
//!
//! Every method appends to a caller-owned `Vec<Command>` so the hot path allocates nothing.
//! On error nothing is appended and the state is unchanged.

use std::fmt;
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::SeedableRng;

use crate::graph::Plan;
use crate::policy::Policy;

#[path = "fanout.rs"]
mod fanout;

/// What a command asks the driver to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Op {
    /// Call the job now: attempt `attempt`, `arg` is the attempt timeout (or `None`).
    Start = 0,
    /// Wait `arg` seconds, then report [`Run::elapsed`]. `attempt` is the attempt that
    /// failed (the retry index `k` of the delay formula).
    Sleep = 1,
    /// Cancel the running attempt `attempt`; report [`Run::drained`] when it has ended.
    Cancel = 2,
    /// Drop the retry wait that followed the failure of attempt `attempt`; report nothing.
    StopSleep = 3,
    /// Attempt `attempt` failed retryably and may be retried: call the job's `retry_after`
    /// hook with that failure now and report [`Run::hinted`].
    Hint = 4,
    /// Attempt `attempt`'s failure is final because the retry's wait (`arg` seconds, `None`
    /// when the deadline had already passed) would not end before the run's deadline.
    NoRoom = 5,
    /// The run's deadline passed before attempt `attempt` of the job could start (the job
    /// was ready, or its retry wait had ended): the job fails with a timeout.
    Expire = 6,
    /// Like [`Op::Start`], but `arg` is the time left before the run's deadline, shorter
    /// than the job's own attempt timeout (or the job has none).
    StartClipped = 7,
    /// The `retry_after` hint reported for attempt `attempt` was unusable: its failure is
    /// final.
    BadHint = 8,
    /// Attempt `attempt`'s failure is final because the retry budget refused its retry
    /// ([`RetryGate`]).
    NoBudget = 9,
    /// Attempt `attempt`'s failure is final and the job has a fallback the run is not
    /// stopping for: call it once now. The job stays running: report [`Run::succeeded`]
    /// with its value, or [`Run::failed`] (its failure is then final), or, cancelled,
    /// [`Run::drained`].
    Fallback = 10,
    /// Fan-out: ask the source of `job` (a `Parallelizable` node) for item `attempt`; report
    /// [`Run::drawn`] or [`Run::draw_failed`].
    Draw = 11,
    /// Fan-out: close the source of `job` (a generator's `close()`, an async generator's
    /// `aclose()`); report [`Run::closed`] when it has finished.
    Close = 12,
    /// Fan-out: cancel the draw of item `attempt` from the source of `job` in flight; its
    /// end is reported as any draw's ([`Run::drawn`] or [`Run::draw_failed`]).
    StopDraw = 13,
}

/// What a run asks before a forward retry and tells of each forward first attempt: the
/// retry budget shared across runs (docs/contract.md#retry-budget). The core decides when
/// to ask; the gate holds the shared state and the clock.
pub trait RetryGate: Send + Sync {
    /// A forward job's first attempt starts.
    fn first_attempt(&mut self);
    /// A forward retry would be scheduled: `false` refuses it (the failure is final).
    fn allow_retry(&mut self) -> bool;
}

/// A [`RetryGate`] held by a run.
struct Gate(Box<dyn RetryGate>);

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RetryGate")
    }
}

/// One instruction for the driver.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Command {
    pub op: Op,
    pub job: u32,
    pub attempt: u32,
    /// START: the attempt timeout, SLEEP: the delay (seconds); otherwise `None`.
    pub arg: Option<f64>,
}

/// Where a job stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JobState {
    /// Forward: not started yet. Release: owed, waiting for its turn.
    Waiting,
    /// An attempt was started and has not been reported yet.
    Running,
    /// Between a failed attempt and the next one.
    Sleeping,
    /// Forward only: CANCEL was issued; waiting for `drained`.
    Cancelling,
    /// Completed successfully.
    Succeeded,
    /// Failed for good (nonretryable, or retries exhausted).
    Failed,
    /// Forward only: cancelled by the core and drained (or reported unstarted).
    Drained,
    /// Forward only: its input was rejected before attempt 0; nothing was called.
    Rejected,
    /// Forward only: its retry wait was dropped by the core (STOP_SLEEP).
    Stopped,
    /// Between a failed attempt and the report of its `retry_after` hook (HINT).
    Hinting,
    /// Forward only: the run's deadline passed before its next attempt could start.
    Expired,
    /// Release only: its START was reported as never carried out.
    Unstarted,
    /// Release only: no release is owed for this node.
    NotOwed,
}

impl JobState {
    fn describe(self) -> &'static str {
        match self {
            JobState::Waiting => "waiting",
            JobState::Running => "running",
            JobState::Sleeping => "waiting to retry",
            JobState::Cancelling => "being cancelled",
            JobState::Succeeded => "already succeeded",
            JobState::Failed => "already failed",
            JobState::Drained => "already drained",
            JobState::Rejected => "rejected",
            JobState::Stopped => "stopped",
            JobState::Hinting => "waiting for its retry_after hint",
            JobState::Expired => "expired",
            JobState::Unstarted => "unstarted",
            JobState::NotOwed => "not owed",
        }
    }
}

/// What a job's `retry_after` hook said (see [`Run::hinted`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Hint {
    /// Wait this many seconds (capped by `max_delay`, no jitter); NaN, negative, or
    /// infinite without a cap is unusable.
    Wait(f64),
    /// No hint: the backoff wait applies.
    Backoff,
    /// The hook raised or returned something that is not a number or `None`.
    Unusable,
}

/// What [`Run::failed`] decided for the failed attempt.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Failure {
    /// Another attempt follows after a wait of `delay` seconds (the SLEEP command's arg).
    Retry { delay: f64 },
    /// The job failed for good: nonretryable, retries exhausted, or the run aborted.
    Final,
    /// The job was being cancelled by the core: the report changes nothing.
    Ignored,
    /// A retry is allowed and the job has a `retry_after` hook: the HINT command asks the
    /// driver for it; [`Run::hinted`] then decides.
    AskHook,
}

/// Misuse of the protocol. The run is unchanged when one is returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunError {
    /// The job id is not a job of this run (or a release job before shutdown began).
    UnknownJob { event: &'static str, job: i64 },
    /// The event does not fit the job's state.
    WrongState {
        event: &'static str,
        job: u32,
        node: String,
        release: bool,
        state: JobState,
    },
    /// `start` after `start` or after `begin_shutdown`.
    AlreadyStarted,
    /// `begin_shutdown` while forward jobs are still running, waiting or draining.
    NotQuiescent { pending: u32 },
    /// `begin_shutdown` twice.
    ShutdownBegun,
    /// A fan-out handed to [`Run::with_fan_out`] does not fit the plan.
    BadFanOut(String),
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::UnknownJob { event, job } => {
                write!(f, "Run.{event}: {job} is not a job of this run")
            }
            RunError::WrongState {
                event,
                job,
                node,
                release,
                state,
            } => {
                let kind = if *release { "release of node" } else { "node" };
                write!(
                    f,
                    "Run.{event}: job {job} ({kind} '{node}') is {}",
                    state.describe()
                )
            }
            RunError::AlreadyStarted => f.write_str("Run.start: the run was already started"),
            RunError::NotQuiescent { pending } => write!(
                f,
                "Run.begin_shutdown: {pending} forward job(s) still pending"
            ),
            RunError::ShutdownBegun => f.write_str("Run.begin_shutdown: shutdown already began"),
            RunError::BadFanOut(why) => write!(f, "Run.with_fan_out: {why}"),
        }
    }
}

impl std::error::Error for RunError {}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Idle,
    Forward,
    Shutdown,
}

#[derive(Clone, Copy, Debug)]
struct Job {
    state: JobState,
    attempts: u32,
    /// Forward: active dependencies not yet succeeded. Shutdown: consumers not yet complete.
    remaining: u32,
}

/// Scheduling state of one execution of a [`Plan`].
#[derive(Debug)]
pub struct Run {
    plan: Arc<Plan>,
    phase: Phase,
    aborted: bool,
    pending: u32,
    /// Owned forward jobs whose first attempt started (release owed).
    owed: u32,
    /// Owed releases not yet completed (shutdown).
    outstanding: u32,
    jobs: Vec<Job>,
    /// Release jobs, allocated by `begin_shutdown` only when a release is owed.
    rels: Vec<Job>,
    seed: Option<u64>,
    rng: Option<SmallRng>,
    /// The forward phase's deadline, on the driver's clock (finite).
    deadline: Option<f64>,
    /// The driver's time as last told ([`Run::clock`]).
    now: f64,
    /// Test mode: every retry wait is 0 seconds (the attempts are unchanged).
    instant_retries: bool,
    /// The retry budget's gate, if the run draws on one.
    gate: Option<Gate>,
    /// Per forward job: it has a fallback not called yet (empty: none has one).
    fallbacks: Vec<bool>,
    /// Fan-out: the number of the plan's jobs; jobs from here on were grown per item.
    base: usize,
    /// Fan-out: what each grown job is (`jobs[base + k]` is `grown[k]`).
    grown: Vec<fanout::Grown>,
    /// Fan-out: each `Parallelizable` node's state (empty: the plan has none).
    fans: Vec<fanout::Fan>,
    /// Fan-out: per plan job, `(fan, position)` when it is a branch template.
    templates: Vec<Option<(u32, u32)>>,
}

enum Target {
    Forward(usize),
    Release(usize),
}

impl Run {
    /// A fresh run. `seed` makes the jitter reproducible; `None` seeds from the thread RNG
    /// (itself seeded by the OS) the first time a delay is drawn.
    pub fn new(plan: Arc<Plan>, seed: Option<u64>) -> Self {
        let plan_len = plan.len();
        let jobs = (0..plan.len())
            .map(|j| Job {
                state: JobState::Waiting,
                attempts: 0,
                remaining: plan.deps.row_len(j),
            })
            .collect();
        Run {
            plan,
            phase: Phase::Idle,
            aborted: false,
            pending: 0,
            owed: 0,
            outstanding: 0,
            jobs,
            rels: Vec::new(),
            seed,
            rng: None,
            deadline: None,
            now: 0.0,
            instant_retries: false,
            gate: None,
            fallbacks: Vec::new(),
            base: plan_len,
            grown: Vec::new(),
            fans: Vec::new(),
            templates: Vec::new(),
        }
    }

    /// The plan job whose node a job runs: itself, or the template of a grown job.
    #[inline]
    /// One release job per job: owed (`Waiting`) where the job's template has a release
    /// and the job was attempted, `NotOwed` otherwise.
    fn release_jobs(&self) -> Vec<Job> {
        (0..self.jobs.len())
            .map(|i| Job {
                state: if self.plan.releases[self.tpl(i)].is_some() && self.jobs[i].attempts > 0 {
                    JobState::Waiting
                } else {
                    JobState::NotOwed
                },
                attempts: 0,
                remaining: 0,
            })
            .collect()
    }

    fn tpl(&self, job: usize) -> usize {
        if job < self.base {
            job
        } else {
            self.grown_template(job)
        }
    }

    /// Draw on a retry budget: `gate` hears of every forward first attempt and is asked
    /// before every forward retry (never a release's).
    pub fn with_retry_gate(mut self, gate: Box<dyn RetryGate>) -> Self {
        self.gate = Some(Gate(gate));
        self
    }

    /// The forward jobs (indexes) that have a fallback: a final failure of one while the
    /// run is not aborted emits [`Op::Fallback`] instead of failing it (once per job).
    pub fn with_fallbacks(mut self, jobs: &[usize]) -> Self {
        let mut fallbacks = vec![false; self.jobs.len()];
        for &j in jobs {
            if let Some(slot) = fallbacks.get_mut(j) {
                *slot = true;
            }
        }
        self.fallbacks = fallbacks;
        self
    }

    /// Give the forward phase a deadline `at`, on the clock of [`Run::clock`]; `None` or a
    /// non-finite value means none. With a deadline, every forward attempt's timeout is the
    /// smaller of its policy timeout and the time left ([`Op::StartClipped`] when the time
    /// left is the smaller), a retry whose wait would not end before the deadline is not
    /// taken ([`Op::NoRoom`]), and a job that could start only at or after the deadline
    /// fails ([`Op::Expire`]). Releases are never bound by it.
    pub fn set_deadline(&mut self, at: Option<f64>) {
        self.deadline = at.filter(|d| d.is_finite());
    }

    /// The forward phase's deadline, if any.
    #[inline]
    pub fn deadline(&self) -> Option<f64> {
        self.deadline
    }

    /// Tell the run the driver's current time (seconds, the clock of the deadline). Only
    /// read when the run has a deadline; the driver calls it before each event it reports.
    #[inline]
    pub fn clock(&mut self, now: f64) {
        self.now = now;
    }

    /// Seconds left before the deadline (`None` without one); `<= 0` once it has passed.
    #[inline]
    fn left(&self) -> Option<f64> {
        self.deadline.map(|d| d - self.now)
    }

    /// Builder: make every retry wait (of nodes and of releases) 0 seconds, for tests.
    /// Attempts, retry decisions and the order of events are unchanged, and no jitter is
    /// drawn.
    pub fn with_instant_retries(mut self, on: bool) -> Self {
        self.instant_retries = on;
        self
    }

    /// Whether retry waits are 0 seconds (see [`Run::with_instant_retries`]).
    pub fn instant_retries(&self) -> bool {
        self.instant_retries
    }

    /// The plan this run executes.
    pub fn plan(&self) -> &Arc<Plan> {
        &self.plan
    }

    /// Jobs currently running, waiting to retry or draining (0 = the phase is quiescent).
    #[inline]
    pub fn pending(&self) -> u32 {
        self.pending
    }

    /// Exactly one job is pending: a START emitted now is all the run has to do, so the
    /// driver may carry it out where it stands (the inline carrier, an inline await) rather
    /// than beside other work. The one rule both do it by.
    #[inline]
    pub fn lone(&self) -> bool {
        self.pending == 1
    }

    /// A forward job failed for good, or `cancel` was called.
    #[inline]
    pub fn aborted(&self) -> bool {
        self.aborted
    }

    /// Shutdown began and every owed release has completed.
    #[inline]
    pub fn finished(&self) -> bool {
        self.phase == Phase::Shutdown && self.outstanding == 0
    }

    /// Whether `begin_shutdown` was called.
    #[inline]
    pub fn shutting_down(&self) -> bool {
        self.phase == Phase::Shutdown
    }

    /// Number of releases owed so far (owned jobs whose first attempt started).
    #[inline]
    pub fn owed_releases(&self) -> u32 {
        self.owed
    }

    fn target(&self, event: &'static str, job: i64) -> Result<Target, RunError> {
        let n = self.jobs.len() as i64;
        if (0..n).contains(&job) {
            Ok(Target::Forward(job as usize))
        } else if job >= n && job < 2 * n && !self.rels.is_empty() {
            Ok(Target::Release((job - n) as usize))
        } else {
            Err(RunError::UnknownJob { event, job })
        }
    }

    fn wrong(&self, event: &'static str, t: &Target) -> RunError {
        let n = self.jobs.len();
        let (job, i, release, state) = match *t {
            Target::Forward(i) => (i, i, false, self.jobs[i].state),
            Target::Release(i) => (n + i, i, true, self.rels[i].state),
        };
        RunError::WrongState {
            event,
            job: job as u32,
            node: self.job_name(i),
            release,
            state,
        }
    }

    /// State of a job (forward `0..n`, release `n..2n`); `None` for an unknown id.
    /// Release jobs are [`JobState::NotOwed`] before shutdown.
    pub fn state(&self, job: u32) -> Option<JobState> {
        let n = self.jobs.len();
        let j = job as usize;
        if j < n {
            Some(self.jobs[j].state)
        } else if j < 2 * n {
            Some(self.rels.get(j - n).map_or(JobState::NotOwed, |r| r.state))
        } else {
            None
        }
    }

    /// Attempts started so far for `job` (an attempt reported unstarted is not counted).
    pub fn attempts(&self, job: i64) -> Result<u32, RunError> {
        let n = self.jobs.len() as i64;
        if (0..n).contains(&job) {
            Ok(self.jobs[job as usize].attempts)
        } else if job >= n && job < 2 * n {
            Ok(self.rels.get((job - n) as usize).map_or(0, |r| r.attempts))
        } else {
            Err(RunError::UnknownJob {
                event: "attempts",
                job,
            })
        }
    }

    /// Whether the job's first attempt started (for an owned forward job: release owed).
    pub fn started(&self, job: i64) -> Result<bool, RunError> {
        self.attempts(job).map(|a| a > 0)
    }

    /// Forward jobs that completed successfully, ascending.
    pub fn succeeded_jobs(&self) -> Vec<u32> {
        self.jobs
            .iter()
            .enumerate()
            .filter(|(_, j)| j.state == JobState::Succeeded)
            .map(|(i, _)| i as u32)
            .collect()
    }

    fn jitter(&mut self, policy: &Policy, retry: u32) -> f64 {
        if self.instant_retries {
            return 0.0;
        }
        let seed = self.seed;
        let rng = self.rng.get_or_insert_with(|| match seed {
            Some(s) => SmallRng::seed_from_u64(s),
            None => SmallRng::from_rng(&mut rand::rng()),
        });
        policy.delay(retry, rng)
    }

    #[inline]
    fn launch(&mut self, job: usize, out: &mut Vec<Command>) {
        let mut op = Op::Start;
        let mut timeout = self.plan.policies[self.tpl(job)].timeout();
        if let Some(left) = self.left() {
            if left <= 0.0 {
                self.expire(job, out);
                return;
            }
            if timeout.is_none_or(|t| t > left) {
                timeout = Some(left);
                op = Op::StartClipped;
            }
        }
        let owns = self.plan.releases[self.tpl(job)].is_some();
        let j = &mut self.jobs[job];
        if j.state == JobState::Waiting {
            self.pending += 1;
            if owns {
                self.owed += 1;
            }
        }
        j.state = JobState::Running;
        let attempt = j.attempts;
        // saturating: u32::MAX retries can never all run, but never overflow either
        j.attempts = j.attempts.saturating_add(1);
        if attempt == 0 {
            if let Some(gate) = self.gate.as_mut() {
                gate.0.first_attempt();
            }
        }
        out.push(Command {
            op,
            job: job as u32,
            attempt,
            arg: timeout,
        });
    }

    /// The deadline has passed before `job` could start its next attempt.
    fn expire(&mut self, job: usize, out: &mut Vec<Command>) {
        let j = &mut self.jobs[job];
        if j.state == JobState::Sleeping {
            self.pending -= 1;
        }
        j.state = JobState::Expired;
        out.push(Command {
            op: Op::Expire,
            job: job as u32,
            attempt: j.attempts,
            arg: None,
        });
        if !self.aborted {
            self.abort(out);
        }
    }

    /// A forward job's retry after the failure of `attempt` waits `delay`: SLEEP, or the
    /// failure is final when the wait would not end before the deadline.
    fn schedule(&mut self, i: usize, attempt: u32, delay: f64, out: &mut Vec<Command>) -> Failure {
        if let Some(left) = self.left() {
            if delay >= left {
                self.no_room(i, attempt, Some(delay), out);
                return Failure::Final;
            }
        }
        if let Some(gate) = self.gate.as_mut() {
            if !gate.0.allow_retry() {
                out.push(Command {
                    op: Op::NoBudget,
                    job: i as u32,
                    attempt,
                    arg: None,
                });
                self.fail_for_good(i, out);
                return Failure::Final;
            }
        }
        self.jobs[i].state = JobState::Sleeping;
        out.push(Command {
            op: Op::Sleep,
            job: i as u32,
            attempt,
            arg: Some(delay),
        });
        Failure::Retry { delay }
    }

    fn no_room(&mut self, i: usize, attempt: u32, delay: Option<f64>, out: &mut Vec<Command>) {
        out.push(Command {
            op: Op::NoRoom,
            job: i as u32,
            attempt,
            arg: delay,
        });
        self.fail_for_good(i, out);
    }

    fn fail_for_good(&mut self, i: usize, out: &mut Vec<Command>) {
        if !self.aborted && self.fallbacks.get(i).copied().unwrap_or(false) {
            self.fallbacks[i] = false; // called once
            self.jobs[i].state = JobState::Running;
            out.push(Command {
                op: Op::Fallback,
                job: i as u32,
                attempt: self.jobs[i].attempts.saturating_sub(1),
                arg: None,
            });
            return;
        }
        self.jobs[i].state = JobState::Failed;
        self.pending -= 1;
        if !self.aborted {
            self.abort(out);
        }
    }

    /// A release's retry after the failure of `attempt` waits `delay`.
    fn schedule_release(
        &mut self,
        i: usize,
        attempt: u32,
        delay: f64,
        out: &mut Vec<Command>,
    ) -> Failure {
        self.rels[i].state = JobState::Sleeping;
        out.push(Command {
            op: Op::Sleep,
            job: (self.jobs.len() + i) as u32,
            attempt,
            arg: Some(delay),
        });
        Failure::Retry { delay }
    }

    #[inline]
    fn launch_release(&mut self, i: usize, out: &mut Vec<Command>) {
        let n = self.jobs.len();
        let timeout = self.plan.releases[self.tpl(i)].and_then(|p| p.timeout());
        let r = &mut self.rels[i];
        if r.state == JobState::Waiting {
            self.pending += 1;
        }
        r.state = JobState::Running;
        let attempt = r.attempts;
        r.attempts = r.attempts.saturating_add(1);
        out.push(Command {
            op: Op::Start,
            job: (n + i) as u32,
            attempt,
            arg: timeout,
        });
    }

    fn abort(&mut self, out: &mut Vec<Command>) {
        self.aborted = true;
        for (i, j) in self.jobs.iter_mut().enumerate() {
            match j.state {
                JobState::Running => {
                    j.state = JobState::Cancelling;
                    out.push(Command {
                        op: Op::Cancel,
                        job: i as u32,
                        attempt: j.attempts - 1,
                        arg: None,
                    });
                }
                JobState::Sleeping => {
                    j.state = JobState::Stopped;
                    self.pending -= 1;
                    out.push(Command {
                        op: Op::StopSleep,
                        job: i as u32,
                        attempt: j.attempts - 1,
                        arg: None,
                    });
                }
                JobState::Hinting => {
                    // Its failure is final: no retry follows an abort.
                    j.state = JobState::Failed;
                    self.pending -= 1;
                }
                _ => {}
            }
        }
        if !self.fans.is_empty() {
            self.fan_abort(out);
        }
    }

    /// Begin the forward phase: START every node with no active dependency.
    pub fn start(&mut self, out: &mut Vec<Command>) -> Result<(), RunError> {
        if self.phase != Phase::Idle {
            return Err(RunError::AlreadyStarted);
        }
        self.phase = Phase::Forward;
        if self.aborted {
            return Ok(());
        }
        let plan = Arc::clone(&self.plan);
        for &root in &plan.roots {
            if self.aborted {
                break; // the deadline had passed already
            }
            self.launch(root as usize, out);
        }
        Ok(())
    }

    /// The current attempt of `job` returned (and its value passed the output check).
    ///
    /// Ignored for a forward job the core has CANCELled (only `drained` counts for it).
    pub fn succeeded(&mut self, job: i64, out: &mut Vec<Command>) -> Result<(), RunError> {
        match self.target("succeeded", job)? {
            Target::Forward(i) => match self.jobs[i].state {
                JobState::Running => {
                    self.jobs[i].state = JobState::Succeeded;
                    self.pending -= 1;
                    if !self.fans.is_empty() {
                        self.fan_succeeded(i, out);
                        return Ok(());
                    }
                    let plan = Arc::clone(&self.plan);
                    for &c in plan.consumers.row(i) {
                        let cj = &mut self.jobs[c as usize];
                        cj.remaining -= 1;
                        if cj.remaining == 0 && !self.aborted {
                            self.launch(c as usize, out);
                        }
                    }
                    Ok(())
                }
                JobState::Cancelling | JobState::Drained => Ok(()),
                _ => Err(self.wrong("succeeded", &Target::Forward(i))),
            },
            Target::Release(i) => match self.rels[i].state {
                JobState::Running => {
                    self.rels[i].state = JobState::Succeeded;
                    self.pending -= 1;
                    self.release_done(i, out);
                    Ok(())
                }
                _ => Err(self.wrong("succeeded", &Target::Release(i))),
            },
        }
    }

    /// The current attempt of `job` failed; `retryable` says whether the exception is in
    /// the job's retryable set. Returns what was decided: a retry after a delay (the SLEEP
    /// command is appended), or a final failure, which aborts the forward phase (for a
    /// forward job) or completes its release (for a release job).
    ///
    /// Ignored for a forward job the core has CANCELled (only `drained` counts for it).
    pub fn failed(
        &mut self,
        job: i64,
        retryable: bool,
        out: &mut Vec<Command>,
    ) -> Result<Failure, RunError> {
        match self.target("failed", job)? {
            Target::Forward(i) => match self.jobs[i].state {
                JobState::Running => {
                    let policy = self.plan.policies[self.tpl(i)];
                    let attempt = self.jobs[i].attempts - 1;
                    if !self.aborted && policy.may_retry(attempt, retryable) {
                        if self.left().is_some_and(|left| left <= 0.0) {
                            self.no_room(i, attempt, None, out);
                            Ok(Failure::Final)
                        } else if policy.retry_after() {
                            self.jobs[i].state = JobState::Hinting;
                            out.push(Command {
                                op: Op::Hint,
                                job: i as u32,
                                attempt,
                                arg: None,
                            });
                            Ok(Failure::AskHook)
                        } else {
                            let delay = self.jitter(&policy, attempt);
                            Ok(self.schedule(i, attempt, delay, out))
                        }
                    } else {
                        self.fail_for_good(i, out);
                        Ok(Failure::Final)
                    }
                }
                JobState::Cancelling | JobState::Drained => Ok(Failure::Ignored),
                _ => Err(self.wrong("failed", &Target::Forward(i))),
            },
            Target::Release(i) => match self.rels[i].state {
                JobState::Running => {
                    let policy = self.plan.releases[self.tpl(i)].unwrap_or_default();
                    let attempt = self.rels[i].attempts - 1;
                    if policy.may_retry(attempt, retryable) {
                        if policy.retry_after() {
                            self.rels[i].state = JobState::Hinting;
                            out.push(Command {
                                op: Op::Hint,
                                job: (self.jobs.len() + i) as u32,
                                attempt,
                                arg: None,
                            });
                            Ok(Failure::AskHook)
                        } else {
                            let delay = self.jitter(&policy, attempt);
                            Ok(self.schedule_release(i, attempt, delay, out))
                        }
                    } else {
                        self.rels[i].state = JobState::Failed;
                        self.pending -= 1;
                        self.release_done(i, out);
                        Ok(Failure::Final)
                    }
                }
                _ => Err(self.wrong("failed", &Target::Release(i))),
            },
        }
    }

    /// What the `retry_after` hook of `job` said about the failure of its last attempt
    /// (asked for by [`Op::Hint`]): SLEEP for the hinted wait (capped by `max_delay`, no
    /// jitter) or the backoff wait; an unusable hint makes the failure final
    /// ([`Op::BadHint`]). A forward wait is checked against the deadline like any other.
    ///
    /// Ignored for a forward job whose failure became final meanwhile (the run aborted):
    /// returns [`Failure::Final`] with no commands.
    pub fn hinted(
        &mut self,
        job: i64,
        hint: Hint,
        out: &mut Vec<Command>,
    ) -> Result<Failure, RunError> {
        match self.target("hinted", job)? {
            Target::Forward(i) => match self.jobs[i].state {
                JobState::Hinting => {
                    let policy = self.plan.policies[self.tpl(i)];
                    let attempt = self.jobs[i].attempts - 1;
                    match self.hint_delay(&policy, attempt, hint) {
                        Some(delay) => Ok(self.schedule(i, attempt, delay, out)),
                        None => {
                            out.push(Command {
                                op: Op::BadHint,
                                job: i as u32,
                                attempt,
                                arg: None,
                            });
                            self.fail_for_good(i, out);
                            Ok(Failure::Final)
                        }
                    }
                }
                JobState::Failed if self.aborted => Ok(Failure::Final),
                _ => Err(self.wrong("hinted", &Target::Forward(i))),
            },
            Target::Release(i) => match self.rels[i].state {
                JobState::Hinting => {
                    let policy = self.plan.releases[self.tpl(i)].unwrap_or_default();
                    let attempt = self.rels[i].attempts - 1;
                    match self.hint_delay(&policy, attempt, hint) {
                        Some(delay) => Ok(self.schedule_release(i, attempt, delay, out)),
                        None => {
                            out.push(Command {
                                op: Op::BadHint,
                                job: (self.jobs.len() + i) as u32,
                                attempt,
                                arg: None,
                            });
                            self.rels[i].state = JobState::Failed;
                            self.pending -= 1;
                            self.release_done(i, out);
                            Ok(Failure::Final)
                        }
                    }
                }
                _ => Err(self.wrong("hinted", &Target::Release(i))),
            },
        }
    }

    /// The wait a hint gives (0 with instant retries), or `None` when it is unusable.
    fn hint_delay(&mut self, policy: &Policy, attempt: u32, hint: Hint) -> Option<f64> {
        match hint {
            Hint::Wait(v) => policy
                .hinted_delay(v)
                .map(|d| if self.instant_retries { 0.0 } else { d }),
            Hint::Backoff => Some(self.jitter(policy, attempt)),
            Hint::Unusable => None,
        }
    }

    /// The retry wait of `job` is over: START its next attempt.
    ///
    /// Ignored after the core dropped the wait (STOP_SLEEP).
    pub fn elapsed(&mut self, job: i64, out: &mut Vec<Command>) -> Result<(), RunError> {
        match self.target("elapsed", job)? {
            Target::Forward(i) => match self.jobs[i].state {
                JobState::Sleeping => {
                    self.launch(i, out);
                    Ok(())
                }
                JobState::Stopped => Ok(()),
                _ => Err(self.wrong("elapsed", &Target::Forward(i))),
            },
            Target::Release(i) => match self.rels[i].state {
                JobState::Sleeping => {
                    self.launch_release(i, out);
                    Ok(())
                }
                _ => Err(self.wrong("elapsed", &Target::Release(i))),
            },
        }
    }

    /// A job the core CANCELled has ended, whatever its outcome. Repeats are ignored.
    pub fn drained(&mut self, job: i64, _out: &mut Vec<Command>) -> Result<(), RunError> {
        match self.target("drained", job)? {
            Target::Forward(i) => match self.jobs[i].state {
                JobState::Cancelling => {
                    self.jobs[i].state = JobState::Drained;
                    self.pending -= 1;
                    Ok(())
                }
                JobState::Drained => Ok(()),
                _ => Err(self.wrong("drained", &Target::Forward(i))),
            },
            t @ Target::Release(_) => Err(self.wrong("drained", &t)),
        }
    }

    /// A START of `job` was never carried out (its task was cancelled before the call
    /// began). The attempt is not counted; for attempt 0 of an owned forward job this
    /// withdraws the release obligation.
    ///
    /// For a CANCELled forward job this ends it like `drained` (a later `drained` is
    /// ignored). For a running forward job (not cancelled by the core) it ends the job and
    /// aborts the forward phase, as the node can no longer produce its value. For a
    /// release it completes the release (nothing ran, no retry).
    pub fn unstarted(&mut self, job: i64, out: &mut Vec<Command>) -> Result<(), RunError> {
        match self.target("unstarted", job)? {
            Target::Forward(i) => match self.jobs[i].state {
                JobState::Running | JobState::Cancelling => {
                    let was_running = self.jobs[i].state == JobState::Running;
                    self.withdraw(i);
                    self.jobs[i].state = JobState::Drained;
                    self.pending -= 1;
                    if was_running && !self.aborted {
                        self.abort(out);
                    }
                    Ok(())
                }
                JobState::Drained => Ok(()),
                _ => Err(self.wrong("unstarted", &Target::Forward(i))),
            },
            Target::Release(i) => match self.rels[i].state {
                JobState::Running => {
                    self.rels[i].attempts -= 1;
                    self.rels[i].state = JobState::Unstarted;
                    self.pending -= 1;
                    self.release_done(i, out);
                    Ok(())
                }
                _ => Err(self.wrong("unstarted", &Target::Release(i))),
            },
        }
    }

    /// The input of forward `job` was rejected before its attempt 0 could call anything
    /// (a missing value, a failed input check). The job fails for good without an attempt:
    /// the attempt is not counted, no release is owed, and the forward phase aborts.
    ///
    /// Only the first attempt can be rejected (inputs are checked once). For a job the
    /// core has CANCELled meanwhile it ends the job the same way (the run is aborted
    /// already).
    pub fn rejected(&mut self, job: i64, out: &mut Vec<Command>) -> Result<(), RunError> {
        match self.target("rejected", job)? {
            Target::Forward(i)
                if self.jobs[i].attempts == 1
                    && matches!(self.jobs[i].state, JobState::Running | JobState::Cancelling) =>
            {
                self.withdraw(i);
                self.jobs[i].state = JobState::Rejected;
                self.pending -= 1;
                if !self.aborted {
                    self.abort(out);
                }
                Ok(())
            }
            t => Err(self.wrong("rejected", &t)),
        }
    }

    fn withdraw(&mut self, i: usize) {
        let t = self.tpl(i);
        let j = &mut self.jobs[i];
        j.attempts -= 1;
        if j.attempts == 0 && self.plan.releases[t].is_some() {
            self.owed -= 1;
        }
    }

    /// Caller cancellation (or abort) of the forward phase: CANCEL running forward jobs,
    /// STOP_SLEEP waiting ones, start nothing new. Idempotent; no effect once shutdown began.
    pub fn cancel(&mut self, out: &mut Vec<Command>) {
        if self.phase != Phase::Shutdown && !self.aborted {
            self.abort(out);
        }
    }

    /// The driver can no longer carry out the forward phase: its own bookkeeping failed
    /// (a `RecursionError` or `MemoryError` near the interpreter's limits, or a bug), and
    /// what it was told may not have reached the core. It has stopped every attempt it
    /// started without waiting for them; every forward job not over is taken as over
    /// (drained, or its retry dropped), and the shutdown phase begins as in
    /// `begin_shutdown`: every release owed (an owned job whose first attempt started) is
    /// still carried out, in dependency order. Commands a later report of a forward job
    /// would give are none: `drained` and `unstarted` accept it.
    pub fn abandon(&mut self, out: &mut Vec<Command>) -> Result<(), RunError> {
        if self.phase == Phase::Shutdown {
            return Err(RunError::ShutdownBegun);
        }
        self.aborted = true;
        for fan in self.fans.iter_mut() {
            fan.abandon();
        }
        for j in self.jobs.iter_mut() {
            j.state = match j.state {
                JobState::Running | JobState::Cancelling => JobState::Drained,
                JobState::Sleeping => JobState::Stopped,
                JobState::Hinting => JobState::Failed,
                state => state,
            };
        }
        self.pending = 0;
        self.begin_shutdown(out)
    }

    /// End of the forward phase: START the first releases. Requires `pending == 0`.
    ///
    /// A release is owed for every owned node whose first attempt started; it starts once
    /// every consumer of its node has completed, where a node completes when all its
    /// consumers have completed and, if it owes a release, that release has completed.
    pub fn begin_shutdown(&mut self, out: &mut Vec<Command>) -> Result<(), RunError> {
        if self.phase == Phase::Shutdown {
            return Err(RunError::ShutdownBegun);
        }
        if self.pending != 0 {
            return Err(RunError::NotQuiescent {
                pending: self.pending,
            });
        }
        self.phase = Phase::Shutdown;
        if self.owed == 0 {
            return Ok(());
        }
        let n = self.jobs.len();
        let plan = Arc::clone(&self.plan);
        if !self.fans.is_empty() {
            self.fan_shutdown(out);
            return Ok(());
        }
        self.rels = self.release_jobs();
        self.outstanding = self.owed;
        let mut ready: Vec<u32> = Vec::new();
        for i in 0..n {
            let c = plan.consumers.row_len(i);
            self.jobs[i].remaining = c;
            if c == 0 {
                ready.push(i as u32);
            }
        }
        // Nodes are made ready leaves-first; propagate from every leaf.
        let mut complete: Vec<u32> = Vec::new();
        for &i in &ready {
            self.make_ready(i as usize, &mut complete, out);
        }
        self.propagate(&mut complete, out);
        Ok(())
    }

    #[inline]
    fn make_ready(&mut self, i: usize, complete: &mut Vec<u32>, out: &mut Vec<Command>) {
        if self.rels[i].state == JobState::Waiting {
            self.launch_release(i, out);
        } else {
            complete.push(i as u32);
        }
    }

    fn propagate(&mut self, complete: &mut Vec<u32>, out: &mut Vec<Command>) {
        if !self.fans.is_empty() {
            self.fan_propagate(complete, out);
            return;
        }
        let plan = Arc::clone(&self.plan);
        while let Some(i) = complete.pop() {
            for &d in plan.deps.row(i as usize) {
                let dj = &mut self.jobs[d as usize];
                dj.remaining -= 1;
                if dj.remaining == 0 {
                    self.make_ready(d as usize, complete, out);
                }
            }
        }
    }

    fn release_done(&mut self, i: usize, out: &mut Vec<Command>) {
        self.outstanding -= 1;
        let mut complete = vec![i as u32];
        self.propagate(&mut complete, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Graph, NodeDef};

    fn plan(nodes: Vec<NodeDef>, finals: &[&str]) -> Arc<Plan> {
        Arc::new(
            Graph::new(nodes)
                .unwrap()
                .select(finals, &[] as &[&str])
                .unwrap(),
        )
    }

    fn start(job: u32, attempt: u32, timeout: Option<f64>) -> Command {
        Command {
            op: Op::Start,
            job,
            attempt,
            arg: timeout,
        }
    }

    fn cmd(op: Op, job: u32, attempt: u32) -> Command {
        Command {
            op,
            job,
            attempt,
            arg: None,
        }
    }

    fn retrying(retries: u32) -> Policy {
        Policy::new(Some(5.0), retries, 0.5, 2.0).unwrap()
    }

    #[test]
    fn chain_runs_in_order() {
        let p = plan(
            vec![
                NodeDef::new("a", &["x"]),
                NodeDef::new("b", &["a"]),
                NodeDef::new("c", &["b"]),
            ],
            &["c"],
        );
        let mut r = Run::new(p, Some(1));
        let mut out = Vec::new();
        r.start(&mut out).unwrap();
        assert_eq!(out, [start(0, 0, None)]);
        assert_eq!(r.pending(), 1);
        out.clear();
        r.succeeded(0, &mut out).unwrap();
        assert_eq!(out, [start(1, 0, None)]);
        out.clear();
        r.succeeded(1, &mut out).unwrap();
        r.succeeded(2, &mut out).unwrap();
        assert_eq!(out, [start(2, 0, None)]);
        assert_eq!(r.pending(), 0);
        assert_eq!(r.succeeded_jobs(), [0, 1, 2]);
        assert!(!r.finished());
        out.clear();
        r.begin_shutdown(&mut out).unwrap();
        assert!(out.is_empty());
        assert!(r.finished());
    }

    #[test]
    fn fan_out_starts_together_and_joins() {
        let p = plan(
            vec![
                NodeDef::new("src", &[]),
                NodeDef::new("l", &["src"]),
                NodeDef::new("r", &["src"]),
                NodeDef::new("join", &["l", "r"]),
            ],
            &["join"],
        );
        let (l, r_, join) = (
            p.index("l").unwrap(),
            p.index("r").unwrap(),
            p.index("join").unwrap(),
        );
        let mut r = Run::new(p, None);
        let mut out = Vec::new();
        r.start(&mut out).unwrap();
        out.clear();
        r.succeeded(0, &mut out).unwrap();
        let mut started: Vec<u32> = out.iter().map(|c| c.job).collect();
        started.sort();
        assert_eq!(started, [l.min(r_), l.max(r_)]);
        assert_eq!(r.pending(), 2);
        out.clear();
        r.succeeded(l as i64, &mut out).unwrap();
        assert!(out.is_empty());
        r.succeeded(r_ as i64, &mut out).unwrap();
        assert_eq!(out, [start(join, 0, None)]);
    }

    #[test]
    fn retries_sleep_with_jitter_then_fail_for_good() {
        let p = plan(
            vec![
                NodeDef::new("a", &[]).with_policy(retrying(2)),
                NodeDef::new("b", &[]),
            ],
            &["a", "b"],
        );
        let mut r = Run::new(p, Some(42));
        let mut out = Vec::new();
        r.start(&mut out).unwrap();
        assert_eq!(out, [start(0, 0, Some(5.0)), start(1, 0, None)]);
        out.clear();
        r.failed(0, true, &mut out).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].op, out[0].job, out[0].attempt), (Op::Sleep, 0, 0));
        let d = out[0].arg.unwrap();
        assert!((0.25..=0.5).contains(&d), "{d}");
        assert_eq!(r.pending(), 2);
        out.clear();
        r.elapsed(0, &mut out).unwrap();
        assert_eq!(out, [start(0, 1, Some(5.0))]);
        out.clear();
        r.failed(0, true, &mut out).unwrap();
        let d = out[0].arg.unwrap();
        assert!((0.5..=1.0).contains(&d), "{d}");
        out.clear();
        r.elapsed(0, &mut out).unwrap();
        out.clear();
        r.failed(0, true, &mut out).unwrap();
        // third failure: retries exhausted; b is cancelled
        assert_eq!(out, [cmd(Op::Cancel, 1, 0)]);
        assert!(r.aborted());
        assert_eq!(r.attempts(0).unwrap(), 3);
        assert_eq!(r.pending(), 1);
        assert!(matches!(
            r.begin_shutdown(&mut out),
            Err(RunError::NotQuiescent { pending: 1 })
        ));
        out.clear();
        // a late success of the cancelled job is ignored; drained ends it
        r.succeeded(1, &mut out).unwrap();
        assert_eq!(r.pending(), 1);
        r.drained(1, &mut out).unwrap();
        r.drained(1, &mut out).unwrap();
        assert_eq!(r.pending(), 0);
        assert!(out.is_empty());
        assert!(r.succeeded_jobs().is_empty());
    }

    #[test]
    fn nonretryable_failure_stops_sleepers_and_starts_nothing() {
        let p = plan(
            vec![
                NodeDef::new("a", &[]).with_policy(retrying(3)),
                NodeDef::new("b", &[]),
                NodeDef::new("c", &["b"]),
            ],
            &["a", "c"],
        );
        let mut r = Run::new(p, Some(0));
        let mut out = Vec::new();
        r.start(&mut out).unwrap();
        out.clear();
        r.failed(0, true, &mut out).unwrap();
        assert_eq!(out[0].op, Op::Sleep);
        out.clear();
        r.failed(1, false, &mut out).unwrap();
        assert_eq!(out, [cmd(Op::StopSleep, 0, 0)]);
        assert_eq!(r.pending(), 0);
        out.clear();
        r.elapsed(0, &mut out).unwrap(); // stale timer: ignored
        assert!(out.is_empty());
        assert_eq!(r.state(2), Some(JobState::Waiting));
        r.cancel(&mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn cancel_is_idempotent_and_start_after_cancel_starts_nothing() {
        let p = plan(vec![NodeDef::new("a", &[])], &["a"]);
        let mut r = Run::new(Arc::clone(&p), None);
        let mut out = Vec::new();
        r.start(&mut out).unwrap();
        out.clear();
        r.cancel(&mut out);
        assert_eq!(out, [cmd(Op::Cancel, 0, 0)]);
        out.clear();
        r.cancel(&mut out);
        assert!(out.is_empty());
        assert!(r.aborted());

        let mut r = Run::new(p, None);
        r.cancel(&mut out);
        r.start(&mut out).unwrap();
        assert!(out.is_empty());
        assert_eq!(r.pending(), 0);
        r.begin_shutdown(&mut out).unwrap();
        assert!(r.finished());
    }

    #[test]
    fn misuse_is_an_error_and_changes_nothing() {
        let p = plan(
            vec![NodeDef::new("a", &[]), NodeDef::new("b", &["a"])],
            &["b"],
        );
        let mut r = Run::new(p, None);
        let mut out = Vec::new();
        assert_eq!(
            r.succeeded(0, &mut out).unwrap_err().to_string(),
            "Run.succeeded: job 0 (node 'a') is waiting"
        );
        r.start(&mut out).unwrap();
        assert_eq!(r.start(&mut out), Err(RunError::AlreadyStarted));
        out.clear();
        assert!(matches!(
            r.succeeded(2, &mut out),
            Err(RunError::UnknownJob { job: 2, .. })
        ));
        assert!(r.succeeded(-1, &mut out).is_err());
        assert!(r.succeeded(1, &mut out).is_err());
        assert!(r.elapsed(0, &mut out).is_err());
        assert!(r.drained(0, &mut out).is_err());
        assert!(r.attempts(4).is_err());
        assert_eq!(r.attempts(3).unwrap(), 0);
        assert!(out.is_empty());
        r.succeeded(0, &mut out).unwrap();
        assert!(r.succeeded(0, &mut out).is_err());
    }

    #[test]
    fn unstarted_withdraws_the_release_obligation() {
        let p = plan(
            vec![
                NodeDef::new("conn", &[]).owned(Policy::default()),
                NodeDef::new("boom", &[]),
            ],
            &["conn", "boom"],
        );
        let mut r = Run::new(p, None);
        let mut out = Vec::new();
        r.start(&mut out).unwrap();
        assert!(r.started(0).unwrap());
        out.clear();
        r.failed(1, false, &mut out).unwrap();
        assert_eq!(out, [cmd(Op::Cancel, 0, 0)]);
        r.unstarted(0, &mut out).unwrap();
        r.drained(0, &mut out).unwrap(); // second report ignored
        assert!(!r.started(0).unwrap());
        assert_eq!(r.pending(), 0);
        out.clear();
        r.begin_shutdown(&mut out).unwrap();
        assert!(out.is_empty());
        assert!(r.finished());
    }

    #[test]
    fn abandon_releases_what_was_acquired_whatever_is_in_flight() {
        // conn <- tx <- query; conn and tx acquired, query running, cache never started
        let p = plan(
            vec![
                NodeDef::new("conn", &[]).owned(Policy::default()),
                NodeDef::new("tx", &["conn"]).owned(Policy::default()),
                NodeDef::new("query", &["tx"]).with_policy(retrying(2)),
                NodeDef::new("cache", &["query"]).owned(Policy::default()),
            ],
            &["cache"],
        );
        let n = p.len() as u32;
        let idx = |s: &str| p.index(s).unwrap();
        let (conn, tx, query) = (idx("conn"), idx("tx"), idx("query"));
        let mut r = Run::new(Arc::clone(&p), None);
        let mut out = Vec::new();
        r.start(&mut out).unwrap();
        r.succeeded(conn as i64, &mut out).unwrap();
        out.clear();
        // tx is running (its value is somewhere in the driver), query is not started
        r.abandon(&mut out).unwrap();
        assert_eq!(r.pending(), 1); // tx's release
        assert!(r.aborted());
        assert_eq!(out, [start(n + tx, 0, None)]);
        // a late report of the forward job is accepted
        r.drained(tx as i64, &mut out).unwrap();
        r.unstarted(tx as i64, &mut out).unwrap();
        out.clear();
        r.succeeded((n + tx) as i64, &mut out).unwrap();
        assert_eq!(out, [start(n + conn, 0, None)]);
        out.clear();
        r.succeeded((n + conn) as i64, &mut out).unwrap();
        assert!(r.finished() && out.is_empty());
        assert_eq!(r.state(n + query), Some(JobState::NotOwed));
        assert!(r.abandon(&mut out).is_err()); // once shutdown began
                                               // a job waiting for its retry, and one whose hook is being asked, end too
        let p = plan(
            vec![NodeDef::new("a", &[]).with_policy(retrying(2))],
            &["a"],
        );
        let mut r = Run::new(p, None);
        r.start(&mut out).unwrap();
        r.failed(0, true, &mut out).unwrap();
        out.clear();
        r.abandon(&mut out).unwrap();
        assert!(out.is_empty() && r.finished());
        assert_eq!(r.state(0), Some(JobState::Stopped));
    }

    #[test]
    fn shutdown_releases_in_dependency_order() {
        // conn <- tx <- query, and an unrelated owned `cache`
        let p = plan(
            vec![
                NodeDef::new("conn", &[]).owned(Policy::new(Some(2.0), 0, 1.0, 2.0).unwrap()),
                NodeDef::new("tx", &["conn"]).owned(Policy::default()),
                NodeDef::new("query", &["tx"]),
                NodeDef::new("cache", &[]).owned(Policy::default()),
            ],
            &["query", "cache"],
        );
        let n = p.len() as u32;
        let idx = |s: &str| p.index(s).unwrap();
        let (conn, tx, query, cache) = (idx("conn"), idx("tx"), idx("query"), idx("cache"));
        let mut r = Run::new(Arc::clone(&p), None);
        let mut out = Vec::new();
        r.start(&mut out).unwrap();
        for j in [conn, cache, tx, query] {
            r.succeeded(j as i64, &mut out).unwrap();
        }
        out.clear();
        r.begin_shutdown(&mut out).unwrap();
        let mut first: Vec<u32> = out.iter().map(|c| c.job).collect();
        first.sort();
        let mut expect = vec![n + tx, n + cache];
        expect.sort();
        assert_eq!(first, expect);
        assert!(!r.finished());
        assert_eq!(r.pending(), 2);
        out.clear();
        r.failed((n + tx) as i64, false, &mut out).unwrap();
        assert_eq!(out, [start(n + conn, 0, Some(2.0))]);
        out.clear();
        r.cancel(&mut out); // no effect during shutdown
        assert!(out.is_empty());
        r.succeeded((n + conn) as i64, &mut out).unwrap();
        assert!(!r.finished());
        r.succeeded((n + cache) as i64, &mut out).unwrap();
        assert!(r.finished());
        assert_eq!(r.pending(), 0);
        assert!(out.is_empty());
        assert_eq!(r.state(n + tx), Some(JobState::Failed));
    }

    #[test]
    fn release_retries_under_its_own_policy() {
        let p = plan(
            vec![NodeDef::new("conn", &[]).owned(Policy::new(None, 1, 0.0, 2.0).unwrap())],
            &["conn"],
        );
        let mut r = Run::new(p, None);
        let mut out = Vec::new();
        r.start(&mut out).unwrap();
        r.failed(0, true, &mut out).unwrap(); // forward: no retries
        assert!(r.aborted());
        out.clear();
        r.begin_shutdown(&mut out).unwrap();
        assert_eq!(out, [start(1, 0, None)]);
        out.clear();
        r.failed(1, true, &mut out).unwrap();
        assert_eq!(
            out,
            [Command {
                op: Op::Sleep,
                job: 1,
                attempt: 0,
                arg: Some(0.0)
            }]
        );
        out.clear();
        r.elapsed(1, &mut out).unwrap();
        assert_eq!(out, [start(1, 1, None)]);
        out.clear();
        r.failed(1, true, &mut out).unwrap();
        assert!(out.is_empty());
        assert!(r.finished());
        assert_eq!(r.attempts(1).unwrap(), 2);
        assert!(r.begin_shutdown(&mut out).is_err());
    }

    #[test]
    fn failed_says_what_was_decided() {
        let p = plan(
            vec![
                NodeDef::new("a", &[]).with_policy(retrying(1)),
                NodeDef::new("b", &[]),
            ],
            &["a", "b"],
        );
        let mut r = Run::new(p, Some(7));
        let mut out = Vec::new();
        r.start(&mut out).unwrap();
        out.clear();
        let Failure::Retry { delay } = r.failed(0, true, &mut out).unwrap() else {
            panic!("a retryable first failure is retried")
        };
        assert_eq!(
            out,
            [Command {
                op: Op::Sleep,
                job: 0,
                attempt: 0,
                arg: Some(delay)
            }]
        );
        out.clear();
        r.elapsed(0, &mut out).unwrap();
        out.clear();
        assert_eq!(r.failed(0, true, &mut out).unwrap(), Failure::Final);
        assert_eq!(out, [cmd(Op::Cancel, 1, 0)]);
        out.clear();
        assert_eq!(r.failed(1, true, &mut out).unwrap(), Failure::Ignored);
        assert!(out.is_empty());
    }

    #[test]
    fn instant_retries_wait_zero_and_keep_the_attempts() {
        let p = plan(
            vec![
                NodeDef::new("conn", &[]).owned(Policy::new(None, 1, 3.0, 2.0).unwrap()),
                NodeDef::new("a", &["conn"]).with_policy(retrying(2)),
            ],
            &["a"],
        );
        let (conn, a, n) = (0, 1, 2);
        let mut r = Run::new(p, Some(1)).with_instant_retries(true);
        assert!(r.instant_retries());
        let mut out = Vec::new();
        r.start(&mut out).unwrap();
        r.succeeded(conn, &mut out).unwrap();
        for attempt in 0..2 {
            out.clear();
            assert_eq!(
                r.failed(a, true, &mut out).unwrap(),
                Failure::Retry { delay: 0.0 }
            );
            assert_eq!(out[0].arg, Some(0.0));
            r.elapsed(a, &mut out).unwrap();
            assert_eq!(r.attempts(a).unwrap(), attempt + 2);
        }
        out.clear();
        assert_eq!(r.failed(a, true, &mut out).unwrap(), Failure::Final);
        r.begin_shutdown(&mut out).unwrap();
        out.clear();
        assert_eq!(
            r.failed(n + conn, true, &mut out).unwrap(),
            Failure::Retry { delay: 0.0 }
        );
    }

    #[test]
    fn rejected_input_fails_the_node_without_an_attempt() {
        let p = plan(
            vec![
                NodeDef::new("conn", &[]).owned(Policy::default()),
                NodeDef::new("other", &[]),
                NodeDef::new("late", &["other"]),
            ],
            &["conn", "late"],
        );
        let mut r = Run::new(p, None);
        let mut out = Vec::new();
        r.start(&mut out).unwrap();
        out.clear();
        r.rejected(0, &mut out).unwrap();
        assert_eq!(out, [cmd(Op::Cancel, 1, 0)]);
        assert_eq!(r.state(0), Some(JobState::Rejected));
        assert!(r.aborted());
        assert_eq!(r.attempts(0).unwrap(), 0);
        assert_eq!(r.owed_releases(), 0);
        assert!(r.rejected(0, &mut out).is_err());
        assert!(
            r.rejected(2, &mut out).is_err(),
            "a waiting job has no input yet"
        );
        out.clear();
        r.drained(1, &mut out).unwrap();
        r.begin_shutdown(&mut out).unwrap();
        assert!(out.is_empty() && r.finished());
    }

    #[test]
    fn rejected_after_a_cancel_ends_the_job() {
        let p = plan(
            vec![NodeDef::new("a", &[]), NodeDef::new("b", &[])],
            &["a", "b"],
        );
        let mut r = Run::new(p, None);
        let mut out = Vec::new();
        r.start(&mut out).unwrap();
        out.clear();
        r.failed(1, false, &mut out).unwrap();
        assert_eq!(out, [cmd(Op::Cancel, 0, 0)]);
        out.clear();
        r.rejected(0, &mut out).unwrap();
        assert!(out.is_empty());
        assert_eq!(r.pending(), 0);
        // only attempt 0 is ever checked
        let p = plan(
            vec![NodeDef::new("a", &[]).with_policy(retrying(1))],
            &["a"],
        );
        let mut r = Run::new(p, None);
        r.start(&mut out).unwrap();
        r.failed(0, true, &mut out).unwrap();
        r.elapsed(0, &mut out).unwrap();
        assert!(r.rejected(0, &mut out).is_err());
    }

    #[test]
    fn seeded_runs_are_reproducible() {
        let p = plan(
            vec![NodeDef::new("a", &[]).with_policy(retrying(5))],
            &["a"],
        );
        let delays = |seed| {
            let mut r = Run::new(Arc::clone(&p), Some(seed));
            let mut out = Vec::new();
            let mut ds = Vec::new();
            r.start(&mut out).unwrap();
            for _ in 0..5 {
                out.clear();
                r.failed(0, true, &mut out).unwrap();
                ds.push(out[0].arg.unwrap());
                r.elapsed(0, &mut out).unwrap();
            }
            ds
        };
        assert_eq!(delays(3), delays(3));
        assert_ne!(delays(3), delays(4));
    }

    fn at(op: Op, job: u32, attempt: u32, arg: Option<f64>) -> Command {
        Command {
            op,
            job,
            attempt,
            arg,
        }
    }

    #[test]
    fn a_node_ready_only_after_the_deadline_expires() {
        // `a` is a blocking call that returns past the deadline: `b` cannot start.
        let p = plan(
            vec![
                NodeDef::new("a", &[]),
                NodeDef::new("b", &["a"]),
                NodeDef::new("c", &[]).with_policy(retrying(0)),
            ],
            &["b", "c"],
        );
        let mut r = Run::new(p, None);
        r.set_deadline(Some(102.0));
        assert_eq!(r.deadline(), Some(102.0));
        let mut out = Vec::new();
        r.clock(100.0);
        r.start(&mut out).unwrap();
        assert_eq!(
            out,
            [
                at(Op::StartClipped, 0, 0, Some(2.0)),
                at(Op::StartClipped, 2, 0, Some(2.0)),
            ]
        );
        out.clear();
        r.clock(103.0);
        r.succeeded(0, &mut out).unwrap();
        assert_eq!(out, [at(Op::Expire, 1, 0, None), cmd(Op::Cancel, 2, 0)]);
        assert_eq!(r.state(1), Some(JobState::Expired));
        assert_eq!(r.attempts(1).unwrap(), 0);
        assert!(r.aborted());
        assert_eq!(r.pending(), 1);
        out.clear();
        r.drained(2, &mut out).unwrap();
        r.begin_shutdown(&mut out).unwrap();
        assert!(r.finished());
    }

    #[test]
    fn a_wait_that_ends_late_expires_the_run() {
        let p = plan(
            vec![NodeDef::new("a", &[]).with_policy(Policy::new(None, 3, 0.0, 2.0).unwrap())],
            &["a"],
        );
        let mut r = Run::new(p, None);
        r.set_deadline(Some(1.0));
        let mut out = Vec::new();
        r.clock(0.0);
        r.start(&mut out).unwrap();
        r.clock(0.5);
        out.clear();
        r.failed(0, true, &mut out).unwrap();
        assert_eq!(out, [at(Op::Sleep, 0, 0, Some(0.0))]);
        out.clear();
        r.clock(1.0); // the timer fired at the deadline: no time left for attempt 2
        r.elapsed(0, &mut out).unwrap();
        assert_eq!(out, [at(Op::Expire, 0, 1, None)]);
        assert_eq!(r.pending(), 0);
        assert_eq!(r.attempts(0).unwrap(), 1);
        assert!(r.aborted());
    }

    #[test]
    fn a_zero_budget_starts_nothing_and_an_infinite_one_is_none() {
        let p = plan(
            vec![NodeDef::new("a", &[]), NodeDef::new("b", &[])],
            &["a", "b"],
        );
        let mut r = Run::new(Arc::clone(&p), None);
        r.set_deadline(Some(7.0));
        r.clock(7.0);
        let mut out = Vec::new();
        r.start(&mut out).unwrap();
        assert_eq!(out, [at(Op::Expire, 0, 0, None)]);
        assert_eq!(r.pending(), 0);
        assert_eq!(r.state(1), Some(JobState::Waiting));
        let mut r = Run::new(p, None);
        r.set_deadline(Some(f64::INFINITY));
        assert_eq!(r.deadline(), None);
        out.clear();
        r.start(&mut out).unwrap();
        assert_eq!(out, [start(0, 0, None), start(1, 0, None)]);
    }

    #[test]
    fn an_abort_while_hinting_makes_the_failure_final() {
        let hooked = Policy::new(None, 2, 1.0, 2.0)
            .unwrap()
            .with_retry_after(true);
        let p = plan(
            vec![
                NodeDef::new("a", &[]).with_policy(hooked),
                NodeDef::new("b", &[]),
            ],
            &["a", "b"],
        );
        let mut r = Run::new(p, None);
        let mut out = Vec::new();
        r.start(&mut out).unwrap();
        out.clear();
        assert_eq!(r.failed(0, true, &mut out).unwrap(), Failure::AskHook);
        assert_eq!(out, [cmd(Op::Hint, 0, 0)]);
        assert_eq!(r.state(0), Some(JobState::Hinting));
        assert!(r.elapsed(0, &mut out).is_err());
        out.clear();
        r.cancel(&mut out);
        assert_eq!(out, [cmd(Op::Cancel, 1, 0)]);
        assert_eq!(r.state(0), Some(JobState::Failed));
        out.clear();
        assert_eq!(
            r.hinted(0, Hint::Wait(1.0), &mut out).unwrap(),
            Failure::Final
        );
        assert!(out.is_empty());
        assert!(r.hinted(1, Hint::Backoff, &mut out).is_err());
    }

    #[test]
    fn a_failure_at_the_deadline_has_no_room_and_asks_no_hook() {
        let hooked = Policy::new(None, 2, 1.0, 2.0)
            .unwrap()
            .with_retry_after(true);
        let p = plan(vec![NodeDef::new("a", &[]).with_policy(hooked)], &["a"]);
        let mut r = Run::new(p, None);
        r.set_deadline(Some(1.0));
        let mut out = Vec::new();
        r.clock(0.0);
        r.start(&mut out).unwrap();
        out.clear();
        r.clock(1.0);
        assert_eq!(r.failed(0, true, &mut out).unwrap(), Failure::Final);
        assert_eq!(out, [at(Op::NoRoom, 0, 0, None)]);
        assert_eq!(r.state(0), Some(JobState::Failed));
        assert_eq!(r.pending(), 0);
    }

    #[test]
    fn hinted_decisions_and_instant_retries() {
        let hooked = Policy::new(None, 3, 1.0, 2.0)
            .unwrap()
            .with_max_delay(Some(4.0))
            .unwrap()
            .with_retry_after(true);
        let p = plan(vec![NodeDef::new("a", &[]).with_policy(hooked)], &["a"]);
        let mut r = Run::new(Arc::clone(&p), Some(1));
        let mut out = Vec::new();
        r.start(&mut out).unwrap();
        r.failed(0, true, &mut out).unwrap();
        out.clear();
        assert_eq!(
            r.hinted(0, Hint::Wait(9.0), &mut out).unwrap(),
            Failure::Retry { delay: 4.0 }
        );
        assert_eq!(out, [at(Op::Sleep, 0, 0, Some(4.0))]);
        r.elapsed(0, &mut out).unwrap();
        r.failed(0, true, &mut out).unwrap();
        out.clear();
        assert_eq!(
            r.hinted(0, Hint::Wait(-1.0), &mut out).unwrap(),
            Failure::Final
        );
        assert_eq!(out, [cmd(Op::BadHint, 0, 1)]);
        assert!(r.aborted());

        let mut r = Run::new(p, Some(1)).with_instant_retries(true);
        r.start(&mut out).unwrap();
        r.failed(0, true, &mut out).unwrap();
        out.clear();
        assert_eq!(
            r.hinted(0, Hint::Wait(3.0), &mut out).unwrap(),
            Failure::Retry { delay: 0.0 }
        );
        assert!(r.hinted(0, Hint::Wait(3.0), &mut out).is_err());
    }
}
