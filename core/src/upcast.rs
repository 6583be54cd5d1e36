//! Schema evolution: decoding an event written under any released schema
//! version into today's [`Event`].
//!
//! An upcaster rewrites the JSON of one version into the next
//! (`{"type": ..., "data": ...}` in, the same shape out). Decoding an event of
//! version `v` runs every upcaster from `v` up to [`CURRENT_SCHEMA_VERSION`],
//! then decodes the typed event. Versions newer than this build, or zero, are
//! refused rather than guessed at.

use serde_json::Value;
use thiserror::Error;

use crate::event::{Event, CURRENT_SCHEMA_VERSION};

/// Rewrites one schema version's event JSON into the next version's.
#[derive(Clone, Copy, Debug)]
pub struct Upcaster {
    /// The version this step reads; it writes `from_version + 1`.
    pub from_version: u32,
    /// The rewrite. Errors name what could not be migrated.
    pub apply: fn(&mut Value) -> Result<(), String>,
}

/// The released upcasters, one per version step, in order; a test checks
/// that this table always covers `1..CURRENT_SCHEMA_VERSION`.
pub const UPCASTERS: &[Upcaster] = &[
    Upcaster {
        from_version: 1,
        // Version 2 only added an event type: every version 1 event is a
        // version 2 event as it stands.
        apply: |_| Ok(()),
    },
    Upcaster {
        from_version: 2,
        // Version 3 only added an event type and a stream kind: every
        // version 2 event is a version 3 event as it stands.
        apply: |_| Ok(()),
    },
    Upcaster {
        from_version: 3,
        // Version 4 only added the optional `requestedBy` of
        // `ActivationRequested` and `RunRequested`: every version 3 event
        // is a version 4 event as it stands.
        apply: |_| Ok(()),
    },
];

/// Why an event could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum UpcastError {
    /// Written by a newer build, or an invalid version.
    #[error("unsupported schema version {found} (this build reads 1..={current})")]
    UnsupportedSchema {
        /// The recorded version.
        found: u32,
        /// This build's version.
        current: u32,
    },
    /// No upcaster is registered for a step.
    #[error("no upcaster from schema version {0}")]
    MissingUpcaster(u32),
    /// An upcaster refused the event.
    #[error("upcasting from schema version {from_version} failed: {reason}")]
    UpcastFailed {
        /// The step that failed.
        from_version: u32,
        /// Its reason.
        reason: String,
    },
    /// The JSON is not a valid event of its version.
    #[error("malformed event: {0}")]
    Malformed(String),
}

/// Decodes an event recorded under `schema_version` with the released
/// upcasters.
///
/// # Errors
/// See [`UpcastError`].
pub fn decode_event(schema_version: u32, json: &str) -> Result<Event, UpcastError> {
    decode_event_with(UPCASTERS, CURRENT_SCHEMA_VERSION, schema_version, json)
}

/// [`decode_event`] against an explicit upcaster table and current version.
/// Exposed so that the upcasting machinery is testable before a second schema
/// version exists.
///
/// # Errors
/// See [`UpcastError`].
pub fn decode_event_with(
    upcasters: &[Upcaster],
    current: u32,
    schema_version: u32,
    json: &str,
) -> Result<Event, UpcastError> {
    if schema_version == 0 || schema_version > current {
        return Err(UpcastError::UnsupportedSchema {
            found: schema_version,
            current,
        });
    }
    if schema_version == current {
        return serde_json::from_str(json).map_err(|err| UpcastError::Malformed(err.to_string()));
    }
    let mut value: Value =
        serde_json::from_str(json).map_err(|err| UpcastError::Malformed(err.to_string()))?;
    for version in schema_version..current {
        let step = upcasters
            .iter()
            .find(|step| step.from_version == version)
            .ok_or(UpcastError::MissingUpcaster(version))?;
        (step.apply)(&mut value).map_err(|reason| UpcastError::UpcastFailed {
            from_version: version,
            reason,
        })?;
    }
    serde_json::from_value(value).map_err(|err| UpcastError::Malformed(err.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_released_table_covers_every_step() {
        let released_steps: Vec<u32> = (1..=CURRENT_SCHEMA_VERSION)
            .skip(1)
            .map(|to| to - 1)
            .collect();
        for version in released_steps {
            assert!(
                UPCASTERS.iter().any(|step| step.from_version == version),
                "no upcaster from {version}"
            );
        }
    }

    #[test]
    fn current_events_decode_directly() {
        let json = r#"{"type":"ProviderRemoved","data":{"name":"acp"}}"#;
        assert_eq!(
            decode_event(CURRENT_SCHEMA_VERSION, json).unwrap(),
            Event::ProviderRemoved { name: "acp".into() }
        );
    }

    // A hypothetical history: v1 called the field `provider`, v2 `providerName`,
    // v3 (current) `name`. Old records must still decode.
    fn v1_to_v2(value: &mut Value) -> Result<(), String> {
        let data = value["data"].as_object_mut().ok_or("no data")?;
        let name = data.remove("provider").ok_or("no provider")?;
        data.insert("providerName".into(), name);
        Ok(())
    }
    fn v2_to_v3(value: &mut Value) -> Result<(), String> {
        let data = value["data"].as_object_mut().ok_or("no data")?;
        let name = data.remove("providerName").ok_or("no providerName")?;
        data.insert("name".into(), name);
        Ok(())
    }
    const CHAIN: &[Upcaster] = &[
        Upcaster {
            from_version: 1,
            apply: v1_to_v2,
        },
        Upcaster {
            from_version: 2,
            apply: v2_to_v3,
        },
    ];

    #[test]
    fn old_versions_run_every_upcaster_in_order() {
        let v1 = json!({"type": "ProviderRemoved", "data": {"provider": "fork"}}).to_string();
        let v2 = json!({"type": "ProviderRemoved", "data": {"providerName": "fork"}}).to_string();
        let expected = Event::ProviderRemoved {
            name: "fork".into(),
        };
        assert_eq!(decode_event_with(CHAIN, 3, 1, &v1).unwrap(), expected);
        assert_eq!(decode_event_with(CHAIN, 3, 2, &v2).unwrap(), expected);
    }

    #[test]
    fn unsupported_missing_and_failing_steps_are_typed_errors() {
        let v1 = json!({"type": "ProviderRemoved", "data": {"provider": "fork"}}).to_string();
        assert_eq!(
            decode_event_with(CHAIN, 3, 4, &v1),
            Err(UpcastError::UnsupportedSchema {
                found: 4,
                current: 3
            })
        );
        assert!(matches!(
            decode_event_with(CHAIN, 3, 0, &v1),
            Err(UpcastError::UnsupportedSchema { .. })
        ));
        assert_eq!(
            decode_event_with(&CHAIN[1..], 3, 1, &v1),
            Err(UpcastError::MissingUpcaster(1))
        );
        let wrong = json!({"type": "ProviderRemoved", "data": {"name": "x"}}).to_string();
        assert!(matches!(
            decode_event_with(CHAIN, 3, 1, &wrong),
            Err(UpcastError::UpcastFailed {
                from_version: 1,
                ..
            })
        ));
        assert!(matches!(
            decode_event(CURRENT_SCHEMA_VERSION, "{not json"),
            Err(UpcastError::Malformed(_))
        ));
    }
}
