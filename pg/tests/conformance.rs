//! The store's conformance suite against [`PgLog`] on a real PostgreSQL:
//! one shared server per test process, a fresh schema per test.

use subagent_pg::testing::{unique_schema, TestServer};
use subagent_pg::PgLog;
use subagent_store::conformance::Harness;
use subagent_store::IndexDamage;

/// A schema of the shared server; "reopening" drops the handle and
/// connects again.
struct PgHarness {
    schema: String,
}

impl PgHarness {
    fn new() -> PgHarness {
        PgHarness {
            schema: unique_schema("conformance"),
        }
    }
}

fn server() -> &'static TestServer {
    TestServer::shared().expect("a PostgreSQL test server")
}

impl Harness for PgHarness {
    type Log = PgLog;
    fn open(&mut self) -> PgLog {
        PgLog::connect(server().options(&self.schema)).expect("connect")
    }
    fn reopen(&mut self, log: PgLog) -> PgLog {
        drop(log);
        self.open()
    }
    fn corrupt(&mut self, log: &PgLog, position: u64, byte: usize) {
        log.corrupt_record(position, byte).expect("corrupt");
    }
    fn damage_index(&mut self, log: &PgLog, damage: IndexDamage) -> bool {
        log.damage_index(damage).expect("damage index");
        true
    }
}

subagent_store::conformance_suite!(PgHarness::new());
