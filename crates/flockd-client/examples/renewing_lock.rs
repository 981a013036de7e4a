//! A worker that holds `order:1042` with a renewing lease, writes its state with the token, and
//! stops the moment the lock is lost.
//!
//!   FLOCKD_URL=redis://127.0.0.1:6390/ cargo run -p flockd-client --example renewing_lock
//!
//! The repository's tests include this file and call `run` against a real server.

use std::time::Duration;

use flockd_client::{Client, Error};

/// Takes the lock (waiting up to 5 s), writes three steps of work to the fence register
/// `order:1042:state` with the token, and releases. Returns the token, or `None` if the lock
/// stayed busy.
pub async fn run(url: &str) -> Result<Option<u64>, Error> {
    let client = Client::open(url).await?;
    let Some(lock) = client
        .lock("order:1042")
        .lease(Duration::from_millis(1500))
        .wait(Duration::from_secs(5))
        .acquire()
        .await?
    else {
        return Ok(None);
    };
    let token = lock.token();
    let lost = lock.lost();
    tokio::pin!(lost);
    for step in 1..=3 {
        tokio::select! {
            why = &mut lost => {
                eprintln!("lost order:1042 at step {step}: {why}");
                return Ok(None);
            }
            // Longer than the lease: only the watchdog's renewals keep the lock meanwhile.
            _ = tokio::time::sleep(Duration::from_millis(700)) => {}
        }
        if !lock
            .fence_set("order:1042:state", format!("step {step} by {token}"))
            .await?
        {
            eprintln!("the write of step {step} was refused");
            return Ok(None);
        }
    }
    lock.release().await?;
    Ok(Some(token))
}

#[allow(dead_code)] // the tests call `run`
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let url = std::env::var("FLOCKD_URL").unwrap_or_else(|_| "redis://127.0.0.1:6390/".into());
    match run(&url).await? {
        Some(token) => println!("done with token {token}"),
        None => println!("did not finish: the lock was busy or lost"),
    }
    Ok(())
}
