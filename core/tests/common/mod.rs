//! The simulated attempts and waits shared by the virtual-clock executors of
//! `virtual_time.rs` and `deadlines.rs`: each runs as a tokio task under the paused clock
//! and reports back on a channel, as the asyncio driver reports to a run.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

#[derive(Clone, Copy, Debug)]
pub enum Outcome {
    Return,
    Raise { retryable: bool },
}

#[derive(Debug)]
pub enum Event {
    Returned(u32),
    Raised(u32, bool),
    TimedOut(u32),
    Elapsed(u32),
}

/// An attempt of `job` that takes `secs` virtual seconds and then ends with `outcome`,
/// bounded by `timeout` (`tokio::time::timeout` drops it, so it is drained at once).
pub fn spawn_attempt(
    tx: mpsc::UnboundedSender<Event>,
    job: u32,
    secs: f64,
    outcome: Outcome,
    timeout: Option<f64>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let body = async move {
            tokio::time::sleep(Duration::from_secs_f64(secs)).await;
            outcome
        };
        let result = match timeout {
            Some(t) => tokio::time::timeout(Duration::from_secs_f64(t), body)
                .await
                .ok(),
            None => Some(body.await),
        };
        let _ = tx.send(match result {
            Some(Outcome::Return) => Event::Returned(job),
            Some(Outcome::Raise { retryable }) => Event::Raised(job, retryable),
            None => Event::TimedOut(job),
        });
    })
}

/// The wait before `job`'s retry: `delay` virtual seconds, then `Elapsed`.
pub fn spawn_sleep(tx: mpsc::UnboundedSender<Event>, job: u32, delay: f64) -> JoinHandle<()> {
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs_f64(delay)).await;
        let _ = tx.send(Event::Elapsed(job));
    })
}
