//! A progress bar on stderr for long steps (opening, mapping weights, loading methods,
//! and the bytes of weights copied to a device), drawn only when stderr is a terminal and
//! the caller allows it (never with `--json`).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::borrow::Cow;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// How often the byte count is polled while weights are copied.
const POLL: Duration = Duration::from_millis(100);

/// A bar of a known number of steps, or nothing.
pub struct Progress(Option<ProgressBar>);

impl Progress {
    /// A bar of `steps` steps, shown when `show` holds and stderr is a terminal.
    pub fn new(steps: u64, show: bool) -> Progress {
        if !show || !std::io::stderr().is_terminal() {
            return Progress(None);
        }
        let bar = ProgressBar::with_draw_target(Some(steps), ProgressDrawTarget::stderr());
        let style =
            ProgressStyle::with_template("{spinner} {elapsed:>3} [{bar:24}] {pos}/{len} {msg}")
                .map(|s| s.progress_chars("=> "))
                .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        bar.enable_steady_tick(Duration::from_millis(100));
        Progress(Some(bar))
    }

    /// Names the step under way.
    pub fn step(&self, msg: impl Into<Cow<'static, str>>) {
        if let Some(b) = &self.0 {
            b.set_message(msg);
        }
    }

    /// One step done.
    pub fn inc(&self) {
        if let Some(b) = &self.0 {
            b.inc(1);
        }
    }

    /// Runs `work` while the bar counts bytes: `done()` (polled from another thread) out of
    /// `total`, and the average rate in GB/s; then the bar shows its steps again. Without a
    /// bar, or with nothing to count, just runs `work`.
    pub fn bytes<T>(
        &self,
        total: u64,
        done: impl Fn() -> u64 + Sync,
        work: impl FnOnce() -> T,
    ) -> T {
        let Some(b) = self.0.as_ref().filter(|_| total > 0) else {
            return work();
        };
        let (steps_style, len, pos) = (b.style(), b.length(), b.position());
        let style = ProgressStyle::with_template(
            "{spinner} {elapsed:>3} [{bar:24}] {decimal_bytes}/{decimal_total_bytes} {prefix}",
        )
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        // Hidden while switching, so no frame mixes the two styles.
        let switch = |style: ProgressStyle, len: u64, pos: u64| {
            b.set_draw_target(ProgressDrawTarget::hidden());
            b.set_style(style);
            b.set_length(len);
            b.set_position(pos);
            b.set_draw_target(ProgressDrawTarget::stderr());
        };
        b.set_prefix("");
        switch(style, total, 0);
        let start = Instant::now();
        let update = || {
            let n = done();
            b.set_length(total.max(n));
            b.set_position(n);
            let gb_s = n as f64 / 1e9 / start.elapsed().as_secs_f64().max(1e-9);
            b.set_prefix(format!("{gb_s:.1} GB/s"));
        };
        let r = std::thread::scope(|s| {
            let (stop, stopped) = std::sync::mpsc::channel::<()>();
            let update = &update;
            s.spawn(move || {
                // Until `stop` is dropped: the work is done.
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(POLL)
                {
                    update();
                }
            });
            let r = work();
            drop(stop);
            r
        });
        switch(steps_style, len.unwrap_or(0), pos);
        r
    }

    /// Removes the bar from the terminal.
    pub fn finish(&self) {
        if let Some(b) = &self.0 {
            b.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
