//! `subagents demo`: the main job. A root session delegates through the real
//! runtime on the embedded RocksDB log: two continuable children (one
//! spawned, one forked), and one external `process` run. Below the root,
//! agents grow the tree themselves: research's scripted agent starts the
//! grandchild fact-check through the runtime's `subagent` tool, waits for
//! it with `subagent_control` and answers with its result. The results
//! come back, everything is disposed child-first, and the descendant tree,
//! each result and the log head are printed. Every run adds a new root to
//! the same log; a log left by a killed run is recovered on open.
//!
//! Each step's output is flushed as the step completes. A wait for a step
//! ends early with the runtime's reported failure (see [`failures`]), so an
//! error names its cause (e.g. the store's file and OS error) rather than a
//! timeout.

mod failures;

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use subagent_acp::{AcpCommand, AcpHost, AcpProvider};
use subagent_core::{
    content::plain_text, ContentBlock, Delivery, Event, StreamId, SubagentActivationSpec,
    ToolRestriction,
};
use subagent_projections::Projections;
use subagent_runtime::scripted::Step;
use subagent_runtime::{AgentHost, Script, ScriptedHost, SubagentActivation};
use subagent_store::{Durability, EventLog, EventLogExt};
use tokio_util::sync::CancellationToken;

use self::failures::{FailureRecorder, FailureWatch};
use crate::error::CliError;
use crate::signals::Shutdown;
use crate::target::LogTarget;
use crate::CliResult;

fn spec(provider: &str, label: &str, prompt: &str, delivery: Delivery) -> SubagentActivationSpec {
    SubagentActivationSpec::with_text_prompt(provider, label, prompt, delivery)
}

/// The scripted agents. `research` delegates: its first turn starts
/// `fact-check` on `child_provider` through the `subagent` tool, waits for
/// it with the control tool and answers with what it said; its second
/// reports a caveat to its parent with `send_message`.
fn scripts(hold_ms: u64, child_provider: &str) -> ScriptedHost {
    let say = |text: &str| Step::Say(text.to_owned());
    let tool = |name: &str, input: serde_json::Value| Step::Tool {
        name: name.to_owned(),
        input,
        output: String::new(),
    };
    ScriptedHost::new(Script::reply("done"))
        .with(
            "research",
            Script {
                turns: vec![
                    vec![
                        say("Reading the design first."),
                        Step::Tool {
                            name: "read_file".into(),
                            input: serde_json::json!({"path": "DESIGN.md"}),
                            output: "# subagents: design".into(),
                        },
                        // Its tool filter denies `shell`: the call is refused and recorded.
                        Step::Tool {
                            name: "shell".into(),
                            input: serde_json::json!({"cmd": "wc -l DESIGN.md"}),
                            output: "280 DESIGN.md".into(),
                        },
                        tool(
                            "subagent",
                            serde_json::json!({
                                "provider": child_provider,
                                "label": "fact-check",
                                "prompt": "Check the numbering claim",
                            }),
                        ),
                        tool(
                            "subagent_control",
                            serde_json::json!({"action": "wait", "child": "$/childId"}),
                        ),
                        Step::SleepMs(30 + hold_ms),
                        Step::Quote {
                            text: "The log is the source of truth; every projection is a fold of it. fact-check:".into(),
                            pointer: "/children/0/output".into(),
                        },
                    ],
                    vec![
                        tool(
                            "send_message",
                            serde_json::json!({"to": "parent", "text": "Caveat: the fold is only as fast as its decoder."}),
                        ),
                        say("Sent the root my caveat."),
                    ],
                ],
            },
        )
        .with(
            "fact-check",
            Script {
                turns: vec![vec![say("Checked: positions are gap-free and start at 1.")]],
            },
        )
        .with(
            "review",
            Script {
                turns: vec![
                    vec![say("The fork saw the parent's history; the plan holds.")],
                    vec![say("Resumed from the log: still holds.")],
                ],
            },
        )
        .with(
            "digger",
            Script {
                turns: vec![
                    vec![say("Digging through the archive."), Step::SleepMs(60_000)],
                    vec![say("Back on it, taking the queued notes in order.")],
                ],
            },
        )
}

/// How long the demo waits for one step.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a wait polls the log.
const POLL_EVERY: Duration = Duration::from_millis(10);

/// Polls the log's projections until `done` holds.
///
/// # Errors
/// [`CliError::DemoStepFailed`] as soon as `failures` holds a reported
/// failure; a read failure of the log; [`CliError::DemoTimeout`] after
/// `timeout` with neither.
async fn wait_for(
    log: &dyn EventLog,
    failures: &FailureWatch,
    what: &'static str,
    timeout: Duration,
    done: impl Fn(&Projections) -> bool,
) -> CliResult {
    wait_for_records(log, failures, what, timeout, |records| {
        done(&Projections::fold(records))
    })
    .await
}

/// As [`wait_for`], on the records themselves (for what the projections do
/// not keep, such as what an agent said).
///
/// # Errors
/// As [`wait_for`].
async fn wait_for_records(
    log: &dyn EventLog,
    failures: &FailureWatch,
    what: &'static str,
    timeout: Duration,
    done: impl Fn(&[subagent_core::RecordedEvent]) -> bool,
) -> CliResult {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(cause) = failures.first() {
            return Err(CliError::DemoStepFailed { what, cause }.into());
        }
        let records: Vec<_> = log.read_all(1).collect::<Result<_, _>>()?;
        if done(&records) {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(CliError::DemoTimeout {
                what,
                seconds: timeout.as_secs(),
            }
            .into());
        }
        tokio::select! {
            () = tokio::time::sleep(POLL_EVERY) => {}
            cause = failures.reported() => {
                return Err(CliError::DemoStepFailed { what, cause }.into());
            }
        }
    }
}

/// Runs `demo` until it ends, a failure is reported or a shutdown signal
/// arrives, whichever is first. Once the log has failed the demo cannot
/// succeed, and a runtime call may never return; this ends it with the
/// cause instead of hanging. The caller then drops the tokio runtime, and
/// with it every driver, which kills each agent's process group.
///
/// # Errors
/// `demo`'s error, [`CliError::DemoStopped`] with the reported failure, or
/// [`CliError::Stopped`] with the signal.
async fn until_failure<T>(
    failures: &FailureWatch,
    shutdown: &mut Shutdown,
    demo: impl std::future::Future<Output = Result<T, Box<dyn std::error::Error>>>,
) -> Result<T, Box<dyn std::error::Error>> {
    tokio::select! {
        // The demo first: its own error says which step failed.
        biased;
        outcome = demo => outcome,
        cause = failures.reported() => Err(CliError::DemoStopped { cause }.into()),
        signal = shutdown.received() => Err(CliError::Stopped { signal }.into()),
    }
}

fn text(value: &str) -> Vec<ContentBlock> {
    vec![ContentBlock::text(value)]
}

async fn finish(out: &mut dyn Write, name: &str, activation: &SubagentActivation) -> CliResult {
    let result = activation.result().await?;
    writeln!(
        out,
        "  {name:<11} {:<10} {}",
        result.stop_reason.to_string(),
        plain_text(&result.output)
    )?;
    Ok(())
}

/// The child of `parent` labelled `label` that an agent's delegation call
/// started, the call, and the child's settled result.
fn delegated(
    state: &Projections,
    parent: subagent_core::SessionId,
    label: &str,
) -> Option<(
    subagent_core::SessionId,
    subagent_core::ToolCallRef,
    subagent_core::SubagentResult,
)> {
    let listed = state
        .list_children(parent)
        .into_iter()
        .find(|listed| listed.entry.label == label)?;
    let child = listed.entry.child_id;
    let call = state.sessions.get(&child)?.requested_by.clone()?;
    let (_, result) = state.activations.get(&child)?.last_result.as_ref()?;
    Some((child, call, result.clone()))
}

/// The call ids of `session`'s refused tool calls.
///
/// # Errors
/// A read failure of the log.
fn refused_calls(
    log: &dyn EventLog,
    session: subagent_core::SessionId,
) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let mut calls = Vec::new();
    for record in log.read_stream(StreamId::Session(session), 1) {
        if let Event::ToolReturned {
            call_id,
            refused: true,
            ..
        } = record?.event
        {
            calls.push(call_id);
        }
    }
    Ok(calls)
}

/// The id of the first message `from` sent `to` as an agent.
fn reply_to(
    records: &[subagent_core::RecordedEvent],
    to: subagent_core::SessionId,
    from: subagent_core::SessionId,
) -> Option<subagent_core::MessageId> {
    records.iter().find_map(|record| match &record.event {
        Event::MessageAccepted {
            message_id,
            source: subagent_core::MessageSource::AgentMessage { sender_session_id },
            ..
        } if record.stream == StreamId::Session(to) && *sender_session_id == from => {
            Some(*message_id)
        }
        _ => None,
    })
}

/// `err`, or when the runtime reported a failure that `err` does not already
/// carry (an aggregate such as "3 branches failed"), `err` with that cause.
fn with_reported_cause(
    err: Box<dyn std::error::Error>,
    failures: &FailureWatch,
) -> Box<dyn std::error::Error> {
    match failures.first() {
        Some(cause) if !err.to_string().contains(&cause) => CliError::DemoFailed {
            error: err.to_string(),
            cause,
        }
        .into(),
        _ => err,
    }
}

/// How the demo runs, beyond where its log is.
pub(crate) struct Options {
    /// Extra milliseconds the research child keeps working.
    pub(crate) hold_ms: u64,
    /// The ACP agent the spawned children run on, if any.
    pub(crate) acp: Option<AcpCommand>,
    /// Span export.
    pub(crate) telemetry: crate::telemetry::TelemetryArgs,
    /// How it holds its trees on a PostgreSQL store.
    pub(crate) host: crate::hosting::HostArgs,
}

/// Runs the demo, writing its report to `out`. `hold_ms` keeps the research
/// child working that much longer, so a crash drill can kill the process
/// while work is live. With `acp`, fact-check (which research starts
/// through its `subagent` tool) and digger run on that ACP agent through
/// the `acp` provider, and research's tool filter (which its descendants
/// inherit) denies `acp/execute` as well as `shell`.
///
/// # Errors
/// Storage failures, runtime rejections and failures, write failures.
pub(crate) fn run(
    data: &Path,
    store: Option<&LogTarget>,
    options: &Options,
    out: &mut dyn Write,
) -> CliResult {
    let Options {
        hold_ms,
        acp,
        telemetry,
        host: hosting,
    } = options;
    let hold_ms = *hold_ms;
    let failures = FailureWatch::default();
    // Declared first, so it is dropped last: the last spans are flushed
    // once the runtime is gone.
    let _exporting = crate::telemetry::install(
        &telemetry.export(&crate::telemetry::OtelEnvironment::from_process()),
        Some(Box::new(FailureRecorder::new(failures.clone()))),
    )?;
    let target = store
        .cloned()
        .unwrap_or_else(|| LogTarget::Dir(data.to_owned()));
    let opened: Arc<dyn EventLog> = target.open_writable(Durability::Sync)?;
    let shared = Arc::clone(&opened);
    let log = &*opened;
    let tokio = tokio::runtime::Runtime::new()?;
    // Before any agent starts: from here on, SIGINT and SIGTERM end the
    // demo through its runtime, never by their default action.
    let mut shutdown = {
        let _entered = tokio.enter();
        Shutdown::install()?
    };
    let start = log.head() + 1;
    let demo = async {
        let local = if acp.is_some() { "acp" } else { "spawn" };
        let scripted: Arc<dyn AgentHost> = Arc::new(scripts(hold_ms, local));
        let host: Arc<dyn AgentHost> = match &acp {
            Some(command) => Arc::new(AcpHost::new(scripted).route("acp", command.clone())),
            None => scripted,
        };
        let (runtime, recovery) = hosting.open(&target, shared, host).await?;
        if recovery.events > 0 {
            writeln!(
                out,
                "recovered the previous run: {} recovery events appended",
                recovery.events
            )?;
        }
        crate::shipped::register_providers(&runtime).await?;
        if let Some(command) = &acp {
            runtime
                .register_provider(Arc::new(AcpProvider::continuable("acp")))
                .await?;
            writeln!(
                out,
                "fact-check and digger run on the ACP agent {} (provider acp)",
                command.program
            )?;
        }
        let root = runtime.open_root("demo root").await?;
        writeln!(out, "[1/7] root session {}", root.session())?;
        let signal = CancellationToken::new();
        runtime.set_persona_variables([("project".to_owned(), "subagents".to_owned())].into())?;
        let mut research_spec = spec("spawn", "research", "Summarize DESIGN.md", Delivery::Parent);
        let mut denied = vec!["shell".to_owned()];
        if acp.is_some() {
            denied.push("acp/execute".to_owned());
        }
        research_spec.request.options.tool_filter = Some(ToolRestriction::Deny(denied));
        research_spec.request.options.persona = Some("You research {{project}}.".into());
        let research = runtime
            .start_activation(&root, research_spec, signal.clone())
            .await?;
        writeln!(
            out,
            "[2/7] spawned {} (research: persona, tool filter denying shell; it delegates)",
            research.child_id()
        )?;
        let review = runtime
            .start_activation(
                &root,
                spec("fork", "review", "Review the plan", Delivery::Caller),
                signal.clone(),
            )
            .await?;
        writeln!(out, "      forked  {} (review)", review.child_id())?;
        let shout = runtime
            .start_activation(
                &root,
                spec(
                    "process",
                    "shout",
                    "the external run says hello",
                    Delivery::Parent,
                ),
                signal,
            )
            .await?;
        writeln!(
            out,
            "      external {} (process: tr a-z A-Z)",
            shout.child_id()
        )?;
        writeln!(out, "[3/7] results:")?;
        out.flush()?;
        finish(out, "research", &research).await?;
        // research waited for its child before answering: the grandchild
        // has settled, and is read from the log (no handle to it exists
        // outside the runtime).
        let records: Vec<_> = log.read_all(1).collect::<Result<_, _>>()?;
        let state = Projections::fold(&records);
        let Some((fact_check, started_by, result)) =
            delegated(&state, research.child_id(), "fact-check")
        else {
            return Err(CliError::DemoStepFailed {
                what: "research's delegation",
                cause: "research settled without starting fact-check".into(),
            }
            .into());
        };
        writeln!(
            out,
            "  {:<11} {:<10} {}",
            "fact-check",
            result.stop_reason.to_string(),
            plain_text(&result.output)
        )?;
        for (name, activation) in [("review", &review), ("shout", &shout)] {
            finish(out, name, activation).await?;
        }
        writeln!(
            out,
            "      grandchild {fact_check} (fact-check), started by research's `subagent` call {} of turn {}",
            started_by.call_id, started_by.turn
        )?;
        let mut refused = Vec::new();
        for (name, session) in [
            ("research", research.child_id()),
            ("fact-check", fact_check),
        ] {
            let calls = refused_calls(log, session)?;
            if !calls.is_empty() {
                refused.push(format!("{name} {calls:?}"));
            }
        }
        writeln!(
            out,
            "      refused tool calls (recorded): {}",
            refused.join(", ")
        )?;
        let quiet = CancellationToken::new;
        writeln!(
            out,
            "[4/7] messages: the root asks research a follow-up; research answers its parent with `send_message`"
        )?;
        runtime
            .send_message(&root, research.child_id(), text("Any caveats?"), quiet())
            .await?;
        let research_id = research.child_id();
        let root_id = root.session();
        out.flush()?;
        wait_for_records(
            log,
            &failures,
            "research's reply",
            STEP_TIMEOUT,
            |records| reply_to(records, root_id, research_id).is_some(),
        )
        .await?;
        let records: Vec<_> = log.read_all(1).collect::<Result<_, _>>()?;
        if let Some(reply) = reply_to(&records, root_id, research_id) {
            writeln!(out, "      research → root, message {reply}")?;
        }

        writeln!(out, "[5/7] interrupt: digger is interrupted mid-turn; its queued notes wait, then resume in order")?;
        let digger = runtime
            .start_activation(
                &root,
                spec(local, "digger", "Dig through the archive", Delivery::Caller),
                quiet(),
            )
            .await?;
        let digger_id = digger.child_id();
        out.flush()?;
        // Mid-turn means the agent is at work: it has said something. (A
        // turn that is only running may still be starting its agent, and
        // an interrupt then ends it before the agent saw a prompt.)
        wait_for_records(log, &failures, "digger to start", STEP_TIMEOUT, |records| {
            records.iter().any(|record| {
                record.stream == StreamId::Session(digger_id)
                    && matches!(record.event, Event::AssistantMessage { .. })
            })
        })
        .await?;
        for note in ["note 1: skip 2019", "note 2: prefer primary sources"] {
            runtime
                .send_message(&root, digger_id, text(note), quiet())
                .await?;
        }
        runtime
            .interrupt(
                digger_id,
                subagent_runtime::InterruptAuthority::User {
                    parent_session_id: root.session(),
                },
            )
            .await?;
        out.flush()?;
        wait_for(
            log,
            &failures,
            "the interrupt to land",
            STEP_TIMEOUT,
            |state| {
                state
                    .activations
                    .get(&digger_id)
                    .is_some_and(|a| a.running_turn.is_none())
            },
        )
        .await?;
        let records: Vec<_> = log.read_all(1).collect::<Result<_, _>>()?;
        let parked = Projections::fold(&records)
            .pending_messages(digger_id)
            .len();
        writeln!(
            out,
            "      interrupted: {parked} queued notes preserved, not run"
        )?;
        runtime
            .send_message(&root, digger_id, text("note 3: resume"), quiet())
            .await?;
        out.flush()?;
        wait_for(
            log,
            &failures,
            "the parked queue to resume",
            STEP_TIMEOUT,
            |state| {
                state.pending_messages(digger_id).is_empty()
                    && state
                        .activations
                        .get(&digger_id)
                        .is_some_and(|a| a.turns >= 2 && a.running_turn.is_none())
            },
        )
        .await?;
        writeln!(
            out,
            "      resumed: the three notes were taken in FIFO order"
        )?;

        writeln!(
            out,
            "[6/7] cold resume: review is released, then a message brings it back from the log"
        )?;
        review.dispose().await?;
        let review_id = review.child_id();
        runtime
            .send_message(&root, review_id, text("Does it still hold?"), quiet())
            .await?;
        out.flush()?;
        wait_for(
            log,
            &failures,
            "review to resume and settle",
            STEP_TIMEOUT,
            |state| {
                state
                    .activations
                    .get(&review_id)
                    .is_some_and(|a| a.last_result.as_ref().is_some_and(|(epoch, _)| *epoch == 2))
            },
        )
        .await?;
        writeln!(out, "      review resumed in epoch 2 and answered again")?;

        writeln!(
            out,
            "      draining every descendant of the root, child-first"
        )?;
        runtime
            .drain_descendants(std::slice::from_ref(&root))
            .await?;
        for activation in [&research, &shout, &digger] {
            activation.dispose().await?;
        }
        runtime.close_root(&root).await?;
        // Clean shutdown: registrations end and the projections are checkpointed.
        runtime.close().await?;
        Ok::<_, Box<dyn std::error::Error>>(root.session())
    };
    let outcome = tokio.block_on(until_failure(&failures, &mut shutdown, demo));
    drop(tokio);
    let root = outcome.map_err(|err| with_reported_cause(err, &failures))?;
    let state = subagent_replay::state_at(log, None)?;
    writeln!(out, "[7/7] durable at head {}\n", log.head())?;
    crate::render::tree(out, &state, root)?;
    writeln!(out)?;
    let dir = shell_word(&target.to_string());
    writeln!(
        out,
        "Inspect it with:\n  subagents tree {dir} --root {root}\n  subagents replay {dir} --at {start}\n  subagents diff {dir} --from {start}\n  subagents verify {dir}\n  subagents log {dir} --from {start}"
    )?;
    if let Some(LogTarget::Postgres(_, url)) = store {
        if crate::target::has_password(url) {
            writeln!(
                out,
                "(the password is shown as ***: put yours back in the URL to run these)"
            )?;
        }
    }
    if !on_path("subagents") {
        writeln!(
            out,
            "(`subagents` is not on your PATH: `make install` puts it in ~/.cargo/bin)"
        )?;
    }
    Ok(())
}

/// `word` as one word of a POSIX shell command line: unchanged when it has
/// only characters no shell treats specially, else single-quoted, so the
/// printed commands run as printed whatever the directory is called.
fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./:=@%+,".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// Whether an executable file called `name` is in a directory of `PATH`.
fn on_path(name: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join(name))
                .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        })
    })
}

#[cfg(test)]
mod tests;
