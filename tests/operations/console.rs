//! The console on the metrics port against the real binary, over raw HTTP/1.1: the page and
//! its JSON ask for the Redis port's credentials (401 with a Basic challenge, 200 with them),
//! show only the names a user's key patterns allow, `console no` answers 404 as before the
//! console, the search by prefix pages through held locks with their holdings, and the event
//! feed (server-sent events) delivers a release, with a cap on open feeds; in a 3-node cluster
//! each node shows the members, the leader, the term, the indexes and the lag it knows.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::common::cluster::Cluster;
use crate::common::{Raw, TestServer, wait_until};
use base64::Engine;
use serde_json::Value;

struct Response {
    status: u16,
    head: String,
    body: String,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.body))
    }
}

fn basic(user: &str, password: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

/// GET `path`, with an Authorization header if given; the whole response (it asks to close).
fn get(addr: SocketAddr, path: &str, auth: Option<&str>) -> Response {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let auth = auth.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"));
    Response {
        status,
        head: head.to_string(),
        body: body.to_string(),
    }
}

/// An open server-sent event stream, read as it comes.
struct Feed {
    stream: TcpStream,
    seen: String,
}

impl Feed {
    fn open(addr: SocketAddr, name: &str, auth: Option<&str>) -> Feed {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let auth = auth.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
        write!(
            stream,
            "GET /console/api/events?name={name} HTTP/1.1\r\nHost: localhost\r\n{auth}\r\n"
        )
        .unwrap();
        Feed {
            stream,
            seen: String::new(),
        }
    }

    /// Reads until nothing came for a second (or `limit` passed).
    fn read_until_quiet(&mut self, limit: Duration) {
        let deadline = Instant::now() + limit;
        let mut quiet_since = Instant::now();
        let mut buf = [0u8; 65536];
        while Instant::now() < deadline && quiet_since.elapsed() < Duration::from_secs(1) {
            match self.stream.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => {
                    self.seen.push_str(&String::from_utf8_lossy(&buf[..n]));
                    quiet_since = Instant::now();
                }
                Err(_) => {}
            }
        }
    }

    /// Reads until `text` has come (true), or `timeout` passed (false).
    fn wait_for(&mut self, text: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut buf = [0u8; 4096];
        while !self.seen.contains(text) {
            if Instant::now() >= deadline {
                return false;
            }
            match self.stream.read(&mut buf) {
                Ok(0) => return self.seen.contains(text),
                Ok(n) => self.seen.push_str(&String::from_utf8_lossy(&buf[..n])),
                Err(_) => {} // the read timeout: look at the deadline again
            }
        }
        true
    }
}

fn names(list: &Value) -> Vec<String> {
    let mut names: Vec<String> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

#[test]
fn the_page_and_its_endpoints_need_the_redis_ports_credentials() {
    let server = TestServer::start(&["--metrics-port", "0", "--requirepass", "s3cret"]);
    let addr = server.metrics_addr();
    for path in [
        "/",
        "/console/api/overview",
        "/console/api/locks",
        "/console/api/events?name=a",
    ] {
        for auth in [
            None,
            Some(basic("default", "wrong")),
            Some(basic("nobody", "s3cret")),
        ] {
            let r = get(addr, path, auth.as_deref());
            assert_eq!(r.status, 401, "{path} with {auth:?}: {}", r.head);
            assert_eq!(
                r.header("www-authenticate"),
                Some(r#"Basic realm="flockd", charset="UTF-8""#),
                "{path}"
            );
        }
    }
    // The port's own endpoints stay open, as before.
    assert_eq!(get(addr, "/metrics", None).status, 200);
    assert_eq!(get(addr, "/livez", None).status, 200);

    // As AUTH takes them: `default` by name, or no name at all.
    for auth in [basic("default", "s3cret"), basic("", "s3cret")] {
        let page = get(addr, "/", Some(&auth));
        assert_eq!(page.status, 200, "{}", page.head);
        assert_eq!(
            page.header("content-type"),
            Some("text/html; charset=utf-8")
        );
        assert_eq!(
            page.header("content-length").unwrap(),
            page.body.len().to_string()
        );
        assert!(page.body.contains("<script>'use strict';"));
        let policy = page.header("content-security-policy").unwrap();
        assert!(
            policy.starts_with("default-src 'none'; script-src 'sha256-"),
            "{policy}"
        );
        let overview = get(addr, "/console/api/overview", Some(&auth)).json();
        assert_eq!(overview["cluster"]["mode"], "single");
    }
    // A failed login is in ACL LOG, as a failed AUTH is.
    let mut raw = server.raw();
    assert_eq!(raw.call(&["AUTH", "s3cret"]), "+OK\r\n");
    let log = raw.call(&["ACL", "LOG"]);
    assert!(
        log.contains("nobody") && log.contains("name=console"),
        "{log}"
    );
}

#[test]
fn a_user_sees_only_the_names_its_key_patterns_allow() {
    let server = TestServer::start(&["--metrics-port", "0", "--requirepass", "admin"]);
    let addr = server.metrics_addr();
    let mut raw = server.raw();
    assert_eq!(raw.call(&["AUTH", "admin"]), "+OK\r\n");
    for rules in [
        &[
            "ACL",
            "SETUSER",
            "alice",
            "on",
            ">pw",
            "~orders:*",
            "&__flock__:orders:*",
            "allcommands",
        ][..],
        // May read locks, not INFO: the overview stands for INFO.
        &[
            "ACL",
            "SETUSER",
            "bob",
            "on",
            ">pw",
            "allkeys",
            "allchannels",
            "+@flock",
            "-info",
        ][..],
    ] {
        assert_eq!(raw.call(rules), "+OK\r\n");
    }
    for name in ["orders:1", "orders:2", "payroll:1"] {
        assert_eq!(
            raw.call(&["FLOCK.ACQUIRE", name, "60000", "OWNER", "svc"])
                .as_bytes()[0],
            b':'
        );
        // A refused acquire makes the name hot (FLOCK.HOT's `busy`).
        assert_eq!(raw.call(&["FLOCK.ACQUIRE", name, "60000"]), "$-1\r\n");
    }
    let admin = basic("default", "admin");
    let alice = basic("alice", "pw");
    let bob = basic("bob", "pw");

    let all = get(addr, "/console/api/locks", Some(&admin)).json();
    assert_eq!(names(&all["locks"]), ["orders:1", "orders:2", "payroll:1"]);
    let mine = get(addr, "/console/api/locks", Some(&alice)).json();
    assert_eq!(names(&mine["locks"]), ["orders:1", "orders:2"]);
    let hot = get(addr, "/console/api/hot", Some(&admin)).json();
    assert_eq!(names(&hot["locks"]), ["orders:1", "orders:2", "payroll:1"]);
    let hot = get(addr, "/console/api/hot", Some(&alice)).json();
    assert_eq!(names(&hot["locks"]), ["orders:1", "orders:2"]);
    assert_eq!(hot["locks"][0]["busy"], 1);

    // Another's lock cannot be followed; the feed says which permission is missing.
    let refused = get(addr, "/console/api/events?name=payroll:1", Some(&alice));
    assert_eq!(refused.status, 403);
    assert_eq!(
        refused.json()["error"],
        "NOPERM No permissions to access a key"
    );
    let mut own = Feed::open(addr, "orders:1", Some(&alice));
    assert!(
        own.wait_for("event: ready", Duration::from_secs(10)),
        "{}",
        own.seen
    );

    // Each endpoint stands for a command the user must be allowed to run.
    let overview = get(addr, "/console/api/overview", Some(&bob));
    assert_eq!(overview.status, 403);
    assert_eq!(
        overview.json()["error"],
        "NOPERM User bob has no permissions to run the 'info' command"
    );
    assert_eq!(get(addr, "/console/api/locks", Some(&bob)).status, 200);
    // The page itself holds no data: any user may load it.
    assert_eq!(get(addr, "/", Some(&bob)).status, 200);

    // A user that loses the name loses its feed.
    assert_eq!(
        raw.call(&["ACL", "SETUSER", "alice", "resetkeys", "~other:*"]),
        "+OK\r\n"
    );
    assert_eq!(raw.call(&["FLOCK.FORCERELEASE", "orders:1"]), ":1\r\n");
    assert!(
        own.wait_for("event: closed", Duration::from_secs(10)),
        "{}",
        own.seen
    );
    assert!(!own.seen.contains("forcereleased"), "{}", own.seen);
}

#[test]
fn console_no_answers_404_as_before_and_config_set_turns_it_on() {
    let server = TestServer::start(&["--metrics-port", "0", "--console", "no"]);
    let addr = server.metrics_addr();
    for path in ["/", "/console/api/overview", "/console/api/events?name=a"] {
        let r = get(addr, path, None);
        assert_eq!(r.status, 404, "{path}");
        assert_eq!(r.body, "not found: try /metrics, /livez or /readyz\n");
    }
    assert_eq!(get(addr, "/metrics", None).status, 200);
    let mut raw = server.raw();
    assert_eq!(
        raw.call(&["CONFIG", "GET", "console"]),
        "*2\r\n$7\r\nconsole\r\n$2\r\nno\r\n"
    );
    assert_eq!(raw.call(&["CONFIG", "SET", "console", "yes"]), "+OK\r\n");
    assert_eq!(get(addr, "/", None).status, 200);
    assert_eq!(
        raw.call(&["CONFIG", "SET", "console", "maybe"]),
        "-ERR CONFIG SET failed (possibly related to argument 'console') - bad value 'maybe' (allowed: yes, no)\r\n"
    );
    // Other paths stay the port's 404.
    assert_eq!(get(addr, "/admin", None).status, 404);
}

#[test]
fn the_search_pages_through_held_locks_by_prefix() {
    let server = TestServer::start(&["--metrics-port", "0"]);
    let addr = server.metrics_addr();
    let mut raw = server.raw();
    for i in 0..250 {
        let name = format!("job:{i:03}");
        let owner = format!("worker-{i}");
        assert_eq!(
            raw.call(&["FLOCK.ACQUIRE", &name, "60000", "OWNER", &owner]),
            format!(":{}\r\n", 1)
        );
    }
    for name in ["other:1", "jo"] {
        assert_eq!(raw.call(&["FLOCK.ACQUIRE", name, "60000"]), ":1\r\n");
    }
    // A free name is not held: not found.
    assert_eq!(raw.call(&["FLOCK.ACQUIRE", "job:free", "60000"]), ":1\r\n");
    assert_eq!(raw.call(&["FLOCK.RELEASE", "job:free", "1"]), ":1\r\n");
    // Two holdings of a shared lock, and a waiter on another lock.
    for _ in 0..2 {
        assert_eq!(
            raw.call(&["FLOCK.ACQUIRE", "job:shared", "60000", "SHARED"])
                .as_bytes()[0],
            b':'
        );
    }
    let mut waiter = Raw::connect(server.addr);
    waiter.cmd(&[b"FLOCK.ACQUIRE", b"job:007", b"60000", b"WAIT", b"30000"]);
    wait_until(Duration::from_secs(10), "the waiter queues", || {
        raw.call(&["INFO", "clients"]).contains("blocked_clients:1")
    });

    let mut found: Vec<Value> = Vec::new();
    let mut cursor = String::new();
    let mut pages = 0;
    loop {
        let page = get(
            addr,
            &format!("/console/api/locks?prefix=job%3A&limit=100&cursor={cursor}"),
            None,
        )
        .json();
        let locks = page["locks"].as_array().unwrap();
        assert!(locks.len() <= 100, "{}", locks.len());
        found.extend(locks.iter().cloned());
        cursor = page["cursor"].as_str().unwrap().to_string();
        pages += 1;
        if cursor == "0" {
            break;
        }
        assert!(pages < 100, "the walk does not end");
    }
    assert!(pages >= 3, "251 names in pages of 100 took {pages} pages");
    let mut all = names(&Value::Array(found.clone()));
    all.dedup();
    assert_eq!(all.len(), 251, "{all:?}");
    assert!(all.iter().all(|n| n.starts_with("job:")), "{all:?}");
    assert!(!all.contains(&"job:free".to_string()));

    let lock = |name: &str| found.iter().find(|l| l["name"] == name).unwrap().clone();
    let one = lock("job:042");
    let holding = &one["holdings"][0];
    assert_eq!(holding["token"], "1");
    assert_eq!(holding["owner"], "worker-42");
    assert_eq!(holding["mode"], "exclusive");
    let ttl = holding["ttl_ms"].as_i64().unwrap();
    assert!(ttl > 0 && ttl <= 60_000, "{ttl}");
    assert_eq!(one["waiters"], 0);
    assert_eq!(lock("job:007")["waiters"], 1);
    let shared = lock("job:shared");
    assert_eq!(shared["holdings"].as_array().unwrap().len(), 2);
    assert_eq!(shared["holdings"][1]["token"], "2");
    assert_eq!(shared["holdings"][1]["mode"], "shared");
    assert_eq!(shared["name_query"], "job%3Ashared");

    // Page sizes are bounded.
    for bad in ["limit=0", "limit=201", "limit=x", "cursor=nope"] {
        let r = get(addr, &format!("/console/api/locks?{bad}"), None);
        assert_eq!(r.status, 400, "{bad}: {}", r.body);
    }
    assert_eq!(
        get(addr, "/console/api/locks?limit=200", None).json()["locks"]
            .as_array()
            .unwrap()
            .len(),
        200
    );
}

#[test]
fn the_feed_delivers_a_release_and_feeds_are_capped() {
    let server = TestServer::start(&["--metrics-port", "0"]);
    let addr = server.metrics_addr();
    let mut raw = server.raw();
    assert_eq!(raw.call(&["FLOCK.ACQUIRE", "orders:9", "60000"]), ":1\r\n");
    let mut feed = Feed::open(addr, "orders%3A9", None);
    assert!(
        feed.wait_for("event: ready", Duration::from_secs(10)),
        "{}",
        feed.seen
    );
    assert!(
        feed.seen.contains("content-type: text/event-stream"),
        "{}",
        feed.seen
    );
    assert!(
        raw.call(&["CLIENT", "LIST"]).contains("name=console"),
        "the feed is a client"
    );
    assert_eq!(raw.call(&["FLOCK.RELEASE", "orders:9", "1"]), ":1\r\n");
    assert!(
        feed.wait_for(r#""event":"released","token":"1""#, Duration::from_secs(10)),
        "{}",
        feed.seen
    );
    // Events of other locks do not come.
    assert_eq!(raw.call(&["FLOCK.ACQUIRE", "orders:10", "60000"]), ":1\r\n");
    assert_eq!(raw.call(&["FLOCK.ACQUIRE", "orders:9", "60000"]), ":2\r\n");
    assert!(feed.wait_for(r#""event":"granted","token":"2""#, Duration::from_secs(10)));
    assert_eq!(feed.seen.matches("event: lock").count(), 2, "{}", feed.seen);

    // 16 feeds at most: the 17th is refused until one closes.
    let mut more: Vec<Feed> = (1..16).map(|_| Feed::open(addr, "x", None)).collect();
    for f in &mut more {
        assert!(
            f.wait_for("event: ready", Duration::from_secs(10)),
            "{}",
            f.seen
        );
    }
    let refused = get(addr, "/console/api/events?name=x", None);
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert!(
        refused.json()["error"]
            .as_str()
            .unwrap()
            .contains("16 event feeds")
    );
    drop(more.pop());
    wait_until(
        Duration::from_secs(10),
        "a closed feed frees its place",
        || {
            let mut probe = Feed::open(addr, "y", None);
            probe.wait_for("\r\n\r\n", Duration::from_secs(10));
            probe.seen.starts_with("HTTP/1.1 200")
        },
    );
    drop(more);
    wait_until(
        Duration::from_secs(10),
        "closed feeds leave CLIENT LIST",
        || {
            raw.call(&["CLIENT", "LIST"])
                .matches("name=console")
                .count()
                == 1
        },
    );
    // Bad requests get a clear error.
    assert_eq!(get(addr, "/console/api/events", None).status, 400);
    assert_eq!(get(addr, "/console/api/nothing", None).status, 404);
}

#[test]
fn each_cluster_node_shows_the_members_leader_term_indexes_and_lag() {
    let metrics = vec!["--metrics-port".to_string(), "0".to_string()];
    let cluster = Cluster::start_with(3, 3, vec![metrics.clone(), metrics.clone(), metrics]);
    let leader = cluster.wait_for_leader(Duration::from_secs(30));
    let follower = (leader + 1) % 3;
    let node = |i: usize| cluster.nodes[i].as_ref().unwrap();
    let overview = |i: usize| get(node(i).metrics_addr(), "/console/api/overview", None).json();
    let leader_id = overview(leader)["cluster"]["node_id"].clone();

    // The leader knows what every member acknowledged: every lag is a number.
    wait_until(
        Duration::from_secs(20),
        "the leader knows every member's index",
        || {
            let c = &overview(leader)["cluster"];
            c["members"]
                .as_array()
                .unwrap()
                .iter()
                .all(|m| m["lag"].is_u64())
        },
    );
    let c = overview(leader)["cluster"].clone();
    assert_eq!(c["mode"], "cluster");
    assert_eq!(c["role"], "leader");
    assert_eq!(c["leader"], leader_id);
    assert!(c["term"].as_u64().unwrap() >= 1, "{c}");
    assert!(c["commit_index"].as_u64().unwrap() >= 1, "{c}");
    let members = c["members"].as_array().unwrap();
    assert_eq!(members.len(), 3, "{c}");
    let leaders: Vec<&Value> = members.iter().filter(|m| m["role"] == "leader").collect();
    assert_eq!(leaders.len(), 1, "{c}");
    assert_eq!(leaders[0]["id"], leader_id);
    // Every member answers: none is down; this node was not removed.
    assert!(members.iter().all(|m| m["up"] == true), "{c}");
    assert!(c["removed"].is_null(), "{c}");

    // A follower knows the leader, and its own lag only.
    let c = overview(follower)["cluster"].clone();
    assert_eq!(c["role"], "follower", "{c}");
    assert_eq!(c["leader"], leader_id);
    for m in c["members"].as_array().unwrap() {
        assert_eq!(m["lag"].is_u64(), m["id"] == c["node_id"], "{c}");
    }

    // A lock taken through the follower shows there, and its release comes on the follower's
    // feed (every node publishes what it applied).
    let mut client = Raw::connect(cluster.addr(follower));
    let token = client.call(&["FLOCK.ACQUIRE", "jobs:cluster", "60000", "OWNER", "n2"]);
    let token = token.trim_start_matches(':').trim().to_string();
    let addr = node(follower).metrics_addr();
    wait_until(
        Duration::from_secs(10),
        "the follower shows the lock",
        || {
            let found = get(addr, "/console/api/locks?prefix=jobs", None).json();
            found["locks"][0]["holdings"][0]["token"] == token.as_str()
        },
    );
    let mut feed = Feed::open(addr, "jobs:cluster", None);
    assert!(
        feed.wait_for("event: ready", Duration::from_secs(10)),
        "{}",
        feed.seen
    );
    assert_eq!(
        client.call(&["FLOCK.RELEASE", "jobs:cluster", &token]),
        ":1\r\n"
    );
    let released = format!(r#""event":"released","token":"{token}""#);
    assert!(
        feed.wait_for(&released, Duration::from_secs(10)),
        "{}\n{}",
        feed.seen,
        cluster.logs()
    );
}

#[test]
fn a_feed_that_is_not_read_drops_events_and_says_so() {
    let server = TestServer::start(&["--metrics-port", "0", "--appendfsync", "no"]);
    let addr = server.metrics_addr();
    let mut feed = Feed::open(addr, "busy", None);
    assert!(
        feed.wait_for("event: ready", Duration::from_secs(10)),
        "{}",
        feed.seen
    );
    // The reader's socket takes little; the rest waits in the server's socket, then in the
    // feed's queue of 64 chunks, and then is dropped.
    let small: libc::c_int = 4096;
    let set = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&feed.stream),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&small as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(set, 0);
    let mut raw = server.raw();
    let started = Instant::now();
    let mut token = 0u64;
    for _ in 0..40 {
        let mut batch = Vec::new();
        for _ in 0..1000 {
            token += 1;
            let t = token.to_string();
            batch.extend_from_slice(&common::encode_request(&[
                b"FLOCK.ACQUIRE",
                b"busy",
                b"60000",
            ]));
            batch.extend_from_slice(&common::encode_request(&[
                b"FLOCK.RELEASE",
                b"busy",
                t.as_bytes(),
            ]));
        }
        raw.send(&batch);
        for _ in 0..2000 {
            raw.read_reply();
        }
    }
    eprintln!("80000 events in {:?}", started.elapsed());
    // The notice goes out with the next event that finds room, once the reader reads again.
    let mut next_pair = |raw: &mut Raw| {
        token += 1;
        let t = token.to_string();
        assert_eq!(
            raw.call(&["FLOCK.ACQUIRE", "busy", "60000"]),
            format!(":{t}\r\n")
        );
        assert_eq!(raw.call(&["FLOCK.RELEASE", "busy", &t]), ":1\r\n");
        t
    };
    let mut noticed = false;
    for _ in 0..60 {
        next_pair(&mut raw);
        if feed.wait_for("event: dropped", Duration::from_millis(500)) {
            noticed = true;
            break;
        }
    }
    assert!(noticed, "no dropped notice in {} bytes", feed.seen.len());
    let notice = &feed.seen[feed.seen.find("event: dropped").unwrap()..];
    let count: u64 = notice["event: dropped\ndata: {\"dropped\":".len()..]
        .split('}')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{}", &notice[..notice.len().min(200)]));
    assert!(count > 0 && count < 80_000, "{count}");
    // The feed goes on: once its reader caught up, a new event comes whole.
    feed.read_until_quiet(Duration::from_secs(60));
    let last = next_pair(&mut raw);
    assert!(feed.wait_for(
        &format!(r#""event":"released","token":"{last}""#),
        Duration::from_secs(30)
    ));
}
