//! A progress bar on stderr for long steps (opening, mapping weights, loading methods),
//! drawn only when stderr is a terminal and the caller allows it (never with `--json`).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::borrow::Cow;
use std::io::IsTerminal;
use std::time::Duration;

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
