//! The multi-primary cluster under test (`LEDGER_TEST_CLUSTER`): its engine, the
//! script that runs it, and the session settings of the test's own connections.

/// The engine of the cluster under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Galera,
    GroupReplication,
}

pub fn engine() -> Engine {
    match std::env::var("LEDGER_TEST_CLUSTER").as_deref() {
        Err(_) | Ok("galera") => Engine::Galera,
        Ok("group-replication" | "gr") => Engine::GroupReplication,
        Ok(other) => panic!("LEDGER_TEST_CLUSTER={other}: galera or group-replication"),
    }
}

impl Engine {
    pub fn ports(self) -> [u16; 3] {
        match self {
            Self::Galera => [3311, 3312, 3313],
            Self::GroupReplication => [3321, 3322, 3323],
        }
    }

    /// The script that runs the cluster (start, stop, kill N, restart-node N).
    pub fn script(self) -> &'static str {
        match self {
            Self::Galera => concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/galera-cluster.sh"),
            Self::GroupReplication => concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/gr-cluster.sh"),
        }
    }

    /// Causal reads for the test's own assertion connections.
    pub fn causal_reads(self) -> &'static str {
        match self {
            Self::Galera => "SET SESSION wsrep_sync_wait = 15",
            Self::GroupReplication => "SET SESSION group_replication_consistency = 'BEFORE'",
        }
    }

    pub fn eventual_reads(self) -> &'static str {
        match self {
            Self::Galera => "SET SESSION wsrep_sync_wait = 0",
            Self::GroupReplication => "SET SESSION group_replication_consistency = 'EVENTUAL'",
        }
    }

    pub fn as_service_sees_it(self) -> ledger::db::conn::cluster::Engine {
        match self {
            Self::Galera => ledger::db::conn::cluster::Engine::Galera,
            Self::GroupReplication => ledger::db::conn::cluster::Engine::GroupReplication,
        }
    }
}
