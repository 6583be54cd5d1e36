//! The gateway's door, each rule by a request that must be refused: no or
//! a wrong token (unknown routes included), two `Authorization` or two
//! `Origin` headers (over a raw socket), a browser origin off the
//! allow-list, a body over the size limit, JSON nested too deep, a body
//! that is not JSON, a request slower than the time limit; and the JSON
//! `{code, message}` form of the answers for unknown routes and methods.

mod common;

use std::time::Duration;

use common::{answer, Server, ALLOWED_ORIGIN, TOKEN};
use serde_json::json;
use subagent_gateway::Limits;
use subagent_runtime::CapacityLimits;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn every_route_needs_the_token_even_one_that_does_not_exist() {
    let server = Server::start().await;
    // `/` is the console page, the one public route (tests/history.rs).
    for path in ["/v1/roots", "/v1/state", "/v1/no-such-route", "/index.html"] {
        let bare = server
            .client
            .get(format!("{}{path}", server.base))
            .send()
            .await
            .unwrap();
        assert_eq!(
            bare.headers()
                .get("www-authenticate")
                .map(|v| v.to_str().unwrap()),
            Some("Bearer")
        );
        let (status, body) = answer(bare).await;
        assert_eq!(
            (status, body["code"].as_str().unwrap()),
            (401, "gateway/unauthenticated"),
            "{path}"
        );
        for wrong in [
            "Bearer nope",
            "Basic dGVzdA==",
            &format!("Bearer {TOKEN}x"),
            TOKEN,
        ] {
            let response = server
                .client
                .get(format!("{}{path}", server.base))
                .header("authorization", wrong)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 401, "{path} with {wrong:?}");
        }
    }
    // With the token, the unknown route is a JSON 404 and a wrong method 405.
    let (status, body) = server.get("/v1/no-such-route").await;
    assert_eq!(
        (status, body["code"].as_str().unwrap()),
        (404, "gateway/not-found")
    );
    let (status, body) = server.get("/v1/prompt").await;
    assert_eq!(
        (status, body["code"].as_str().unwrap()),
        (405, "gateway/method-not-allowed")
    );
    // A lower-case scheme is still a bearer token.
    let response = server
        .client
        .get(format!("{}/v1/state", server.base))
        .header("authorization", format!("bearer {TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn a_browser_origin_off_the_allow_list_is_refused_even_with_the_token() {
    let server = Server::start().await;
    let head = server.head();
    let refused = server
        .request(reqwest::Method::POST, "/v1/roots")
        .header("origin", "http://evil.test")
        .json(&json!({"label": "x"}))
        .send()
        .await
        .unwrap();
    assert!(refused
        .headers()
        .get("access-control-allow-origin")
        .is_none());
    let (status, body) = answer(refused).await;
    assert_eq!(
        (status, body["code"].as_str().unwrap()),
        (403, "gateway/forbidden-origin")
    );
    assert_eq!(server.head(), head, "nothing was opened");
    let allowed = server
        .request(reqwest::Method::POST, "/v1/roots")
        .header("origin", ALLOWED_ORIGIN)
        .json(&json!({"label": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(allowed.status(), 201);
}

/// A raw `GET` of `path` with these header lines and `connection: close`:
/// the one answer, which must be the JSON refusal `gateway/bad-request`
/// with the connection closed after it; its message.
async fn refused_as_bad(server: &Server, path: &str, lines: &[String]) -> String {
    let mut request = format!("GET {path} HTTP/1.1\r\nhost: gateway.test\r\n");
    for line in lines {
        request.push_str(line);
        request.push_str("\r\n");
    }
    request.push_str("connection: close\r\n\r\n");
    let answers = server.raw(request.into_bytes()).await;
    assert_eq!(answers.len(), 1, "{path} {lines:?}: {answers:?}");
    answers[0].refusal(400, "gateway/bad-request")
}

#[tokio::test]
async fn two_authorization_headers_are_a_bad_request_whichever_is_valid() {
    let server = Server::start().await;
    let valid = format!("authorization: Bearer {TOKEN}");
    let wrong = "authorization: Bearer nope".to_owned();
    for path in ["/v1/roots", "/v1/no-such-route", "/"] {
        for pair in [
            [valid.clone(), wrong.clone()],
            [wrong.clone(), valid.clone()],
            [valid.clone(), valid.clone()],
        ] {
            let message = refused_as_bad(&server, path, &pair).await;
            assert!(
                message.contains("more than one Authorization header"),
                "{path} {pair:?}: {message}"
            );
        }
    }
    // One valid header is still served.
    let (status, _) = server.get("/v1/roots").await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn two_origin_headers_are_a_bad_request_whichever_is_allowed() {
    let server = Server::start().await;
    let allowed = format!("origin: {ALLOWED_ORIGIN}");
    let evil = "origin: http://evil.test".to_owned();
    for pair in [
        [allowed.clone(), evil.clone()],
        [evil.clone(), allowed.clone()],
        [allowed.clone(), allowed.clone()],
    ] {
        let lines = [
            format!("authorization: Bearer {TOKEN}"),
            pair[0].clone(),
            pair[1].clone(),
        ];
        let message = refused_as_bad(&server, "/v1/roots", &lines).await;
        assert!(
            message.contains("more than one Origin header"),
            "{pair:?}: {message}"
        );
    }
}

#[tokio::test]
async fn bodies_over_the_limit_too_deep_or_not_json_are_refused_before_the_runtime() {
    let limits = Limits {
        body_bytes: 4_096,
        ..Limits::default()
    };
    let server = Server::with(limits, CapacityLimits::default()).await;
    let head = server.head();
    let large = json!({"label": "x".repeat(5_000)});
    let (status, body) = server.post("/v1/roots", &large).await;
    assert_eq!(
        (status, body["code"].as_str().unwrap()),
        (413, "gateway/payload-too-large")
    );
    // Without a Content-Length (chunked), the limit still holds.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = vec![
        Ok(b"{\"label\":\"".to_vec()),
        Ok(vec![b'y'; 5_000]),
        Ok(b"\"}".to_vec()),
    ];
    let streamed = server
        .request(reqwest::Method::POST, "/v1/roots")
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(tokio_stream::iter(chunks)))
        .send()
        .await
        .unwrap();
    let (status, body) = answer(streamed).await;
    assert_eq!(
        (status, body["code"].as_str().unwrap()),
        (413, "gateway/payload-too-large")
    );

    let deep = format!("{}{}", "[".repeat(40), "]".repeat(40));
    let not_json = server
        .request(reqwest::Method::POST, "/v1/roots")
        .header("content-type", "text/plain")
        .body("{\"label\":\"x\"}")
        .send()
        .await
        .unwrap();
    let (status, body) = answer(not_json).await;
    assert_eq!(
        (status, body["code"].as_str().unwrap()),
        (400, "gateway/bad-request")
    );
    for raw in [
        deep.as_str(),
        "{\"label\":",
        "{\"label\": 7}",
        "{\"label\":\"x\",\"extra\":1}",
    ] {
        let response = server
            .request(reqwest::Method::POST, "/v1/roots")
            .header("content-type", "application/json")
            .body(raw.to_owned())
            .send()
            .await
            .unwrap();
        let (status, body) = answer(response).await;
        assert_eq!(
            (status, body["code"].as_str().unwrap()),
            (400, "gateway/bad-request"),
            "{raw}"
        );
    }
    assert_eq!(server.head(), head, "no refusal reached the log");
}

#[tokio::test]
async fn a_request_slower_than_the_time_limit_is_answered_with_a_timeout() {
    let limits = Limits {
        request_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let server = Server::with(limits, CapacityLimits::default()).await;
    let head = server.head();
    // Headers promise a body that never comes.
    let address = server.base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = format!(
        "POST /v1/roots HTTP/1.1\r\nhost: {address}\r\nauthorization: Bearer {TOKEN}\r\n\
         content-type: application/json\r\ncontent-length: 100\r\n\r\n{{\"label\":"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut reply = Vec::new();
    let answered = async {
        let mut buffer = [0u8; 1024];
        // Until the answer's JSON is in, or the server closes.
        while !String::from_utf8_lossy(&reply).contains("gateway/timeout") {
            let read = stream.read(&mut buffer).await.unwrap();
            if read == 0 {
                break;
            }
            reply.extend_from_slice(&buffer[..read]);
        }
    };
    tokio::time::timeout(Duration::from_secs(10), answered)
        .await
        .expect("the server answers within the limit");
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 504"), "{reply}");
    assert!(reply.contains("gateway/timeout"), "{reply}");
    assert_eq!(server.head(), head);
}

#[tokio::test]
async fn a_bad_id_in_a_path_or_query_is_a_json_bad_request() {
    let server = Server::start().await;
    for path in [
        "/v1/sessions/not-an-id/children",
        "/v1/state?at=minus",
        "/v1/state?surprise=1",
        "/v1/events?root=nope",
    ] {
        let (status, body) = server.get(path).await;
        assert_eq!(
            (status, body["code"].as_str().unwrap()),
            (400, "gateway/bad-request"),
            "{path}: {body}"
        );
    }
    let (status, body) = server
        .get("/v1/sessions/0190a8f0-0000-7000-8000-000000000001/transcript")
        .await;
    assert_eq!(
        (status, body["code"].as_str().unwrap()),
        (404, "replay/unknown-session")
    );
    // A segment that is not UTF-8 once decoded: axum's own refusal is plain
    // text; every route with a segment answers the JSON form instead.
    let root = server.open_root().await;
    for (method, path) in [
        ("GET", "/v1/sessions/%ff/children".to_owned()),
        ("GET", "/v1/sessions/%ff/descendants".to_owned()),
        ("GET", "/v1/sessions/%ff/transcript".to_owned()),
        ("GET", "/v1/sessions/%ff/tree".to_owned()),
        ("GET", "/v1/attachments/%ff".to_owned()),
        ("DELETE", "/v1/roots/%ff".to_owned()),
        ("POST", "/v1/roots/%ff/reopen".to_owned()),
        ("POST", "/v1/roots/%ff/children".to_owned()),
        ("DELETE", format!("/v1/roots/{root}/children/%ff")),
    ] {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let response = server
            .request(method.clone(), &path)
            .header("content-type", "application/json")
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.headers()["content-type"].to_str().unwrap(),
            "application/json",
            "{method} {path}"
        );
        let (status, body) = answer(response).await;
        assert_eq!(
            (status, body["code"].as_str().unwrap()),
            (400, "gateway/bad-request"),
            "{method} {path}: {body}"
        );
    }
}

#[tokio::test]
async fn every_route_of_the_document_is_served_with_its_method() {
    let server = Server::start().await;
    let id = "0190a8f0-0000-7000-8000-000000000009";
    for (method, path) in subagent_gateway::openapi::ROUTES {
        let concrete = path
            .replace("{root}", id)
            .replace("{child}", id)
            .replace("{session}", id);
        let method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let response = server
            .request(method.clone(), &concrete)
            .header("content-type", "application/json")
            .body("{}")
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        if status == 200 && concrete == "/v1/events" {
            continue;
        }
        let (_, body) = answer(response).await;
        assert_ne!(body["code"], "gateway/not-found", "{method} {concrete}");
        assert_ne!(status, 405, "{method} {concrete}");
    }
    let (status, document) = server.get("/v1/openapi.json").await;
    assert_eq!(status, 200);
    assert_eq!(document, subagent_gateway::openapi::document());
}

#[tokio::test]
async fn a_label_empty_or_holding_a_control_character_is_refused_with_nothing_recorded() {
    let server = Server::start().await;
    let root = server.open_root().await;
    let head = server.head();
    for label in ["", "a\nforged", "x\u{1b}[31m", "nul\u{0}"] {
        let (status, body) = server.post("/v1/roots", &json!({"label": label})).await;
        assert_eq!(
            (status, body["code"].as_str().unwrap()),
            (400, "gateway/bad-request"),
            "root {label:?}: {body}"
        );
        let (status, body) = server
            .post(
                &format!("/v1/roots/{root}/children"),
                &json!({
                    "provider": "spawn",
                    "label": label,
                    "request": {"prompt": [{"type": "text", "text": "begin"}]},
                    "delivery": "parent",
                }),
            )
            .await;
        assert_eq!(
            (status, body["code"].as_str().unwrap()),
            (400, "gateway/bad-request"),
            "child {label:?}: {body}"
        );
    }
    assert_eq!(server.head(), head, "nothing was recorded");
}

#[tokio::test]
async fn a_start_with_an_empty_prompt_is_refused_as_an_empty_prompt_is() {
    let server = Server::start().await;
    let root = server.open_root().await;
    let head = server.head();
    let (status, body) = server
        .post(
            &format!("/v1/roots/{root}/children"),
            &json!({
                "provider": "spawn",
                "label": "worker",
                "request": {"prompt": []},
                "delivery": "parent",
            }),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str().unwrap()),
        (400, "gateway/bad-request"),
        "{body}"
    );
    assert!(body["message"]
        .as_str()
        .unwrap()
        .contains("at least one content block"));
    assert_eq!(server.head(), head, "nothing was recorded");
}
