//! The shutdown signals of the commands that run agents (`demo`, `serve`):
//! SIGINT and SIGTERM, installed before any agent starts, so neither ever
//! ends the process by its default action and leaves agent process groups
//! behind. A command that receives one ends its runtime, which kills every
//! agent's process group; `kill -9` of the host is covered by each agent's
//! parent-death signal (`subagent_acp`'s process).

use tokio::signal::unix::{signal, Signal as Stream, SignalKind};

/// A shutdown signal received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Signal {
    /// SIGINT (Ctrl-C).
    Interrupt,
    /// SIGTERM.
    Terminate,
}

impl Signal {
    /// Its name, as `kill -l` prints it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Signal::Interrupt => "SIGINT",
            Signal::Terminate => "SIGTERM",
        }
    }

    /// The exit status a shell gives a process it ended: 128 + its number.
    pub(crate) fn exit_status(self) -> u8 {
        match self {
            Signal::Interrupt => 130,
            Signal::Terminate => 143,
        }
    }
}

/// SIGINT and SIGTERM, caught from [`install`](Self::install) on.
pub(crate) struct Shutdown {
    interrupt: Stream,
    terminate: Stream,
}

impl Shutdown {
    /// Catches both signals from now on. Must be called within a tokio
    /// runtime.
    ///
    /// # Errors
    /// The OS refused a handler.
    pub(crate) fn install() -> std::io::Result<Shutdown> {
        Ok(Shutdown {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }

    /// Completes with the first signal received.
    pub(crate) async fn received(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::Interrupt,
            _ = self.terminate.recv() => Signal::Terminate,
        }
    }
}
