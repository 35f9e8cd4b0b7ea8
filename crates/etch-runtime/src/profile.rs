//! The profiler for development (`etch bench --profile`, `--etdump`).
//!
//! When enabled, every top-level [`crate::Method::execute`] is recorded as one [`Run`]: an
//! [`Event`] per kernel call, per delegate call, per operator run inside a delegate, and
//! one for the whole execution. [`take`] hands the runs over as a [`Profile`], which sums
//! them per operator and per delegate ([`Profile::rows`]) and writes them in ExecuTorch's
//! ETDump format for its Inspector ([`Profile::to_etdump`]).
//!
//! Timing:
//! - a kernel call of a method on the host is timed with the host clock;
//! - a kernel call of a method on a device (a delegate's nested method) is timed on the
//!   device when the method has a [`DeviceOpTimer`] (CUDA events, see
//!   [`crate::Method::set_op_timer`]): marks are queued around each call and read back
//!   after the execution, so the device is not waited for per call and device time, not
//!   launch time, is measured. Without a timer the device is waited for after each call
//!   (the simulated device: the time is the CPU kernel's);
//! - a delegate call is timed on the host around the call (delegates on a device wait for
//!   it at the end of their call, when they check for errors).
//!
//! Off, profiling costs one relaxed atomic load per execution. Runs are process-wide and
//! a delegate's operators are attributed to its call through a thread-local scope: record
//! from one thread at a time.

mod etdump;

use etch_core::{Device, DeviceOpTimer, DeviceRegistry, EValue, Error, Result, StreamId};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

static ENABLED: AtomicBool = AtomicBool::new(false);
static RUNS: Mutex<Vec<Run>> = Mutex::new(Vec::new());
static EPOCH: OnceLock<Instant> = OnceLock::new();

/// Turns profiling on or off (process-wide).
pub fn set_enabled(on: bool) {
    epoch();
    ENABLED.store(on, Ordering::Relaxed);
}

/// Whether executions are being recorded.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The runs recorded so far, and clears them.
pub fn take() -> Profile {
    let runs = RUNS.lock().map(|mut r| std::mem::take(&mut *r));
    Profile {
        runs: runs.unwrap_or_default(),
    }
}

/// What an [`Event`] times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventKind {
    /// A whole top-level execution (upstream's `Method::execute`).
    Method,
    /// A kernel call of a top-level method (upstream's `OPERATOR_CALL` and
    /// `native_call_<op>`).
    Operator,
    /// A delegate call (upstream's `DELEGATE_CALL`).
    Delegate,
    /// An operator run inside a delegate call: a kernel of a delegate's nested method, or a
    /// backend's own step (upstream: a delegate event, named by its delegate debug id).
    DelegateOp,
}

/// One timed interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// What it times.
    pub kind: EventKind,
    /// The operator (`aten::add.out`), the delegate (`delegate 0 (ExecutorBackend)`) or
    /// the method.
    pub name: String,
    /// The call's shapes, with `ETCH_PROFILE_SHAPES=1` (see [`call_shapes`]).
    pub shapes: Option<String>,
    /// The instruction's chain; -1 for a method.
    pub chain: i32,
    /// The instruction's index in its chain, as in the program; for a delegate's
    /// operator, the delegate call's. -1 for a method.
    pub instruction: i32,
    /// For a delegate's operator: which call of that operator in the delegate call it
    /// is, from 1 (0 otherwise).
    pub ordinal: u32,
    /// Start, in nanoseconds since the profiler was first enabled.
    pub start_ns: u64,
    /// End, likewise.
    pub end_ns: u64,
    /// Timed on the device by a [`DeviceOpTimer`] (device time) rather than on the host.
    pub device_timed: bool,
}

impl Event {
    /// How long it took.
    pub fn duration(&self) -> Duration {
        Duration::from_nanos(self.end_ns.saturating_sub(self.start_ns))
    }
}

/// The events of one top-level execution, in the order they ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Run {
    /// The method executed.
    pub method: String,
    /// Its events.
    pub events: Vec<Event>,
}

/// Recorded runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Profile {
    /// One per top-level execution.
    pub runs: Vec<Run>,
}

/// The totals of one operator, delegate or delegate operator over a profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// [`EventKind::Operator`], [`EventKind::Delegate`] or [`EventKind::DelegateOp`].
    pub kind: EventKind,
    /// The name, followed by the shapes with `ETCH_PROFILE_SHAPES=1`.
    pub name: String,
    /// Calls over all runs.
    pub calls: u64,
    /// Time over all runs.
    pub total: Duration,
    /// Whether any call was timed on the device.
    pub device_timed: bool,
}

impl Row {
    /// The mean time of one call.
    pub fn mean(&self) -> Duration {
        self.total
            .checked_div(self.calls.try_into().unwrap_or(u32::MAX))
            .unwrap_or_default()
    }
}

impl Profile {
    /// Totals per operator, per delegate and per operator inside delegates, slowest first.
    pub fn rows(&self) -> Vec<Row> {
        let mut rows: Vec<Row> = Vec::new();
        let mut index: HashMap<(EventKind, String), usize> = HashMap::new();
        let events = self.runs.iter().flat_map(|r| &r.events);
        for e in events.filter(|e| e.kind != EventKind::Method) {
            let name = match &e.shapes {
                Some(s) => format!("{} {s}", e.name),
                None => e.name.clone(),
            };
            let i = *index.entry((e.kind, name.clone())).or_insert_with(|| {
                rows.push(Row {
                    kind: e.kind,
                    name,
                    calls: 0,
                    total: Duration::ZERO,
                    device_timed: false,
                });
                rows.len() - 1
            });
            rows[i].calls += 1;
            rows[i].total += e.duration();
            rows[i].device_timed |= e.device_timed;
        }
        rows.sort_by_key(|r| std::cmp::Reverse(r.total));
        rows
    }

    /// The time of the whole executions, summed over the runs.
    pub fn run_time(&self) -> Duration {
        let events = self.runs.iter().flat_map(|r| &r.events);
        events
            .filter(|e| e.kind == EventKind::Method)
            .map(Event::duration)
            .sum()
    }
}

/// With `ETCH_PROFILE_SHAPES=1`, the shapes of a call's first and last tensor arguments
/// (its first input and its output: `[4, 8] -> [4, 16]`), which split the profile's rows
/// by shape; `None` otherwise.
pub fn call_shapes(values: &[EValue], args: &[u32]) -> Option<String> {
    static SHAPES: OnceLock<bool> = OnceLock::new();
    if !*SHAPES.get_or_init(|| std::env::var("ETCH_PROFILE_SHAPES").is_ok_and(|v| v == "1")) {
        return None;
    }
    let shape = |a: &u32| match values.get(*a as usize) {
        Some(EValue::Tensor(t)) => Some(format!("{:?}", t.sizes())),
        _ => None,
    };
    let first = args.iter().find_map(shape).unwrap_or_default();
    let out = args.iter().rev().find_map(shape).unwrap_or_default();
    Some(format!("{first} -> {out}"))
}

/// Records an operator that a delegate ran itself (a backend's step, such as an XNNPACK
/// node), from `start` to `end`, timed on the host.
pub fn record_delegate_op(name: &str, shapes: Option<String>, start: Instant, end: Instant) {
    record_op(name, shapes, (-1, -1), (ns(start), ns(end)), false);
}

fn epoch() -> Instant {
    *EPOCH.get_or_init(Instant::now)
}

fn ns(t: Instant) -> u64 {
    u64::try_from(t.saturating_duration_since(epoch()).as_nanos()).unwrap_or(u64::MAX)
}

fn push_event(e: Event) {
    if let Ok(mut runs) = RUNS.lock() {
        match runs.last_mut() {
            Some(r) => r.events.push(e),
            None => runs.push(Run {
                method: String::new(),
                events: vec![e],
            }),
        }
    }
}

/// A delegate call being recorded on this thread: the operators recorded meanwhile are
/// its operators.
struct Scope {
    chain: i32,
    instruction: i32,
    /// Calls so far per operator (for [`Event::ordinal`]).
    calls: HashMap<String, u32>,
}

thread_local! {
    static SCOPES: RefCell<Vec<Scope>> = const { RefCell::new(Vec::new()) };
}

/// Records an operator call: as an operator of the delegate call this thread is in, if
/// any; otherwise as the kernel call of instruction `at` (chain, index).
fn record_op(
    name: &str,
    shapes: Option<String>,
    at: (i32, i32),
    (start_ns, end_ns): (u64, u64),
    device_timed: bool,
) {
    let scoped = SCOPES.with(|s| {
        s.borrow_mut().last_mut().map(|sc| {
            let n = sc.calls.entry(name.to_string()).or_insert(0);
            *n += 1;
            (sc.chain, sc.instruction, *n)
        })
    });
    let (kind, (chain, instruction), ordinal) = match scoped {
        Some((c, i, n)) => (EventKind::DelegateOp, (c, i), n),
        None => (EventKind::Operator, at, 0),
    };
    push_event(Event {
        kind,
        name: name.to_string(),
        shapes,
        chain,
        instruction,
        ordinal,
        start_ns,
        end_ns,
        device_timed,
    });
}

fn instruction_at(chain: usize, instruction: u32) -> (i32, i32) {
    let c = i32::try_from(chain).unwrap_or(i32::MAX);
    (c, i32::try_from(instruction).unwrap_or(i32::MAX))
}

/// A delegate call in progress (from [`ExecProfile::delegate_start`]); dropping it ends
/// the scope, also when the call fails.
pub(crate) struct DelegateScope {
    start: Instant,
    at: (i32, i32),
    pushed: bool,
}

impl Drop for DelegateScope {
    fn drop(&mut self) {
        if self.pushed {
            SCOPES.with(|s| s.borrow_mut().pop());
        }
    }
}

/// A kernel call timed by the device timer, waiting for the timer's read-back.
struct Pending {
    op: String,
    shapes: Option<String>,
    at: (i32, i32),
}

/// The profiler's part of one [`crate::Method::execute`], made only while profiling.
pub(crate) struct ExecProfile<'a> {
    method: &'a str,
    /// Inside a delegate call (a nested method): its calls are the delegate's operators.
    nested: bool,
    start: Instant,
    timer: Option<&'a mut (dyn DeviceOpTimer + 'static)>,
    /// The device a method without a timer runs on (waited for after each call).
    device: Option<(&'a DeviceRegistry, Device)>,
    pending: Vec<Pending>,
}

impl<'a> ExecProfile<'a> {
    /// Starts recording an execution of `method`; a top-level one starts a new run.
    pub(crate) fn begin(
        method: &'a str,
        mut timer: Option<&'a mut (dyn DeviceOpTimer + 'static)>,
        device: Option<(&'a DeviceRegistry, Device)>,
    ) -> Self {
        let nested = SCOPES.with(|s| !s.borrow().is_empty());
        if !nested && let Ok(mut runs) = RUNS.lock() {
            runs.push(Run {
                method: method.to_string(),
                events: Vec::new(),
            });
        }
        if let Some(t) = timer.as_deref_mut() {
            t.reset();
        }
        ExecProfile {
            method,
            nested,
            start: Instant::now(),
            timer,
            device: device.filter(|(_, d)| !d.is_cpu()),
            pending: Vec::new(),
        }
    }

    /// Just before a kernel call: marks the device timer; returns the host start time.
    pub(crate) fn kernel_start(&mut self) -> Result<Instant> {
        if let Some(t) = self.timer.as_deref_mut() {
            t.mark()?;
        }
        Ok(Instant::now())
    }

    /// Just after the kernel call of `op` (chain, instruction `at`) that started at `t0`.
    pub(crate) fn kernel_end(
        &mut self,
        t0: Instant,
        op: &str,
        values: &[EValue],
        args: &[u32],
        at: (usize, u32),
    ) -> Result<()> {
        let shapes = call_shapes(values, args);
        let at = instruction_at(at.0, at.1);
        if let Some(t) = self.timer.as_deref_mut() {
            t.mark()?;
            let op = op.to_string();
            self.pending.push(Pending { op, shapes, at });
            return Ok(());
        }
        if let Some((devices, d)) = self.device {
            devices.require(d.kind)?.synchronize(d.index, StreamId(0))?;
        }
        record_op(op, shapes, at, (ns(t0), ns(Instant::now())), false);
        Ok(())
    }

    /// Just before the delegate call of instruction `at`: the operators recorded until
    /// the scope ends are the delegate's (a delegate inside a delegate adds to the
    /// outermost one, the call the program's instructions know).
    pub(crate) fn delegate_start(&self, at: (usize, u32)) -> DelegateScope {
        let at = instruction_at(at.0, at.1);
        if !self.nested {
            SCOPES.with(|s| {
                s.borrow_mut().push(Scope {
                    chain: at.0,
                    instruction: at.1,
                    calls: HashMap::new(),
                })
            });
        }
        DelegateScope {
            start: Instant::now(),
            at,
            pushed: !self.nested,
        }
    }

    /// Just after delegate `index` (backend `id`) returned.
    pub(crate) fn delegate_end(&self, scope: DelegateScope, index: usize, id: &str) {
        let span = (ns(scope.start), ns(Instant::now()));
        let at = scope.at;
        drop(scope);
        let name = format!("delegate {index} ({id})");
        if self.nested {
            return record_op(&name, None, at, span, false);
        }
        push_event(Event {
            kind: EventKind::Delegate,
            name,
            shapes: None,
            chain: at.0,
            instruction: at.1,
            ordinal: 0,
            start_ns: span.0,
            end_ns: span.1,
            device_timed: false,
        });
    }

    /// After the last instruction: reads the device timer back and records its calls (each
    /// placed at the execution's host start plus its offset on the device), then the whole
    /// execution when it is a top-level one.
    pub(crate) fn finish(mut self) -> Result<()> {
        if let Some(t) = self.timer.as_deref_mut() {
            let mut marks = Vec::with_capacity(2 * self.pending.len());
            t.read(&mut marks)?;
            if marks.len() != 2 * self.pending.len() {
                return Err(Error::internal(format!(
                    "device timer gave {} marks for {} kernel calls",
                    marks.len(),
                    self.pending.len()
                )));
            }
            let base = ns(self.start);
            for (p, m) in self.pending.drain(..).zip(marks.chunks_exact(2)) {
                let span = (base.saturating_add(m[0]), base.saturating_add(m[1]));
                record_op(&p.op, p.shapes, p.at, span, true);
            }
        }
        if !self.nested {
            push_event(Event {
                kind: EventKind::Method,
                name: self.method.to_string(),
                shapes: None,
                chain: -1,
                instruction: -1,
                ordinal: 0,
                start_ns: ns(self.start),
                end_ns: ns(Instant::now()),
                device_timed: false,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::etdump::{RUN_NAME, native_call_name};
    use super::*;
    use etch_format::etdump::{ETDUMP_VERSION, schema};

    fn event(kind: EventKind, name: &str, at: (i32, i32), ordinal: u32) -> Event {
        Event {
            kind,
            name: name.to_string(),
            shapes: Some("[1] -> [1]".into()),
            chain: at.0,
            instruction: at.1,
            ordinal,
            start_ns: 10,
            end_ns: 20,
            device_timed: false,
        }
    }

    /// (name, delegate id, chain, instruction) of each upstream event.
    fn summary(d: &schema::EtDump) -> Vec<(Option<String>, Option<String>, i32, i32)> {
        let events = d.run_data.as_ref().unwrap()[0].events.as_ref().unwrap();
        events
            .iter()
            .map(|e| {
                let p = e.profile_event.as_ref().unwrap();
                let id = p.delegate_debug_id_str.clone();
                (p.name.clone(), id, p.chain_index, p.instruction_id)
            })
            .collect()
    }

    #[test]
    fn upstream_names_and_ids() {
        assert_eq!(native_call_name("aten::add.out"), "native_call_add.out");
        assert_eq!(native_call_name("add.out"), "native_call_add.out");
        let profile = Profile {
            runs: vec![Run {
                method: "forward".into(),
                events: vec![
                    event(EventKind::Operator, "aten::add.out", (0, 3), 0),
                    event(EventKind::DelegateOp, "aten::mm.out", (0, 4), 2),
                    event(
                        EventKind::Delegate,
                        "delegate 0 (ExecutorBackend)",
                        (0, 4),
                        0,
                    ),
                    event(EventKind::Method, "forward", (-1, -1), 0),
                ],
            }],
        };
        let d = profile.to_etdump_schema();
        assert_eq!(d.version, ETDUMP_VERSION);
        assert_eq!(
            d.run_data.as_ref().unwrap()[0].name.as_deref(),
            Some(RUN_NAME)
        );
        let s = |x: &str| Some(x.to_string());
        assert_eq!(
            summary(&d),
            [
                (s("native_call_add.out"), None, 0, 3),
                (s("OPERATOR_CALL"), None, 0, 3),
                (None, s("aten::mm.out #2"), 0, 4),
                (s("DELEGATE_CALL"), None, 0, 4),
                (s("Method::execute"), None, -1, 0),
            ]
        );
        let back = etch_format::etdump::read_etdump(&profile.to_etdump()).unwrap();
        assert_eq!(back, d);
    }

    #[test]
    fn rows_sum_per_kind_and_shape() {
        let mut op = event(EventKind::Operator, "aten::add.out", (0, 1), 0);
        let mut other_shape = op.clone();
        other_shape.shapes = Some("[2] -> [2]".into());
        other_shape.end_ns = 40;
        let run = |events: Vec<Event>| Run {
            method: "forward".into(),
            events,
        };
        let method = event(EventKind::Method, "forward", (-1, -1), 0);
        let p = Profile {
            runs: vec![
                run(vec![op.clone(), other_shape, method.clone()]),
                run(vec![op.clone(), method]),
            ],
        };
        assert_eq!(p.run_time().as_nanos(), 20);
        let rows = p.rows();
        let names: Vec<(&str, u64, u128)> = rows
            .iter()
            .map(|r| (r.name.as_str(), r.calls, r.total.as_nanos()))
            .collect();
        assert_eq!(
            names,
            [
                ("aten::add.out [2] -> [2]", 1, 30),
                ("aten::add.out [1] -> [1]", 2, 20)
            ]
        );
        assert_eq!(rows[1].mean().as_nanos(), 10);
        op.end_ns = 0; // an end before the start counts as no time
        assert_eq!(op.duration().as_nanos(), 0);
    }
}
