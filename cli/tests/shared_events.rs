//! A root-filtered event stream (`GET /v1/events?root=R`) served by one host
//! of a shared PostgreSQL log, while another host holds tree R and
//! delegates in it: the stream delivers every event of R's tree, and none
//! of another tree.
//!
//! Host A serves the gateway (in this process, over real HTTP on
//! 127.0.0.1); host B, a second runtime on its own connection pool of the
//! same schema, opens R and starts children in it after the subscriber has
//! caught up. Each child's first record reaches A's stream from the log,
//! possibly before A's follower has folded it into A's projections: a
//! filter that asked A's projections then, and remembered "not in this
//! tree" for a session A had not seen yet, would drop that child's events
//! for good.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use subagent_core::{ContentBlock, Delivery, Event, SessionId, StreamId, SubagentActivationSpec};
use subagent_gateway::{GatewayConfig, Limits, Token, TokenSource};
use subagent_pg::testing::{unique_schema, TestServer};
use subagent_pg::PgLog;
use subagent_projections::Projections;
use subagent_runtime::providers::SpawnProvider;
use subagent_runtime::scripted::Step;
use subagent_runtime::{CapacityLimits, Script, ScriptedHost, SharedHost, SubagentRuntime};
use subagent_store::{EventLog, EventLogExt};
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "test-token-0123456789abcdef0123456789abcdef";
/// Long enough that no lease lapses during the test.
const TERM: Duration = Duration::from_secs(30);
/// Children host B starts in the watched tree.
const CHILDREN: usize = 12;

/// Agents that say a few things with pauses between, so their events
/// arrive over time.
fn agents() -> Arc<ScriptedHost> {
    let turn = vec![
        Step::Say("one".into()),
        Step::SleepMs(5),
        Step::Say("two".into()),
        Step::SleepMs(5),
        Step::Say("three".into()),
    ];
    Arc::new(ScriptedHost::new(Script {
        turns: vec![turn.clone(), turn],
    }))
}

async fn open_host(server: &TestServer, schema: &str, holder: &str) -> SubagentRuntime {
    let log: Arc<dyn EventLog> = Arc::new(PgLog::connect(server.options(schema)).expect("connect"));
    let (runtime, _) = SubagentRuntime::open_shared(
        log,
        agents(),
        CapacityLimits::default(),
        SharedHost::new(holder, TERM),
    )
    .await
    .expect("open a shared host");
    runtime
        .register_provider(Arc::new(SpawnProvider))
        .await
        .expect("register spawn");
    runtime
}

/// Serves the gateway over `runtime` on a fresh 127.0.0.1 port: its base URL.
async fn serve(runtime: &SubagentRuntime, shutdown: &CancellationToken) -> String {
    let router = subagent_gateway::router(
        runtime.clone(),
        GatewayConfig {
            token: Token::new(TOKEN, TokenSource::Given).expect("token"),
            allowed_origins: Vec::new(),
            limits: Limits::default(),
        },
        shutdown.clone(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("address"));
    let (served, serving) = (runtime.clone(), shutdown.clone());
    tokio::spawn(async move {
        let _ = subagent_gateway::serve(listener, router, served, serving.clone(), async move {
            serving.cancelled().await;
        })
        .await;
    });
    base
}

/// One Server-Sent Event: its `id:` (a log position) and `event:`.
#[derive(Debug)]
struct Frame {
    id: Option<u64>,
    event: String,
    data: Value,
}

/// Reads frames from `response` into `frames` until `done` holds for them;
/// `false` if the stream stays silent for `quiet`.
async fn read_until(
    response: &mut reqwest::Response,
    buffer: &mut String,
    frames: &mut Vec<Frame>,
    quiet: Duration,
    done: impl Fn(&[Frame]) -> bool,
) -> bool {
    while !done(frames) {
        let Ok(chunk) = tokio::time::timeout(quiet, response.chunk()).await else {
            return false;
        };
        let chunk = chunk
            .expect("the event stream reads")
            .expect("the event stream stays open");
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let text: String = buffer.drain(..end + 2).collect();
            let mut frame = Frame {
                id: None,
                event: "message".into(),
                data: Value::Null,
            };
            for line in text.lines() {
                if let Some(id) = line.strip_prefix("id:") {
                    frame.id = Some(id.trim().parse().expect("a numeric id"));
                } else if let Some(event) = line.strip_prefix("event:") {
                    frame.event = event.trim().to_owned();
                } else if let Some(data) = line.strip_prefix("data:") {
                    frame.data = serde_json::from_str(data.trim()).expect("JSON data");
                }
            }
            // Keep-alive comments carry no event.
            if frame.id.is_some() || frame.event != "message" {
                frames.push(frame);
            }
        }
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_root_filtered_stream_delivers_every_event_of_a_tree_another_host_holds() {
    let server = TestServer::shared().expect("a PostgreSQL test server");
    let schema = unique_schema("shared_events");
    let a = open_host(server, &schema, "host-a").await;
    let b = open_host(server, &schema, "host-b").await;

    // B holds the watched tree R, and another tree beside it.
    let watched = b.open_root("watched").await.expect("open R");
    let other = b.open_root("other").await.expect("open the other root");
    let r = watched.session();
    // A knows R once its follower has folded R's creation: only then does
    // its gateway accept `?root=R`.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while a.root_of(r) != Some(r) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "host A never learned of R"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let shutdown = CancellationToken::new();
    let base = serve(&a, &shutdown).await;
    let client = reqwest::Client::new();
    let mut stream = client
        .get(format!("{base}/v1/events?root={r}"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("subscribe");
    assert_eq!(stream.status(), 200);
    let (mut buffer, mut frames) = (String::new(), Vec::new());
    assert!(
        read_until(
            &mut stream,
            &mut buffer,
            &mut frames,
            Duration::from_secs(20),
            |frames| frames.iter().any(|frame| frame.event == "caught-up"),
        )
        .await,
        "the stream never caught up"
    );

    // B delegates in both trees while the subscriber follows live, then
    // sends each child of R a message (a second turn in a session the
    // stream has already met).
    let mut children = Vec::new();
    for index in 0..CHILDREN {
        for (root, label) in [(&watched, "watched"), (&other, "other")] {
            let spec = SubagentActivationSpec::with_text_prompt(
                "spawn",
                &format!("{label}-{index}"),
                "go",
                Delivery::Parent,
            );
            let child = b
                .start_activation(root, spec, CancellationToken::new())
                .await
                .expect("B starts a child");
            if root.session() == r {
                children.push(child);
            }
        }
    }
    for child in &children {
        b.send_message(
            &watched,
            child.child_id(),
            vec![ContentBlock::text("again")],
            CancellationToken::new(),
        )
        .await
        .expect("B messages its child");
    }
    // Wait until every child of R has ended its second turn.
    let check = PgLog::connect(server.options(&schema)).expect("connect");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let ended = children
            .iter()
            .filter(|child| {
                check
                    .read_stream(StreamId::Session(child.child_id()), 1)
                    .filter_map(Result::ok)
                    .filter(|record| matches!(record.event, Event::TurnEnded { .. }))
                    .count()
                    >= 2
            })
            .count();
        if ended == children.len() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "B's children did not finish"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Every event of R's tree so far, by position, from the log itself.
    let records: Vec<_> = check
        .read_all(1)
        .map(|record| record.expect("the log reads back"))
        .collect();
    let state = Projections::fold(&records);
    let in_tree = |stream: StreamId| match stream {
        StreamId::Session(session) => state.root_of(session) == Some(r),
        StreamId::Runtime | StreamId::Host(_) => false,
    };
    let expected: BTreeSet<u64> = records
        .iter()
        .filter(|record| in_tree(record.stream))
        .map(|record| record.position)
        .collect();
    let last = *expected.last().expect("R's tree has events");
    let children_of_r: BTreeSet<SessionId> = children.iter().map(|c| c.child_id()).collect();
    assert_eq!(
        state
            .list_children(r)
            .iter()
            .map(|listed| listed.entry.child_id)
            .collect::<BTreeSet<_>>(),
        children_of_r
    );

    // The stream delivers them all (it may stop short: what is missing is
    // then listed below), and nothing else.
    read_until(
        &mut stream,
        &mut buffer,
        &mut frames,
        Duration::from_secs(10),
        |frames| frames.iter().any(|frame| frame.id >= Some(last)),
    )
    .await;
    let delivered: BTreeSet<u64> = frames.iter().filter_map(|frame| frame.id).collect();
    let missing: Vec<String> = expected
        .difference(&delivered)
        .map(|position| {
            let record = &records[*position as usize - 1];
            format!(
                "{position} {} in {}",
                record.event.type_name(),
                record.stream
            )
        })
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} events of R's tree were not delivered: {missing:#?}",
        missing.len(),
        expected.len()
    );
    // Whatever came after those is of R's tree too, by the log as it is now.
    let now: Vec<_> = check
        .read_all(1)
        .map(|record| record.expect("the log reads back"))
        .collect();
    let state = Projections::fold(&now);
    let foreign: Vec<String> = delivered
        .iter()
        .map(|position| &now[*position as usize - 1])
        .filter(|record| match record.stream {
            StreamId::Session(session) => state.root_of(session) != Some(r),
            StreamId::Runtime | StreamId::Host(_) => true,
        })
        .map(|record| {
            format!(
                "{} {} in {}",
                record.position,
                record.event.type_name(),
                record.stream
            )
        })
        .collect();
    assert!(
        foreign.is_empty(),
        "events outside R's tree were delivered: {foreign:#?}"
    );
    for frame in frames.iter().filter(|frame| frame.id.is_some()) {
        assert_eq!(frame.data["position"], frame.id.expect("an id"));
    }

    drop(stream);
    shutdown.cancel();
    for child in children {
        let _ = child.dispose().await;
    }
    b.close().await.expect("B closes");
    let _ = a.close().await;
}
