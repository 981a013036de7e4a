// The console page in a real browser: Debian's chromium, headless, driven by playwright-core.
// A test client holds a lock over the Redis port; the page must show it with its token and
// owner, a release must appear in the page's live feed within a second, a wrong password must
// get 401, no request may leave the console's own origin, and the page must log no error (a
// Content-Security-Policy refusal would be one). A user without rights must see the server's
// own words (its NOPERM texts) and a state that says refused, not "no answer", and no empty
// table's "no contention". Saves a screenshot to $SCREENSHOT.
//
//   CONSOLE_URL=http://127.0.0.1:N FLOCKD_PORT=M FLOCKD_PASSWORD=pw SCREENSHOT=/tmp/x.png \
//     node tests/console/browser.js          (tests/console/run.sh sets all of this up)
'use strict';

const fs = require('fs');
const net = require('net');
const os = require('os');
const path = require('path');
const { chromium } = require('playwright-core');

const CONSOLE_URL = process.env.CONSOLE_URL;
const PORT = Number(process.env.FLOCKD_PORT);
const PASSWORD = process.env.FLOCKD_PASSWORD;
const SCREENSHOT = process.env.SCREENSHOT;
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];
const FEED_LIMIT_MS = 1000;

let passed = 0;
let failed = 0;
function check(name, ok, detail) {
  if (ok) { passed += 1; console.log(`ok   ${name}`); } else {
    failed += 1;
    console.log(`FAIL ${name}${detail === undefined ? '' : `\n     | ${detail}`}`);
  }
}

// A minimal RESP client: one request at a time, replies as JS values (errors thrown).
class Resp {
  constructor(port) {
    this.socket = net.connect(port, '127.0.0.1');
    this.buffer = Buffer.alloc(0);
    this.waiting = [];
    this.socket.on('data', (chunk) => { this.buffer = Buffer.concat([this.buffer, chunk]); this.drain(); });
  }

  call(...args) {
    const parts = [`*${args.length}\r\n`];
    for (const a of args.map(String)) parts.push(`$${Buffer.byteLength(a)}\r\n${a}\r\n`);
    this.socket.write(parts.join(''));
    return new Promise((resolve, reject) => { this.waiting.push({ resolve, reject }); this.drain(); });
  }

  parse(at) {
    const end = this.buffer.indexOf('\r\n', at);
    if (end < 0) return null;
    const line = this.buffer.toString('utf8', at + 1, end);
    const next = end + 2;
    switch (String.fromCharCode(this.buffer[at])) {
      case '+': return { value: line, next };
      case '-': return { value: new Error(line), next };
      case ':': return { value: Number(line), next };
      case '$': {
        const len = Number(line);
        if (len < 0) return { value: null, next };
        if (this.buffer.length < next + len + 2) return null;
        return { value: this.buffer.toString('utf8', next, next + len), next: next + len + 2 };
      }
      case '*': {
        const count = Number(line);
        const items = [];
        let pos = next;
        for (let i = 0; i < count; i += 1) {
          const item = this.parse(pos);
          if (!item) return null;
          items.push(item.value);
          pos = item.next;
        }
        return { value: count < 0 ? null : items, next: pos };
      }
      default: throw new Error(`unexpected reply byte ${this.buffer[at]}`);
    }
  }

  drain() {
    while (this.waiting.length) {
      const reply = this.parse(0);
      if (!reply) return;
      this.buffer = this.buffer.subarray(reply.next);
      const { resolve, reject } = this.waiting.shift();
      if (reply.value instanceof Error) reject(reply.value); else resolve(reply.value);
    }
  }

  close() { this.socket.destroy(); }
}

function freshProfile() {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'flockd-console-chromium-'));
}

async function withBrowser(credentials, body) {
  const profile = freshProfile();
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: ARGS,
    httpCredentials: credentials,
    viewport: { width: 1400, height: 1000 },
  });
  try {
    return await body(context);
  } finally {
    await context.close();
    fs.rmSync(profile, { recursive: true, force: true });
  }
}

async function main() {
  const origin = new URL(CONSOLE_URL).origin;

  // A wrong password: the page is refused with a Basic challenge.
  await withBrowser({ username: 'default', password: 'not-the-password' }, async (context) => {
    const page = context.pages()[0] || await context.newPage();
    const response = await page.goto(CONSOLE_URL);
    check('a wrong password gets 401', response.status() === 401, `status ${response.status()}`);
    check('the 401 asks for Basic credentials',
      /^Basic realm="flockd"/.test((await response.allHeaders())['www-authenticate'] || ''));
  });

  const client = new Resp(PORT);
  await client.call('AUTH', PASSWORD);
  await client.call('CLIENT', 'SETNAME', 'browser-test');
  const token = await client.call('FLOCK.ACQUIRE', 'console:demo', 30000, 'OWNER', 'browser-test');
  // Some company for the screenshot: a semaphore with two holders, a refused acquire (a hot
  // lock), and a little traffic for the charts.
  await client.call('FLOCK.ACQUIRE', 'reports:nightly', 45000, 'LIMIT', 3, 'OWNER', 'cron-a');
  await client.call('FLOCK.ACQUIRE', 'reports:nightly', 45000, 'LIMIT', 3, 'OWNER', 'cron-b');
  await client.call('FLOCK.ACQUIRE', 'orders:17', 20000, 'OWNER', 'checkout-7');
  for (let i = 0; i < 5; i += 1) await client.call('FLOCK.ACQUIRE', 'orders:17', 20000);
  for (let i = 0; i < 200; i += 1) await client.call('FLOCK.STATUS', 'console:demo');

  await withBrowser({ username: 'default', password: PASSWORD }, async (context) => {
    const page = context.pages()[0] || await context.newPage();
    const elsewhere = [];
    const errors = [];
    page.on('request', (request) => {
      if (!request.url().startsWith(`${origin}/`)) elsewhere.push(request.url());
    });
    page.on('console', (message) => { if (message.type() === 'error') errors.push(message.text()); });
    page.on('pageerror', (error) => errors.push(String(error)));

    const response = await page.goto(CONSOLE_URL);
    check('the right password gets the page', response.status() === 200, `status ${response.status()}`);

    const row = page.locator('#locks tbody tr[data-name="console:demo"]');
    await row.first().waitFor({ timeout: 10000 });
    const shownToken = (await row.locator('td.token').first().textContent()).trim();
    const shownOwner = (await row.locator('td.owner').first().textContent()).trim();
    check('the page shows the held lock with its token', shownToken === String(token),
      `token ${shownToken}, expected ${token}`);
    check('the page shows the holder\'s owner', shownOwner === 'browser-test', `owner ${shownOwner}`);

    await page.fill('#prefix', 'reports:');
    await page.waitForFunction(() => {
      const names = [...document.querySelectorAll('#locks tbody tr')].map((tr) => tr.dataset.name);
      return names.length === 2 && names.every((n) => n === 'reports:nightly');
    }, null, { timeout: 10000 });
    check('the prefix search shows only matching locks, one row per holding', true);
    await page.fill('#prefix', '');
    await row.first().waitFor({ timeout: 10000 });

    await row.locator('button', { hasText: 'follow' }).click();
    await page.waitForSelector('#feed-status[data-state="ready"]', { timeout: 10000 });
    const started = Date.now();
    const released = await client.call('FLOCK.RELEASE', 'console:demo', token);
    await page.waitForSelector('#feed li[data-event="released"]', { timeout: 10000 });
    const took = Date.now() - started;
    const line = (await page.locator('#feed li[data-event="released"]').first().textContent()).trim();
    check(`the release is in the feed within a second (${took} ms)`,
      released === 1 && took <= FEED_LIMIT_MS && line.includes(`token ${token}`), line);
    // Another holder takes it: the feed shows the grant too, and the table catches up.
    const next = await client.call('FLOCK.ACQUIRE', 'console:demo', 30000, 'OWNER', 'browser-test-2');
    await page.waitForSelector('#feed li[data-event="granted"]', { timeout: 10000 });
    await page.waitForFunction((t) => {
      const cell = document.querySelector('#locks tbody tr[data-name="console:demo"] td.token');
      return cell && cell.textContent === t;
    }, String(next), { timeout: 10000 });
    check('the table shows the new holding after the grant', true);

    // Samples for the charts (one every 2 s), then the picture.
    await page.waitForFunction(() => document.querySelectorAll('#ops-chart polyline').length > 0,
      null, { timeout: 15000 });
    await page.waitForTimeout(2500);
    await page.screenshot({ path: SCREENSHOT, fullPage: true });
    check(`screenshot saved to ${SCREENSHOT}`, fs.statSync(SCREENSHOT).size > 0);

    check('nothing was requested from anywhere but the console', elsewhere.length === 0, elsewhere.join(' '));
    check('the page logged no error (CSP included)', errors.length === 0, errors.join(' | '));
  });

  // A user who may log in but run nothing: every endpoint answers 403 with a NOPERM text.
  await client.call('ACL', 'SETUSER', 'norights', 'on', '>norights-pw', 'nocommands', 'resetkeys',
    'resetchannels');
  await withBrowser({ username: 'norights', password: 'norights-pw' }, async (context) => {
    const page = context.pages()[0] || await context.newPage();
    const response = await page.goto(CONSOLE_URL);
    check('a user without rights gets the page itself', response.status() === 200,
      `status ${response.status()}`);
    const settled = await page.waitForFunction(
      () => document.getElementById('status').dataset.state,
      null, { timeout: 10000 }).then(() => true, () => false);
    const text = async (selector) => (await page.locator(selector).textContent()).trim();
    const status = await text('#status');
    check('the status says refused, not "no answer"', settled && /refused/.test(status)
      && !/no answer/.test(status), `status "${status}"`);
    const title = await text('#node-title');
    check('the header no longer says connecting', !/connecting/.test(title), `title "${title}"`);
    const clusterError = await text('#cluster-error');
    check('the overview shows the server\'s NOPERM words',
      /^NOPERM User norights has no permissions to run the '[a-z.]+' command$/.test(clusterError),
      `"${clusterError}"`);
    const hotError = await text('#hot-error');
    check('the hottest locks show the server\'s NOPERM words', /^NOPERM /.test(hotError), `"${hotError}"`);
    check('no "no contention" above the refusal', await page.locator('#hot-empty').isHidden());
    await page.fill('#follow-name', 'console:demo');
    await page.locator('#follow button[type="submit"]').click();
    const fed = await page.waitForSelector('#feed-status[data-state="refused"]', { timeout: 10000 })
      .then(() => true, () => false);
    await page.waitForFunction(() => /NOPERM/.test(document.getElementById('feed-status').textContent),
      null, { timeout: 5000 }).catch(() => {});
    const feedStatus = await text('#feed-status');
    check('a refused feed says so in the server\'s words', fed && /NOPERM/.test(feedStatus)
      && !/credentials or permissions\?/.test(feedStatus), `"${feedStatus}"`);
  });
  client.close();
}

const watchdog = setTimeout(() => {
  console.log('FAIL the browser test did not finish within 150 s');
  process.exit(1);
}, 150000);

main().then(() => {
  clearTimeout(watchdog);
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed === 0 ? 0 : 1);
}, (error) => {
  clearTimeout(watchdog);
  console.log(`FAIL ${error && error.stack ? error.stack : error}`);
  process.exit(1);
});
