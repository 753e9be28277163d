// A function's page never acts with the console's authority: opened in a browser that
// is logged in to the console (same host), it can neither read the console nor start or
// stop a trigger, and the function never sees the session cookie.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { Platform } from '../lib/platform.mjs';
import { launchChromium, openPage, logIn } from '../lib/browser.mjs';

// Bob's function: a page that tries to use alice's console session (her namespace comes
// in the query string) and shows the Cookie header the function received.
const EVIL_HANDLER = `
import html

PAGE = """<!doctype html>
<html><head><title>evil</title></head><body>
<p id="cookie">COOKIE</p>
<form id="stop" method="post" action="/console/set-trigger">
  <input id="ns" name="namespace" value="">
  <input name="trigger" value="hello-http">
  <input name="enabled" value="false">
  <button type="submit">stop</button>
</form>
<script>
(async () => {
  const ns = new URLSearchParams(location.search).get('ns');
  document.getElementById('ns').value = ns;
  const results = { origin: String(self.origin) };
  try { results.cookie = document.cookie; } catch (e) { results.cookie = 'blocked: ' + e.name; }
  for (const credentials of ['same-origin', 'include']) {
    try {
      const response = await fetch('/funcs/' + ns, { credentials });
      const text = await response.text();
      results[credentials] = { status: response.status, listed: text.includes('python3.11') };
    } catch (e) {
      results[credentials] = { error: e.name };
    }
  }
  window.results = results;
})();
</script>
</body></html>
"""


def handle(event):
    cookie = event["_http"]["headers"].get("cookie", "")
    return {
        "statusCode": 200,
        "headers": {"Content-Type": "text/html; charset=utf-8"},
        "body": PAGE.replace("COOKIE", html.escape(cookie)),
    }
`;

let platform;
let browser;
let alice;
let bob;

before(async () => {
  platform = await Platform.start();
  alice = platform.user('alice');
  bob = platform.user('bob');
  await alice.trigger({ name: 'hello-http', type: 'http', function_ref: 'hello' });
  await bob.trigger({ name: 'evil-http', type: 'http', function_ref: 'evil' });
  [browser] = await Promise.all([
    launchChromium(),
    alice.deploy('functions', { name: 'hello', runtime: 'python3.11' }, {
      'handler.py': 'def handle(event):\n    return {"hello": "alice"}\n',
    }),
    bob.deploy('functions', { name: 'evil', runtime: 'python3.11' }, { 'handler.py': EVIL_HANDLER }),
  ]);
});

after(async () => {
  await browser?.close();
  await platform?.stop();
});

const triggerEnabled = async () =>
  (await alice.api('GET', `/v1/namespaces/${alice.namespace}/triggers/hello-http`)).enabled;

test("a function's page cannot read the console or toggle a trigger with the visitor's session", async () => {
  const { context, page } = await openPage(browser);
  await logIn(page, platform.url, alice);

  // Any unsandboxed page of this origin (here /healthz, plain text) can read the list:
  // what the function's page tries below fails because of the sandbox only.
  await page.goto(`${platform.url}/healthz`);
  const own = await page.evaluate(async (ns) => {
    const response = await fetch(`/funcs/${ns}`);
    return { status: response.status, listed: (await response.text()).includes('python3.11') };
  }, alice.namespace);
  assert.deepEqual(own, { status: 200, listed: true });

  const evilUrl = `${platform.url}/fn/${bob.namespace}/evil?ns=${alice.namespace}`;
  let response;
  for (let tries = 0; ; tries++) {
    response = await page.goto(evilUrl);
    if (response.status() !== 503 || tries > 100) break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  assert.equal(response.status(), 200);
  assert.equal(
    response.headers()['content-security-policy'],
    'sandbox allow-scripts allow-forms allow-popups allow-downloads',
  );
  const seen = await page.locator('#cookie').innerText();
  assert.ok(!seen.includes('sless_session'), `the function received the session cookie: ${seen}`);

  await page.waitForFunction(() => window.results !== undefined);
  const results = await page.evaluate(() => window.results);
  assert.equal(results.origin, 'null', 'the page runs in an opaque origin');
  assert.match(results.cookie, /^blocked/);
  for (const credentials of ['same-origin', 'include']) {
    const outcome = results[credentials];
    assert.ok(outcome.error !== undefined || !outcome.listed, `fetch with ${credentials} read the console: ${JSON.stringify(outcome)}`);
  }

  // The form post reaches the console without the session cookie (the opaque origin
  // makes it cross-site) and without the CSRF token: refused, sent to the login.
  const [post] = await Promise.all([
    page.waitForResponse((r) => r.request().method() === 'POST'),
    page.locator('#stop button').click(),
  ]);
  const refused = post.status() === 403 || (post.headers().location ?? '').startsWith('/login');
  assert.ok(refused, `the post got ${post.status()} → ${post.headers().location}`);
  await page.waitForLoadState();
  assert.ok(!(await page.content()).includes('Stopped trigger'), 'no "Stopped" message');
  assert.equal(await triggerEnabled(), true, 'the trigger is still on');

  // Alice is still logged in: her console works and her trigger is untouched.
  await page.goto(`${platform.url}/funcs/${alice.namespace}`);
  assert.equal(page.url(), `${platform.url}/funcs/${alice.namespace}`);
  await context.close();
});
