// MULTI/EXEC through the clients' own transaction APIs: ioredis `multi()` and node-redis
// `multi()`. Run by tests/examples/run.sh:  FLOCKD_URL=redis://127.0.0.1:PORT node multi.js ioredis|node-redis
// Prints one line per check and exits non-zero on the first surprise.
'use strict';
const assert = require('node:assert/strict');

const url = process.env.FLOCKD_URL || 'redis://127.0.0.1:6390';
const which = process.argv[2];

function ms(since) { return Date.now() - since; }

async function ioredisChecks() {
  const Redis = require('ioredis');
  const redis = new Redis(url, { stringNumbers: true, maxRetriesPerRequest: 0 });
  try {
    // FLOCK.ACQUIRE inside MULTI: the token comes back in the EXEC reply.
    let res = await redis.multi()
      .call('FLOCK.ACQUIRE', 'multi:io', 30000)
      .call('FLOCK.TOKEN', 'multi:io')
      .call('FENCE.SET', 'multi:io:res', 1, 'one')
      .exec();
    assert.equal(res.length, 3);
    for (const [err] of res) assert.equal(err, null);
    const token = res[0][1];
    assert.match(String(token), /^[1-9][0-9]*$/);
    assert.equal(String(res[1][1]), String(token));
    console.log(`ioredis multi: acquired token ${token} in EXEC`);

    // A held lock inside MULTI answers null at once, WAIT or not (as BLPOP inside MULTI).
    const t0 = Date.now();
    res = await redis.multi().call('FLOCK.ACQUIRE', 'multi:io', 30000, 'WAIT', 5000).exec();
    assert.deepEqual(res, [[null, null]]);
    assert.ok(ms(t0) < 2500, `WAIT inside MULTI blocked for ${ms(t0)} ms`);
    console.log(`ioredis multi: WAIT on a held lock answered null in ${ms(t0)} ms`);

    // Release and re-acquire atomically: one transaction, the next token.
    res = await redis.multi()
      .call('FLOCK.RELEASE', 'multi:io', token)
      .call('FLOCK.ACQUIRE', 'multi:io', 30000)
      .exec();
    assert.equal(String(res[0][1]), '1');
    const next = res[1][1];
    assert.equal(BigInt(next), BigInt(token) + 1n);
    console.log(`ioredis multi: release + acquire gave token ${next}`);

    // A command's own error is its element; the others still take effect.
    res = await redis.multi()
      .call('FLOCK.RELEASE', 'multi:io', token) // the old token: NOTOWNER
      .call('FLOCK.RELEASE', 'multi:io', next)
      .exec();
    assert.match(String(res[0][0] && res[0][0].message), /^NOTOWNER/);
    assert.equal(String(res[1][1]), '1');
    console.log('ioredis multi: NOTOWNER is an element, the rest applied');

    // An error at queue time (wrong arity) aborts EXEC: nothing applied.
    await assert.rejects(
      redis.multi().call('FLOCK.ACQUIRE', 'multi:io', 30000).call('FLOCK.ACQUIRE', 'multi:io').exec(),
      (err) => /EXECABORT/.test(err.message),
    );
    assert.equal(String(await redis.call('FLOCK.TTL', 'multi:io')), '-2');
    console.log('ioredis multi: a queued syntax error aborts EXEC, nothing applied');

    // pipeline() is no transaction: plain commands in one write.
    res = await redis.pipeline().call('FLOCK.ACQUIRE', 'multi:io', 30000).call('FLOCK.TTL', 'multi:io').exec();
    assert.equal(res[0][0], null);
    assert.equal(BigInt(res[0][1]), BigInt(next) + 1n);
    await redis.call('FLOCK.RELEASE', 'multi:io', res[0][1]);
    console.log('ioredis pipeline: ok');
  } finally {
    redis.disconnect();
  }
}

async function nodeRedisChecks() {
  const { createClient } = require('redis');
  const client = createClient({ url, socket: { reconnectStrategy: false } });
  client.on('error', (err) => console.error('client error:', err.message));
  await client.connect();
  try {
    let res = await client.multi()
      .addCommand(['FLOCK.ACQUIRE', 'multi:nr', '30000'])
      .addCommand(['FLOCK.TOKEN', 'multi:nr'])
      .exec();
    const token = res[0];
    assert.ok(Number.isSafeInteger(token) && token >= 1, `token ${token}`);
    assert.equal(res[1], token);
    console.log(`node-redis multi: acquired token ${token} in EXEC`);

    const t0 = Date.now();
    res = await client.multi().addCommand(['FLOCK.ACQUIRE', 'multi:nr', '30000', 'WAIT', '5000']).exec();
    assert.deepEqual(res, [null]);
    assert.ok(ms(t0) < 2500, `WAIT inside MULTI blocked for ${ms(t0)} ms`);
    console.log(`node-redis multi: WAIT on a held lock answered null in ${ms(t0)} ms`);

    res = await client.multi()
      .addCommand(['FLOCK.RELEASE', 'multi:nr', String(token)])
      .addCommand(['FLOCK.ACQUIRE', 'multi:nr', '30000'])
      .exec();
    assert.deepEqual(res, [1, token + 1]);
    console.log(`node-redis multi: release + acquire gave token ${token + 1}`);

    // node-redis rejects with the queued command's own error (the EXECABORT comes after it).
    await assert.rejects(
      client.multi().addCommand(['FLOCK.RELEASE', 'multi:nr', String(token + 1)]).addCommand(['FLOCK.ACQUIRE', 'multi:nr']).exec(),
      (err) => /EXECABORT|wrong number of arguments/.test(err.message),
    );
    assert.equal(await client.sendCommand(['FLOCK.TTL', 'multi:nr']) > 0, true, 'EXECABORT applied the release');
    assert.equal(await client.sendCommand(['FLOCK.RELEASE', 'multi:nr', String(token + 1)]), 1);
    console.log('node-redis multi: a queued syntax error aborts EXEC, nothing applied');
  } finally {
    await client.close();
  }
}

const run = { ioredis: ioredisChecks, 'node-redis': nodeRedisChecks }[which];
if (!run) {
  console.error('usage: node multi.js ioredis|node-redis');
  process.exit(2);
}
run().then(() => process.exit(0), (err) => { console.error(err); process.exit(1); });
