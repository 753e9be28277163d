// What the console tests look at: the examples of the repository plus a hostile upload
// and a failed build, in alice's namespace; one function in bob's.

import { readFileSync } from 'node:fs';
import path from 'node:path';
import { repoRoot } from './platform.mjs';

const example = (name, file) => readFileSync(path.join(repoRoot, 'examples', name, file), 'utf8');

export const HOSTILE_FILE = '<img src=x onerror=alert(1)>.py';
export const HOSTILE_CONTENT =
  '# a comment that closes the page script\n' +
  'NOTE = "</script><script>alert(2)</script>"\n' +
  '\n' +
  'def handle(event):\n' +
  '    return {"note": NOTE}\n';

/** Everything alice sees: name → what the list must show. */
export const ALICE = {
  'hello-python': { kind: 'function', runtime: 'python3.11', phase: 'Ready' },
  'greeter-node': { kind: 'function', runtime: 'nodejs20', phase: 'Ready' },
  'clock-service': { kind: 'service', runtime: 'nodejs20', phase: 'Ready' },
  'escape-check': { kind: 'function', runtime: 'python3.11', phase: 'Ready' },
  'broken-node': { kind: 'function', runtime: 'nodejs20', phase: 'Failed' },
  'printer': { kind: 'function', runtime: 'python3.11', phase: 'Ready' },
};

/** What `printer` prints for an event `{"n": N}`: the logs show it. */
export const printed = (n) => `printer got ${n}`;

export async function deployFixtures(alice, bob) {
  await alice.trigger({ name: 'hello-http', type: 'http', function_ref: 'hello-python' });
  await alice.trigger({ name: 'greeter-http', type: 'http', function_ref: 'greeter-node' });
  await alice.trigger({
    name: 'greeter-cron',
    type: 'cron',
    function_ref: 'greeter-node',
    schedule: '*/5 * * * *',
  });
  await alice.trigger({ name: 'escape-http', type: 'http', function_ref: 'escape-check' });
  await alice.trigger({ name: 'printer-http', type: 'http', function_ref: 'printer' });

  await Promise.all([
    alice.deploy('functions', { name: 'hello-python', runtime: 'python3.11' }, {
      'handler.py': example('hello-python', 'handler.py'),
    }),
    alice.deploy('functions', { name: 'greeter-node', runtime: 'nodejs20' }, {
      'handler.js': example('greeter-node', 'handler.js'),
    }),
    alice.deploy('services', { name: 'clock-service', runtime: 'nodejs20' }, {
      'handler.js': example('clock-service', 'handler.js'),
    }),
    alice.deploy('functions', { name: 'escape-check', runtime: 'python3.11', entrypoint: 'handler.handle' }, {
      'handler.py': HOSTILE_CONTENT,
      [HOSTILE_FILE]: HOSTILE_CONTENT,
    }),
    // A package.json npm cannot parse: the build fails at once, offline.
    alice.deploy('functions', { name: 'broken-node', runtime: 'nodejs20' }, {
      'handler.js': 'exports.handle = async () => ({});\n',
      'package.json': '{ "name": "broken", ',
    }, 'Failed'),
    alice.deploy('functions', { name: 'printer', runtime: 'python3.11' }, {
      'handler.py':
        'def handle(event):\n    print("printer got", event.get("n"))\n    return {"n": event.get("n")}\n',
    }),
    bob.deploy('functions', { name: 'bobs-secret', runtime: 'python3.11' }, {
      'handler.py': 'def handle(event):\n    return {"secret": "bob"}\n',
    }),
  ]);
  // A job of printer that has run once.
  await alice.api('POST', `/v1/namespaces/${alice.namespace}/jobs`, {
    name: 'nightly',
    function_ref: 'printer',
    event_json: '{"n": 1}',
    run_id: 1,
  });
}
