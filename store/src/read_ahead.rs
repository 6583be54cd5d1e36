//! Reading a log in order while other threads read and decode ahead: what
//! every whole-log fold (replay, verify, opening projections) spends most
//! of its time on is decoding records, which is independent per record, so
//! [`scan`] decodes pages on [`READERS`] threads while the caller folds.
//!
//! The records reach the caller exactly as [`EventLogExt::read_all`] would
//! give them: in position order, each once, the first read failure
//! returned in its place. The readers take fixed, interleaved page ranges
//! (`from + k * READ_PAGE`, reader `k % READERS`), which is every position
//! of a gap-free log. The first page that comes back short ends the
//! read-ahead; from there the caller's thread reads on page by page, as
//! `read_all` does, so a record that fails to decode mid-page, a log that
//! grew meanwhile or a damaged one with a gap is met exactly as a plain
//! read meets it.

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::sync_channel;

use subagent_core::RecordedEvent;

use crate::error::StoreError;
use crate::log::{EventLog, EventLogExt, READ_PAGE};

/// Reader threads beside the caller's.
pub const READERS: u64 = 2;
/// Pages each reader may hold decoded ahead of the caller.
const PAGES_AHEAD: usize = 2;
/// Below this many records to read, [`scan`] reads on the caller's thread
/// alone: starting threads would cost more than they save.
const PARALLEL_FROM: u64 = 4 * READ_PAGE as u64;

/// Calls `visit` with every record from `from_position` on, in position
/// order, until the log ends, `visit` breaks, or `visit` or a read fails.
///
/// # Errors
/// The first read failure (converted into `E`) or `visit`'s error, after
/// every record before it was visited.
pub fn scan<L, E, F>(log: &L, from_position: u64, mut visit: F) -> Result<(), E>
where
    L: EventLog + ?Sized,
    E: From<StoreError>,
    F: FnMut(&RecordedEvent) -> Result<ControlFlow<()>, E>,
{
    let from = from_position.max(1);
    let mut next = from;
    if log.head().saturating_sub(from) >= PARALLEL_FROM {
        match read_ahead(log, from, &mut visit)? {
            ControlFlow::Break(()) => return Ok(()),
            ControlFlow::Continue(after) => next = after,
        }
    }
    for record in log.read_all(next) {
        if visit(&record?)?.is_break() {
            break;
        }
    }
    Ok(())
}

/// The parallel part of [`scan`]: visits pages in order until one comes
/// back short (visited; the caller reads on after it), one fails (not
/// visited: the caller reads it again), or `visit` breaks. Returns where
/// the caller goes on.
fn read_ahead<L, E, F>(log: &L, from: u64, visit: &mut F) -> Result<ControlFlow<(), u64>, E>
where
    L: EventLog + ?Sized,
    E: From<StoreError>,
    F: FnMut(&RecordedEvent) -> Result<ControlFlow<()>, E>,
{
    let page_len = READ_PAGE as u64;
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let mut pages = Vec::new();
        for reader in 0..READERS {
            let (sender, receiver) =
                sync_channel::<Result<Vec<RecordedEvent>, StoreError>>(PAGES_AHEAD);
            pages.push(receiver);
            let stop = &stop;
            scope.spawn(move || {
                let mut index = reader;
                while !stop.load(Ordering::Relaxed) {
                    let Some(start) = index
                        .checked_mul(page_len)
                        .and_then(|offset| from.checked_add(offset))
                    else {
                        break;
                    };
                    let page = log.read_all_page(start, READ_PAGE);
                    let last = !matches!(&page, Ok(records) if records.len() == READ_PAGE);
                    if sender.send(page).is_err() || last {
                        break;
                    }
                    index += READERS;
                }
            });
        }
        let mut next = from;
        let mut index = 0u64;
        let outcome = 'pages: loop {
            // A reader hangs up only after sending its last (short) page,
            // which ends this loop first; so a hang-up is never reached.
            let Ok(page) = pages[(index % READERS) as usize].recv() else {
                break Ok(ControlFlow::Continue(next));
            };
            // A failed page is read again by the caller's thread, which
            // meets the failure after the records before it.
            let Ok(page) = page else {
                break Ok(ControlFlow::Continue(next));
            };
            let full = page.len() == READ_PAGE;
            let after = page.last().map(|last| last.position.checked_add(1));
            for record in page {
                match visit(&record) {
                    Ok(ControlFlow::Continue(())) => {}
                    Ok(ControlFlow::Break(())) => break 'pages Ok(ControlFlow::Break(())),
                    Err(err) => break 'pages Err(err),
                }
            }
            match after {
                // Nothing follows position u64::MAX.
                Some(None) => break Ok(ControlFlow::Break(())),
                Some(Some(after)) => next = after,
                None => {}
            }
            // A short page is the end of the log as it was read; the
            // caller reads on from there.
            if !full {
                break Ok(ControlFlow::Continue(next));
            }
            index += 1;
        };
        // Readers blocked on a full channel see it closed and stop.
        stop.store(true, Ordering::Relaxed);
        drop(pages);
        outcome
    })
}
