//! openraft's own storage test suite against flockd's log store (segment files on disk) and state
//! machine (snapshots in the AOF format), each build in a fresh directory.

mod common;

use std::sync::Arc;

use common::{PlainHost, TempDir};
use flockd_raft::log_store::LogStore;
use flockd_raft::pending::PendingTable;
use flockd_raft::state_machine::{MachineStore, Me};
use flockd_raft::types::FlockRaft;
use openraft::StorageError;
use openraft::testing::log::{StoreBuilder, Suite};
use openraft::type_config::TypeConfigExt;

struct Builder;

impl StoreBuilder<FlockRaft, LogStore, MachineStore, TempDir> for Builder {
    async fn build(&self) -> Result<(TempDir, LogStore, MachineStore), StorageError<FlockRaft>> {
        let dir = TempDir::new("suite");
        let log = LogStore::open(&dir.path().join("log"), Default::default())
            .map_err(|e| StorageError::read(FlockRaft::err_from_error(&e)))?;
        let machine = MachineStore::open(
            &dir.path().join("snapshot"),
            Arc::new(PlainHost::default()),
            Arc::new(PendingTable::default()),
            Me {
                node: 1,
                incarnation: 1,
            },
        )
        .map_err(|e| StorageError::read(FlockRaft::err_from_error(&e)))?;
        Ok((dir, log, machine))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openraft_storage_suite_passes() -> Result<(), StorageError<FlockRaft>> {
    Suite::test_all(Builder).await
}
