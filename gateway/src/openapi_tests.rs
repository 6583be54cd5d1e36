//! Unit tests of `openapi`: the document names exactly [`ROUTES`], the
//! committed copy is the document (`SUBAGENTS_BLESS=1` rewrites it), and
//! each request schema's fields are what its Rust type accepts: every
//! property is accepted, every required one is needed, an optional one is
//! not, and an unknown one is refused exactly where the schema says
//! `additionalProperties: false`.

use std::collections::BTreeSet;

use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use subagent_core::{InterruptRequest, PromptRequest, SubagentActivationSpec};

use super::*;
use crate::routes::roots::OpenRoot;

const CHILD: &str = "0190a8f0-0000-7000-8000-000000000001";
const PARENT: &str = "0190a8f0-0000-7000-8000-000000000002";

#[test]
fn the_document_names_exactly_the_routes_the_router_serves() {
    let document = document();
    let mut named = BTreeSet::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            named.insert((method.clone(), path.clone()));
        }
    }
    let served: BTreeSet<_> = ROUTES
        .iter()
        .map(|(method, path)| ((*method).to_owned(), (*path).to_owned()))
        .collect();
    assert_eq!(named, served);
}

#[test]
fn the_committed_document_is_the_served_one() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.json");
    let generated = format!("{}\n", serde_json::to_string_pretty(&document()).unwrap());
    if std::env::var_os("SUBAGENTS_BLESS").is_some() {
        std::fs::write(path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == generated,
        "gateway/openapi.json is stale: run SUBAGENTS_BLESS=1 cargo test --workspace --lib openapi"
    );
}

/// Checks `sample` (every documented property set) against `T` and the
/// schema `name`.
fn check_schema<T: DeserializeOwned>(name: &str, sample: Value) {
    let schema = &document()["components"]["schemas"][name];
    let properties: BTreeSet<_> = schema["properties"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    let sampled: BTreeSet<_> = sample.as_object().unwrap().keys().cloned().collect();
    assert_eq!(
        sampled, properties,
        "{name}: the sample covers every property"
    );
    serde_json::from_value::<T>(sample.clone())
        .unwrap_or_else(|err| panic!("{name}: the full sample is refused: {err}"));
    let required: BTreeSet<String> = schema["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|value| value.as_str().unwrap().to_owned())
        .collect();
    for property in &properties {
        let mut without = sample.clone();
        without.as_object_mut().unwrap().remove(property);
        let accepted = serde_json::from_value::<T>(without).is_ok();
        assert_eq!(
            accepted,
            !required.contains(property),
            "{name}.{property}: the schema says required = {}",
            required.contains(property)
        );
    }
    let mut extra = sample;
    extra["undocumented"] = json!(1);
    let closed = schema["additionalProperties"] == json!(false);
    assert_eq!(
        serde_json::from_value::<T>(extra).is_err(),
        closed,
        "{name}: additionalProperties"
    );
}

#[test]
fn each_request_schema_matches_its_type() {
    let address =
        json!({"childSessionId": CHILD, "parentSessionId": PARENT, "mode": "continuable"});
    check_schema::<PromptRequest>(
        "PromptRequest",
        json!({
            "address": address, "delivery": "queue", "requestId": "r",
            "content": [{"type": "text", "text": "hi"}], "timeZone": "UTC",
        }),
    );
    check_schema::<InterruptRequest>("InterruptRequest", address.clone());
    check_schema::<subagent_core::ContinuableAddress>("ContinuableAddress", address);
    check_schema::<OpenRoot>(
        "OpenRoot",
        json!({"label": "me", "agentOptions": {"model": "m"}}),
    );
    check_schema::<SubagentActivationSpec>(
        "SubagentActivationSpec",
        json!({
            "provider": "spawn", "label": "l", "childId": CHILD, "delivery": "parent",
            "request": {"prompt": [{"type": "text", "text": "go"}]},
        }),
    );
}
