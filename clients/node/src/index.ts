/**
 * Fenced locks from flockd (a lock server that speaks the Redis protocol) on ioredis: a fencing
 * token per grant, renewals at a third of the lease, and a signal the moment the lock can no
 * longer be trusted.
 *
 * `client.acquire()` resolves to a {@link Lock} with its `token`, or null when the lock was not
 * granted. While it is held the lock renews itself; `lock.lost` resolves, the `lost` event fires
 * and `lock.signal` aborts when it is lost: flockd published that the holding expired or was
 * force-released, a renewal was refused, or no renewal succeeded for the lease minus a margin
 * (counted from when each request was sent, so a slow network or a paused process counts
 * against it). `fenceSet` writes with the token and sends nothing once the lock is lost.
 *
 * A client may name several nodes of a flockd cluster (or use ioredis's Sentinel support): a
 * renewal, release or fenced write that meets a dropped connection or -CLUSTERDOWN is sent again
 * through the next node, so renewals go on across a leader change. An acquire is never sent
 * twice (a resent acquire can leave a lock held under a token nobody saw).
 */
import { EventEmitter } from "node:events";
import Redis, { RedisOptions } from "ioredis";

/** Bounds the connection to one node, so a dead node costs the next one little. */
const CONNECT_TIMEOUT_MS = 2000;
/** Bounds a command that does not block (a write under appendfsync always may take a while). */
const REPLY_TIMEOUT_MS = 10000;
/** What a blocking acquire is given beyond its WAIT, so we never give up before the server. */
const REPLY_SLACK_MS = 5000;
/** The pause before going round the nodes again after all failed. */
const RETRY_PAUSE_MS = 100;
/** How often a lock re-subscribes after its event connection dropped (renewals still tell). */
const MAX_RESUBSCRIBES = 20;

/** Why a lock was lost. */
export type LostReason =
  /** flockd published `forcereleased <token>` (FLOCK.FORCERELEASE). */
  | "ForceReleased"
  /** flockd published `expired <token>`: the lease ran out on the server. */
  | "Expired"
  /** A renewal was refused (`-NOTOWNER`): the holding is gone. */
  | "RenewRefused"
  /** No renewal succeeded for the lease minus the margin (server gone, or this process paused). */
  | "LeaseRunningOut"
  /** A `session` lock's connection closed, and the holding with it. */
  | "ConnectionLost";

/** The lock is lost: what `lock.lost` resolves with, and what a fenced write rejects with. */
export class LostError extends Error {
  constructor(
    readonly lockName: string,
    readonly token: bigint,
    readonly reason: LostReason,
    readonly detail: string = "",
  ) {
    super(`flockd: lock ${lockName} (token ${token}) lost: ${reason}${detail ? ` (${detail})` : ""}`);
    this.name = "LostError";
  }
}

/** The lock was released already. */
export class ReleasedError extends Error {
  constructor(readonly lockName: string) {
    super(`flockd: lock ${lockName} was released`);
    this.name = "ReleasedError";
  }
}

/** withLock could not get the lock within its wait. */
export class NotGrantedError extends Error {
  constructor(readonly lockName: string) {
    super(`flockd: lock ${lockName} was not granted`);
    this.name = "NotGrantedError";
  }
}

/** Options of an acquire. Without any: an exclusive lock with a 30 s lease, no wait. */
export interface AcquireOptions {
  /** How long the server keeps the lock without a renewal (default 30000). Renewed at a third. */
  leaseMs?: number;
  /** How long to wait in the lock's FIFO queue (WAIT ms) when it is held; 0 gives up at once. */
  waitMs?: number;
  /** Acquires with the same owner are reentrant (holds of one holding). */
  owner?: string;
  /** A read lock. Not with `limit`. */
  shared?: boolean;
  /** One of n permits (1..65535). Not with `shared`. */
  limit?: number;
  /** The holding also ends when the lock's connection closes (the lock stays on it). */
  session?: boolean;
  /** Do not subscribe to the lock's channel: a force-release or expiry is then noticed by the
   * next renewal (within a third of the lease) instead of at once. */
  noEvents?: boolean;
}

const errorMessage = (e: unknown): string => (e instanceof Error ? e.message : String(e));

/** A reply error from the server (ioredis's ReplyError), as opposed to a connection failure. */
function isReplyError(e: unknown): boolean {
  return e instanceof Error && e.name === "ReplyError";
}

function isClusterDown(e: unknown): boolean {
  return isReplyError(e) && errorMessage(e).startsWith("CLUSTERDOWN");
}

class TimeoutError extends Error {
  constructor(what: string, ms: number) {
    super(`flockd: ${what}: no reply within ${ms} ms`);
    this.name = "TimeoutError";
  }
}

/** A command given up because the lock was released or lost meanwhile. */
class StoppedError extends Error {
  constructor() {
    super("flockd: stopped");
    this.name = "StoppedError";
  }
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, Math.max(0, ms)));

/** Rejects after ms and calls onTimeout (which closes the connection, so nothing is left queued). */
function withTimeout<T>(p: Promise<T>, ms: number, what: string, onTimeout: () => void): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      onTimeout();
      reject(new TimeoutError(what, ms));
    }, Math.max(0, ms));
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

/** A connection to one node (or to the master the sentinels name). */
interface Connection {
  redis: Redis;
  node: number;
}

/**
 * The nodes of one flockd (or one flockd cluster) and how to connect to them. Each lock keeps
 * connections of its own.
 */
export class FlockdClient {
  private readonly nodes: string[];
  private readonly options: RedisOptions;
  private readonly sentinel: boolean;
  private first = 0; // the node tried first: the last one that answered
  private readonly locks = new Set<Lock>();

  /**
   * @param nodes each `host:port` or a URL (`redis://[user:password@]host:port`, `rediss://` for
   *   TLS); may be empty when `ioredisOptions.sentinels` is given.
   * @param ioredisOptions ioredis's options (password, tls, sentinels and name, ...). The package
   *   overrides those a lock depends on: no retry or resend of a command, no offline queue, no
   *   reconnect of its own, integer replies as strings (tokens go up to 2^63-1), and the timeouts.
   */
  constructor(nodes: string[] | string, ioredisOptions: RedisOptions = {}) {
    this.nodes = typeof nodes === "string" ? [nodes] : [...nodes];
    this.options = { ...ioredisOptions };
    this.sentinel = Array.isArray(ioredisOptions.sentinels) && ioredisOptions.sentinels.length > 0;
    if (this.sentinel) {
      this.nodes = ["sentinels"]; // one entry: each connection asks the sentinels for the master
    } else if (this.nodes.length === 0) {
      throw new Error("flockd: no node given");
    }
  }

  /**
   * Sends FLOCK.ACQUIRE once, on a connection of its own: a Lock with its token, or null when the
   * lock was not granted (held, and not freed within waitMs). Its reply is awaited for the wait
   * plus 5 s, so the client never gives up before the server's null reply.
   *
   * An error after the request was sent (a dropped connection, -CLUSTERDOWN) leaves its outcome
   * unknown: with an owner, FLOCK.STATUS tells whether you hold it; otherwise its lease ends it.
   *
   * A grant that followed a wait and came back later than a third of the lease after the acquire
   * was sent is renewed at once, before this resolves (the server may have applied it any time
   * before its reply), and counts from that renewal's send; refused (-NOTOWNER), the lease ran
   * out before the reply and this resolves to null.
   */
  async acquire(name: string, options: AcquireOptions = {}): Promise<Lock | null> {
    const leaseMs = options.leaseMs ?? 30000;
    const waitMs = options.waitMs ?? 0;
    const args = acquireArgs(name, options, leaseMs, waitMs);
    const timeoutMs = waitMs > 0 ? waitMs + REPLY_SLACK_MS : REPLY_TIMEOUT_MS;
    const conn = await this.connect(Date.now() + CONNECT_TIMEOUT_MS * this.nodes.length, timeoutMs);
    const sent = Date.now(); // validity counts from here, not from the reply
    let reply: unknown;
    try {
      reply = await withTimeout(conn.redis.call("FLOCK.ACQUIRE", ...args), timeoutMs + 1000,
        "FLOCK.ACQUIRE", () => conn.redis.disconnect());
    } catch (e) {
      if (isClusterDown(e)) this.skip(conn.node);
      conn.redis.disconnect();
      throw new Error(`flockd: FLOCK.ACQUIRE ${name}: ${errorMessage(e)}`, { cause: e });
    }
    if (reply === null) {
      conn.redis.disconnect();
      return null;
    }
    let token: bigint;
    try {
      token = BigInt(String(reply));
    } catch {
      token = 0n;
    }
    if (token <= 0n) {
      conn.redis.disconnect();
      throw new Error(`flockd: FLOCK.ACQUIRE ${name} replied ${String(reply)}`);
    }
    const lock = new Lock(this, name, token, leaseMs, options, sent, conn);
    if (waitMs > 0 && Date.now() - sent > leaseMs / 3) {
      // Granted after a wait: the server may have applied the grant any time before its reply,
      // so the lease may be shorter than counted from the send. Renew now, on the lock's
      // connection, and count from this renewal's send; refused, the lease ran out before the
      // reply, and the lock was not granted.
      let renewed: boolean;
      try {
        renewed = await lock.renewAtOnce();
      } catch (e) {
        lock.discard();
        throw new Error(`flockd: FLOCK.ACQUIRE ${name}: the renewal after the wait: ${errorMessage(e)}`, { cause: e });
      }
      if (!renewed) {
        lock.discard();
        return null;
      }
    }
    this.locks.add(lock);
    await lock.start(!options.noEvents);
    return lock;
  }

  /**
   * Acquires, runs fn with the lock, and releases it whatever fn did. Rejects with
   * NotGrantedError when the lock was not granted. fn can watch `lock.signal` (aborted on loss).
   */
  async withLock<T>(name: string, options: AcquireOptions, fn: (lock: Lock) => Promise<T> | T): Promise<T> {
    const lock = await this.acquire(name, options);
    if (lock === null) throw new NotGrantedError(name);
    try {
      return await fn(lock);
    } finally {
      try {
        await lock.release();
      } catch (e) {
        // A lost lock's release gets -NOTOWNER or finds no server: fn's outcome says more.
        if (!lock.isLost()) throw e;
      }
    }
  }

  /** Releases every lock of this client still held (one try each) and closes its connections. */
  async close(): Promise<void> {
    await Promise.allSettled([...this.locks].map((lock) => lock.release()));
    this.locks.clear();
  }

  /** @internal */
  forget(lock: Lock): void {
    this.locks.delete(lock);
  }

  /**
   * @internal Connects to the first node that accepts, starting at the one that answered last;
   * tries each once, and no later than `until`.
   */
  async connect(until: number, commandTimeoutMs: number): Promise<Connection> {
    const errors: string[] = [];
    const first = this.first;
    for (let i = 0; i < this.nodes.length; i++) {
      const left = until - Date.now();
      if (left <= 0) break;
      const node = (first + i) % this.nodes.length;
      const redis = this.newRedis(this.nodes[node], commandTimeoutMs);
      try {
        await withTimeout(redis.connect(), Math.min(left, CONNECT_TIMEOUT_MS), "connect",
          () => redis.disconnect());
        this.first = node;
        return { redis, node };
      } catch (e) {
        redis.disconnect();
        errors.push(`${this.nodes[node]}: ${errorMessage(e)}`);
      }
    }
    throw new Error(`flockd: no node accepted a connection (${errors.join("; ") || "no time left"})`);
  }

  private newRedis(node: string, commandTimeoutMs: number): Redis {
    // The caller's options first, so ours win where a lock depends on them.
    const options: RedisOptions = {
      ...this.options,
      lazyConnect: true,
      connectTimeout: CONNECT_TIMEOUT_MS,
      commandTimeout: commandTimeoutMs,
      // A command is sent once: a resent acquire can be granted unseen. We go to the next
      // node ourselves, so ioredis neither reconnects nor queues while disconnected.
      maxRetriesPerRequest: 0,
      autoResendUnfulfilledCommands: false,
      enableOfflineQueue: false,
      retryStrategy: () => null,
      reconnectOnError: () => false,
      autoResubscribe: false,
      // Tokens go up to 2^63-1, past what a JavaScript number holds exactly.
      stringNumbers: true,
    };
    if (this.sentinel) options.sentinelRetryStrategy = () => null;
    let redis: Redis;
    if (this.sentinel) redis = new Redis(options);
    else if (node.includes("://")) redis = new Redis(node, options);
    else {
      const colon = node.lastIndexOf(":");
      const host = colon > 0 ? node.slice(0, colon) : node;
      const port = colon > 0 ? Number(node.slice(colon + 1)) : 6379;
      redis = new Redis({ ...options, host, port });
    }
    redis.on("error", () => {}); // each failure reaches the command that met it
    return redis;
  }

  /** @internal The node after `node` is tried first (it answered -CLUSTERDOWN or dropped). */
  skip(node: number): void {
    if (this.first === node) this.first = (node + 1) % this.nodes.length;
  }
}

function acquireArgs(name: string, o: AcquireOptions, leaseMs: number, waitMs: number): string[] {
  if (!name) throw new Error("flockd: a lock name must not be empty");
  if (!Number.isInteger(leaseMs) || leaseMs < 1) throw new Error("flockd: leaseMs must be an integer of at least 1");
  if (!Number.isInteger(waitMs) || waitMs < 0) throw new Error("flockd: waitMs must be an integer of at least 0");
  if (o.shared && o.limit !== undefined) throw new Error("flockd: shared and limit cannot be combined");
  const args = [name, String(leaseMs)];
  if (o.shared) args.push("SHARED");
  if (o.limit !== undefined) {
    if (!Number.isInteger(o.limit) || o.limit < 1 || o.limit > 65535) throw new Error("flockd: a limit is 1 to 65535");
    args.push("LIMIT", String(o.limit));
  }
  if (waitMs > 0) args.push("WAIT", String(waitMs));
  if (o.owner) args.push("OWNER", o.owner);
  if (o.session) args.push("SESSION");
  return args;
}

/** How long before the lease's end the lock counts as lost: a tenth of the lease, at most 2 s. */
export function safetyMarginMs(leaseMs: number): number {
  return Math.min(leaseMs / 10, 2000);
}

/**
 * A granted lock. It renews itself until release() or until it is lost. Events: `lost`
 * (with the LostError), never after a release.
 */
export class Lock extends EventEmitter {
  /** Resolves with the LostError when the lock is lost; never resolves after a release. */
  readonly lost: Promise<LostError>;
  /** Aborted when the lock is lost (with the LostError as reason) or released. */
  readonly signal: AbortSignal;
  readonly marginMs: number;

  private validUntil: number; // when the last successful request was sent, plus the lease
  private lostError: LostError | undefined;
  private released = false;
  private stopped = false;
  private failure: string | undefined;
  private conn: Connection | undefined; // undefined after a failure until the next command connects
  private queue: Promise<unknown> = Promise.resolve(); // one command at a time on conn
  private events: Redis | undefined;
  private renewTimer: NodeJS.Timeout | undefined;
  private deadlineTimer: NodeJS.Timeout | undefined;
  private renewing = false;
  private readonly resolveLost: (e: LostError) => void;
  private readonly abort = new AbortController();

  /** @internal */
  constructor(
    private readonly client: FlockdClient,
    /** The lock's name. */
    readonly name: string,
    /** The fencing token of the grant, a bigint (tokens go up to 2^63-1): pass it with every
     * write to what the lock protects, so a store can refuse writes from an older holder. */
    readonly token: bigint,
    readonly leaseMs: number,
    private readonly options: AcquireOptions,
    sent: number,
    conn: Connection,
  ) {
    super();
    this.marginMs = safetyMarginMs(leaseMs);
    this.validUntil = sent + leaseMs;
    this.conn = conn;
    let resolveLost!: (e: LostError) => void;
    this.lost = new Promise((resolve) => (resolveLost = resolve));
    this.resolveLost = resolveLost;
    this.signal = this.abort.signal;
  }

  /** @internal Subscribes (before acquire resolves, so no later event is missed) and starts renewing. */
  async start(subscribe: boolean): Promise<void> {
    if (subscribe) {
      try {
        await this.subscribe();
      } catch {
        this.resubscribe(1); // renewals tell meanwhile
      }
    }
    this.scheduleRenewal(this.validUntil - this.leaseMs);
    this.scheduleDeadline();
  }

  /**
   * @internal The renewal right after a grant that followed a wait (before the lock is handed
   * over): true when renewed (validity now counts from its send), false on -NOTOWNER; other
   * errors are thrown.
   */
  async renewAtOnce(): Promise<boolean> {
    // The server's lease, however it started, ends before now + the lease.
    const until = Date.now() + this.leaseMs - this.marginMs;
    let result: { reply: unknown; sent: number };
    try {
      result = await this.send(undefined, until, "FLOCK.RENEW", [this.name, String(this.token), String(this.leaseMs)]);
    } catch (e) {
      if (isReplyError(e) && errorMessage(e).startsWith("NOTOWNER")) return false;
      throw e;
    }
    if (String(result.reply) !== "1") throw new Error(`flockd: FLOCK.RENEW replied ${String(result.reply)}`);
    this.validUntil = result.sent + this.leaseMs;
    return true;
  }

  /** @internal A lock never handed over: nothing more is sent, its connection is closed. */
  discard(): void {
    this.stopped = true;
    this.conn?.redis.disconnect();
    this.conn = undefined;
  }

  /** The LostError if the lock is lost, else undefined. Checks the clock too: after this process
   * was paused past the lease it reports the loss before the renewal timer has run. */
  get error(): LostError | undefined {
    if (!this.lostError && !this.released && Date.now() + this.marginMs >= this.validUntil) {
      this.lose("LeaseRunningOut", "by the clock");
    }
    return this.lostError;
  }

  /** True once the lock is lost (see `error`). */
  isLost(): boolean {
    return this.error !== undefined;
  }

  /** The lease's end by this process's clock, counted from the last successful request's send. */
  get validUntilMs(): number {
    return this.validUntil;
  }

  /**
   * FENCE.SET key token value LOCK name: true when flockd stored the value, false when it refused
   * (a higher token wrote to key, or this holding is no longer live). Once the lock is known to be
   * lost it sends nothing and rejects with the LostError.
   */
  async fenceSet(key: string, value: string | Buffer | number): Promise<boolean> {
    this.usable();
    const { reply } = await this.send(() => this.usable(), Date.now() + REPLY_TIMEOUT_MS,
      "FENCE.SET", [key, String(this.token), value, "LOCK", this.name]);
    return String(reply) === "1";
  }

  private usable(): void {
    if (this.released) throw new ReleasedError(this.name);
    const lost = this.error;
    if (lost) throw lost;
  }

  /**
   * Stops the renewals and sends FLOCK.RELEASE: true when the holding is gone now, false when a
   * reentrant hold (same owner) remains. A lock lost already gets flockd's -NOTOWNER as the error
   * (one short try). `lost` does not resolve; `signal` is aborted.
   */
  async release(): Promise<boolean> {
    if (this.released) throw new ReleasedError(this.name);
    const wasLost = this.lostError !== undefined;
    this.released = true;
    this.stop();
    this.abort.abort(new ReleasedError(this.name));
    this.client.forget(this);
    const until = Date.now() + (wasLost ? CONNECT_TIMEOUT_MS : REPLY_TIMEOUT_MS);
    try {
      const { reply } = await this.send(undefined, until, "FLOCK.RELEASE", [this.name, String(this.token)]);
      return String(reply) === "1";
    } finally {
      await this.queue.catch(() => {});
      this.conn?.redis.disconnect();
      this.conn = undefined;
    }
  }

  /** Records the first reason the lock is lost; nothing after a release. */
  private lose(reason: LostReason, detail = ""): void {
    if (this.released || this.lostError) return;
    this.lostError = new LostError(this.name, this.token, reason, detail);
    this.stop();
    this.abort.abort(this.lostError);
    this.resolveLost(this.lostError);
    this.emit("lost", this.lostError);
    this.client.forget(this);
  }

  /** Ends the background work: the timers, a renewal in flight, the subscription. */
  private stop(): void {
    this.stopped = true;
    clearTimeout(this.renewTimer);
    clearTimeout(this.deadlineTimer);
    this.events?.disconnect();
    this.events = undefined;
    if (this.lostError) {
      // Nothing more will be sent for a lost lock but its release, which connects again.
      void this.queue.finally(() => {
        if (!this.released) {
          this.conn?.redis.disconnect();
          this.conn = undefined;
        }
      });
    }
  }

  /**
   * Sends one command on the lock's connection; the reply and when the request was sent. A
   * dropped connection, a timeout or -CLUSTERDOWN sends it again through the next node until
   * `until` (a session lock's connection is its holding: there the lock is lost instead). check,
   * if given, must pass before each send. One command at a time.
   */
  private send(check: (() => void) | undefined, until: number, cmd: string,
    args: (string | Buffer | number)[]): Promise<{ reply: unknown; sent: number }> {
    const run = this.queue.then(() => this.sendNow(check, until, cmd, args));
    this.queue = run.catch(() => {});
    return run;
  }

  private async sendNow(check: (() => void) | undefined, until: number, cmd: string,
    args: (string | Buffer | number)[]): Promise<{ reply: unknown; sent: number }> {
    let last: unknown;
    for (let attempt = 0; attempt < 1000; attempt++) {
      check?.();
      let left = until - Date.now();
      if (left <= 0) throw new Error(`flockd: ${cmd}: ${last ? errorMessage(last) : "no time left"}`);
      left = Math.min(left, REPLY_TIMEOUT_MS);
      if (!this.conn) {
        if (this.options.session) {
          this.lose("ConnectionLost", last ? errorMessage(last) : "");
          throw new Error(`flockd: ${cmd}: the session's connection closed: ${errorMessage(last)}`);
        }
        try {
          this.conn = await this.client.connect(until, REPLY_TIMEOUT_MS);
        } catch (e) {
          last = e;
          this.failure = errorMessage(e);
          await sleep(Math.min(RETRY_PAUSE_MS, until - Date.now()));
          continue;
        }
      }
      const conn = this.conn;
      const sent = Date.now();
      try {
        const reply = await withTimeout(conn.redis.call(cmd, ...args), left, cmd, () => conn.redis.disconnect());
        return { reply, sent };
      } catch (e) {
        last = e;
        if (isReplyError(e) && !isClusterDown(e)) throw e; // the server's answer: not to be resent
        // A dropped connection, a timeout, or -CLUSTERDOWN: through the next node.
        this.failure = errorMessage(e);
        conn.redis.disconnect();
        if (this.conn === conn) this.conn = undefined;
        this.client.skip(conn.node);
        if (isClusterDown(e)) await sleep(Math.min(RETRY_PAUSE_MS, until - Date.now()));
      }
    }
    throw new Error(`flockd: ${cmd}: ${errorMessage(last)}`);
  }

  private deadline(): number {
    return this.validUntil - this.marginMs;
  }

  private scheduleDeadline(): void {
    clearTimeout(this.deadlineTimer);
    this.deadlineTimer = setTimeout(() => {
      if (this.stopped) return;
      if (Date.now() < this.deadline()) return this.scheduleDeadline(); // renewed meanwhile
      this.lose("LeaseRunningOut", this.failure ? `last failure: ${this.failure}` : "no renewal came back in time");
    }, Math.max(0, this.deadline() - Date.now()));
  }

  private scheduleRenewal(renewedAt: number): void {
    clearTimeout(this.renewTimer);
    this.renewTimer = setTimeout(() => void this.renew(), Math.max(0, renewedAt + this.leaseMs / 3 - Date.now()));
  }

  /** One renewal, at a third of the lease from the last successful one's send. */
  private async renew(): Promise<void> {
    if (this.stopped || this.renewing) return;
    // After a pause both timers may be due: the clock decides.
    if (Date.now() >= this.deadline()) {
      this.lose("LeaseRunningOut", this.failure ? `last failure: ${this.failure}` : "no renewal came back in time");
      return;
    }
    this.renewing = true;
    try {
      const { reply, sent } = await this.send(() => {
        if (this.stopped) throw new StoppedError();
      }, this.deadline(), "FLOCK.RENEW", [this.name, String(this.token), String(this.leaseMs)]);
      if (this.stopped) return;
      if (String(reply) !== "1") {
        this.lose("RenewRefused", `FLOCK.RENEW replied ${String(reply)}`);
        return;
      }
      this.validUntil = sent + this.leaseMs;
      this.failure = undefined;
      this.scheduleDeadline();
      this.scheduleRenewal(sent);
    } catch (e) {
      if (this.stopped || e instanceof StoppedError) return;
      if (isReplyError(e) && !isClusterDown(e)) {
        this.lose("RenewRefused", errorMessage(e));
        return;
      }
      // Every node failed until the deadline: the deadline timer says it.
      this.failure = errorMessage(e);
    } finally {
      this.renewing = false;
    }
  }

  /** Opens the lock's event subscription on some node and waits for its confirmation. */
  private async subscribe(): Promise<void> {
    const conn = await this.client.connect(Date.now() + REPLY_TIMEOUT_MS, REPLY_TIMEOUT_MS);
    const redis = conn.redis;
    const expected = String(this.token);
    redis.on("message", (_channel: string, message: string) => {
      const space = message.indexOf(" ");
      if (space < 0 || message.slice(space + 1) !== expected) return;
      const event = message.slice(0, space);
      if (event === "forcereleased") this.lose("ForceReleased");
      else if (event === "expired") this.lose("Expired");
    });
    try {
      await withTimeout(redis.subscribe(`__flock__:${this.name}`), REPLY_TIMEOUT_MS, "SUBSCRIBE",
        () => redis.disconnect());
    } catch (e) {
      redis.disconnect();
      throw e;
    }
    if (this.stopped) {
      redis.disconnect();
      return;
    }
    this.events = redis;
    // A dropped subscription is made again on another node (events published meanwhile are
    // missed; the next renewal tells).
    redis.once("close", () => {
      if (this.events === redis && !this.stopped) {
        this.events = undefined;
        redis.disconnect();
        this.resubscribe(1);
      }
    });
  }

  private resubscribe(failures: number): void {
    if (failures > MAX_RESUBSCRIBES || this.stopped) return;
    setTimeout(() => {
      if (this.stopped) return;
      this.subscribe().catch(() => this.resubscribe(failures + 1));
    }, failures * RETRY_PAUSE_MS);
  }
}

export default FlockdClient;
