//! The spec's `prompt` and `interruptByParent` through the runtime (the
//! gateway's HTTP tests cover them end to end): a prompt whose signal fired
//! before acceptance is `gateway/cancelled` and records nothing, the
//! request's shape is checked before any lookup, a host that does not say
//! it takes images receives none, image caps stay under the hard limit,
//! and `interruptByParent` reports whether it stopped live work.

mod common;

use common::{spec, Harness};

use subagent_core::{
    AddressMode, AttachmentLimits, ContentBlock, ContinuableAddress, Delivery, ErrorCode,
    InterruptReceipt, InterruptRequest, MessageDelivery, PromptRequest, SessionId, SubagentError,
    MAX_ATTACHMENT_BYTES,
};
use subagent_runtime::{Script, ScriptedHost};
use subagent_store::EventLog;
use tokio_util::sync::CancellationToken;

fn request(child: SessionId, parent: SessionId, zone: Option<&str>) -> PromptRequest {
    PromptRequest {
        address: ContinuableAddress {
            child_session_id: child,
            parent_session_id: parent,
            mode: AddressMode::Continuable,
        },
        delivery: MessageDelivery::Queue,
        request_id: "r-1".into(),
        content: vec![ContentBlock::text("hello")],
        time_zone: zone.map(str::to_owned),
    }
}

#[tokio::test]
async fn a_prompt_cancelled_before_acceptance_records_nothing() {
    let h = Harness::open(ScriptedHost::new(Script::reply("done"))).await;
    let child = h
        .start(spec("spawn", "helper", Delivery::Parent))
        .await
        .unwrap()
        .child_id();
    let head = h.log.head();
    let signal = CancellationToken::new();
    signal.cancel();
    let refused = h
        .runtime
        .prompt(request(child, h.root.session(), None), signal)
        .await
        .unwrap_err();
    assert_eq!(refused, SubagentError::Cancelled);
    assert_eq!(h.log.head(), head);
}

#[tokio::test]
async fn zones_are_checked_against_the_bundled_iana_database_before_any_lookup() {
    let h = Harness::open(ScriptedHost::new(Script::reply("done"))).await;
    let child = h
        .start(spec("spawn", "helper", Delivery::Parent))
        .await
        .unwrap()
        .child_id();
    for zone in ["America/Argentina/Buenos_Aires", "UTC", "Asia/Kolkata"] {
        let mut accepted = request(child, h.root.session(), Some(zone));
        accepted.request_id = zone.into();
        h.runtime
            .prompt(accepted, CancellationToken::new())
            .await
            .unwrap_or_else(|err| panic!("{zone}: {err}"));
    }
    let head = h.log.head();
    // An unknown child with a bad zone: the zone is refused first.
    for zone in ["Europe/Atlantis", "europe/paris/", "../etc/passwd"] {
        let refused = h
            .runtime
            .prompt(
                request(SessionId::new(), h.root.session(), Some(zone)),
                CancellationToken::new(),
            )
            .await
            .unwrap_err();
        assert_eq!(refused.code(), ErrorCode::InvalidTimeZone, "{zone}");
    }
    assert_eq!(h.log.head(), head);
}

#[tokio::test]
async fn interrupt_by_parent_says_whether_it_stopped_live_work() {
    let host = ScriptedHost::new(Script::reply("done")).with(
        "slow",
        Script {
            turns: vec![vec![
                subagent_runtime::scripted::Step::Say("working".into()),
                subagent_runtime::scripted::Step::SleepMs(60_000),
            ]],
        },
    );
    let h = Harness::open(host).await;
    let slow = h
        .start(spec("spawn", "slow", Delivery::Parent))
        .await
        .unwrap()
        .child_id();
    h.until_events("the slow turn", slow, |events| {
        events
            .iter()
            .any(|event| matches!(event, subagent_core::Event::AssistantMessage { .. }))
    })
    .await;
    let address = InterruptRequest {
        child_session_id: slow,
        parent_session_id: h.root.session(),
        mode: AddressMode::Continuable,
    };
    assert_eq!(
        h.runtime.interrupt_by_parent(address).await,
        Ok(InterruptReceipt { interrupted: true })
    );
    let wrong = InterruptRequest {
        parent_session_id: SessionId::new(),
        ..address
    };
    assert_eq!(
        h.runtime
            .interrupt_by_parent(wrong)
            .await
            .unwrap_err()
            .code(),
        ErrorCode::Unauthorized
    );
}

/// A host that runs the scripted agents but says nothing about image input.
struct SilentHost(ScriptedHost);

impl subagent_runtime::AgentHost for SilentHost {
    fn create(
        &self,
        spec: subagent_runtime::AgentSpec,
    ) -> subagent_runtime::BoxFuture<'static, Result<Box<dyn subagent_runtime::Agent>, SubagentError>>
    {
        self.0.create(spec)
    }
}

#[tokio::test]
async fn a_host_that_does_not_say_it_takes_images_receives_none() {
    let h = Harness::open(std::sync::Arc::new(SilentHost(ScriptedHost::new(
        Script::reply("done"),
    ))))
    .await;
    let child = h
        .start(spec("spawn", "helper", Delivery::Parent))
        .await
        .unwrap()
        .child_id();
    let head = h.log.head();
    let mut image = request(child, h.root.session(), None);
    image.content.push(
        serde_json::from_value(serde_json::json!(
            {"type": "image", "mimeType": "image/gif", "data": "R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7"}
        ))
        .unwrap(),
    );
    let refused = h
        .runtime
        .prompt(image, CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), ErrorCode::AttachmentInvalid);
    assert!(
        refused.to_string().contains("does not accept image input"),
        "{refused}"
    );
    assert_eq!(h.log.head(), head);
    assert_eq!(h.log.attachment_ids().unwrap(), Vec::new());
    // Text still goes through.
    h.runtime
        .prompt(
            request(child, h.root.session(), None),
            CancellationToken::new(),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn image_caps_cannot_pass_the_hard_limit() {
    let h = Harness::open(ScriptedHost::new(Script::reply("done"))).await;
    let before = h.runtime.attachment_limits();
    assert_eq!(before, AttachmentLimits::DEFAULT);
    let refused = h
        .runtime
        .set_attachment_limits(AttachmentLimits {
            per_image: MAX_ATTACHMENT_BYTES + 1,
            per_request: MAX_ATTACHMENT_BYTES + 1,
        })
        .unwrap_err();
    assert_eq!(refused.code(), ErrorCode::BadRequest);
    assert_eq!(h.runtime.attachment_limits(), before);
    let smaller = AttachmentLimits {
        per_image: 1_024,
        per_request: 4_096,
    };
    h.runtime.set_attachment_limits(smaller).unwrap();
    assert_eq!(h.runtime.attachment_limits(), smaller);
}
