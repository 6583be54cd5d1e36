//! Output schemas: the enforced subset (`assert_object_json_schema`) and the
//! validation of a child's structured capture.
//!
//! The subset, checked before anything is recorded:
//! - the root is a JSON object schema with `"type": "object"`;
//! - every schema object uses only these keywords: `type`, `properties`,
//!   `required`, `additionalProperties`, `items`, `prefixItems`, `enum`,
//!   `const`, `anyOf`, `oneOf`, `allOf`, `not`, `$defs`, `$ref`, `$schema`,
//!   `$id`, `title`, `description`, `default`, `examples`, `format`,
//!   `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`,
//!   `multipleOf`, `minLength`, `maxLength`, `pattern`, `minItems`,
//!   `maxItems`, `uniqueItems`, `minProperties`, `maxProperties`;
//! - `$ref` is local (`#...`): no remote references are ever fetched;
//! - at most [`MAX_SCHEMA_BYTES`] serialized and [`MAX_SCHEMA_DEPTH`] levels
//!   of nesting;
//! - it compiles under the `jsonschema` crate.

use serde_json::Value;

use crate::error::SubagentError;

/// Largest accepted schema, serialized.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;
/// Deepest accepted nesting of JSON values in a schema.
pub const MAX_SCHEMA_DEPTH: usize = 32;

const KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "prefixItems",
    "enum",
    "const",
    "anyOf",
    "oneOf",
    "allOf",
    "not",
    "$defs",
    "$ref",
    "$schema",
    "$id",
    "title",
    "description",
    "default",
    "examples",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
];
/// Keywords whose value is a map of names to schemas.
const SCHEMA_MAPS: &[&str] = &["properties", "$defs"];
/// Keywords whose value is one schema.
const SCHEMA_VALUES: &[&str] = &["additionalProperties", "items", "not"];
/// Keywords whose value is a list of schemas.
const SCHEMA_LISTS: &[&str] = &["anyOf", "oneOf", "allOf", "prefixItems"];

fn reject(reason: impl Into<String>) -> SubagentError {
    SubagentError::InvalidOutputSchema(reason.into())
}

fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

fn check_schema(schema: &Value, path: &str) -> Result<(), SubagentError> {
    let object = match schema {
        Value::Object(object) => object,
        Value::Bool(_) => return Ok(()),
        _ => return Err(reject(format!("{path} is not a schema object"))),
    };
    for (keyword, value) in object {
        if !KEYWORDS.contains(&keyword.as_str()) {
            return Err(reject(format!(
                "{path}: keyword {keyword:?} is outside the supported subset"
            )));
        }
        if keyword == "$ref"
            && !value
                .as_str()
                .is_some_and(|reference| reference.starts_with('#'))
        {
            return Err(reject(format!(
                "{path}: only local $ref (\"#...\") is allowed"
            )));
        }
        let here = format!("{path}/{keyword}");
        if SCHEMA_MAPS.contains(&keyword.as_str()) {
            let map = value
                .as_object()
                .ok_or_else(|| reject(format!("{here} must be an object")))?;
            for (name, nested) in map {
                check_schema(nested, &format!("{here}/{name}"))?;
            }
        } else if SCHEMA_VALUES.contains(&keyword.as_str()) {
            check_schema(value, &here)?;
        } else if SCHEMA_LISTS.contains(&keyword.as_str()) {
            let list = value
                .as_array()
                .ok_or_else(|| reject(format!("{here} must be an array")))?;
            for (index, nested) in list.iter().enumerate() {
                check_schema(nested, &format!("{here}/{index}"))?;
            }
        }
    }
    Ok(())
}

/// Checks that `schema` is inside the enforced subset and compiles.
///
/// # Errors
/// `subagent/invalid-output-schema` naming the first problem.
pub fn assert_object_json_schema(schema: &Value) -> Result<(), SubagentError> {
    let size = serde_json::to_vec(schema).map_or(usize::MAX, |bytes| bytes.len());
    if size > MAX_SCHEMA_BYTES {
        return Err(reject(format!(
            "schema of {size} bytes exceeds {MAX_SCHEMA_BYTES}"
        )));
    }
    if depth(schema) > MAX_SCHEMA_DEPTH {
        return Err(reject(format!(
            "schema nests deeper than {MAX_SCHEMA_DEPTH}"
        )));
    }
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err(reject(
            "the root must be an object schema with \"type\": \"object\"",
        ));
    }
    check_schema(schema, "#")?;
    jsonschema::validator_for(schema).map_err(|err| reject(format!("does not compile: {err}")))?;
    Ok(())
}

/// What [`validate_capture`] answers for a schema that does not compile,
/// which an accepted schema never is.
pub const SCHEMA_DOES_NOT_COMPILE: &str = "the output schema does not compile";

/// Validates a structured capture against its schema. The error names only
/// where and which keyword failed, never the captured values.
///
/// # Errors
/// A safe description of the first failure, or of a missing capture.
pub fn validate_capture(schema: &Value, capture: Option<&Value>) -> Result<Value, String> {
    let capture =
        capture.ok_or_else(|| "the child finished without a structured capture".to_owned())?;
    let validator =
        jsonschema::validator_for(schema).map_err(|_| SCHEMA_DOES_NOT_COMPILE.to_owned())?;
    let first_error = validator.iter_errors(capture).next().map(|error| {
        format!(
            "the structured capture does not match the output schema at {:?} (rule {})",
            error.instance_path().to_string(),
            error.schema_path()
        )
    });
    match first_error {
        None => Ok(capture.clone()),
        Some(reason) => Err(reason),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {"answer": {"type": "integer", "minimum": 0}, "notes": {"type": "array", "items": {"$ref": "#/$defs/note"}}},
            "required": ["answer"],
            "additionalProperties": false,
            "$defs": {"note": {"type": "string", "maxLength": 80}}
        })
    }

    #[test]
    fn supported_schemas_pass_and_captures_are_checked() {
        assert!(assert_object_json_schema(&schema()).is_ok());
        assert_eq!(
            validate_capture(&schema(), Some(&json!({"answer": 42}))),
            Ok(json!({"answer": 42}))
        );
        let err = validate_capture(&schema(), Some(&json!({"answer": -1, "secret": "hunter2"})))
            .unwrap_err();
        assert!(
            !err.contains("hunter2") && !err.contains("-1"),
            "no captured values leak: {err}"
        );
        assert!(validate_capture(&schema(), None)
            .unwrap_err()
            .contains("without a structured capture"));
    }

    #[test]
    fn schemas_outside_the_subset_are_rejected_with_a_reason() {
        let deep = (0..40).fold(
            json!({"type": "object"}),
            |inner, _| json!({"type": "object", "properties": {"x": inner}}),
        );
        for (bad, why) in [
            (json!("object"), "root must be an object"),
            (json!({"type": "array"}), "root must be an object"),
            (
                json!({"type": "object", "patternProperties": {}}),
                "outside the supported subset",
            ),
            (
                json!({"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}}),
                "only local $ref",
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}}),
                "does not compile",
            ),
            (
                json!({"type": "object", "properties": []}),
                "must be an object",
            ),
            (deep, "nests deeper"),
            (
                json!({"type": "object", "description": "x".repeat(MAX_SCHEMA_BYTES)}),
                "exceeds",
            ),
        ] {
            let err = assert_object_json_schema(&bad).unwrap_err();
            assert_eq!(err.code().as_str(), "subagent/invalid-output-schema");
            assert!(err.to_string().contains(why), "{why}: {err}");
        }
    }
}
