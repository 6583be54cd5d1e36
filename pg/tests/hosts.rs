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
//! - A host paused past its lease (SIGSTOP, in a process of its own, with a
//!   child mid-turn) while the other takes its tree over: once resumed
//!   (SIGCONT), its child's late turn, its keeper and a new start are all
//!   refused, it gives the tree up, and it writes nothing more.
//! - A host that lost its lease unawares (nothing in the log says so yet):
//!   its next command is fenced by the store, answered
//!   `subagent/tree-elsewhere`, and writes nothing.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use subagent_core::{
    content::plain_text, AbandonReason, AddressMode, ContentBlock, ContinuableAddress, Delivery,
    ErrorCode, Event, InterruptRequest, MessageDelivery, NewEvent, PromptRequest, SessionId,
    StreamId, SubagentActivationSpec, SubagentError, SubagentStopReason,
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
/// Set: the first host is the paused one (its child says more after a
/// pause, and it reports what it was refused once resumed).
const PAUSED_ENV: &str = "SUBAGENTS_PG_HOST_PAUSED";
/// What the paused host's child says after its pause, refused.
const LATE_WORDS: &str = "late words";
/// The lease term of the hosts: long enough that a loaded CI machine
/// renews in time (every third of it), short enough for takeovers to come
/// soon.
const TERM: Duration = Duration::from_secs(3);

fn replying(text: &str) -> Arc<ScriptedHost> {
    Arc::new(ScriptedHost::new(Script::reply(text)))
}

async fn open_host(
    log: &Arc<dyn EventLog>,
    holder: &str,
    agents: Arc<ScriptedHost>,
) -> SubagentRuntime {
    open_host_for(log, holder, agents, TERM).await
}

/// [`open_host`] with leases of `term`.
async fn open_host_for(
    log: &Arc<dyn EventLog>,
    holder: &str,
    agents: Arc<ScriptedHost>,
    term: Duration,
) -> SubagentRuntime {
    let (runtime, _) = SubagentRuntime::open_shared(
        Arc::clone(log),
        agents,
        CapacityLimits::default(),
        SharedHost::new(holder, term),
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

/// The head of the whole log: a fresh connection reads the counter row
/// when it opens. (An open log's `head()` is its own view, which learns
/// other connections' commits only when its follower next reads that row.)
fn durable_head(server: &TestServer, schema: &str) -> u64 {
    connect(server, schema).head()
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
    let head = durable_head(server, &schema);
    a.close().await.expect("close a");
    b.close().await.expect("close b");
    assert!(
        durable_head(server, &schema) > head,
        "closing records each host's unregistration"
    );
    // Through a fresh connection: b closed last, and `log_a` may not have
    // heard of b's last commits, which b's checkpoint is at.
    verified(connect(server, &schema).as_ref());
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
    // the log's fold. Every start was acknowledged, so the log is
    // complete; but `log_a.head()` may not have learned b's last commits.
    let head = durable_head(server, &schema);
    assert!(head >= log_a.head(), "a fresh view is never behind a's");
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
    verified(connect(server, &schema).as_ref());
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
    let paused = std::env::var(PAUSED_ENV).is_ok();
    let turn = if paused {
        vec![
            Step::Say("working".into()),
            // Long enough for the test to pause this process first, even
            // on a loaded machine (it checks that it did).
            Step::SleepMs(5_000),
            Step::Say(LATE_WORDS.into()),
            Step::SleepMs(600_000),
        ]
    } else {
        vec![Step::Say("working".into()), Step::SleepMs(600_000)]
    };
    let busy = Arc::new(ScriptedHost::new(Script { turns: vec![turn] }));
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
        if !paused {
            tokio::time::sleep(Duration::from_secs(600)).await;
            return;
        }
        // Paused past the lease and resumed: the keeper's renewal is
        // fenced, and the tree is given up.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while !host.held_trees().is_empty() {
            assert!(tokio::time::Instant::now() < deadline, "never gave up");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        println!("GAVE-UP");
        // Once the follower has folded the other host's claim, a start
        // names the new holder.
        while host
            .projections()
            .owner_of(root.session())
            .is_none_or(|owner| owner.holder != "host-b")
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "never saw the claim"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let task =
            SubagentActivationSpec::with_text_prompt("spawn", "late", "go", Delivery::Caller);
        let refused = host
            .start_activation(&root, task, CancellationToken::new())
            .await
            .err()
            .expect("the tree is another host's");
        assert_eq!(
            refused,
            SubagentError::TreeElsewhere {
                root: root.session(),
                holder: Some("host-b".into())
            }
        );
        println!("REFUSED {}", refused.code());
    });
}

fn first_host(server: &TestServer, schema: &str, paused: bool) -> std::process::Child {
    let mut command = Command::new(std::env::current_exe().expect("test binary"));
    command
        .args([
            "--exact",
            "host_child",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(PORT_ENV, server.port().to_string())
        .env(SCHEMA_ENV, schema)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if paused {
        command.env(PAUSED_ENV, "1");
    }
    command.spawn().expect("spawn the first host")
}

/// The first host's `TREE <root> <child>` line.
fn reported_tree(
    lines: &mut impl Iterator<Item = std::io::Result<String>>,
) -> (SessionId, SessionId) {
    loop {
        let line = lines
            .next()
            .expect("the first host reports its tree")
            .expect("read");
        if let Some(start) = line.find("TREE ") {
            let mut ids = line[start + 5..].split(' ');
            let root = SessionId::parse(ids.next().expect("root")).expect("root id");
            let child = SessionId::parse(ids.next().expect("child")).expect("child id");
            return (root, child);
        }
    }
}

/// Whether the paused host's late words are in the log.
fn late_words_recorded(log: &Arc<dyn EventLog>) -> bool {
    log.read_all(1).filter_map(Result::ok).any(|record| {
        matches!(&record.event, Event::AssistantMessage { content, .. }
            if plain_text(content) == LATE_WORDS)
    })
}

/// Sends `signal` (`STOP`, `CONT`) to a child process.
fn signal(process: &std::process::Child, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &process.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_host_resumes_to_find_its_tree_taken_and_writes_nothing() {
    let server = TestServer::shared().expect("a PostgreSQL server of its own");
    let schema = unique_schema("paused");
    let log = connect(server, &schema);
    let mut first = first_host(server, &schema, true);
    let mut lines = BufReader::new(first.stdout.take().expect("stdout")).lines();
    let (root, child) = reported_tree(&mut lines);
    signal(&first, "STOP");
    assert!(
        !late_words_recorded(&log),
        "the host said its late words before it was paused: the pause came too late"
    );
    let b = open_host(&log, "host-b", replying("from b")).await;
    let deadline = tokio::time::Instant::now() + TERM * 10;
    while !b.held_trees().contains(&root) {
        assert!(tokio::time::Instant::now() < deadline, "never taken over");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let head = log.head();
    let settled = log.read_stream(StreamId::Session(child), 1).any(|record| {
        matches!(
            record.expect("read").event,
            Event::ActivationAbandoned {
                reason: AbandonReason::HostRestart,
                ..
            }
        )
    });
    assert!(settled, "the takeover settles the paused host's child");

    signal(&first, "CONT");
    let reports: Vec<String> = tokio::task::spawn_blocking(move || {
        let reports = lines
            .map_while(Result::ok)
            .filter(|line| line.contains("GAVE-UP") || line.contains("REFUSED "))
            .collect();
        let status = first.wait().expect("wait");
        assert!(status.success(), "the paused host failed: {status}");
        reports
    })
    .await
    .expect("the paused host's reports");
    assert_eq!(reports.len(), 2, "{reports:?}");
    assert!(reports[0].contains("GAVE-UP"), "{reports:?}");
    assert!(
        reports[1].contains("REFUSED subagent/tree-elsewhere"),
        "{reports:?}"
    );
    // Nothing from the paused host landed after the takeover: not its
    // child's late words, not its refused start.
    // Read from the counter row: the paused host wrote, if at all,
    // through its own connection, which `log` may not have heard of yet.
    assert_eq!(
        durable_head(server, &schema),
        head,
        "the paused host wrote after losing its tree"
    );
    assert!(!late_words_recorded(&log), "the late words were recorded");
    b.close().await.expect("close");
    verified(log.as_ref());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_hosts_tree_is_taken_over_after_its_lease_and_its_late_append_is_fenced() {
    let server = TestServer::shared().expect("a PostgreSQL server of its own");
    let schema = unique_schema("takeover");
    let log = connect(server, &schema);
    let mut first = first_host(server, &schema, false);
    let mut lines = BufReader::new(first.stdout.take().expect("stdout")).lines();
    let (root, child) = reported_tree(&mut lines);
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
    // So is a message to it (the spec's `prompt`), and nothing is written.
    let head = log.head();
    let prompted = b
        .prompt(
            PromptRequest {
                address: ContinuableAddress {
                    child_session_id: child,
                    parent_session_id: root,
                    mode: AddressMode::Continuable,
                },
                delivery: MessageDelivery::Queue,
                request_id: "stray".into(),
                content: vec![ContentBlock::text("from the wrong host")],
                time_zone: None,
            },
            CancellationToken::new(),
        )
        .await
        .expect_err("the child is in another host's tree");
    assert_eq!(
        prompted,
        SubagentError::TreeElsewhere {
            root,
            holder: Some("host-a".into())
        }
    );
    assert_eq!(log.head(), head);

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

/// A host that lost its tree without knowing it (its lease lapsed while it
/// was paused, and another holder took the tree without writing anything
/// yet, so the host's own projections still say it holds the tree): its
/// next command is decided, presented with its stale fence, refused by the
/// store, answered `subagent/tree-elsewhere`, and writes nothing; its
/// keeper's next renewal is refused too, and the host gives the tree up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_lost_its_lease_unawares_is_fenced_and_gives_the_tree_up() {
    let server = TestServer::shared().expect("a PostgreSQL server of its own");
    let schema = unique_schema("unaware");
    let log_a = connect(server, &schema);
    // A long term, so the keeper (renewing every third of it) is unlikely
    // to run, find the lease gone and give the tree up between the take
    // below and the start: the start must meet the store's fence.
    let a = open_host_for(&log_a, "host-a", replying("a"), TERM * 4).await;
    let root = a.open_root("root").await.expect("root");
    let taker = PgLog::connect(server.options(&schema)).expect("connect");
    let (sql, connection) = server
        .config()
        .connect(subagent_pg::tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    // The lease lapses (as if host a had been paused past its term) and
    // another holder takes it; the keeper may renew in between, so retry.
    let lapse = format!(
        "UPDATE \"{schema}\".leases SET expires_at = clock_timestamp() - interval '1 second' \
         WHERE root = $1"
    );
    let taken = loop {
        sql.execute(&lapse, &[&root.session().as_uuid()])
            .await
            .expect("lapse the lease");
        match taker.acquire_lease(root.session(), "host-b", Duration::from_secs(3600)) {
            Ok(lease) => break lease,
            Err(StoreError::LeaseHeld { .. }) => continue,
            Err(err) => panic!("take the lease: {err:?}"),
        }
    };
    assert_eq!(taken.holder, "host-b");
    assert_eq!(
        a.projections()
            .owner_of(root.session())
            .map(|owner| owner.holder.clone()),
        Some("host-a".to_owned()),
        "nothing in the log says host a lost the tree"
    );

    let head = log_a.head();
    let task = SubagentActivationSpec::with_text_prompt("spawn", "late", "go", Delivery::Caller);
    let refused = a
        .start_activation(&root, task, CancellationToken::new())
        .await
        .err()
        .expect("fenced");
    assert_eq!(
        refused,
        SubagentError::TreeElsewhere {
            root: root.session(),
            holder: None
        }
    );
    assert!(
        a.held_trees().contains(&root.session()),
        "the start was refused by a keeper that had already given up, not by the store's fence"
    );
    assert_eq!(log_a.head(), head, "a fenced command writes nothing");

    // The keeper's renewal is fenced too: the tree is given up.
    let deadline = tokio::time::Instant::now() + TERM * 10;
    while !a.held_trees().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never gave the tree up"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let task = SubagentActivationSpec::with_text_prompt("spawn", "later", "go", Delivery::Caller);
    assert_eq!(
        a.start_activation(&root, task, CancellationToken::new())
            .await
            .err()
            .expect("the tree is no longer this host's"),
        SubagentError::TreeElsewhere {
            root: root.session(),
            holder: None
        },
        "the log does not say who took it"
    );
    assert_eq!(log_a.head(), head, "nothing written after the loss");
    a.close().await.expect("close");
    verified(log_a.as_ref());
}
