//! Process hygiene for the children the runtime's providers start: what
//! keeps a child from outliving its host when the host cannot run its
//! destructors.

use tokio::process::Command;

/// Has the child killed when the thread that started it ends, on Linux
/// (`PR_SET_PDEATHSIG`): a host killed with SIGKILL, which runs no
/// destructor, still leaves no child behind. It reaches the child itself;
/// what the child started is in its process group, which the child's own
/// death does not end. Call it on a command started from one of the
/// runtime's worker threads, which live as long as the runtime (a thread
/// of the blocking pool ends when idle, and would kill the child with it).
#[cfg(target_os = "linux")]
pub fn die_with_parent(builder: &mut Command) {
    // SAFETY: getpid(2) is async-signal-safe and touches no memory of ours.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs in the forked child before exec, and calls
    // only prctl(2) and getppid(2), which are async-signal-safe; it
    // allocates nothing.
    unsafe {
        builder.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died before the signal was set.
            if libc::getppid() != parent {
                return Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
            }
            Ok(())
        });
    }
}

/// Elsewhere the process group alone is ended, by the host's destructors.
#[cfg(not(target_os = "linux"))]
pub fn die_with_parent(_builder: &mut Command) {}
