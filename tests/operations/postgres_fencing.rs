//! docs/fencing.md's fenced UPDATE against a real, throwaway PostgreSQL: tokens from flockd,
//! two holders of one lock writing one row, and the holder whose lease ran out fenced out (its
//! UPDATE matches 0 rows) although it writes last. Once from Rust (the flockd-client crate and
//! tokio-postgres), once from Python (the flockd package and psycopg, the documentation's
//! example). PostgreSQL runs as the `postgres` user when the test runs as root (CI), on a free
//! loopback port, in a temporary directory, and is stopped by its pid.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{TempDir, TestServer, collect_output, skipping};

/// Where Debian puts the server binaries (not on PATH), or PATH.
fn pg_bin(name: &str) -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin").join(name))
        .collect();
    candidates.sort();
    candidates.reverse();
    candidates.into_iter().find(|p| p.is_file()).or_else(|| {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(name))
                .find(|p| p.is_file())
        })
    })
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// `program args` as the `postgres` user when we are root (PostgreSQL refuses to run as root).
fn as_postgres(program: &Path) -> Command {
    if is_root() {
        let mut cmd = Command::new("setpriv");
        cmd.args([
            "--reuid=postgres",
            "--regid=postgres",
            "--init-groups",
            "--",
        ])
        .arg(program);
        cmd
    } else {
        Command::new(program)
    }
}

struct Postgres {
    child: Child,
    port: u16,
    _dir: TempDir,
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // setpriv execs: this pid is the postmaster. SIGINT is its fast shutdown.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGINT);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Postgres {
    fn dsn(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=flockd dbname=postgres",
            self.port
        )
    }
}

fn start_postgres() -> Option<Postgres> {
    let (initdb, postgres) = (pg_bin("initdb")?, pg_bin("postgres")?);
    let dir = TempDir::new("pg");
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    if is_root() {
        let owner = Command::new("chown")
            .arg("-R")
            .arg("postgres:postgres")
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(owner.success(), "chown of the PostgreSQL directory");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let out = collect_output(
        as_postgres(&initdb)
            .args(["-D"])
            .arg(&data)
            .args(["-A", "trust", "-U", "flockd", "-E", "UTF8", "--no-sync"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("initdb starts"),
        Duration::from_secs(120),
    );
    assert!(
        out.status.is_some_and(|s| s.success()),
        "initdb failed: {}\n{}",
        out.stdout,
        out.stderr
    );
    let port = common::cluster::free_ports(1)[0];
    let child = as_postgres(&postgres)
        .arg("-D")
        .arg(&data)
        .args(["-p", &port.to_string(), "-k"])
        .arg(&data)
        .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("postgres starts");
    let pg = Postgres {
        child,
        port,
        _dir: dir,
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "PostgreSQL did not listen in 30 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(pg)
}

const FENCED_UPDATE: &str = "UPDATE orders SET status = $1, fence_token = $2 \
                             WHERE id = $3 AND fence_token <= $2";

#[test]
fn a_stale_holders_update_matches_no_row_from_rust_and_from_python() {
    let Some(pg) = start_postgres() else {
        skipping("no PostgreSQL server binaries (initdb, postgres): the fenced UPDATE is not run");
        return;
    };
    let server = TestServer::start(&[]);
    let url = server.url();
    let dsn = pg.dsn();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // PostgreSQL accepts connections a little after it listens.
        let deadline = Instant::now() + Duration::from_secs(30);
        let (db, connection) = loop {
            match tokio_postgres::connect(&dsn, tokio_postgres::NoTls).await {
                Ok(pair) => break pair,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("connect to PostgreSQL: {e}"),
            }
        };
        tokio::spawn(connection);
        db.batch_execute(
            "CREATE TABLE orders (id INT PRIMARY KEY, status TEXT NOT NULL, \
             fence_token BIGINT NOT NULL DEFAULT 0); \
             INSERT INTO orders (id, status) VALUES (42, 'new');",
        )
        .await
        .unwrap();
        let write = |status: &'static str, token: u64| {
            let db = &db;
            async move {
                db.execute(FENCED_UPDATE, &[&status, &(token as i64), &42i32])
                    .await
                    .unwrap()
            }
        };

        // The stale holder: a plain acquire with a short lease and no renewal (a process that
        // stalls after taking the lock behaves the same), so the lease runs out.
        let mut raw = redis::Client::open(url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let stale_token: u64 = redis::cmd("FLOCK.ACQUIRE")
            .arg("orders:42")
            .arg(300)
            .query_async(&mut raw)
            .await
            .unwrap();
        assert_eq!(write("paid (stale holder, on time)", stale_token).await, 1);

        let client = flockd_client::Client::open(&url).await.unwrap();

        let fresh = client
            .lock("orders:42")
            .lease(Duration::from_secs(30))
            .wait(Duration::from_secs(5))
            .acquire()
            .await
            .unwrap()
            .expect("granted once the stale lease ran out");
        assert!(fresh.token() > stale_token);
        assert_eq!(write("shipped", fresh.token()).await, 1);
        // The stale holder writes last, and is fenced out.
        assert_eq!(write("refunded (stale holder, late)", stale_token).await, 0);
        let row = db
            .query_one("SELECT status, fence_token FROM orders WHERE id = 42", &[])
            .await
            .unwrap();
        assert_eq!(row.get::<_, String>(0), "shipped");
        assert_eq!(row.get::<_, i64>(1), fresh.token() as i64);
        fresh.release().await.unwrap();
    });

    // The same through psycopg, as docs/examples/python/postgres_fenced_update.py.
    let python_ready = Command::new("python3")
        .args(["-c", "import psycopg, flockd"])
        .status()
        .is_ok_and(|s| s.success());
    if !python_ready {
        skipping(
            "python3 with psycopg and the flockd package is not installed: the psycopg run is not done",
        );
        return;
    }
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/examples/python/postgres_fenced_update.py"
    );
    let out = collect_output(
        Command::new("python3")
            .arg(script)
            .env("FLOCKD_URL", format!("redis://{}", server.addr))
            .env("PG_DSN", &dsn)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
        Duration::from_secs(60),
    );
    assert!(
        out.status.is_some_and(|s| s.success()),
        "the psycopg example failed ({:?}): {}\n{}",
        out.status,
        out.stdout,
        out.stderr
    );
    assert!(out.stdout.contains("fenced out True"), "{}", out.stdout);
}
