//! Fan-out: a `Parallelizable` node's items, each run as a branch of jobs grown at run time.
//!
//! The plan holds the branch once, as *templates* (the nodes between the source node and its
//! `Collect` node). The run never starts a template: when the source node has succeeded and
//! every input the branch takes from outside has, the run asks the driver for items one at a
//! time ([`Op::Draw`]), never more than one ahead of a free place (`limit`), and for each
//! item grows one job per template (`jobs[base..]`), wired to the item's other jobs and to
//! the outer jobs the templates consume. The grown jobs are ordinary jobs from then on: the
//! same launch, retries, timeouts, fallbacks, abort and drain. A branch holds its place from
//! its growth to the success of its last job. The `Collect` node starts once the source is
//! exhausted and every branch has succeeded.
//!
//! A final failure aborts the run as any failure does; the fan-out then stops a draw in
//! flight ([`Op::StopDraw`]) and closes the source ([`Op::Close`]); both count as pending,
//! so the forward phase is over only once the source is closed.
//!
//! Shutdown orders the grown jobs' releases with the same rule as the plan's: a grown job's
//! dependencies are its item's jobs of its template's branch dependencies and the outer jobs
//! its template consumes; the `Collect` node depends on every item's collected jobs.

use super::*;

/// What a grown job is: position `pos` of fan `fan`'s templates, for item `item`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Grown {
    fan: u32,
    item: u32,
    pos: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    /// The source node has not succeeded yet.
    Pending,
    /// The source exists; an item may be drawn when the branch's inputs are ready and a
    /// place is free.
    Ready,
    /// A draw is in flight.
    Drawing,
    /// The source said it has no more items (or its branches are all done).
    Exhausted,
    /// A close is in flight.
    Closing,
    /// Closed, or ended by raising.
    Closed,
}

/// One `Parallelizable` node's fan-out.
#[derive(Debug)]
pub(super) struct Fan {
    source: u32,
    collect: u32,
    templates: Vec<u32>,
    /// Per template position: the positions of its dependencies that are templates.
    tdeps: Vec<Vec<u32>>,
    /// Per template position: the positions of its consumers that are templates.
    tcons: Vec<Vec<u32>>,
    /// The positions the `Collect` node depends on.
    collected: Vec<u32>,
    limit: Option<u32>,
    /// Templates with an outer input not yet succeeded, plus one until the source node has.
    waiting: u32,
    state: Source,
    /// A [`Op::StopDraw`] was emitted for the draw in flight.
    stopping: bool,
    /// Items drawn so far (the next item's index).
    items: u32,
    /// Branches grown and not yet complete.
    active: u32,
    /// Per item: the id of its first grown job (its jobs are contiguous, in template order).
    first: Vec<u32>,
    /// Per item: its jobs not yet succeeded.
    left: Vec<u32>,
}

impl Fan {
    /// The run's bookkeeping was abandoned ([`Run::abandon`]): nothing is in flight.
    pub(super) fn abandon(&mut self) {
        if matches!(self.state, Source::Drawing | Source::Closing) {
            self.state = Source::Closed;
        }
    }
}

impl Run {
    /// Builder: `source` (a forward job) is a `Parallelizable` node whose items each run the
    /// branch `templates` (forward jobs, in the plan's order), collected by `collect`;
    /// `limit` bounds the branches running at once (`None`: no bound). Call before `start`.
    pub fn with_fan_out(
        mut self,
        source: usize,
        collect: usize,
        templates: &[usize],
        limit: Option<u32>,
    ) -> Result<Self, RunError> {
        let n = self.base;
        let bad = |why: String| Err(RunError::BadFanOut(why));
        if self.phase != Phase::Idle {
            return bad("the run has started".into());
        }
        if source >= n || collect >= n || templates.iter().any(|&t| t >= n) {
            return bad(format!("a job is not a job of the plan ({n} jobs)"));
        }
        if limit == Some(0) {
            return bad("the limit must be at least 1".into());
        }
        if self.templates.is_empty() {
            self.templates = vec![None; n];
        }
        let f = self.fans.len() as u32;
        let taken = |run: &Run, j: usize| {
            run.templates[j].is_some() || run.fans.iter().any(|x| x.source as usize == j)
        };
        if source == collect || taken(&self, source) || taken(&self, collect) {
            return bad(
                "the source and the collect node must be distinct jobs of no fan-out".into(),
            );
        }
        for (pos, &t) in templates.iter().enumerate() {
            if t == source || t == collect || taken(&self, t) {
                return bad(format!("template {t} is taken"));
            }
            self.templates[t] = Some((f, pos as u32));
        }
        let plan = Arc::clone(&self.plan);
        let pos_of = |run: &Run, j: u32| match run.templates[j as usize] {
            Some((g, p)) if g == f => Some(p),
            _ => None,
        };
        let mut tdeps = Vec::with_capacity(templates.len());
        let mut tcons = Vec::with_capacity(templates.len());
        let mut waiting = 1; // the source node itself
        for &t in templates {
            let deps: Vec<u32> = plan
                .deps
                .row(t)
                .iter()
                .filter_map(|&d| pos_of(&self, d))
                .collect();
            if plan.deps.row_len(t) == 0 {
                return bad(format!("template {t} depends on nothing"));
            }
            if (plan.deps.row_len(t) as usize) > deps.len() {
                waiting += 1;
            }
            let mut cons = Vec::new();
            for &c in plan.consumers.row(t) {
                match pos_of(&self, c) {
                    Some(p) => cons.push(p),
                    None if c as usize == collect => {}
                    None => return bad(format!("template {t} is consumed by job {c} outside")),
                }
            }
            tdeps.push(deps);
            tcons.push(cons);
        }
        let collected = plan
            .deps
            .row(collect)
            .iter()
            .filter_map(|&d| pos_of(&self, d))
            .collect();
        self.fans.push(Fan {
            source: source as u32,
            collect: collect as u32,
            templates: templates.iter().map(|&t| t as u32).collect(),
            tdeps,
            tcons,
            collected,
            limit,
            waiting,
            state: Source::Pending,
            stopping: false,
            items: 0,
            active: 0,
            first: Vec::new(),
            left: Vec::new(),
        });
        Ok(self)
    }

    /// The plan job of a grown job (its template).
    pub(super) fn grown_template(&self, job: usize) -> usize {
        let g = self.grown[job - self.base];
        self.fans[g.fan as usize].templates[g.pos as usize] as usize
    }

    /// A job's name: the node's, `node[i]` for item `i`'s job of template `node`.
    pub(super) fn job_name(&self, job: usize) -> String {
        let names = self.plan.names();
        if job < self.base {
            return names[job].clone();
        }
        let g = self.grown[job - self.base];
        format!("{}[{}]", names[self.grown_template(job)], g.item)
    }

    /// The number of forward jobs, grown ones included (release `i` is job `jobs + i`).
    pub fn job_count(&self) -> usize {
        self.jobs.len()
    }

    /// Items drawn so far from the source of `job` (`None`: not a fan-out source).
    pub fn items(&self, job: usize) -> Option<u32> {
        self.fan_of(job).map(|f| self.fans[f].items)
    }

    fn fan_of(&self, job: usize) -> Option<usize> {
        self.fans.iter().position(|f| f.source as usize == job)
    }

    /// A forward job succeeded in a run with fan-outs: its consumers (grown or not) and the
    /// fan-outs it gates.
    pub(super) fn fan_succeeded(&mut self, i: usize, out: &mut Vec<Command>) {
        if i >= self.base {
            let g = self.grown[i - self.base];
            let (f, pos) = (g.fan as usize, g.pos as usize);
            let first = self.fans[f].first[g.item as usize] as usize;
            for k in 0..self.fans[f].tcons[pos].len() {
                let c = first + self.fans[f].tcons[pos][k] as usize;
                let cj = &mut self.jobs[c];
                cj.remaining -= 1;
                if cj.remaining == 0 && !self.aborted {
                    self.launch(c, out);
                }
            }
            let left = &mut self.fans[f].left[g.item as usize];
            *left -= 1;
            if *left == 0 {
                self.branch_done(f, out);
            }
            return;
        }
        let plan = Arc::clone(&self.plan);
        for &c in plan.consumers.row(i) {
            let c = c as usize;
            let cj = &mut self.jobs[c];
            cj.remaining -= 1;
            match self.templates[c] {
                Some((f, pos)) => {
                    let fan = &mut self.fans[f as usize];
                    if cj.remaining as usize == fan.tdeps[pos as usize].len() {
                        fan.waiting -= 1;
                        self.pump(f as usize, out);
                    }
                }
                None => {
                    if cj.remaining == 0 && !self.aborted {
                        self.launch(c, out);
                    }
                }
            }
        }
        if let Some(f) = self.fan_of(i) {
            let fan = &mut self.fans[f];
            fan.waiting -= 1;
            fan.state = Source::Ready;
            if self.aborted {
                self.close(f, out);
            } else {
                self.pump(f, out);
            }
        }
    }

    /// Draw the next item if the fan-out may: its inputs ready, a place free, none in flight.
    fn pump(&mut self, f: usize, out: &mut Vec<Command>) {
        let fan = &mut self.fans[f];
        if self.aborted
            || fan.waiting != 0
            || fan.state != Source::Ready
            || fan.limit.is_some_and(|m| fan.active >= m)
        {
            return;
        }
        fan.state = Source::Drawing;
        self.pending += 1;
        out.push(Command {
            op: Op::Draw,
            job: fan.source,
            attempt: fan.items,
            arg: None,
        });
    }

    fn close(&mut self, f: usize, out: &mut Vec<Command>) {
        let fan = &mut self.fans[f];
        fan.state = Source::Closing;
        self.pending += 1;
        out.push(Command {
            op: Op::Close,
            job: fan.source,
            attempt: fan.items,
            arg: None,
        });
    }

    fn drawing(&self, event: &'static str, job: i64) -> Result<usize, RunError> {
        let f = usize::try_from(job)
            .ok()
            .and_then(|j| self.fan_of(j))
            .ok_or(RunError::UnknownJob { event, job })?;
        if self.fans[f].state != Source::Drawing {
            return Err(self.wrong(event, &Target::Forward(job as usize)));
        }
        Ok(f)
    }

    /// The draw asked for by [`Op::Draw`] ended: `item` says whether the source gave an
    /// item (the driver keeps it as the value of the item's source) or is exhausted. An item
    /// grows its branch and starts the branch's first jobs; in an aborted run it is dropped
    /// and the source closed.
    pub fn drawn(&mut self, job: i64, item: bool, out: &mut Vec<Command>) -> Result<(), RunError> {
        let f = self.drawing("drawn", job)?;
        self.pending -= 1;
        self.fans[f].stopping = false;
        if !item {
            self.fans[f].state = Source::Exhausted;
            self.fan_over(f, out);
            return Ok(());
        }
        if self.aborted {
            self.close(f, out);
            return Ok(());
        }
        let fan = &mut self.fans[f];
        let k = fan.items;
        fan.items += 1;
        fan.active += 1;
        fan.state = Source::Ready;
        let first = self.jobs.len() as u32;
        fan.first.push(first);
        fan.left.push(fan.templates.len() as u32);
        for (pos, &t) in fan.templates.iter().enumerate() {
            self.jobs.push(Job {
                state: JobState::Waiting,
                attempts: 0,
                remaining: fan.tdeps[pos].len() as u32,
            });
            self.grown.push(Grown {
                fan: f as u32,
                item: k,
                pos: pos as u32,
            });
            if !self.fallbacks.is_empty() {
                // A template never runs, so its flag is never cleared: each item's job gets it.
                let has = self.fallbacks.get(t as usize).copied().unwrap_or(false);
                self.fallbacks.push(has);
            }
        }
        if self.fans[f].templates.is_empty() {
            self.branch_done(f, out);
            return Ok(());
        }
        for pos in 0..self.fans[f].templates.len() {
            if self.fans[f].tdeps[pos].is_empty() && !self.aborted {
                self.launch((first as usize) + pos, out);
            }
        }
        self.pump(f, out);
        Ok(())
    }

    /// The draw asked for by [`Op::Draw`] raised: the source node fails for good (the
    /// driver records the exception under its name), and the run aborts.
    pub fn draw_failed(&mut self, job: i64, out: &mut Vec<Command>) -> Result<(), RunError> {
        let f = self.drawing("draw_failed", job)?;
        self.pending -= 1;
        self.fans[f].state = Source::Closed;
        if !self.aborted {
            self.abort(out);
        }
        Ok(())
    }

    /// The close asked for by [`Op::Close`] has finished (however it ended).
    pub fn closed(&mut self, job: i64, _out: &mut Vec<Command>) -> Result<(), RunError> {
        let f = usize::try_from(job)
            .ok()
            .and_then(|j| self.fan_of(j))
            .ok_or(RunError::UnknownJob {
                event: "closed",
                job,
            })?;
        if self.fans[f].state != Source::Closing {
            return Err(self.wrong("closed", &Target::Forward(job as usize)));
        }
        self.fans[f].state = Source::Closed;
        self.pending -= 1;
        Ok(())
    }

    fn branch_done(&mut self, f: usize, out: &mut Vec<Command>) {
        self.fans[f].active -= 1;
        self.pump(f, out);
        self.fan_over(f, out);
    }

    /// Every branch done and the source exhausted: the `Collect` node's branch inputs are in.
    fn fan_over(&mut self, f: usize, out: &mut Vec<Command>) {
        let fan = &self.fans[f];
        if fan.state != Source::Exhausted || fan.active != 0 || self.aborted {
            return;
        }
        let c = fan.collect as usize;
        let by = fan.collected.len() as u32;
        self.fans[f].state = Source::Closed;
        let cj = &mut self.jobs[c];
        cj.remaining -= by;
        if cj.remaining == 0 {
            self.launch(c, out);
        }
    }

    /// The run aborts: stop each draw in flight, close each open source.
    pub(super) fn fan_abort(&mut self, out: &mut Vec<Command>) {
        for f in 0..self.fans.len() {
            match self.fans[f].state {
                Source::Drawing if !self.fans[f].stopping => {
                    let fan = &mut self.fans[f];
                    fan.stopping = true;
                    out.push(Command {
                        op: Op::StopDraw,
                        job: fan.source,
                        attempt: fan.items,
                        arg: None,
                    });
                }
                Source::Ready => self.close(f, out),
                _ => {}
            }
        }
    }

    /// The driver's bookkeeping failed and the run is about to be abandoned
    /// ([`Run::abandon`]): one [`Op::Close`] per source that may still be open (drawn from,
    /// a draw or a close in flight). The driver carries each out to its end (a draw in flight
    /// stopped first, a close in flight awaited) before it abandons the run, and reports
    /// none of them: the source's `finally` has run before any release starts and before the
    /// run raises, as when a failure closes it ([`Run::closed`]).
    pub fn close_sources(&mut self, out: &mut Vec<Command>) -> Result<(), RunError> {
        if self.phase == Phase::Shutdown {
            return Err(RunError::ShutdownBegun);
        }
        for fan in &mut self.fans {
            if matches!(fan.state, Source::Ready | Source::Drawing | Source::Closing) {
                if fan.state != Source::Ready {
                    self.pending = self.pending.saturating_sub(1); // its event never comes
                }
                fan.state = Source::Closed;
                out.push(Command {
                    op: Op::Close,
                    job: fan.source,
                    attempt: fan.items,
                    arg: None,
                });
            }
        }
        self.aborted = true;
        Ok(())
    }

    /// The jobs `job` depends on for the shutdown order (appended to `buf`).
    fn shutdown_deps(&self, job: usize, buf: &mut Vec<u32>) {
        if job < self.base {
            buf.extend_from_slice(self.plan.deps.row(job));
            for fan in &self.fans {
                if fan.collect as usize == job {
                    for &first in &fan.first {
                        buf.extend(fan.collected.iter().map(|&p| first + p));
                    }
                }
            }
            return;
        }
        let g = self.grown[job - self.base];
        let fan = &self.fans[g.fan as usize];
        let first = fan.first[g.item as usize];
        for &d in self.plan.deps.row(fan.templates[g.pos as usize] as usize) {
            match self.templates[d as usize] {
                Some((h, p)) if h == g.fan => buf.push(first + p),
                _ => buf.push(d),
            }
        }
    }

    /// `begin_shutdown` for a run with fan-outs: the same rule over plan and grown jobs.
    pub(super) fn fan_shutdown(&mut self, out: &mut Vec<Command>) {
        let n = self.jobs.len();
        self.rels = self.release_jobs();
        self.outstanding = self.owed;
        for j in self.jobs.iter_mut() {
            j.remaining = 0;
        }
        let mut buf = Vec::new();
        for i in 0..n {
            buf.clear();
            self.shutdown_deps(i, &mut buf);
            for &d in &buf {
                self.jobs[d as usize].remaining += 1;
            }
        }
        let mut complete: Vec<u32> = Vec::new();
        for i in 0..n {
            if self.jobs[i].remaining == 0 {
                self.make_ready(i, &mut complete, out);
            }
        }
        self.fan_propagate(&mut complete, out);
    }

    pub(super) fn fan_propagate(&mut self, complete: &mut Vec<u32>, out: &mut Vec<Command>) {
        let mut buf = Vec::new();
        while let Some(i) = complete.pop() {
            buf.clear();
            self.shutdown_deps(i as usize, &mut buf);
            for &d in &buf {
                let dj = &mut self.jobs[d as usize];
                dj.remaining -= 1;
                if dj.remaining == 0 {
                    self.make_ready(d as usize, complete, out);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `conn` (owned) and `src` feed the branch `a -> b` (b owned), collected by `col`.
    fn fan_plan() -> (Arc<Plan>, [usize; 5]) {
        crate::testing::fan_plan(("a", false), ("b", true))
    }

    fn run(limit: Option<u32>) -> (Run, [usize; 5]) {
        let (plan, [conn, src, a, b, col]) = fan_plan();
        let run = Run::new(plan, Some(1))
            .with_fan_out(src, col, &[a, b], limit)
            .unwrap();
        (run, [conn, src, a, b, col])
    }

    fn ops(out: &[Command], op: Op) -> Vec<u32> {
        out.iter().filter(|c| c.op == op).map(|c| c.job).collect()
    }

    #[test]
    fn items_grow_branches_within_the_limit_and_the_collect_waits_for_all() {
        let (mut r, [conn, src, _a, _b, col]) = run(Some(2));
        let mut out = Vec::new();
        r.start(&mut out).unwrap();
        r.succeeded(src as i64, &mut out).unwrap();
        assert!(
            ops(&out, Op::Draw).is_empty(),
            "the branch's outer input is not ready"
        );
        r.succeeded(conn as i64, &mut out).unwrap();
        assert_eq!(ops(&out, Op::Draw), vec![src as u32]);
        // Draws answered first (5 items, then the end), else the oldest running job succeeds.
        let mut live: Vec<u32> = Vec::new();
        let mut max_active = 0;
        let mut items = 0;
        let mut collected = false;
        for _ in 0..100 {
            out.clear();
            if r.fans[0].state == Source::Drawing {
                r.drawn(src as i64, items < 5, &mut out).unwrap();
                items += 1;
            } else if !live.is_empty() {
                let job = live.remove(0);
                r.succeeded(job as i64, &mut out).unwrap();
            } else {
                break;
            }
            assert!(r.fans[0].active <= 2, "never more branches than the limit");
            max_active = max_active.max(r.fans[0].active);
            for job in ops(&out, Op::Start) {
                if job == col as u32 {
                    collected = true;
                } else {
                    live.push(job);
                }
            }
        }
        assert!(collected);
        assert_eq!(max_active, 2);
        assert_eq!(r.items(src), Some(5));
        assert_eq!(r.job_count(), 5 + 10);
        assert_eq!(r.state(col as u32), Some(JobState::Running));
        assert_eq!(r.job_name(5), "a[0]");
        assert_eq!(r.job_name(14), "b[4]");
    }

    #[test]
    fn a_branch_failure_cancels_the_others_stops_the_draw_and_closes_the_source() {
        let (mut r, [conn, src, ..]) = run(None);
        let mut out = Vec::new();
        r.start(&mut out).unwrap();
        r.succeeded(conn as i64, &mut out).unwrap();
        r.succeeded(src as i64, &mut out).unwrap();
        r.drawn(src as i64, true, &mut out).unwrap(); // a[0] = job 5 starts
        r.drawn(src as i64, true, &mut out).unwrap(); // a[1] = job 7 starts
        out.clear();
        r.failed(5, false, &mut out).unwrap(); // a[0] fails for good
        assert!(r.aborted());
        assert_eq!(ops(&out, Op::Cancel), vec![7]);
        assert_eq!(ops(&out, Op::StopDraw), vec![src as u32]);
        out.clear();
        r.drained(7, &mut out).unwrap();
        r.drawn(src as i64, true, &mut out).unwrap(); // the stopped draw still gave an item
        assert_eq!(ops(&out, Op::Close), vec![src as u32]);
        assert_eq!(
            r.job_count(),
            9,
            "an item drawn after the abort grows nothing"
        );
        assert!(
            r.begin_shutdown(&mut Vec::new()).is_err(),
            "the close is pending"
        );
        r.closed(src as i64, &mut out).unwrap();
        assert_eq!(r.pending(), 0);
        out.clear();
        r.begin_shutdown(&mut out).unwrap();
        // Only conn's release is owed (b never started); it runs once the branches drained.
        assert_eq!(
            out,
            vec![Command {
                op: Op::Start,
                job: (9 + conn) as u32,
                attempt: 0,
                arg: None
            }]
        );
    }

    #[test]
    fn releases_of_branch_resources_come_before_the_outer_resource_they_use() {
        let (mut r, [conn, src, ..]) = run(None);
        let mut out = Vec::new();
        r.start(&mut out).unwrap();
        r.succeeded(conn as i64, &mut out).unwrap();
        r.succeeded(src as i64, &mut out).unwrap();
        for _ in 0..3 {
            r.drawn(src as i64, true, &mut out).unwrap();
        }
        r.drawn(src as i64, false, &mut out).unwrap();
        for item in 0..3 {
            r.succeeded(5 + 2 * item, &mut out).unwrap();
            r.succeeded(6 + 2 * item, &mut out).unwrap();
        }
        out.clear();
        let col = r.fans[0].collect as i64;
        r.succeeded(col, &mut out).unwrap();
        assert_eq!(r.pending(), 0);
        let n = r.job_count() as u32;
        out.clear();
        r.begin_shutdown(&mut out).unwrap();
        let first = ops(&out, Op::Start);
        assert_eq!(
            first,
            vec![n + 6, n + 8, n + 10],
            "every b[i] released first"
        );
        let mut released = Vec::new();
        for job in first {
            out.clear();
            r.succeeded(job as i64, &mut out).unwrap();
            released.extend(ops(&out, Op::Start));
        }
        assert_eq!(
            released,
            vec![n + conn as u32],
            "conn once every b[i] is released"
        );
        r.succeeded((n + conn as u32) as i64, &mut out).unwrap();
        assert!(r.finished());
    }

    #[test]
    fn an_abandoned_run_closes_each_open_source_before_its_releases() {
        let (mut r, [conn, src, ..]) = run(Some(1));
        let mut out = Vec::new();
        r.start(&mut out).unwrap();
        r.succeeded(conn as i64, &mut out).unwrap();
        r.succeeded(src as i64, &mut out).unwrap();
        r.drawn(src as i64, true, &mut out).unwrap(); // a[0] runs; the source is open
        out.clear();
        r.close_sources(&mut out).unwrap();
        assert_eq!(ops(&out, Op::Close), vec![src as u32]);
        out.clear();
        r.close_sources(&mut out).unwrap();
        assert!(out.is_empty(), "a source is closed once");
        r.abandon(&mut out).unwrap();
        let n = r.job_count() as u32;
        assert_eq!(ops(&out, Op::Start), vec![n + conn as u32]);
        assert!(
            r.close_sources(&mut out).is_err(),
            "not once shutdown began"
        );
        // A source with a draw in flight is closed too, and its draw is no longer pending.
        let (mut r, [conn, src, ..]) = run(None);
        r.start(&mut out).unwrap();
        r.succeeded(conn as i64, &mut out).unwrap();
        r.succeeded(src as i64, &mut out).unwrap();
        assert_eq!(r.fans[0].state, Source::Drawing);
        let before = r.pending();
        out.clear();
        r.close_sources(&mut out).unwrap();
        assert_eq!(ops(&out, Op::Close), vec![src as u32]);
        assert_eq!(r.pending(), before - 1);
    }

    #[test]
    fn bad_fan_outs_are_refused() {
        let (plan, [conn, src, a, b, col]) = fan_plan();
        let p = || Run::new(Arc::clone(&plan), None);
        assert!(p().with_fan_out(src, col, &[a, b], Some(0)).is_err());
        assert!(p().with_fan_out(src, src, &[a, b], None).is_err());
        assert!(p().with_fan_out(src, col, &[a, b, 99], None).is_err());
        // `a` is consumed by `b`, which is outside a branch of `a` alone
        assert!(p().with_fan_out(src, col, &[a], None).is_err());
        assert!(p().with_fan_out(src, col, &[conn], None).is_err());
    }
}
