// node-redis's ordinary use against a tally replica's RESP port.
//
// Run by resp/clients_test.go after `npm ci` here: node check.mjs HOST
// PORT TOKEN PREFIX. Every reply is compared with what Redis would answer;
// the first mismatch exits 1, and the last line says how many checks
// passed.
import { createRequire } from 'node:module';
import { isDeepStrictEqual } from 'node:util';
import { createClient } from 'redis';

const [host, port, token, p] = process.argv.slice(2);
const version = createRequire(import.meta.url)('redis/package.json').version;
let checks = 0;

function want(what, got, expected) {
  if (!isDeepStrictEqual(got, expected)) {
    console.error(`node-redis: ${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(expected)}`);
    process.exit(1);
  }
  checks++;
}

async function wantError(what, fn, prefix, code) {
  let got;
  try {
    got = await fn();
  } catch (e) {
    want(what, e.message.startsWith(prefix) && e.message.endsWith(`(code ${code})`), true);
    return;
  }
  console.error(`node-redis: ${what}: got ${JSON.stringify(got)}, want an error ${prefix} ... (code ${code})`);
  process.exit(1);
}

async function connect(password) {
  const c = createClient({ socket: { host, port: Number(port), reconnectStrategy: false }, password });
  c.on('error', (e) => {
    console.error(`node-redis: connection: ${e.message}`);
    process.exit(1);
  });
  await c.connect();
  return c;
}

const anon = await connect(undefined);
want('PING', await anon.ping(), 'PONG');
await wantError('INCR without AUTH', () => anon.incr(`${p}:views`), 'NOAUTH', 'unauthorized');
await anon.quit();

const r = await connect(token);
want('PING', await r.ping(), 'PONG');
want('INCR', await r.incr(`${p}:views`), 1);
want('INCRBY', await r.incrBy(`${p}:views`, 4), 5);
want('GET', await r.get(`${p}:views`), '5');
want('GET of a missing key', await r.get(`${p}:missing`), null);

const item = `likes:${p}.post`;
want('SADD two', await r.sAdd(item, ['alice', 'bob']), 2);
want('SADD one new', await r.sAdd(item, ['alice', 'carol']), 1);
want('SCARD', await r.sCard(item), 3);
// v5 answers SISMEMBER as 1/0 (v4 as a boolean).
want('SISMEMBER bob', Number(await r.sIsMember(item, 'bob')), 1);
want('SISMEMBER dave', Number(await r.sIsMember(item, 'dave')), 0);
want('SMEMBERS', (await r.sMembers(item)).sort(), ['alice', 'bob', 'carol']);

want('PFADD', Number(await r.pfAdd(`${p}:visitors`, ['u1', 'u2', 'u3'])), 1);
want('PFADD again', Number(await r.pfAdd(`${p}:visitors`, ['u1'])), 0);
want('PFCOUNT', await r.pfCount(`${p}:visitors`), 3);

// MULTI/EXEC: both increments in one transaction, both replies listed.
want('MULTI INCR INCR EXEC', await r.multi().incr(`${p}:tx`).incr(`${p}:tx`).exec(), [1, 2]);
want('GET after EXEC', await r.get(`${p}:tx`), '2');

// SCAN lists counters and sets, not unique counts. v5's scanIterator
// yields a page of keys at a time (v4's one key).
async function scan(opts) {
  const keys = [];
  for await (const page of r.scanIterator(opts)) keys.push(...[page].flat());
  return keys.sort();
}
want('scanIterator counters', await scan({ MATCH: `${p}:*` }), [`${p}:tx`, `${p}:views`]);
want('scanIterator sets', await scan({ MATCH: `likes:${p}.*`, COUNT: 1 }), [item]);
want('EXISTS', await r.exists([`${p}:views`, `${p}:missing`]), 1);
want('TYPE counter', await r.type(`${p}:views`), 'string');
want('TYPE set', await r.type(item), 'set');
want('TYPE missing', await r.type(`${p}:missing`), 'none');
await r.quit();

console.log(`node-redis ${version}: ${checks} checks ok`);
