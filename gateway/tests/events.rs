//! `GET /v1/events` over real HTTP: the history with log positions as ids,
//! one `caught-up` marker, live events after it, resumption with
//! `Last-Event-ID` (no gap, no duplicate), one root's tree only, and a bad
//! resume position or root refused.

mod common;

use common::{read_sse, Server, Sse};

/// The frames of `GET path` up to and including its `caught-up` marker.
async fn until_caught_up(server: &Server, path: &str) -> Vec<Sse> {
    let mut stream = server
        .request(reqwest::Method::GET, path)
        .send()
        .await
        .unwrap();
    read_sse(&mut stream, |frames| {
        frames.iter().any(|frame| frame.event == "caught-up")
    })
    .await
}

#[tokio::test]
async fn the_stream_replays_the_log_by_position_then_follows_live() {
    let server = Server::start().await;
    let root = server.open_root().await;
    let head = server.head();
    let mut stream = server
        .request(reqwest::Method::GET, "/v1/events")
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    assert_eq!(
        stream.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let history = read_sse(&mut stream, |frames| {
        frames.iter().any(|frame| frame.event == "caught-up")
    })
    .await;
    let ids: Vec<u64> = history.iter().filter_map(|frame| frame.id).collect();
    assert_eq!(
        ids,
        (1..=head).collect::<Vec<_>>(),
        "every position once, in order"
    );
    let marker = history.last().unwrap();
    assert_eq!((marker.event.as_str(), marker.id), ("caught-up", None));
    assert_eq!(marker.data["head"], head);
    for frame in history.iter().filter(|frame| frame.id.is_some()) {
        assert_eq!(frame.data["position"], frame.id.unwrap());
        assert_eq!(frame.data["event"]["type"].as_str().unwrap(), frame.event);
    }

    let child = server.start_child(&root, "helper").await;
    let live = read_sse(&mut stream, |frames| {
        frames.iter().any(|frame| frame.event == "TurnEnded")
    })
    .await;
    assert_eq!(
        live[0].id,
        Some(head + 1),
        "live follows history with no gap"
    );
    assert!(live.iter().any(|frame| frame.event == "SessionCreated"
        && frame.data["stream"].as_str().unwrap().ends_with(&child)));
}

#[tokio::test]
async fn a_reconnect_with_last_event_id_resumes_with_no_gap_and_no_duplicate() {
    let server = Server::start().await;
    let root = server.open_root().await;
    server.start_child(&root, "one").await;
    let mut first = server
        .request(reqwest::Method::GET, "/v1/events")
        .send()
        .await
        .unwrap();
    let seen = read_sse(&mut first, |frames| frames.len() >= 3).await;
    let last = seen[2].id.unwrap();
    drop(first);
    server.start_child(&root, "two").await;
    let head = server.head();
    let mut resumed = server
        .request(reqwest::Method::GET, "/v1/events")
        .header("last-event-id", last.to_string())
        .send()
        .await
        .unwrap();
    let rest = read_sse(&mut resumed, |frames| {
        frames.iter().any(|frame| frame.event == "caught-up")
    })
    .await;
    let ids: Vec<u64> = rest.iter().filter_map(|frame| frame.id).collect();
    assert_eq!(ids, (last + 1..=head).collect::<Vec<_>>());
    // `?after=` is the same resume point for a client that cannot set headers.
    let again = until_caught_up(&server, &format!("/v1/events?after={last}")).await;
    assert_eq!(
        again
            .iter()
            .filter_map(|frame| frame.id)
            .collect::<Vec<_>>(),
        ids
    );
}

#[tokio::test]
async fn a_root_filter_streams_only_that_tree() {
    let server = Server::start().await;
    let mine = server.open_root().await;
    let other = server.open_root().await;
    let child = server.start_child(&mine, "mine").await;
    server.start_child(&other, "theirs").await;
    let frames = until_caught_up(&server, &format!("/v1/events?root={mine}")).await;
    let streams: std::collections::BTreeSet<String> = frames
        .iter()
        .filter(|frame| frame.id.is_some())
        .map(|frame| frame.data["stream"].to_string())
        .collect();
    assert!(!streams.is_empty());
    for stream in &streams {
        assert!(
            stream.contains(&mine) || stream.contains(&child),
            "{stream} is outside the tree of {mine}"
        );
    }
    assert!(streams.iter().any(|stream| stream.contains(&child)));
}

#[tokio::test]
async fn a_resume_position_that_is_not_a_number_is_a_bad_request() {
    let server = Server::start().await;
    let response = server
        .request(reqwest::Method::GET, "/v1/events")
        .header("last-event-id", "yesterday")
        .send()
        .await
        .unwrap();
    let (status, body) = common::answer(response).await;
    assert_eq!(
        (status, body["code"].as_str().unwrap()),
        (400, "gateway/bad-request")
    );
}

#[tokio::test]
async fn a_resume_position_past_the_head_is_refused_not_invented() {
    let server = Server::start().await;
    server.open_root().await;
    let head = server.head();
    for (header, query) in [
        (Some((head + 1).to_string()), String::new()),
        (None, format!("?after={}", head + 1000)),
    ] {
        let mut request = server.request(reqwest::Method::GET, &format!("/v1/events{query}"));
        if let Some(header) = &header {
            request = request.header("last-event-id", header);
        }
        let (status, body) = common::answer(request.send().await.unwrap()).await;
        assert_eq!(
            (status, body["code"].as_str().unwrap()),
            (400, "replay/position-past-head"),
            "{header:?} {query}: {body}"
        );
    }
    // At the head itself: nothing to replay, and the head as it is.
    let frames = until_caught_up(&server, &format!("/v1/events?after={head}")).await;
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(frames[0].data["head"], head);
}

#[tokio::test]
async fn a_root_filter_names_a_root_the_log_knows() {
    let server = Server::start().await;
    let root = server.open_root().await;
    let child = server.start_child(&root, "worker").await;
    let unknown = "01a24843-c8b8-74d3-9316-a669bcdfb920";
    for (id, expected) in [
        (unknown, (404, "replay/unknown-session")),
        (child.as_str(), (400, "gateway/bad-request")),
    ] {
        let response = server
            .request(reqwest::Method::GET, &format!("/v1/events?root={id}"))
            .send()
            .await
            .unwrap();
        let (status, body) = common::answer(response).await;
        assert_eq!(
            (status, body["code"].as_str().unwrap()),
            expected,
            "{id}: {body}"
        );
    }
}
