//! The flush thread: it serves one log, or every group's log of a multi-group node, each in its
//! own directory and files. A round takes what every log queued, writes each log's batch, then
//! syncs each log that asked for it, then answers. One thread per node instead of one per group:
//! four groups' appends wake one thread once, not four threads once each.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, SyncSender, channel, sync_channel};

use super::error::LogError;
use super::flush::{Job, Writer};

/// Messages handled in one round at most (a round's writes share its syncs).
const ROUND_JOBS: usize = 4096;

enum Message {
    /// A log opened: its writer, under its number.
    Add(usize, Box<Writer>),
    Job(usize, Job),
    /// A log closes: write and sync what it queued, cut its zeros, then say so (if asked: a
    /// log dropped without a close does not wait).
    Close(usize, Option<SyncSender<()>>),
}

/// The flush thread's queue, shared by the logs it serves. The thread ends once every clone
/// and every [`Slot`] is gone.
#[derive(Clone)]
pub struct Flusher {
    queue: Sender<Message>,
    next: Arc<AtomicUsize>,
}

/// One log's place on a flush thread.
pub struct Slot {
    queue: Sender<Message>,
    number: usize,
    closed: bool,
}

impl Flusher {
    pub fn start() -> io::Result<Flusher> {
        let (queue, messages) = channel();
        std::thread::Builder::new()
            .name("raft-log-flush".to_owned())
            .spawn(move || serve(messages))?;
        Ok(Flusher {
            queue,
            next: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// Hands a log's writer to the thread.
    pub fn add(&self, writer: Writer) -> Result<Slot, LogError> {
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        self.queue
            .send(Message::Add(number, Box::new(writer)))
            .map_err(|_| LogError::Closed)?;
        Ok(Slot {
            queue: self.queue.clone(),
            number,
            closed: false,
        })
    }
}

impl Slot {
    pub fn send(&self, job: Job) -> Result<(), LogError> {
        self.queue
            .send(Message::Job(self.number, job))
            .map_err(|_| LogError::Closed)
    }

    /// Returns once everything this log queued is written and synced and its file is cut to
    /// its records.
    pub fn close(mut self) {
        self.closed = true;
        let (done, wait) = sync_channel(1);
        let asked = Message::Close(self.number, Some(done));
        if self.queue.send(asked).is_err() || wait.recv().is_err() {
            tracing::error!("the Raft log's flush thread is gone");
        }
    }
}

impl Drop for Slot {
    /// A log dropped without [`Slot::close`] is still finished (its file cut to its records),
    /// though the thread goes on serving others.
    fn drop(&mut self) {
        if !self.closed {
            let _ = self.queue.send(Message::Close(self.number, None));
        }
    }
}

fn serve(messages: Receiver<Message>) {
    let mut writers: Vec<Option<Writer>> = Vec::new();
    let mut gathered = Vec::new();
    while let Ok(first) = messages.recv() {
        let mut next = Some(first);
        let mut handled = 0;
        while let Some(message) = next.take() {
            match message {
                Message::Add(number, writer) => {
                    if writers.len() <= number {
                        writers.resize_with(number + 1, || None);
                    }
                    writers[number] = Some(*writer);
                }
                Message::Job(number, job) => {
                    if let Some(writer) = writers.get_mut(number).and_then(Option::as_mut)
                        && writer.take(job)
                    {
                        gathered.push(number);
                    }
                }
                Message::Close(number, done) => {
                    if let Some(mut writer) = writers.get_mut(number).and_then(Option::take) {
                        writer.finish();
                    }
                    if let Some(done) = done {
                        let _ = done.send(());
                    }
                }
            }
            handled += 1;
            if handled < ROUND_JOBS {
                next = messages.try_recv().ok();
            }
        }
        gathered.sort_unstable();
        gathered.dedup();
        // Every log's batch is written before any sync, so that each sync finds its writes done.
        for &number in &gathered {
            if let Some(writer) = writers[number].as_mut() {
                writer.write_gathered();
            }
        }
        for &number in &gathered {
            if let Some(writer) = writers[number].as_mut() {
                writer.sync_gathered();
            }
        }
        gathered.clear();
    }
    for writer in writers.iter_mut().flatten() {
        writer.finish();
    }
}
