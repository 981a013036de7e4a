'use strict';
// The console's script: polls /console/api/* and follows one lock over server-sent events.
// Lock names and owners are data: they only ever go into textContent, never into markup.
(() => {
  const POLL_MS = 2000;
  const PAGE = 100;
  const MAX_PAGES = 16;
  const FEED_ROWS = 200;
  const SVG = 'http://www.w3.org/2000/svg';
  const $ = (id) => document.getElementById(id);

  function el(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (className) node.className = className;
    return node;
  }

  // An error the server answered with carries its HTTP status, so a refusal (401, 403) is not
  // mistaken for a server that does not answer.
  async function refusal(response) {
    let body = null;
    try { body = await response.json(); } catch (_) { /* not JSON: the status says it */ }
    const error = new Error((body && body.error) || `${response.status} ${response.statusText}`);
    error.status = response.status;
    return error;
  }

  async function api(path) {
    const response = await fetch(path, { cache: 'no-store', credentials: 'same-origin' });
    if (!response.ok) throw await refusal(response);
    return response.json();
  }

  const refused = (error) => error && (error.status === 401 || error.status === 403);

  function showError(id, error) {
    const node = $(id);
    node.hidden = !error;
    node.textContent = error ? String(error.message || error) : '';
  }

  function fill(tbody, rows) {
    tbody.replaceChildren(...rows);
  }

  function row(cells) {
    const tr = document.createElement('tr');
    for (const cell of cells) tr.append(cell instanceof Node ? cell : el('td', cell));
    return tr;
  }

  function duration(seconds) {
    const s = Math.floor(seconds);
    if (s < 120) return `${s} s`;
    if (s < 7200) return `${Math.floor(s / 60)} min`;
    if (s < 172800) return `${Math.floor(s / 3600)} h`;
    return `${Math.floor(s / 86400)} d`;
  }

  // ---- node, cluster and charts -------------------------------------------------------

  function renderOverview(data) {
    const node = data.node;
    const cluster = data.cluster;
    $('node-title').textContent = `${node.address} · ${cluster.mode === 'cluster'
      ? `node ${cluster.node_id} (${cluster.role})` : 'single node'} · v${node.version}`;
    const facts = [
      ['role', cluster.role], ['leader', cluster.leader ?? (cluster.mode === 'single' ? '-' : 'none')],
      ['term', cluster.term ?? '-'], ['commit index', cluster.commit_index],
      ['applied index', cluster.applied_index], ['uptime', duration(node.uptime_s)],
      ['clients', node.connected_clients], ['blocked', node.blocked_clients],
      ['lock names', node.lock_names], ['locks held', node.locks_held],
      ['waiters', node.waiters], ['events', node.events ? 'on' : 'off'],
    ];
    if (cluster.removed) facts.unshift(['removed', cluster.removed]);
    const dl = $('node-facts');
    dl.replaceChildren(...facts.flatMap(([k, v]) => [el('dt', k), el('dd', v)]));
    fill($('members').tBodies[0], cluster.members.map((m) => {
      const state = m.up === false ? `${m.role} (down)` : m.role;
      const tr = row([m.id ?? '-', m.address, state, m.index ?? '?', m.lag ?? '?']);
      if (m.role === 'leader') tr.className = 'leader';
      return tr;
    }));
    const groups = cluster.groups || [];
    $('groups').hidden = groups.length === 0;
    fill($('groups').tBodies[0], groups.map((g) => {
      const tr = row([g.group, g.slots, g.leader ?? 'none', g.role, g.term, g.applied_index, g.lag]);
      if (g.role === 'leader') tr.className = 'leader';
      return tr;
    }));
    const h = data.history;
    chart($('ops-chart'), h.ops_per_s, (v) => v >= 1000 ? `${(v / 1000).toFixed(1)}k` : v.toFixed(0));
    chart($('p99-chart'), h.p99_ms, (v) => v < 1 ? `${(v * 1000).toFixed(0)} µs` : `${v.toFixed(1)} ms`);
    const last = (values) => values.length ? values[values.length - 1] : null;
    const ops = last(h.ops_per_s);
    const p99 = last(h.p99_ms);
    $('ops-now').textContent = ops === null ? '' : ops.toFixed(1);
    $('p99-now').textContent = p99 === null || p99 === undefined ? '' : (p99 < 1 ? `${(p99 * 1000).toFixed(0)} µs` : `${p99.toFixed(2)} ms`);
  }

  function svg(tag, attrs) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    return node;
  }

  // A line over the samples (null: no commands then), scaled to the largest, newest at the
  // right; 150 samples (5 minutes) fill the width, drawn at the chart's own size.
  function chart(target, values, label) {
    const width = Math.max(200, Math.round(target.clientWidth || 320));
    const height = 90, top = 12, bottom = 84, slots = 149;
    target.setAttribute('viewBox', `0 0 ${width} ${height}`);
    const present = values.filter((v) => v !== null && v !== undefined);
    const max = Math.max(...present, 0) || 1;
    const x = (i) => width - (values.length - 1 - i) * (width / slots);
    const y = (v) => bottom - (v / max) * (bottom - top);
    const parts = [svg('line', { x1: 0, x2: width, y1: bottom, y2: bottom }),
      svg('line', { x1: 0, x2: width, y1: top, y2: top })];
    const points = values.map((v, i) => (v === null || v === undefined ? null : `${x(i).toFixed(1)},${y(v).toFixed(1)}`))
      .filter(Boolean);
    if (points.length) {
      const first = points[0].split(',')[0];
      const lastX = points[points.length - 1].split(',')[0];
      parts.push(svg('polygon', { class: 'area', points: `${first},${bottom} ${points.join(' ')} ${lastX},${bottom}` }));
      parts.push(svg('polyline', { points: points.join(' ') }));
    }
    const maxText = svg('text', { x: 3, y: top - 3 });
    maxText.textContent = present.length ? `max ${label(max)}` : 'no samples yet';
    const spanText = svg('text', { x: 3, y: height - 1 });
    spanText.textContent = '5 min ago';
    const nowText = svg('text', { x: width - 22, y: height - 1 });
    nowText.textContent = 'now';
    parts.push(maxText, spanText, nowText);
    target.replaceChildren(...parts);
  }

  // ---- hottest locks ------------------------------------------------------------------

  function renderHot(data) {
    $('hot-empty').hidden = data.locks.length > 0;
    fill($('hot').tBodies[0], data.locks.map((h) => {
      const name = el('td', null, 'name');
      const link = el('button', h.name, 'link');
      link.type = 'button';
      link.title = 'follow its events';
      link.addEventListener('click', () => follow(h.name, h.name_query));
      name.append(link);
      return row([name, h.waits, h.wait_ms, h.busy, h.expiries]);
    }));
  }

  // ---- held locks ---------------------------------------------------------------------

  let held = [];
  let searchSerial = 0;

  async function search() {
    const serial = ++searchSerial;
    const prefix = $('prefix').value;
    const found = [];
    let cursor = '';
    let pages = 0;
    // A search walks the table a budget at a time: go on until a page is full or the walk
    // ends (bounded, so a huge table cannot keep the page busy).
    do {
      const query = new URLSearchParams({ prefix, limit: String(PAGE - found.length) });
      if (cursor) query.set('cursor', cursor);
      const data = await api(`/console/api/locks?${query}`);
      if (serial !== searchSerial) return;
      found.push(...data.locks);
      cursor = data.cursor;
      pages += 1;
    } while (cursor !== '0' && found.length < PAGE && pages < MAX_PAGES);
    const fetched = performance.now();
    held = found.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    const rows = [];
    for (const lock of held) {
      lock.holdings.forEach((h, i) => {
        const name = el('td', i === 0 ? lock.name : '', 'name');
        const follow_ = el('td');
        if (i === 0) {
          const button = el('button', 'follow', 'link');
          button.type = 'button';
          button.addEventListener('click', () => follow(lock.name, lock.name_query));
          follow_.append(button);
        }
        const ttl = el('td', '', 'ttl');
        ttl.dataset.ttl = String(h.ttl_ms);
        ttl.dataset.at = String(fetched);
        const tr = row([name, el('td', h.token, 'token'), el('td', h.owner ?? '-', 'owner'), ttl,
          h.holds, h.mode === 'limit' ? `limit ${h.limit}` : h.mode, i === 0 ? lock.waiters : '', follow_]);
        tr.dataset.name = lock.name;
        rows.push(tr);
      });
    }
    fill($('locks').tBodies[0], rows);
    tickTtl();
    const more = cursor !== '0' ? ' (more match: narrow the prefix)' : '';
    $('locks-count').textContent = `${held.length} held${more}`;
  }

  function tickTtl() {
    const now = performance.now();
    for (const cell of document.querySelectorAll('#locks td.ttl')) {
      const left = Math.max(0, Number(cell.dataset.ttl) - (now - Number(cell.dataset.at)));
      cell.textContent = left >= 10000 ? `${(left / 1000).toFixed(0)} s` : `${(left / 1000).toFixed(1)} s`;
      cell.classList.toggle('low', left < 3000);
    }
  }

  // ---- live events --------------------------------------------------------------------

  let source = null;

  function feedLine(parts, className) {
    const li = el('li', null, className);
    li.dataset.event = className;
    li.append(el('span', new Date().toLocaleTimeString(), 'time'));
    for (const part of parts) li.append(el('span', part));
    const list = $('feed');
    list.prepend(li);
    while (list.children.length > FEED_ROWS) list.lastElementChild.remove();
  }

  function unfollow(why) {
    if (source) source.close();
    source = null;
    if (why) $('feed-status').textContent = why;
  }

  function follow(name, nameQuery) {
    unfollow();
    $('follow-name').value = name;
    $('feed').replaceChildren();
    const encoded = nameQuery ?? encodeURIComponent(name);
    $('feed-status').textContent = `connecting to ${name}…`;
    const url = `/console/api/events?name=${encoded}`;
    const es = new EventSource(url);
    source = es;
    es.addEventListener('ready', (e) => {
      const hello = JSON.parse(e.data);
      $('feed-status').textContent = `following ${hello.name}` +
        (hello.events ? '' : ' (notify-flock-events is off: nothing is published)');
      $('feed-status').dataset.state = 'ready';
    });
    es.addEventListener('lock', (e) => {
      const event = JSON.parse(e.data);
      feedLine([event.event, `token ${event.token}`], event.event);
    });
    es.addEventListener('dropped', (e) => {
      feedLine([`${JSON.parse(e.data).dropped} events dropped: this page fell behind`], 'dropped');
    });
    es.addEventListener('closed', (e) => unfollow(`closed: ${JSON.parse(e.data).reason}`));
    es.onerror = () => {
      if (source !== es) return;
      if (es.readyState !== EventSource.CLOSED) {
        $('feed-status').textContent = 'reconnecting…';
        $('feed-status').dataset.state = 'error';
        return;
      }
      // EventSource hides why it was turned away: ask once more with fetch, which reads the
      // server's answer, and stop reading at once if this time the feed opens.
      $('feed-status').textContent = `the feed for ${name} was closed`;
      $('feed-status').dataset.state = 'error';
      feedRefusal(url).then((error) => {
        if (source !== es || !error) return;
        $('feed-status').textContent = refused(error) ? `refused: ${error.message}` : error.message;
        $('feed-status').dataset.state = refused(error) ? 'refused' : 'error';
      });
    };
  }

  async function feedRefusal(url) {
    const abort = new AbortController();
    try {
      const response = await fetch(url, { cache: 'no-store', credentials: 'same-origin', signal: abort.signal });
      if (response.ok) return null;
      return await refusal(response);
    } catch (e) {
      return e.name === 'AbortError' ? null : new Error('no answer');
    } finally {
      abort.abort();
    }
  }

  // ---- polling ------------------------------------------------------------------------

  async function poll() {
    const results = await Promise.allSettled([
      api('/console/api/overview').then(renderOverview),
      api('/console/api/hot').then(renderHot),
      search(),
    ]);
    showError('cluster-error', results[0].reason);
    showError('hot-error', results[1].reason);
    showError('locks-error', results[2].reason);
    // An empty table's note only when the table was answered.
    if (results[1].status === 'rejected') $('hot-empty').hidden = true;
    const errors = results.map((r) => r.reason).filter(Boolean);
    let state = 'live';
    if (errors.length === results.length) {
      if (errors.some(refused)) state = 'refused';
      else if (errors.some((e) => e.status)) state = 'error';
      else state = 'down';
    }
    const words = { live: '● live', refused: '● refused', error: '● error', down: '● no answer' };
    const status = $('status');
    status.className = `status ${state}`;
    status.dataset.state = state;
    status.textContent = words[state];
    status.title = state === 'live' ? '' : errors[0].message;
    if (results[0].status === 'rejected') {
      const why = results[0].reason.status ? results[0].reason.message : 'no answer';
      $('node-title').textContent = `${location.host}: ${why}`;
    }
  }

  async function loop() {
    try { await poll(); } finally { setTimeout(loop, POLL_MS); }
  }

  let typing = null;
  $('prefix').addEventListener('input', () => {
    clearTimeout(typing);
    typing = setTimeout(() => search().catch((e) => showError('locks-error', e)), 250);
  });
  $('search').addEventListener('submit', (e) => { e.preventDefault(); search(); });
  $('follow').addEventListener('submit', (e) => {
    e.preventDefault();
    const name = $('follow-name').value;
    if (name) follow(name);
  });
  $('unfollow').addEventListener('click', () => unfollow('stopped'));
  setInterval(tickTtl, 250);
  loop();
})();
