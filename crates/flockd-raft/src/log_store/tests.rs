use std::fs;

use openraft::storage::{IOFlushed, RaftLogReader, RaftLogStorage};
use openraft::type_config::TypeConfigExt;

use super::mem::tests::id;
use super::*;
use crate::types::EntryPayload;

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("flockd-log-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        Dir(dir)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn entry(term: u64, index: u64) -> RaftEntry {
    RaftEntry {
        log_id: id(term, index),
        payload: EntryPayload::Blank,
    }
}

/// Appends and waits until the flush thread says the entries are durable.
async fn append(log: &mut LogStore, term: u64, indexes: std::ops::Range<u64>) {
    let (tx, rx) = FlockRaft::oneshot();
    log.append(indexes.map(|i| entry(term, i)), IOFlushed::signal(tx))
        .await
        .unwrap();
    rx.await.unwrap().unwrap();
}

async fn ids(log: &mut LogStore) -> Vec<(u64, u64)> {
    log.try_get_log_entries(0..u64::MAX)
        .await
        .unwrap()
        .iter()
        .map(|e| (e.log_id.leader_id.term, e.log_id.index))
        .collect()
}

fn segment_files(dir: &Path) -> Vec<u64> {
    load::segments_in(dir)
        .unwrap()
        .into_iter()
        .map(|(seq, _)| seq)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_was_synced_is_there_after_a_restart() {
    let dir = Dir::new("restart");
    let mut log = LogStore::open(&dir.0, Arc::default()).unwrap();
    assert!(log.is_pristine().unwrap());
    let vote = Vote::new(2, 1);
    log.save_vote(&vote).await.unwrap();
    append(&mut log, 1, 0..10).await;
    log.truncate_after(Some(id(1, 6))).await.unwrap();
    append(&mut log, 2, 7..9).await;
    log.purge(id(1, 2)).await.unwrap();
    let before = ids(&mut log).await;
    assert_eq!(before.first(), Some(&(1, 3)));
    assert_eq!(before.last(), Some(&(2, 8)));
    assert_eq!(log.stats().entries_appended, 12);
    log.close();

    let mut again = LogStore::open(&dir.0, Arc::default()).unwrap();
    assert_eq!(ids(&mut again).await, before);
    assert_eq!(again.read_vote().await.unwrap(), Some(vote));
    let state = again.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(id(1, 2)));
    assert_eq!(state.last_log_id, Some(id(2, 8)));
    // The zeros written ahead were cut at close: the file ends with the last record.
    let path = segment_path(&dir.0, 1);
    let len = fs::metadata(&path).unwrap().len();
    assert!(len < flockd_log::written_ahead::WRITE_AHEAD, "{len}");
    again.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zeros_and_a_torn_record_at_the_end_are_cut_and_damage_before_a_record_is_refused() {
    let dir = Dir::new("tail");
    let mut log = LogStore::open(&dir.0, Arc::default()).unwrap();
    append(&mut log, 1, 0..5).await;
    log.close();
    let path = segment_path(&dir.0, 1);
    let records = fs::read(&path).unwrap();

    // A crash leaves zeros written ahead, or a record cut short before them.
    let mut torn = records.clone();
    torn.extend_from_slice(&records[8..20]);
    torn.extend_from_slice(&[0; 4096]);
    fs::write(&path, &torn).unwrap();
    let mut log = LogStore::open(&dir.0, Arc::default()).unwrap();
    assert_eq!(ids(&mut log).await.len(), 5);
    append(&mut log, 1, 5..6).await;
    log.close();
    let mut log = LogStore::open(&dir.0, Arc::default()).unwrap();
    assert_eq!(ids(&mut log).await.len(), 6);
    log.close();

    // A flipped byte in the second record, with valid records after it: not a torn write.
    let mut damaged = fs::read(&path).unwrap();
    let second = 8 + 8 + u32::from_le_bytes(damaged[8..12].try_into().unwrap()) as usize;
    damaged[second + 9] ^= 0xff;
    fs::write(&path, &damaged).unwrap();
    let err = LogStore::open(&dir.0, Arc::default())
        .err()
        .expect("damage is refused");
    assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
    assert!(err.to_string().contains("damaged record"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_segments_roll_and_purged_ones_are_removed() {
    let dir = Dir::new("roll");
    let mut log =
        LogStore::open_in(&dir.0, Arc::default(), 512, &Flusher::start().unwrap()).unwrap();
    log.save_vote(&Vote::new(1, 1)).await.unwrap();
    for round in 0..20 {
        append(&mut log, 1, round * 10..round * 10 + 10).await;
    }
    let rolled = segment_files(&dir.0);
    assert!(rolled.len() > 3, "{rolled:?}");
    log.save_vote(&Vote::new(3, 1)).await.unwrap();
    log.purge(id(1, 150)).await.unwrap();
    append(&mut log, 3, 200..201).await;
    let kept = segment_files(&dir.0);
    assert!(kept.len() < rolled.len(), "{kept:?} after {rolled:?}");
    assert!(
        kept.last() >= rolled.last(),
        "the segment appended to stays"
    );
    let before = ids(&mut log).await;
    assert_eq!(before.first(), Some(&(1, 151)));
    log.close();

    let mut again =
        LogStore::open_in(&dir.0, Arc::default(), 512, &Flusher::start().unwrap()).unwrap();
    assert_eq!(ids(&mut again).await, before);
    assert_eq!(again.read_vote().await.unwrap(), Some(Vote::new(3, 1)));
    let state = again.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(id(1, 150)));
    again.close();
}

#[test]
fn a_closed_log_unlocks_its_dir_while_clones_live_on() {
    let dir = Dir::new("close");
    let first = LogStore::open(&dir.0, Arc::default()).unwrap();
    let lingering = first.clone();
    let Err(locked) = LogStore::open(&dir.0, Arc::default()) else {
        panic!("a second open of a dir in use must fail");
    };
    assert_eq!(locked.kind(), io::ErrorKind::WouldBlock);
    first.close();
    let again = LogStore::open(&dir.0, Arc::default()).expect("the dir opens again");
    assert!(again.is_pristine().unwrap());
    let closed = lingering
        .is_pristine()
        .expect_err("a closed log is an error");
    assert_eq!(closed.kind(), io::ErrorKind::NotConnected);
    assert_eq!(lingering.stats(), LogStats::default());
    again.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_sharing_a_flush_thread_keep_their_own_files() {
    let dirs = [Dir::new("shared-a"), Dir::new("shared-b")];
    let flusher = Flusher::start().unwrap();
    let mut a = LogStore::open_on(&dirs[0].0, Arc::default(), &flusher).unwrap();
    let mut b = LogStore::open_on(&dirs[1].0, Arc::default(), &flusher).unwrap();
    a.save_vote(&Vote::new(2, 1)).await.unwrap();
    b.save_vote(&Vote::new(7, 3)).await.unwrap();
    let (mut a2, mut b2) = (a.clone(), b.clone());
    tokio::join!(
        async move {
            for round in 0..20 {
                append(&mut a2, 1, round * 3..round * 3 + 3).await;
            }
        },
        async move {
            for round in 0..20 {
                append(&mut b2, 4, round..round + 1).await;
            }
        }
    );
    b.purge(id(4, 4)).await.unwrap();
    assert_eq!(ids(&mut a).await.len(), 60);
    assert_eq!(ids(&mut b).await.first(), Some(&(4, 5)));

    // One closes; the other goes on writing through the same thread.
    a.close();
    append(&mut b, 4, 20..21).await;
    let b_before = ids(&mut b).await;
    let a_again = LogStore::open_on(&dirs[0].0, Arc::default(), &flusher).unwrap();
    let mut a_again_reader = a_again.clone();
    assert_eq!(ids(&mut a_again_reader).await.len(), 60);
    assert_eq!(
        a_again_reader.read_vote().await.unwrap(),
        Some(Vote::new(2, 1))
    );
    a_again.close();
    b.close();
    drop(flusher);

    let mut b_again = LogStore::open(&dirs[1].0, Arc::default()).unwrap();
    assert_eq!(ids(&mut b_again).await, b_before);
    assert_eq!(b_again.read_vote().await.unwrap(), Some(Vote::new(7, 3)));
    b_again.close();
}
