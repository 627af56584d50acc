//! Which test may start: one at a time, or the tests of one group together
//! (up to the group's cap); a running test is listed until its guard drops.

use super::*;

pub(super) struct BusyInfo {
    /// Which connection runs it (to clear its own entry).
    pub(super) id: u64,
    pub(super) test: String,
    pub(super) peer: SocketAddr,
    pub(super) since: Instant,
    pub(super) clock: Arc<TestClock>,
    pub(super) group: Option<String>,
}

/// A group id: 8 to 64 lower-case hex digits.
pub(super) fn valid_group(g: &str) -> bool {
    (8..=64).contains(&g.len())
        && g.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Whether a test of `group` may start while `running` are running: when
/// nothing runs, or when it and every running test share a group (and the
/// group has fewer than `max` tests). Otherwise the reason it may not.
pub(super) fn admit(running: &[BusyInfo], group: Option<&str>, max: usize) -> Result<(), String> {
    let Some(first) = running.first() else {
        return Ok(());
    };
    let same = group.is_some() && running.iter().all(|b| b.group.as_deref() == group);
    if same && running.len() < max {
        return Ok(());
    }
    if same {
        return Err(format!(
            "agent is running {max} tests of this group, its most (its hello says so); \
             a run checks a plan against it, so this sender is not part of the cell's start"
        ));
    }
    let others = if running.len() > 1 {
        format!(" and {} more of its group", running.len() - 1)
    } else {
        String::new()
    };
    Err(format!(
        "agent is running {} for {}{others} (started {:.0} s ago); measurements would disturb each other — retry when it finishes",
        first.test,
        first.peer,
        first.since.elapsed().as_secs_f64()
    ))
}

/// Clears the test's busy entry when it ends, even by panic.
pub(super) struct BusyGuard<'a>(pub(super) &'a Mutex<Vec<BusyInfo>>, pub(super) u64);

impl Drop for BusyGuard<'_> {
    fn drop(&mut self) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|b| b.id != self.1);
    }
}
