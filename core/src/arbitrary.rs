//! Proptest strategies for every content block, contract and event, so that
//! round-trip, store and replay tests draw from the whole schema. Enabled by
//! the `arbitrary` feature.

use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::content::{ContentBlock, ImageBlock, TextBlock, ToolResultBlock, ToolUseBlock};
use crate::contracts::*;
use crate::event::{AbandonReason, AgentReport, Cost, Event, NewEvent, PlanEntry, Usage};
use crate::ids::{EventId, HostId, MessageId, SessionId, SubagentRunId};
use crate::result::{Diagnostic, SubagentResult, SubagentStopReason};

fn uuid() -> impl Strategy<Value = Uuid> {
    any::<u128>().prop_map(Uuid::from_u128)
}

/// Any session id.
pub fn session_id() -> impl Strategy<Value = SessionId> {
    uuid().prop_map(SessionId::from_uuid)
}

/// Any host id.
pub fn host_id() -> impl Strategy<Value = HostId> {
    uuid().prop_map(HostId::from_uuid)
}

fn message_id() -> impl Strategy<Value = MessageId> {
    uuid().prop_map(MessageId::from_uuid)
}

fn run_id() -> impl Strategy<Value = SubagentRunId> {
    uuid().prop_map(SubagentRunId::from_uuid)
}

/// Short text, including multi-byte characters.
fn text() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9 é😀_-]{0,12}"
}

/// Arbitrary JSON of bounded size (numbers limited to what `f64`/`i64` hold exactly).
pub fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-1.0e6f64..1.0e6).prop_map(Value::from),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::Array),
            vec(("[a-z]{1,6}", inner), 0..4)
                .prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
        ]
    })
}

fn extra() -> impl Strategy<Value = Map<String, Value>> {
    // Unknown fields use names no known block field has.
    vec(("x[a-z]{1,5}", json()), 0..2).prop_map(|pairs| pairs.into_iter().collect())
}

/// Any content block, known kinds and unknown ones.
pub fn content_block() -> impl Strategy<Value = ContentBlock> {
    let leaf = prop_oneof![
        (text(), extra()).prop_map(|(text, extra)| ContentBlock::Text(TextBlock { text, extra })),
        (
            "image/(png|jpeg)",
            option::of("[A-Za-z0-9+/]{0,8}"),
            option::of("[a-f0-9]{8}"),
            extra()
        )
            .prop_map(|(mime_type, data, attachment, extra)| {
                ContentBlock::Image(ImageBlock {
                    mime_type,
                    data,
                    attachment,
                    extra,
                })
            }),
        ("c[0-9]{1,3}", "[a-z_]{1,8}", json(), extra()).prop_map(|(id, name, input, extra)| {
            ContentBlock::ToolUse(ToolUseBlock {
                id,
                name,
                input,
                extra,
            })
        }),
        ("(thinking|audio)", vec(("[a-z]{1,5}", json()), 0..3)).prop_map(|(kind, pairs)| {
            let mut map: Map<String, Value> = pairs.into_iter().collect();
            map.insert("type".into(), Value::String(kind));
            ContentBlock::Other(map)
        }),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        ("c[0-9]{1,3}", vec(inner, 0..3), any::<bool>(), extra()).prop_map(
            |(tool_use_id, content, is_error, extra)| {
                ContentBlock::ToolResult(ToolResultBlock {
                    tool_use_id,
                    content,
                    is_error,
                    extra,
                })
            },
        )
    })
}

fn content() -> impl Strategy<Value = Vec<ContentBlock>> {
    vec(content_block(), 0..3)
}

fn stop_reason() -> impl Strategy<Value = SubagentStopReason> {
    prop_oneof![
        Just(SubagentStopReason::Completed),
        Just(SubagentStopReason::Aborted),
        Just(SubagentStopReason::Error),
        Just(SubagentStopReason::MaxTokens),
        Just(SubagentStopReason::Refusal),
        "x-[a-z]{1,8}".prop_map(SubagentStopReason::Other),
    ]
}

fn diagnostic() -> impl Strategy<Value = Diagnostic> {
    text().prop_map(Diagnostic::new)
}

/// Any result.
pub fn result() -> impl Strategy<Value = SubagentResult> {
    (
        content(),
        option::of(json()),
        option::of(diagnostic()),
        stop_reason(),
    )
        .prop_map(
            |(output, structured, diagnostic, stop_reason)| SubagentResult {
                output,
                // `Some(Null)` and `None` are one wire form; keep the generator honest.
                structured: structured.filter(|value| !value.is_null()),
                diagnostic,
                stop_reason,
            },
        )
}

fn capabilities() -> impl Strategy<Value = SubagentCapabilities> {
    any::<[bool; 5]>().prop_map(|flags| SubagentCapabilities {
        agent_options: flags[0],
        output_schema: flags[1],
        depth_limit: flags[2],
        tool_filter: flags[3],
        persona: flags[4],
    })
}

fn delivery() -> impl Strategy<Value = Delivery> {
    prop_oneof![Just(Delivery::Parent), Just(Delivery::Caller)]
}

fn mode() -> impl Strategy<Value = SessionMode> {
    prop_oneof![Just(SessionMode::Continuable), Just(SessionMode::OneShot)]
}

fn source() -> impl Strategy<Value = MessageSource> {
    prop_oneof![
        session_id().prop_map(|parent_session_id| MessageSource::Delegation { parent_session_id }),
        session_id()
            .prop_map(|sender_session_id| MessageSource::AgentMessage { sender_session_id }),
        (text(), session_id()).prop_map(|(summary, sender_session_id)| {
            MessageSource::SubagentSettled {
                summary,
                sender_session_id,
            }
        }),
        session_id()
            .prop_map(|sender_session_id| MessageSource::SubagentReport { sender_session_id }),
        Just(MessageSource::User),
        (text(), option::of("[A-Z][a-z]+/[A-Z][a-z]+"))
            .prop_map(|(request_id, zone)| { MessageSource::Browser { request_id, zone } }),
    ]
}

fn authority() -> impl Strategy<Value = InterruptAuthority> {
    prop_oneof![
        session_id().prop_map(|parent_session_id| InterruptAuthority::User { parent_session_id }),
        session_id().prop_map(|agent_session_id| InterruptAuthority::Ancestor { agent_session_id }),
    ]
}

fn abandon_reason() -> impl Strategy<Value = AbandonReason> {
    prop_oneof![
        Just(AbandonReason::Cancelled),
        Just(AbandonReason::HostRestart),
        Just(AbandonReason::Drained),
        diagnostic().prop_map(|diagnostic| AbandonReason::PreparationFailed { diagnostic }),
    ]
}

fn agent_report() -> impl Strategy<Value = AgentReport> {
    let entry = (text(), text(), text()).prop_map(|(content, priority, status)| PlanEntry {
        content,
        priority,
        status,
    });
    let cost = (-1e12f64..1e12, text()).prop_map(|(amount, currency)| Cost { amount, currency });
    prop_oneof![
        text().prop_map(|session_id| AgentReport::AgentSession { session_id }),
        vec(entry, 0..4).prop_map(|entries| AgentReport::Plan { entries }),
        (any::<u64>(), any::<u64>(), option::of(cost))
            .prop_map(|(used, size, cost)| AgentReport::ContextUsage { used, size, cost }),
    ]
}

fn runtime_event() -> impl Strategy<Value = Event> {
    prop_oneof![
        (
            text(),
            capabilities(),
            any::<bool>(),
            option::of((text(), text())),
            any::<bool>(),
            any::<bool>()
        )
            .prop_map(
                |(name, capabilities, inherits_parent_context, route, continuable, one_shot)| {
                    Event::ProviderRegistered {
                        name,
                        capabilities,
                        inherits_parent_context,
                        route_defaults: route
                            .map(|(provider, model)| AgentRoute { provider, model }),
                        continuable,
                        one_shot,
                    }
                }
            ),
        text().prop_map(|name| Event::ProviderRemoved { name }),
        session_id().prop_map(|parent| Event::AdmissionClosed { parent }),
        session_id().prop_map(|parent| Event::AdmissionReopened { parent }),
        (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(
            |(previous_head, abandoned_activations, failed_runs)| Event::HostRecovered {
                previous_head,
                abandoned_activations,
                failed_runs,
            }
        ),
    ]
}

fn lifecycle_event() -> impl Strategy<Value = Event> {
    prop_oneof![
        (host_id(), text(), any::<u64>()).prop_map(|(host, holder, fence)| {
            Event::TreeAcquired {
                host,
                holder,
                fence,
            }
        }),
        (
            session_id(),
            option::of(session_id()),
            0u64..100,
            text(),
            option::of(text()),
            mode(),
            any::<bool>(),
            json()
        )
            .prop_map(
                |(session, parent, depth, label, provider, mode, external, descriptor)| {
                    Event::SessionCreated {
                        session,
                        parent,
                        depth,
                        label,
                        provider,
                        mode,
                        external,
                        descriptor,
                    }
                }
            ),
        (session_id(), text(), text(), mode(), any::<bool>()).prop_map(
            |(child, label, provider, mode, external)| Event::ChildCataloged {
                child,
                label,
                provider,
                mode,
                external
            }
        ),
        (session_id(), any::<u64>(), vec(json(), 0..3)).prop_map(
            |(source, through_version, events)| {
                Event::HistorySeeded {
                    source,
                    through_version,
                    events,
                }
            }
        ),
        (
            any::<u64>(),
            delivery(),
            option::of(json()),
            option::of(tool_call_ref())
        )
            .prop_map(|(epoch, delivery, schema, requested_by)| {
                Event::ActivationRequested {
                    epoch,
                    delivery,
                    output_schema: schema.filter(|value| !value.is_null()),
                    requested_by,
                }
            }),
        (any::<u64>(), any::<u64>()).prop_map(|(epoch, seeded_events)| Event::ActivationPrepared {
            epoch,
            seeded_events
        }),
        (any::<u64>(), run_id())
            .prop_map(|(epoch, run_id)| Event::ActivationPublished { epoch, run_id }),
        (any::<u64>(), result())
            .prop_map(|(epoch, result)| Event::ActivationSettled { epoch, result }),
        (any::<u64>(), option::of(diagnostic())).prop_map(|(epoch, cleanup_error)| {
            Event::ActivationReleased {
                epoch,
                cleanup_error,
            }
        }),
        (any::<u64>(), abandon_reason())
            .prop_map(|(epoch, reason)| Event::ActivationAbandoned { epoch, reason }),
    ]
}

/// A delegation tool call's reference.
fn tool_call_ref() -> impl Strategy<Value = crate::ToolCallRef> {
    (any::<u64>(), text()).prop_map(|(turn, call_id)| crate::ToolCallRef { turn, call_id })
}

fn run_event() -> impl Strategy<Value = Event> {
    prop_oneof![
        (run_id(), text(), delivery(), option::of(tool_call_ref())).prop_map(
            |(run_id, provider, delivery, requested_by)| Event::RunRequested {
                run_id,
                provider,
                delivery,
                requested_by,
            }
        ),
        run_id().prop_map(|run_id| Event::RunStarted { run_id }),
        (run_id(), result()).prop_map(|(run_id, result)| Event::RunSettled { run_id, result }),
        (run_id(), option::of(diagnostic())).prop_map(|(run_id, cleanup_error)| {
            Event::RunDisposed {
                run_id,
                cleanup_error,
            }
        }),
        (run_id(), diagnostic())
            .prop_map(|(run_id, diagnostic)| Event::RunStartFailed { run_id, diagnostic }),
    ]
}

fn inbox_event() -> impl Strategy<Value = Event> {
    prop_oneof![
        (
            message_id(),
            source(),
            prop_oneof![Just(MessageDelivery::Queue), Just(MessageDelivery::Steer)],
            content()
        )
            .prop_map(
                |(message_id, source, delivery, content)| Event::MessageAccepted {
                    message_id,
                    source,
                    delivery,
                    content
                }
            ),
        (vec(message_id(), 0..3), any::<u64>())
            .prop_map(|(ids, turn)| Event::MessagesClaimed { ids, turn }),
        (vec(message_id(), 0..3), any::<u64>())
            .prop_map(|(ids, epoch)| Event::MessagesDropped { ids, epoch }),
        (any::<u64>(), any::<u64>()).prop_map(|(turn, epoch)| Event::TurnStarted { turn, epoch }),
        (
            any::<u64>(),
            content(),
            option::of((any::<u64>(), any::<u64>()))
        )
            .prop_map(|(turn, content, usage)| {
                Event::AssistantMessage {
                    turn,
                    content,
                    usage: usage.map(|(input_tokens, output_tokens)| Usage {
                        input_tokens,
                        output_tokens,
                    }),
                }
            }),
        (any::<u64>(), text(), text(), json()).prop_map(|(turn, call_id, name, input)| {
            Event::ToolCalled {
                turn,
                call_id,
                name,
                input,
            }
        }),
        (
            any::<u64>(),
            text(),
            content(),
            any::<bool>(),
            any::<bool>()
        )
            .prop_map(|(turn, call_id, output, is_error, refused)| {
                Event::ToolReturned {
                    turn,
                    call_id,
                    output,
                    is_error,
                    refused,
                }
            }),
        (any::<u64>(), agent_report())
            .prop_map(|(turn, report)| Event::AgentReported { turn, report }),
        (any::<u64>(), stop_reason())
            .prop_map(|(turn, stop_reason)| Event::TurnEnded { turn, stop_reason }),
        (session_id(), authority())
            .prop_map(|(target, authority)| Event::InterruptRequested { target, authority }),
    ]
}

/// Any event of the catalogue.
pub fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        runtime_event(),
        lifecycle_event(),
        run_event(),
        inbox_event()
    ]
}

/// Any event that belongs in a session stream.
pub fn session_event() -> impl Strategy<Value = Event> {
    prop_oneof![lifecycle_event(), run_event(), inbox_event()]
        .prop_filter("SessionCreated names its own stream", |event| {
            !matches!(event, Event::SessionCreated { .. })
        })
}

/// A valid W3C trace context.
pub fn trace_context() -> impl Strategy<Value = crate::TraceContext> {
    (any::<[u8; 16]>(), any::<[u8; 8]>(), any::<bool>()).prop_filter_map(
        "W3C ids are never all zero",
        |(trace_id, span_id, sampled)| crate::TraceContext::new(trace_id, span_id, sampled),
    )
}

/// A new event with random ids around any payload.
pub fn new_event() -> impl Strategy<Value = NewEvent> {
    (
        uuid(),
        option::of(uuid()),
        option::of(uuid()),
        option::of(trace_context()),
        event(),
    )
        .prop_map(
            |(event_id, correlation_id, causation_id, trace, event)| NewEvent {
                event_id: EventId::from_uuid(event_id),
                correlation_id,
                causation_id: causation_id.map(EventId::from_uuid),
                trace,
                event,
                recorded_at: None,
            },
        )
}
