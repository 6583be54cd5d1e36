//! Runs the conformance suite against both backends.

mod memory {
    use subagent_store::conformance::Harness;
    use subagent_store::{IndexDamage, MemoryLog};

    /// "Reopening" an in-memory log is a new handle over the same storage.
    struct MemoryHarness(Option<MemoryLog>);

    impl Harness for MemoryHarness {
        type Log = MemoryLog;
        fn open(&mut self) -> MemoryLog {
            self.0.get_or_insert_with(MemoryLog::new).clone()
        }
        fn reopen(&mut self, log: MemoryLog) -> MemoryLog {
            drop(log);
            self.open()
        }
        fn corrupt(&mut self, log: &MemoryLog, position: u64, byte: usize) {
            assert!(log.corrupt_record(position, byte));
        }
        fn damage_index(&mut self, log: &MemoryLog, damage: IndexDamage) -> bool {
            log.damage_index(damage)
        }
    }

    subagent_store::conformance_suite!(MemoryHarness(None));
}

mod rocks {
    use subagent_store::conformance::Harness;
    use subagent_store::{IndexDamage, RocksLog, RocksOptions};
    use tempfile::TempDir;

    struct RocksHarness(TempDir);

    impl Harness for RocksHarness {
        type Log = RocksLog;
        fn open(&mut self) -> RocksLog {
            RocksLog::open(self.0.path(), RocksOptions::default()).expect("open")
        }
        fn reopen(&mut self, log: RocksLog) -> RocksLog {
            drop(log);
            self.open()
        }
        fn corrupt(&mut self, log: &RocksLog, position: u64, byte: usize) {
            log.corrupt_record(position, byte).expect("corrupt");
        }
        fn damage_index(&mut self, log: &RocksLog, damage: IndexDamage) -> bool {
            log.damage_index(damage).expect("damage index");
            true
        }
    }

    subagent_store::conformance_suite!(RocksHarness(TempDir::new().expect("tempdir")));
}
