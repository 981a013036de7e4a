//! A fenced worker for flockd with the `redis` crate (sync API): acquire a lock (waiting in line
//! if it is held), do the work guarded by the fencing token, release.
//!
//! `run("redis://127.0.0.1:6390")` (what `FLOCKD_URL` holds for the other examples) returns the
//! token it worked with.

use redis::RedisResult;

const LOCK: &str = "orders:42";
const RESOURCE: &str = "res:orders:42";
const LEASE_MS: u64 = 10_000;
const WAIT_MS: u64 = 5_000;

pub fn run(url: &str) -> RedisResult<u64> {
    let client = redis::Client::open(url)?;
    let mut con = client.get_connection()?;

    // Blocks up to WAIT_MS; None (null reply) means the lock stayed busy.
    let token: Option<u64> = redis::cmd("FLOCK.ACQUIRE")
        .arg(LOCK)
        .arg(LEASE_MS)
        .arg("WAIT")
        .arg(WAIT_MS)
        .query(&mut con)?;
    let Some(token) = token else {
        return Err((redis::ErrorKind::Io, "lock busy").into());
    };

    let work = (|| -> RedisResult<()> {
        // The guarded write: 0 means a newer holder has written, so we lost the lock. Stop.
        let stored: i64 = redis::cmd("FENCE.SET")
            .arg(RESOURCE)
            .arg(token)
            .arg(format!("written by token {token}"))
            .query(&mut con)?;
        if stored != 1 {
            return Err((redis::ErrorKind::Io, "fenced out by a newer holder").into());
        }
        // Long work: extend the lease before it runs out (-NOTOWNER if it already did).
        let _: i64 = redis::cmd("FLOCK.RENEW")
            .arg(LOCK)
            .arg(token)
            .arg(LEASE_MS)
            .query(&mut con)?;
        let value: Option<String> = redis::cmd("FENCE.GET").arg(RESOURCE).query(&mut con)?;
        if value.as_deref() != Some(format!("written by token {token}").as_str()) {
            return Err((redis::ErrorKind::Io, "fenced register changed under us").into());
        }
        Ok(())
    })();

    // Release whatever happened; -NOTOWNER here means the lease ran out during the work.
    let released: RedisResult<i64> = redis::cmd("FLOCK.RELEASE")
        .arg(LOCK)
        .arg(token)
        .query(&mut con);
    work?;
    released?;
    Ok(token)
}
