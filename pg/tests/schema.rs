//! The schema is created and migrated by the code: once, without racing
//! concurrent connects; a newer stored version is refused and changes
//! nothing; an invalid schema name is refused before any SQL runs.

use std::sync::{Arc, Barrier};

use subagent_core::{Event, NewEvent, StreamId};
use subagent_pg::testing::{unique_schema, TestServer};
use subagent_pg::tokio_postgres::{Client, NoTls};
use subagent_pg::{PgLog, SCHEMA_VERSION};
use subagent_store::{EventLog, ExpectedVersion, StoreError};

fn server() -> &'static TestServer {
    TestServer::shared().expect("a PostgreSQL test server")
}

async fn sql() -> Client {
    let (client, connection) = server().config().connect(NoTls).await.expect("connect");
    tokio::spawn(connection);
    client
}

fn provider_removed() -> NewEvent {
    NewEvent::new(Event::ProviderRemoved { name: "p".into() })
}

async fn tables_of(client: &Client, schema: &str) -> Vec<String> {
    client
        .query(
            "SELECT tablename::text FROM pg_catalog.pg_tables WHERE schemaname = $1 ORDER BY 1",
            &[&schema],
        )
        .await
        .expect("list tables")
        .iter()
        .map(|row| row.get(0))
        .collect()
}

async fn stored_version(client: &Client, schema: &str) -> Vec<i64> {
    client
        .query(
            format!("SELECT version FROM \"{schema}\".subagents_schema").as_str(),
            &[],
        )
        .await
        .expect("read the version")
        .iter()
        .map(|row| row.get(0))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_are_applied_once_and_kept() {
    let schema = unique_schema("once");
    let client = sql().await;
    let log = PgLog::connect(server().options(&schema)).expect("first connect");
    assert_eq!(
        tables_of(&client, &schema).await,
        [
            "blobs",
            "checkpoints",
            "counter",
            "event_ids",
            "events",
            "leases",
            "streams",
            "subagents_schema"
        ]
    );
    assert_eq!(
        stored_version(&client, &schema).await,
        vec![SCHEMA_VERSION as i64]
    );
    log.append(
        StreamId::Runtime,
        ExpectedVersion::NoStream,
        vec![provider_removed()],
    )
    .await
    .expect("append");
    drop(log);
    // Connecting again migrates nothing (migration 1 would fail on the
    // existing tables) and keeps the data.
    let log = PgLog::connect(server().options(&schema)).expect("second connect");
    assert_eq!(log.head(), 1);
    assert_eq!(
        stored_version(&client, &schema).await,
        vec![SCHEMA_VERSION as i64]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_schema_is_migrated_to_leases_keeping_its_events() {
    let schema = unique_schema("from1");
    let client = sql().await;
    let log = PgLog::connect(server().options(&schema)).expect("connect");
    log.append(
        StreamId::Runtime,
        ExpectedVersion::NoStream,
        vec![provider_removed()],
    )
    .await
    .expect("append");
    drop(log);
    // Back to what version 1 created: no leases table.
    client
        .batch_execute(&format!(
            "DROP TABLE \"{schema}\".leases; UPDATE \"{schema}\".subagents_schema SET version = 1"
        ))
        .await
        .expect("downgrade");
    assert!(!tables_of(&client, &schema)
        .await
        .contains(&"leases".to_owned()));
    let log = PgLog::connect(server().options(&schema)).expect("connect a version 1 schema");
    assert_eq!(stored_version(&client, &schema).await, vec![2]);
    assert!(tables_of(&client, &schema)
        .await
        .contains(&"leases".to_owned()));
    assert_eq!(log.head(), 1, "the events are kept");
    assert!(log.leases().expect("list").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_connects_do_not_race() {
    const CONNECTS: usize = 8;
    let schema = unique_schema("race");
    let barrier = Arc::new(Barrier::new(CONNECTS));
    let threads: Vec<_> = (0..CONNECTS)
        .map(|_| {
            let (schema, barrier) = (schema.clone(), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                PgLog::connect(server().options(&schema))
            })
        })
        .collect();
    let logs: Vec<PgLog> = threads
        .into_iter()
        .map(|thread| thread.join().expect("thread").expect("connect"))
        .collect();
    let client = sql().await;
    assert_eq!(
        stored_version(&client, &schema).await,
        vec![SCHEMA_VERSION as i64]
    );
    // Every handle appends; positions are gap-free across them.
    let mut positions = Vec::new();
    for log in &logs {
        let outcome = log
            .append(
                StreamId::Runtime,
                ExpectedVersion::Any,
                vec![provider_removed()],
            )
            .await
            .expect("append");
        positions.push(outcome.first_position);
    }
    positions.sort_unstable();
    assert_eq!(positions, (1..=CONNECTS as u64).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_schema_is_refused_and_nothing_is_written() {
    let schema = unique_schema("newer");
    let client = sql().await;
    let newer = SCHEMA_VERSION as i64 + 1;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {schema};
             CREATE TABLE {schema}.subagents_schema (id smallint PRIMARY KEY, version bigint NOT NULL);
             INSERT INTO {schema}.subagents_schema VALUES (1, {newer});"
        ))
        .await
        .expect("a schema from the future");
    let err = PgLog::connect(server().options(&schema)).expect_err("refused");
    assert_eq!(
        err,
        StoreError::UnsupportedFormat {
            found: SCHEMA_VERSION + 1,
            supported: SCHEMA_VERSION
        }
    );
    assert_eq!(tables_of(&client, &schema).await, ["subagents_schema"]);
    assert_eq!(stored_version(&client, &schema).await, vec![newer]);

    // A schema this build created, then moved on by a newer one: the same.
    let schema = unique_schema("moved");
    drop(PgLog::connect(server().options(&schema)).expect("connect"));
    client
        .execute(
            format!("UPDATE {schema}.subagents_schema SET version = $1").as_str(),
            &[&newer],
        )
        .await
        .expect("move the version on");
    let err = PgLog::connect(server().options(&schema)).expect_err("refused");
    assert!(
        matches!(err, StoreError::UnsupportedFormat { .. }),
        "{err:?}"
    );
    assert_eq!(stored_version(&client, &schema).await, vec![newer]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_schema_names_are_refused_before_any_sql() {
    let client = sql().await;
    let too_long = "a".repeat(subagent_pg::MAX_SCHEMA_NAME + 1);
    for bad in [
        "",
        "Upper",
        "1digit",
        "pg_reserved",
        "x; DROP SCHEMA public CASCADE",
        "quo\"te",
        too_long.as_str(),
    ] {
        let err = PgLog::connect(server().options(bad)).expect_err(bad);
        assert!(
            matches!(err, StoreError::NotALog { .. }),
            "{bad:?}: {err:?}"
        );
        let found = client
            .query(
                "SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1",
                &[&bad],
            )
            .await
            .expect("look for the schema");
        assert!(found.is_empty(), "{bad:?} was created");
    }
}

/// A valid schema name that is also an SQL keyword works: every statement
/// quotes it. (`user` and `select` are reserved words; a test that runs
/// twice on the shared server drops them first.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_named_like_a_keyword_works() {
    let client = sql().await;
    for keyword in ["user", "select"] {
        client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{keyword}\" CASCADE"))
            .await
            .expect("drop");
        let log = PgLog::connect(server().options(keyword)).expect("connect to a keyword schema");
        log.append(
            StreamId::Runtime,
            ExpectedVersion::NoStream,
            vec![provider_removed()],
        )
        .await
        .expect("append");
        assert_eq!(log.read_all_page(1, 10).expect("read").len(), 1);
        assert_eq!(
            stored_version(&client, keyword).await,
            vec![SCHEMA_VERSION as i64]
        );
        drop(log);
        let staged = server().options(&unique_schema("keyword_from"));
        let from = staged.schema.clone();
        drop(PgLog::connect(staged).expect("a staging log"));
        client
            .batch_execute(&format!("DROP SCHEMA \"{keyword}\" CASCADE"))
            .await
            .expect("drop");
        subagent_pg::rename_schema(&server().options(keyword), &from)
            .expect("rename into a keyword");
        assert!(
            !tables_of(&client, keyword).await.is_empty(),
            "renamed into place"
        );
        subagent_pg::drop_schema(&server().options(keyword), keyword)
            .expect("drop a keyword schema");
        assert!(tables_of(&client, keyword).await.is_empty());
    }
}
