//! Unit tests of `remote`, beside it so the module stays short.

use super::*;
use crate::ErrorCode;

fn request(request_id: &str, time_zone: Option<&str>) -> PromptRequest {
    PromptRequest {
        address: ContinuableAddress {
            child_session_id: SessionId::new(),
            parent_session_id: SessionId::new(),
            mode: AddressMode::Continuable,
        },
        delivery: MessageDelivery::Queue,
        request_id: request_id.into(),
        content: vec![ContentBlock::text("hi")],
        time_zone: time_zone.map(str::to_owned),
    }
}

fn known_zone(zone: &str) -> bool {
    zone == "Europe/Paris"
}

#[test]
fn a_well_formed_prompt_passes() {
    assert_eq!(request("r-1", None).validate(known_zone), Ok(()));
    assert_eq!(
        request("r-1", Some("Europe/Paris")).validate(known_zone),
        Ok(())
    );
}

#[test]
fn a_bad_request_id_is_a_bad_request() {
    for id in [
        String::new(),
        "x".repeat(MAX_REQUEST_ID_BYTES + 1),
        "a\nb".into(),
    ] {
        let refused = request(&id, None).validate(known_zone).unwrap_err();
        assert_eq!(refused.code(), ErrorCode::BadRequest, "{id:?}: {refused}");
    }
    let longest = "x".repeat(MAX_REQUEST_ID_BYTES);
    assert_eq!(request(&longest, None).validate(known_zone), Ok(()));
}

#[test]
fn empty_content_or_a_tool_block_is_a_bad_request() {
    let mut empty = request("r", None);
    empty.content.clear();
    assert_eq!(
        empty.validate(known_zone),
        Err(SubagentError::BadRequest(
            "a prompt needs at least one content block".into()
        ))
    );
    let mut tool: PromptRequest = request("r", None);
    tool.content = serde_json::from_value(serde_json::json!([
        {"type": "tool_result", "toolUseId": "t", "content": []}
    ]))
    .unwrap();
    assert_eq!(
        tool.validate(known_zone),
        Err(SubagentError::BadRequest(
            "a prompt carries text and image blocks only, not tool_result blocks".into()
        ))
    );
}

#[test]
fn an_unknown_empty_or_overlong_zone_is_an_invalid_time_zone() {
    for zone in ["Mars/Olympus", "", &"A".repeat(MAX_TIME_ZONE_BYTES + 1)] {
        let refused = request("r", Some(zone)).validate(known_zone).unwrap_err();
        assert_eq!(refused.code(), ErrorCode::InvalidTimeZone, "{zone:?}");
        // The echoed zone is bounded.
        assert!(refused.to_string().len() < 2 * MAX_TIME_ZONE_BYTES + 32);
    }
}

#[test]
fn the_wire_form_is_camel_case_and_refuses_unknown_fields_and_modes() {
    let child = SessionId::new();
    let parent = SessionId::new();
    let json = serde_json::json!({
        "address": {"childSessionId": child, "parentSessionId": parent, "mode": "continuable"},
        "delivery": "steer",
        "requestId": "r-1",
        "content": [{"type": "text", "text": "hi"}],
        "timeZone": "Europe/Paris",
    });
    let parsed: PromptRequest = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(parsed.address.child_session_id, child);
    assert_eq!(parsed.delivery, MessageDelivery::Steer);
    assert_eq!(serde_json::to_value(&parsed).unwrap(), json);

    let mut one_shot = json.clone();
    one_shot["address"]["mode"] = "one-shot".into();
    assert!(serde_json::from_value::<PromptRequest>(one_shot).is_err());
    let mut extra = json;
    extra["surprise"] = true.into();
    assert!(serde_json::from_value::<PromptRequest>(extra).is_err());
    let empty_id = serde_json::json!({
        "childSessionId": "", "parentSessionId": parent, "mode": "continuable"
    });
    assert!(serde_json::from_value::<InterruptRequest>(empty_id).is_err());
}
