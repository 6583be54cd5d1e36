//! The provider conformance suite (feature `conformance`): what every
//! [`SubagentProvider`] must do under the runtime, for any host to run
//! against its own provider, as the store's suite is for logs. `spawn`,
//! `fork`, `process` and `acp` pass it in `make test`.
//!
//! A [`ProviderHarness`] supplies the provider, the host its children's
//! agents come from, a prompt that settles promptly and one that works
//! until it is stopped, and a count of the processes its children run.
//! Each check opens its own runtime over a fresh [`MemoryLog`] and panics
//! naming what broke:
//! - [`capabilities_are_honoured`]: every option the provider does not
//!   declare is refused `subagent/capability-unsupported` before anything
//!   is recorded of the child; every one it declares is accepted;
//! - [`a_start_settles_and_dispose_is_idempotent`];
//! - [`cancellation_at_any_moment_leaves_nothing_running`]: a start whose
//!   signal fires before or just after the call fails `subagent/cancelled`
//!   or settles `aborted`, and nothing of it keeps running;
//! - [`the_signal_after_publication_aborts_the_work`];
//! - [`an_interrupt_aborts_a_continuable_child`];
//! - [`nothing_outlives_close`]: no process of the provider's children is
//!   left once the runtime is closed, and every child has settled (the
//!   runtime's own tasks are awaited by `close`).
//!
//! [`run_all`] runs them in order.

use std::sync::Arc;
use std::time::{Duration, Instant};

use subagent_core::{
    Delivery, ErrorCode, SubagentActivationSpec, SubagentStopReason, ToolRestriction,
};
use subagent_store::{EventLog, MemoryLog};
use tokio_util::sync::CancellationToken;

use crate::{AgentHost, InterruptAuthority, LiveAgent, SubagentProvider, SubagentRuntime};

/// How long any one wait of the suite may take.
const WAIT: Duration = Duration::from_secs(20);

/// What the suite needs around a provider.
pub trait ProviderHarness: Send + Sync {
    /// The provider under test (a fresh value per call is fine).
    fn provider(&self) -> Arc<dyn SubagentProvider>;
    /// The host the runtime opens with: it builds continuable children's
    /// agents, and must build the provider's when the provider is
    /// continuable.
    fn host(&self) -> Arc<dyn AgentHost>;
    /// A prompt whose child settles `completed` promptly.
    fn quick_prompt(&self) -> &str;
    /// A prompt whose child works (for a minute or more) until it is
    /// cancelled, interrupted or disposed.
    fn slow_prompt(&self) -> &str;
    /// The label children are started with; a host may pick its agent's
    /// behaviour by it.
    fn label(&self, slow: bool) -> &str {
        if slow {
            "slow"
        } else {
            "quick"
        }
    }
    /// How many processes this provider's children run right now (0 for an
    /// in-process provider).
    fn processes(&self) -> usize {
        0
    }
    /// How many of those one slow child runs while it works; the suite
    /// waits to see them, so the count is known to see what it counts.
    fn processes_per_slow_child(&self) -> usize {
        0
    }
}

/// How many live (not zombie) processes have `marker` in their command
/// line: what a harness whose provider runs processes can count for
/// [`ProviderHarness::processes`] (name the processes after a marker of
/// the harness's own, in their arguments or `argv[0]`). Linux `/proc` only.
#[must_use]
pub fn live_processes_named(marker: &str) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .flatten()
        .filter(|entry| {
            let path = entry.path();
            let named = std::fs::read(path.join("cmdline"))
                .is_ok_and(|line| String::from_utf8_lossy(&line).contains(marker));
            // The state follows the parenthesized command name.
            let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            named && !state.is_empty() && !state.starts_with('Z')
        })
        .count()
}

/// A runtime over a fresh memory log with the harness's provider, and a
/// root.
async fn open<H: ProviderHarness>(
    harness: &H,
) -> (SubagentRuntime, LiveAgent, Arc<dyn SubagentProvider>) {
    let log: Arc<dyn EventLog> = Arc::new(MemoryLog::new());
    let (runtime, _) = SubagentRuntime::open(log, harness.host())
        .await
        .expect("the runtime opens over a memory log");
    let provider = harness.provider();
    runtime
        .register_provider(Arc::clone(&provider))
        .await
        .expect("the provider registers");
    let root = runtime
        .open_root("conformance")
        .await
        .expect("a root opens");
    (runtime, root, provider)
}

/// A start of the harness's quick or slow prompt on `provider`.
fn spec<H: ProviderHarness>(
    harness: &H,
    provider: &dyn SubagentProvider,
    slow: bool,
) -> SubagentActivationSpec {
    let prompt = if slow {
        harness.slow_prompt()
    } else {
        harness.quick_prompt()
    };
    SubagentActivationSpec::with_text_prompt(
        provider.name(),
        harness.label(slow),
        prompt,
        Delivery::Caller,
    )
}

/// Waits until `check` holds, panicking with `what` after [`WAIT`].
async fn until(what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Starts the harness's slow prompt on `provider` below `root`.
async fn start_slow<H: ProviderHarness>(
    runtime: &SubagentRuntime,
    root: &LiveAgent,
    harness: &H,
    provider: &dyn SubagentProvider,
    signal: CancellationToken,
) -> crate::SubagentActivation {
    runtime
        .start_activation(root, spec(harness, provider, true), signal)
        .await
        .expect("a slow start is accepted")
}

/// `child` settles `aborted`; once disposed, none of its processes runs.
async fn settles_aborted_and_ends<H: ProviderHarness>(
    harness: &H,
    child: &crate::SubagentActivation,
) {
    let result = tokio::time::timeout(WAIT, child.result())
        .await
        .expect("a stopped child settles")
        .expect("a settled result");
    assert_eq!(
        result.stop_reason,
        SubagentStopReason::Aborted,
        "{result:?}"
    );
    child.dispose().await.expect("dispose");
    until("the child's processes to end", || harness.processes() == 0).await;
}

/// Runs every check, in order.
pub async fn run_all<H: ProviderHarness>(harness: &H) {
    capabilities_are_honoured(harness).await;
    a_start_settles_and_dispose_is_idempotent(harness).await;
    cancellation_at_any_moment_leaves_nothing_running(harness).await;
    the_signal_after_publication_aborts_the_work(harness).await;
    an_interrupt_aborts_a_continuable_child(harness).await;
    nothing_outlives_close(harness).await;
}

/// Every option the provider does not declare is refused
/// `subagent/capability-unsupported` and catalogs no child; every one it
/// declares is accepted.
pub async fn capabilities_are_honoured<H: ProviderHarness>(harness: &H) {
    let (runtime, root, provider) = open(harness).await;
    let declared = provider.capabilities();
    let tool = harness.host().tools().first().map(|tool| tool.name.clone());
    type Apply = fn(&mut SubagentActivationSpec, Option<&str>) -> bool;
    let options: [(&str, bool, Apply); 5] = [
        ("agentOptions", declared.agent_options, |spec, _| {
            spec.request.options.agent_options = Some(subagent_core::AgentOptions {
                reasoning_effort: Some("low".into()),
                ..Default::default()
            });
            true
        }),
        ("outputSchema", declared.output_schema, |spec, _| {
            spec.request.options.output_schema = Some(serde_json::json!({"type": "object"}));
            true
        }),
        ("maxDepth", declared.depth_limit, |spec, _| {
            spec.request.options.max_depth = Some(1);
            true
        }),
        (
            "toolFilter",
            declared.tool_filter,
            |spec, tool| match tool {
                Some(tool) => {
                    spec.request.options.tool_filter =
                        Some(ToolRestriction::Deny(vec![tool.to_owned()]));
                    true
                }
                None => false,
            },
        ),
        ("persona", declared.persona, |spec, _| {
            spec.request.options.persona = Some("You help with one task.".into());
            true
        }),
    ];
    for (name, supported, apply) in options {
        let mut start = spec(harness, provider.as_ref(), false);
        if !apply(&mut start, tool.as_deref()) {
            continue;
        }
        let before = runtime
            .list_children(root.session())
            .await
            .expect("the catalog reads")
            .len();
        let outcome = runtime
            .start_activation(&root, start, CancellationToken::new())
            .await;
        match (supported, outcome) {
            (true, Ok(child)) => {
                let result = tokio::time::timeout(WAIT, child.result())
                    .await
                    .unwrap_or_else(|_| panic!("a start with {name} never settled"))
                    .unwrap_or_else(|err| panic!("a start with {name} failed: {err}"));
                // A quick answer need not match a schema; anything else
                // must complete as it would without the option.
                if name != "outputSchema" {
                    assert_eq!(
                        result.stop_reason,
                        SubagentStopReason::Completed,
                        "{name}: {result:?}"
                    );
                }
                child.dispose().await.expect("dispose");
            }
            (true, Err(err)) => panic!("{name} is declared but refused: {err}"),
            (false, Ok(_)) => panic!("{name} is not declared but was accepted"),
            (false, Err(err)) => {
                assert_eq!(
                    err.code(),
                    ErrorCode::CapabilityUnsupported,
                    "{name}: {err}"
                );
                let after = runtime
                    .list_children(root.session())
                    .await
                    .expect("the catalog reads")
                    .len();
                assert_eq!(after, before, "a refused {name} start cataloged a child");
            }
        }
    }
    runtime.close().await.expect("close");
}

/// A quick start settles `completed` with output; dispose is idempotent and
/// leaves no process of the child running.
pub async fn a_start_settles_and_dispose_is_idempotent<H: ProviderHarness>(harness: &H) {
    let (runtime, root, provider) = open(harness).await;
    let child = runtime
        .start_activation(
            &root,
            spec(harness, provider.as_ref(), false),
            CancellationToken::new(),
        )
        .await
        .expect("a quick start is accepted");
    let result = tokio::time::timeout(WAIT, child.result())
        .await
        .expect("a quick start settles")
        .expect("a settled result");
    assert_eq!(
        result.stop_reason,
        SubagentStopReason::Completed,
        "{result:?}"
    );
    assert!(
        !result.output.is_empty(),
        "a completed result carries output"
    );
    child.dispose().await.expect("dispose");
    child.dispose().await.expect("a second dispose is a no-op");
    until("the child's processes to end after dispose", || {
        harness.processes() == 0
    })
    .await;
    runtime.close().await.expect("close");
}

/// A slow start whose signal fires before the call, or at a few moments
/// after it, fails `subagent/cancelled` or settles `aborted`; either way
/// nothing of it runs once it is disposed.
pub async fn cancellation_at_any_moment_leaves_nothing_running<H: ProviderHarness>(harness: &H) {
    let (runtime, root, provider) = open(harness).await;
    for delay_ms in [None, Some(0), Some(2), Some(10), Some(50)] {
        let signal = CancellationToken::new();
        match delay_ms {
            None => signal.cancel(),
            Some(ms) => {
                let cancel = signal.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    cancel.cancel();
                });
            }
        }
        match runtime
            .start_activation(&root, spec(harness, provider.as_ref(), true), signal)
            .await
        {
            Err(err) => assert_eq!(
                err.code(),
                ErrorCode::Cancelled,
                "after {delay_ms:?} ms: {err}"
            ),
            Ok(child) => {
                let result = tokio::time::timeout(WAIT, child.result())
                    .await
                    .unwrap_or_else(|_| {
                        panic!("a start cancelled after {delay_ms:?} ms never settled")
                    })
                    .expect("a settled result");
                assert_eq!(
                    result.stop_reason,
                    SubagentStopReason::Aborted,
                    "after {delay_ms:?} ms"
                );
                child.dispose().await.expect("dispose");
            }
        }
        until("a cancelled start's processes to end", || {
            harness.processes() == 0
        })
        .await;
    }
    runtime.close().await.expect("close");
}

/// A slow child whose start signal fires once it runs settles `aborted`.
pub async fn the_signal_after_publication_aborts_the_work<H: ProviderHarness>(harness: &H) {
    let (runtime, root, provider) = open(harness).await;
    let signal = CancellationToken::new();
    let child = start_slow(&runtime, &root, harness, provider.as_ref(), signal.clone()).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    signal.cancel();
    settles_aborted_and_ends(harness, &child).await;
    runtime.close().await.expect("close");
}

/// A running continuable child interrupted by its parent's user settles
/// `aborted` and stays resumable. (An external run has no interrupt of its
/// own: its signal is [`the_signal_after_publication_aborts_the_work`].)
pub async fn an_interrupt_aborts_a_continuable_child<H: ProviderHarness>(harness: &H) {
    let (runtime, root, provider) = open(harness).await;
    if !provider.is_continuable() {
        runtime.close().await.expect("close");
        return;
    }
    let child = start_slow(
        &runtime,
        &root,
        harness,
        provider.as_ref(),
        CancellationToken::new(),
    )
    .await;
    let id = child.child_id();
    let deadline = Instant::now() + WAIT;
    loop {
        let running = runtime
            .projections()
            .activations
            .get(&id)
            .is_some_and(|activation| activation.running_turn.is_some());
        if running {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the slow child never started its turn"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    runtime
        .interrupt(
            id,
            InterruptAuthority::User {
                parent_session_id: root.session(),
            },
        )
        .await
        .expect("the parent's user may interrupt");
    settles_aborted_and_ends(harness, &child).await;
    runtime.close().await.expect("close");
}

/// Slow children left running when the runtime closes are released, and
/// no process of theirs is left.
pub async fn nothing_outlives_close<H: ProviderHarness>(harness: &H) {
    let (runtime, root, provider) = open(harness).await;
    let mut children = Vec::new();
    for _ in 0..2 {
        children.push(
            start_slow(
                &runtime,
                &root,
                harness,
                provider.as_ref(),
                CancellationToken::new(),
            )
            .await,
        );
    }
    let working = 2 * harness.processes_per_slow_child();
    until("the slow children's processes to run", || {
        harness.processes() == working
    })
    .await;
    runtime.close().await.expect("close");
    until("every process to end after close", || {
        harness.processes() == 0
    })
    .await;
    for child in children {
        let settled = tokio::time::timeout(WAIT, child.result())
            .await
            .expect("close settles every child");
        if let Err(err) = settled {
            assert_eq!(
                err.code(),
                ErrorCode::Closed,
                "a child of a closed runtime failed otherwise: {err}"
            );
        }
    }
}
