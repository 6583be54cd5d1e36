//! Several hosts on one PostgreSQL log (`SubagentRuntime::open_shared`).
//! - Two hosts in one process, each on its own connection pool: both
//!   register a provider of the same name (each in its own host stream),
//!   each runs a delegation in a tree of its own, each lists the other's
//!   tree, and neither can act on the other's (taking it back, or an
//!   interrupt, is refused with `subagent/tree-elsewhere` naming the
//!   holder). `verify` passes.
//! - One host with many commands in flight at once (eight trees, four
//!   starters in each, while a second host delegates beside it): its
//!   commands of different trees run concurrently, each tree's in order;
//!   every delegation completes, the host's projections equal a fold of
//!   the log, and `verify` finds the history admissible.
//! - Two hosts in two processes: this test binary runs itself as the first
//!   host (the ignored `host_child` entry point), which opens a root, starts
//!   a child that stays busy, prints `TREE <root> <child>`, and waits. The
//!   host in the parent delegates in a tree of its own and lists the
//!   first's; while the first lives it can neither take its root nor
//!   interrupt its child. The parent SIGKILLs it; the host in the parent takes the tree over once
//!   the lease lapses and settles the child (`ActivationAbandoned
//!   { HostRestart }`, in the same append as its `TreeAcquired`); an append
//!   presenting the killed host's fence is refused and writes nothing; the
//!   new holder takes the root back and delegates in it; `verify` passes.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use subagent_core::{
    content::plain_text, AbandonReason, AddressMode, Delivery, ErrorCode, Event, InterruptRequest,
    NewEvent, SessionId, StreamId, SubagentActivationSpec, SubagentError, SubagentStopReason,
};
use subagent_pg::testing::{unique_schema, TestServer};
use subagent_pg::PgLog;
use subagent_runtime::providers::SpawnProvider;
use subagent_runtime::scripted::Step;
use subagent_runtime::{CapacityLimits, Script, ScriptedHost, SharedHost, SubagentRuntime};
use subagent_store::{EventLog, EventLogExt, ExpectedVersion, Fence, StoreError, StreamAppend};
use tokio_util::sync::CancellationToken;

const PORT_ENV: &str = "SUBAGENTS_PG_HOST_PORT";
const SCHEMA_ENV: &str = "SUBAGENTS_PG_HOST_SCHEMA";
const TERM: Duration = Duration::from_millis(1500);

fn replying(text: &str) -> Arc<ScriptedHost> {
    Arc::new(ScriptedHost::new(Script::reply(text)))
}

async fn open_host(
    log: &Arc<dyn EventLog>,
    holder: &str,
    agents: Arc<ScriptedHost>,
) -> SubagentRuntime {
    let (runtime, _) = SubagentRuntime::open_shared(
        Arc::clone(log),
        agents,
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

fn connect(server: &TestServer, schema: &str) -> Arc<dyn EventLog> {
    Arc::new(PgLog::connect(server.options(schema)).expect("connect"))
}

fn verified(log: &dyn EventLog) {
    let report = subagent_replay::verify(log).expect("verify runs");
    assert!(report.is_ok(), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hosts_delegate_in_their_own_trees_and_see_each_others() {
    let server = TestServer::shared().expect("a PostgreSQL server of its own");
    let schema = unique_schema("hosts");
    let (log_a, log_b) = (connect(server, &schema), connect(server, &schema));
    let a = open_host(&log_a, "host-a", replying("from a")).await;
    let b = open_host(&log_b, "host-b", replying("from b")).await;
    assert_ne!(a.host_id(), b.host_id());

    let mut roots = Vec::new();
    for host in [&a, &b] {
        let root = host.open_root("root").await.expect("root");
        let task =
            SubagentActivationSpec::with_text_prompt("spawn", "task", "go", Delivery::Caller);
        let child = host
            .start_activation(&root, task, CancellationToken::new())
            .await
            .expect("start");
        let result = child.result().await.expect("result");
        assert_eq!(result.stop_reason, SubagentStopReason::Completed);
        child.dispose().await.expect("dispose");
        roots.push((root, result));
    }
    assert_eq!(plain_text(&roots[0].1.output), "from a");
    assert_eq!(plain_text(&roots[1].1.output), "from b");
    let (root_a, root_b) = (roots[0].0.session(), roots[1].0.session());
    assert_eq!(a.held_trees(), [root_a]);
    assert_eq!(b.held_trees(), [root_b]);

    // Each lists the other's tree, through its follower.
    for (host, foreign) in [(&a, root_b), (&b, root_a)] {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let listed = host.list_children(foreign).await.expect("list");
            if listed.len() == 1 {
                assert_eq!(listed[0].entry.label, "task");
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "never listed");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let descendants = host.list_descendants(foreign).await.expect("descendants");
        assert_eq!(descendants.len(), 1);
    }

    // Neither acts on the other's tree.
    let taken = b.reopen_root(root_a).await.expect_err("held by a");
    assert_eq!(
        taken,
        SubagentError::TreeElsewhere {
            root: root_a,
            holder: Some("host-a".into())
        }
    );
    let head = log_a.head();
    a.close().await.expect("close a");
    b.close().await.expect("close b");
    assert!(log_a.head() >= head);
    verified(log_a.as_ref());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_commands_of_many_trees_record_an_admissible_history() {
    let server = TestServer::shared().expect("a PostgreSQL server of its own");
    let schema = unique_schema("concurrent");
    let (log_a, log_b) = (connect(server, &schema), connect(server, &schema));
    let a = open_host(&log_a, "host-a", replying("a")).await;
    let b = open_host(&log_b, "host-b", replying("b")).await;
    let mut tasks = Vec::new();
    for (host, trees) in [(&a, 8), (&b, 2)] {
        for _ in 0..trees {
            let root = host.open_root("root").await.expect("root");
            for _ in 0..4 {
                let (host, root) = (host.clone(), root.clone());
                tasks.push(tokio::spawn(async move {
                    for _ in 0..3 {
                        let task = SubagentActivationSpec::with_text_prompt(
                            "spawn",
                            "task",
                            "go",
                            Delivery::Caller,
                        );
                        let child = host
                            .start_activation(&root, task, CancellationToken::new())
                            .await
                            .expect("start");
                        let result = child.result().await.expect("result");
                        assert_eq!(result.stop_reason, SubagentStopReason::Completed);
                        child.dispose().await.expect("dispose");
                    }
                }));
            }
        }
    }
    for task in tasks {
        task.await.expect("a starter");
    }
    assert_eq!(a.held_trees().len(), 8);
    // Once a's follower has folded the whole log, its projections are
    // the log's fold.
    let head = log_a.head();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while a.projections().position < head {
        assert!(tokio::time::Instant::now() < deadline, "never folded");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let records: Vec<_> = log_a
        .read_all(1)
        .take_while(|record| record.as_ref().map_or(true, |r| r.position <= head))
        .collect::<Result<_, _>>()
        .expect("read");
    let mine = a.projections();
    assert_eq!(mine.position, head, "nothing appended since");
    assert!(
        mine == subagent_projections::Projections::fold(&records),
        "host a's projections differ from the fold of the log"
    );
    a.close().await.expect("close a");
    b.close().await.expect("close b");
    verified(log_a.as_ref());
}

/// Not a test: the first host of the two-process test.
#[test]
#[ignore = "entry point of the two-process test's first host"]
fn host_child() {
    let (Ok(port), Ok(schema)) = (std::env::var(PORT_ENV), std::env::var(SCHEMA_ENV)) else {
        return;
    };
    let mut config = tokio_postgres::Config::new();
    config
        .host("127.0.0.1")
        .port(port.parse().expect("port"))
        .user("postgres")
        .dbname("postgres");
    let log: Arc<dyn EventLog> = Arc::new(
        PgLog::connect(subagent_pg::PgOptions::new(config).with_schema(schema)).expect("connect"),
    );
    let busy = Arc::new(ScriptedHost::new(Script {
        turns: vec![vec![Step::Say("working".into()), Step::SleepMs(600_000)]],
    }));
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async move {
        let host = open_host(&log, "host-a", busy).await;
        let root = host.open_root("root").await.expect("root");
        let task =
            SubagentActivationSpec::with_text_prompt("spawn", "busy", "go", Delivery::Caller);
        let child = host
            .start_activation(&root, task, CancellationToken::new())
            .await
            .expect("start");
        // Busy: its turn has started.
        let stream = StreamId::Session(child.child_id());
        while !log
            .read_stream(stream, 1)
            .filter_map(Result::ok)
            .any(|record| matches!(record.event, Event::AssistantMessage { .. }))
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        println!("TREE {} {}", root.session(), child.child_id());
        tokio::time::sleep(Duration::from_secs(600)).await;
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_hosts_tree_is_taken_over_after_its_lease_and_its_late_append_is_fenced() {
    let server = TestServer::shared().expect("a PostgreSQL server of its own");
    let schema = unique_schema("takeover");
    let log = connect(server, &schema);
    let mut first = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "host_child",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(PORT_ENV, server.port().to_string())
        .env(SCHEMA_ENV, &schema)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the first host");
    let mut lines = BufReader::new(first.stdout.take().expect("stdout")).lines();
    let (root, child) = loop {
        let line = lines
            .next()
            .expect("the first host reports its tree")
            .expect("read");
        if let Some(start) = line.find("TREE ") {
            let mut ids = line[start + 5..].split(' ');
            let root = SessionId::parse(ids.next().expect("root")).expect("root id");
            let child = SessionId::parse(ids.next().expect("child")).expect("child id");
            break (root, child);
        }
    };
    let b = open_host(&log, "host-b", replying("from b")).await;
    // Each host delegates in its own tree; this one lists the first's.
    let own = b.open_root("own").await.expect("root");
    let task = SubagentActivationSpec::with_text_prompt("spawn", "mine", "go", Delivery::Caller);
    let mine = b
        .start_activation(&own, task, CancellationToken::new())
        .await
        .expect("start");
    mine.result().await.expect("result");
    mine.dispose().await.expect("dispose");
    let listed = b.list_children(root).await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].entry.child_id, child);
    // The first host is alive and renewing: its tree is not taken.
    tokio::time::sleep(TERM * 2).await;
    assert_eq!(b.held_trees(), [own.session()], "taken from a live host");
    assert_eq!(
        b.reopen_root(root).await.expect_err("held by a").code(),
        ErrorCode::TreeElsewhere
    );
    // An interrupt of the first host's running child is refused, naming
    // the holder: this host cannot reach the child's driver.
    let interrupted = b
        .interrupt_by_parent(InterruptRequest {
            child_session_id: child,
            parent_session_id: root,
            mode: AddressMode::Continuable,
        })
        .await
        .expect_err("the child is in another host's tree");
    assert_eq!(
        interrupted,
        SubagentError::TreeElsewhere {
            root,
            holder: Some("host-a".into())
        }
    );

    first.kill().expect("SIGKILL the first host");
    first.wait().expect("reap it");
    let deadline = tokio::time::Instant::now() + TERM * 10;
    while !b.held_trees().contains(&root) {
        assert!(tokio::time::Instant::now() < deadline, "never taken over");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The takeover: the claim and the child's settlement in one append.
    let records: Vec<_> = log.read_all(1).filter_map(Result::ok).collect();
    let acquisitions: Vec<_> = records
        .iter()
        .filter_map(|record| match &record.event {
            Event::TreeAcquired { holder, fence, .. }
                if record.stream == StreamId::Session(root) =>
            {
                Some((holder.clone(), *fence, record.position))
            }
            _ => None,
        })
        .collect();
    assert_eq!(acquisitions.len(), 2, "{acquisitions:?}");
    assert_eq!(acquisitions[0].0, "host-a");
    assert_eq!(acquisitions[1].0, "host-b");
    assert!(acquisitions[1].1 > acquisitions[0].1);
    let abandoned = records
        .iter()
        .find(|record| {
            record.stream == StreamId::Session(child)
                && matches!(
                    record.event,
                    Event::ActivationAbandoned {
                        reason: AbandonReason::HostRestart,
                        ..
                    }
                )
        })
        .expect("the child is settled");
    assert!(abandoned.position > acquisitions[1].2);
    assert_eq!(b.projections().live_activations().len(), 0);

    // The killed host's late append, with its fence, writes nothing.
    let head = log.head();
    let late = log
        .append_fenced(
            vec![StreamAppend {
                stream: StreamId::Session(child),
                expected: ExpectedVersion::Any,
                events: vec![NewEvent::new(Event::TurnStarted { turn: 9, epoch: 1 })],
            }],
            Vec::new(),
            vec![Fence {
                root,
                token: acquisitions[0].1,
            }],
        )
        .await
        .expect_err("fenced");
    assert!(matches!(late, StoreError::Fenced { .. }), "{late:?}");
    assert_eq!(log.head(), head);

    // The new holder takes the root back and delegates in it, with its
    // own registry.
    let agent = b.reopen_root(root).await.expect("reopen");
    let task = SubagentActivationSpec::with_text_prompt("spawn", "again", "go", Delivery::Caller);
    let again = b
        .start_activation(&agent, task, CancellationToken::new())
        .await
        .expect("start");
    assert_eq!(
        plain_text(&again.result().await.expect("result").output),
        "from b"
    );
    again.dispose().await.expect("dispose");
    b.close().await.expect("close");
    verified(log.as_ref());
}
