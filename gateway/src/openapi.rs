//! The OpenAPI 3.1 document of every route, served at `/v1/openapi.json`
//! and committed as `gateway/openapi.json`. [`ROUTES`] is the one list of
//! (method, path) the router serves; the tests keep the router, the
//! document and the committed copy equal, and each request schema's fields
//! equal to what its Rust type accepts.

use serde_json::{json, Value};

/// Every route the router serves, as the document names it.
pub const ROUTES: &[(&str, &str)] = &[
    ("post", "/v1/prompt"),
    ("post", "/v1/interruptByParent"),
    ("get", "/v1/roots"),
    ("post", "/v1/roots"),
    ("delete", "/v1/roots/{root}"),
    ("post", "/v1/roots/{root}/reopen"),
    ("post", "/v1/roots/{root}/children"),
    ("delete", "/v1/roots/{root}/children/{child}"),
    ("get", "/v1/sessions/{session}/children"),
    ("get", "/v1/sessions/{session}/descendants"),
    ("get", "/v1/sessions/{session}/transcript"),
    ("get", "/v1/state"),
    ("get", "/v1/sessions/{session}/tree"),
    ("get", "/v1/diff"),
    ("get", "/v1/verify"),
    ("get", "/v1/attachments/{id}"),
    ("get", "/v1/events"),
    ("get", "/v1/openapi.json"),
    ("get", "/metrics"),
    ("get", "/"),
    ("get", "/console/app.js"),
    ("get", "/console/style.css"),
];

fn schema(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

fn body(name: &str) -> Value {
    json!({"required": true, "content": {"application/json": {"schema": schema(name)}}})
}

fn answer(description: &str, name: Option<&str>) -> Value {
    match name {
        Some(name) => json!({
            "description": description,
            "content": {"application/json": {"schema": schema(name)}},
        }),
        None => json!({"description": description}),
    }
}

fn id_parameter(name: &str) -> Value {
    json!({
        "name": name, "in": "path", "required": true,
        "schema": schema("SessionId"),
    })
}

fn query_parameter(name: &str, description: &str) -> Value {
    json!({
        "name": name, "in": "query", "required": false, "description": description,
        "schema": {"type": "integer", "minimum": 0},
    })
}

/// One operation: its id, summary, parameters, body, success status and
/// answer. Every operation also answers the refusals of `Error`.
fn operation(
    id: &str,
    summary: &str,
    parameters: Vec<Value>,
    request: Option<&str>,
    success: (&str, Value),
) -> Value {
    let mut responses = json!({
        "default": answer("A refusal: {code, message} with the status of the README's table.", Some("Error")),
    });
    responses[success.0] = success.1;
    let mut operation = json!({
        "operationId": id,
        "summary": summary,
        "parameters": parameters,
        "responses": responses,
    });
    if let Some(name) = request {
        operation["requestBody"] = body(name);
    }
    operation
}

/// A console asset: public, one content type.
fn console_asset(id: &str, summary: &str, content_type: &str) -> Value {
    json!({
        "operationId": id,
        "summary": summary,
        "security": [],
        "responses": {
            "200": {"description": "The asset.", "content": {content_type: {"schema": {"type": "string"}}}},
            "default": answer("A refusal.", Some("Error")),
        },
    })
}

fn paths() -> Value {
    json!({
        "/v1/prompt": {"post": operation(
            "prompt",
            "The spec's prompt: one browser-authored message to a continuable child through its live direct parent.",
            vec![], Some("PromptRequest"), ("200", answer("The accepted message's inbox id.", Some("PromptReceipt"))))},
        "/v1/interruptByParent": {"post": operation(
            "interruptByParent",
            "The spec's interruptByParent, authorised against the live activation alone.",
            vec![], Some("InterruptRequest"), ("200", answer("Whether live work was interrupted.", Some("InterruptReceipt"))))},
        "/v1/roots": {
            "get": operation(
                "listRoots", "Every host root of the log, in creation order, and whether this server holds it.",
                vec![], None,
                ("200", json!({"description": "The roots.", "content": {"application/json": {"schema": {"type": "array", "items": schema("RootEntry")}}}}))),
            "post": operation(
                "openRoot", "Open a root session.",
                vec![], Some("OpenRoot"), ("201", answer("The root.", Some("RootOpened")))),
        },
        "/v1/roots/{root}": {"delete": operation(
            "closeRoot", "Close a root this server holds.",
            vec![id_parameter("root")], None, ("204", answer("Closed.", None)))},
        "/v1/roots/{root}/reopen": {"post": operation(
            "reopenRoot", "Take an existing root back after a restart.",
            vec![id_parameter("root")], None, ("200", answer("The root.", Some("RootOpened"))))},
        "/v1/roots/{root}/children": {"post": operation(
            "startChild", "Start a child of a held root with the full start request.",
            vec![id_parameter("root")], Some("SubagentActivationSpec"),
            ("201", answer("The child's identities.", Some("ChildStarted"))))},
        "/v1/roots/{root}/children/{child}": {"delete": operation(
            "disposeChild", "Dispose a direct child of a held root (release its activation).",
            vec![id_parameter("root"), id_parameter("child")], None, ("204", answer("Released.", None)))},
        "/v1/sessions/{session}/children": {"get": operation(
            "listChildren", "The durable catalog of a session, in parent event order.",
            vec![id_parameter("session")], None,
            ("200", json!({"description": "The children.", "content": {"application/json": {"schema": {"type": "array", "items": {"type": "object"}}}}})))},
        "/v1/sessions/{session}/descendants": {"get": operation(
            "listDescendants", "A session's subtree, stable pre-order.",
            vec![id_parameter("session")], None,
            ("200", json!({"description": "The subtree.", "content": {"application/json": {"schema": {"type": "array", "items": {"type": "object"}}}}})))},
        "/v1/sessions/{session}/transcript": {"get": operation(
            "transcript", "A session's own events, a page at a time.",
            vec![
                id_parameter("session"),
                query_parameter("after", "The last stream version already read."),
                json!({
                    "name": "limit", "in": "query", "required": false,
                    "description": "At most this many records, at least one (capped by the server).",
                    "schema": {"type": "integer", "minimum": 1},
                }),
            ],
            None, ("200", answer("One page.", Some("TranscriptPage"))))},
        "/v1/state": {"get": operation(
            "stateAt", "Every projection as of a log position (replay: nothing reruns).",
            vec![query_parameter("at", "The log position (the head when absent).")],
            None,
            ("200", json!({"description": "The projections.", "content": {"application/json": {"schema": {"type": "object"}}}})))},
        "/v1/sessions/{session}/tree": {"get": operation(
            "tree", "A root's tree with each session's state: live, or as it stood at a log position (replay: nothing reruns).",
            vec![id_parameter("session"), query_parameter("at", "The log position (live when absent).")],
            None, ("200", answer("The tree.", Some("TreeAnswer"))))},
        "/v1/diff": {"get": operation(
            "diff", "The domain changes between two log positions.",
            vec![
                {let mut from = query_parameter("from", "The earlier position."); from["required"] = json!(true); from},
                query_parameter("to", "The later position (the head when absent)."),
            ],
            None, ("200", answer("The changes.", Some("DiffAnswer"))))},
        "/v1/verify": {"get": operation(
            "verify", "Verify the log: admissible history, indexes, attachments, checkpoint.",
            vec![], None, ("200", answer("The report.", Some("VerifyAnswer"))))},
        "/": {"get": console_asset("console", "The console page (no token needed).", "text/html")},
        "/console/app.js": {"get": console_asset("consoleScript", "The console's script (no token needed).", "text/javascript")},
        "/console/style.css": {"get": console_asset("consoleStyle", "The console's style sheet (no token needed).", "text/css")},
        "/v1/attachments/{id}": {"get": {
            "operationId": "attachment",
            "summary": "The bytes of an image a prompt carried, by content address; served with the type sniffed from them.",
            "parameters": [
                {"name": "id", "in": "path", "required": true, "schema": schema("AttachmentId")},
            ],
            "responses": {
                "200": {"description": "The image.", "content": {
                    "image/png": {"schema": {"type": "string", "format": "binary"}},
                    "image/jpeg": {"schema": {"type": "string", "format": "binary"}},
                    "image/gif": {"schema": {"type": "string", "format": "binary"}},
                    "image/webp": {"schema": {"type": "string", "format": "binary"}},
                }},
                "default": answer("A refusal: {code, message} with the status of the README's table.", Some("Error")),
            },
        }},
        "/v1/events": {"get": {
            "operationId": "events",
            "summary": "The log as Server-Sent Events: id is the log position, event the type.",
            "parameters": [
                {"name": "root", "in": "query", "required": false, "schema": schema("SessionId")},
                query_parameter("after", "Resume after this position (Last-Event-ID wins)."),
                {"name": "Last-Event-ID", "in": "header", "required": false, "schema": {"type": "string", "pattern": "^[0-9]+$"}},
            ],
            "responses": {
                "200": {"description": "The stream.", "content": {"text/event-stream": {"schema": {"type": "string"}}}},
                "default": answer("A refusal.", Some("Error")),
            },
        }},
        "/v1/openapi.json": {"get": {
            "operationId": "openapi",
            "summary": "This document.",
            "responses": {
                "200": {"description": "The document.", "content": {"application/json": {"schema": {"type": "object"}}}},
                "default": answer("A refusal.", Some("Error")),
            },
        }},
        "/metrics": {"get": {
            "operationId": "metrics",
            "summary": "Prometheus metrics: starts, settlements and refusals, append latency and group size, live activations, the log's head, checkpoint age, open event streams.",
            "responses": {
                "200": {"description": "The metrics in the Prometheus text format.", "content": {"text/plain; version=0.0.4": {"schema": {"type": "string"}}}},
                "default": answer("A refusal.", Some("Error")),
            },
        }},
    })
}

fn schemas() -> Value {
    let id = json!({"type": "string", "format": "uuid"});
    let content = json!({"type": "array", "items": schema("ContentBlock")});
    // The delegation tool call that started a child.
    let requested_by = json!({
        "type": "object", "required": ["turn", "callId"],
        "properties": {
            "turn": {"type": "integer", "minimum": 1},
            "callId": {"type": "string"},
        },
    });
    // A durable continuable address; interruptByParent's request is one.
    let address = json!({
        "type": "object", "additionalProperties": false,
        "required": ["childSessionId", "parentSessionId", "mode"],
        "properties": {
            "childSessionId": schema("SessionId"),
            "parentSessionId": schema("SessionId"),
            "mode": {"const": "continuable"},
        },
    });
    json!({
        "SessionId": id,
        "AttachmentId": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"},
        "Error": {
            "type": "object", "required": ["code", "message"],
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
        },
        "ContentBlock": {
            "type": "object", "required": ["type"],
            "properties": {"type": {"type": "string"}},
            "description": "A content block: {type: \"text\", text} or {type: \"image\", mimeType, data | attachment}; a prompt takes these two kinds. An image carries base64 `data` (PNG, JPEG, GIF or WebP, matching `mimeType`) or names a stored `attachment` (sha256:<hex>).",
        },
        "ContinuableAddress": address.clone(),
        "PromptRequest": {
            "type": "object", "additionalProperties": false,
            "required": ["address", "delivery", "requestId", "content"],
            "properties": {
                "address": schema("ContinuableAddress"),
                "delivery": {"enum": ["queue", "steer"]},
                "requestId": {"type": "string", "minLength": 1, "maxLength": 256},
                "content": content,
                "timeZone": {"type": "string", "minLength": 1, "maxLength": 64},
            },
        },
        "PromptReceipt": {
            "type": "object", "required": ["messageId"],
            "properties": {"messageId": id},
        },
        "InterruptRequest": address,
        "InterruptReceipt": {
            "type": "object", "required": ["interrupted"],
            "properties": {"interrupted": {"type": "boolean"}},
        },
        "OpenRoot": {
            "type": "object", "additionalProperties": false,
            "required": ["label"],
            "properties": {"label": {"type": "string"}, "agentOptions": {"type": "object"}},
        },
        "RootOpened": {
            "type": "object", "required": ["sessionId"],
            "properties": {"sessionId": id},
        },
        "SubagentActivationSpec": {
            "type": "object",
            "required": ["provider", "label", "request", "delivery"],
            "properties": {
                "provider": {"type": "string"},
                "label": {"type": "string"},
                "childId": schema("SessionId"),
                "request": {
                    "type": "object", "required": ["prompt"],
                    "properties": {
                        "prompt": content,
                        "label": {"type": "string"},
                        "outputSchema": {"type": "object"},
                        "maxDepth": {"type": "integer", "minimum": 0},
                        "toolFilter": {"type": "object"},
                        "persona": {"type": "string"},
                        "agentOptions": {"type": "object"},
                    },
                },
                "delivery": {"enum": ["parent", "caller"]},
            },
        },
        "ChildStarted": {
            "type": "object", "required": ["childId"],
            "properties": {"childId": id, "messageId": id},
        },
        "RootEntry": {
            "type": "object", "required": ["sessionId", "label", "createdAt", "held"],
            "properties": {
                "sessionId": id, "label": {"type": "string"},
                "createdAt": {"type": "integer", "minimum": 1}, "held": {"type": "boolean"},
            },
        },
        "TreeAnswer": {
            "type": "object", "required": ["position", "head", "nodes"],
            "properties": {
                "position": {"type": "integer", "minimum": 0},
                "head": {"type": "integer", "minimum": 0},
                "nodes": {"type": "array", "items": {
                    "type": "object",
                    "required": ["id", "parentId", "depth", "label", "provider", "mode", "external", "state", "stopReason", "live"],
                    "properties": {
                        "id": id, "parentId": {"type": ["string", "null"]},
                        "depth": {"type": "integer", "minimum": 0}, "label": {"type": "string"},
                        "provider": {"type": ["string", "null"]},
                        "mode": {"enum": ["continuable", "one-shot", "unknown"]},
                        "external": {"type": "boolean"},
                        "state": {"enum": ["running", "idle", "inactive", "requested", "settled", "disposed", "start-failed"]},
                        "stopReason": {"type": ["string", "null"]},
                        "live": {"type": "boolean"},
                        "diagnostic": {"type": "string"},
                        "requestedBy": requested_by,
                    },
                }},
            },
        },
        "DiffAnswer": {
            "type": "object", "required": ["from", "to", "changes"],
            "properties": {
                "from": {"type": "integer", "minimum": 0}, "to": {"type": "integer", "minimum": 0},
                "changes": {"type": "array", "items": {
                    "type": "object", "required": ["change", "text"],
                    "properties": {"change": {"type": "string"}, "text": {"type": "string"}},
                }},
            },
        },
        "VerifyAnswer": {
            "type": "object", "required": ["ok", "head", "events", "problems", "notes"],
            "properties": {
                "ok": {"type": "boolean"}, "head": {"type": "integer", "minimum": 0},
                "events": {"type": "integer", "minimum": 0},
                "problems": {"type": "array", "items": {"type": "string"}},
                "notes": {
                    "type": "array", "items": {"type": "string"},
                    "description": "What is no problem but worth saying: a checkpoint of another format version.",
                },
            },
        },
        "TranscriptPage": {
            "type": "object", "required": ["records"],
            "properties": {
                "records": {"type": "array", "items": {"type": "object"}},
                "next": {"type": "integer", "minimum": 0},
            },
        },
    })
}

/// The document.
#[must_use]
pub fn document() -> Value {
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "subagents gateway",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The spec's remote methods (prompt, interruptByParent) and the host operations over HTTP. Every route needs Authorization: Bearer <token>.",
        },
        "servers": [{"url": "http://127.0.0.1:7878"}],
        "security": [{"bearer": []}],
        "paths": paths(),
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": schemas(),
        },
    })
}

#[cfg(test)]
#[path = "openapi_tests.rs"]
mod tests;
