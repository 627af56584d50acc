//! SIGINT and SIGTERM as a flag the runner checks between steps (a
//! second signal kills the process at once).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Set by SIGINT/SIGTERM.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Route SIGINT and SIGTERM to the runner's flag (a second one kills the
/// process at once, as usual).
pub fn install_signal_handlers() -> Result<(), String> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [SIGINT, SIGTERM] {
        // A second signal while the flag is set terminates with 130.
        signal_hook::flag::register_conditional_shutdown(sig, 130, flag.clone())
            .map_err(|e| format!("installing a signal handler: {e}"))?;
        signal_hook::flag::register(sig, flag.clone())
            .map_err(|e| format!("installing a signal handler: {e}"))?;
    }
    // Mirror the Arc flag into the static one from a watcher thread.
    std::thread::Builder::new()
        .name("fabperf-signals".into())
        .spawn(move || loop {
            if flag.load(Ordering::SeqCst) {
                INTERRUPTED.store(true, Ordering::SeqCst);
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        })
        .map_err(|e| format!("starting the signal watcher: {e}"))?;
    Ok(())
}

/// Ask the runner to stop as SIGINT would (tests).
pub fn interrupt() {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

pub(super) fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}
