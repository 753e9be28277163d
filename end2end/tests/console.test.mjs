// The console in a real browser against a real `sless up` with real functions.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { Platform } from '../lib/platform.mjs';
import { launchChromium, openPage, logIn, shot } from '../lib/browser.mjs';
import { ALICE, HOSTILE_CONTENT, HOSTILE_FILE, deployFixtures, printed } from '../lib/fixtures.mjs';

let platform;
let browser;
let alice;
let bob;

before(async () => {
  platform = await Platform.start();
  alice = platform.user('alice');
  bob = platform.user('bob');
  [browser] = await Promise.all([launchChromium(), deployFixtures(alice, bob)]);
});

after(async () => {
  await browser?.close();
  await platform?.stop();
});

const listUrl = () => `${platform.url}/funcs/${alice.namespace}`;
const entry = (page, name) => page.locator(`li.entry#entry-${name}`);
const invoke = (name) => fetch(`${platform.url}/fn/${alice.namespace}/${name}`, { method: 'POST' });

test('without a session the console sends the browser to /login; a bad token is refused there', async () => {
  const { context, page } = await openPage(browser);
  const response = await page.goto(listUrl());
  assert.match(page.url(), /\/login\?next=/);
  assert.equal(response.status(), 200);
  await page.locator('input[name="token"]').fill(`${alice.token}x`);
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.locator('#login-error').waitFor();
  assert.match(page.url(), /\/login/);

  await page.locator('input[name="token"]').fill(alice.token);
  await Promise.all([page.waitForURL(listUrl()), page.getByRole('button', { name: 'Log in' }).click()]);
  const cookies = await context.cookies();
  assert.ok(cookies.length > 0, 'a session cookie is set');
  for (const cookie of cookies) {
    assert.equal(cookie.httpOnly, true, `${cookie.name} is HttpOnly`);
    assert.equal(cookie.sameSite, 'Lax', `${cookie.name} is SameSite=Lax`);
    assert.ok(!cookie.value.includes(alice.token), 'the token is not in the cookie');
  }

  await Promise.all([page.waitForURL(/\/login\?bye=1$/), page.getByRole('button', { name: 'Log out' }).click()]);
  assert.equal(await page.locator('.flash-ok').innerText(), 'You are logged out.');
  await page.goto(listUrl());
  assert.match(page.url(), /\/login\?next=/, 'logged out: the list needs a login again');
  await context.close();
});

test('the list shows every fixture with its badge, runtime, phase and the counts', async () => {
  const { context, page } = await openPage(browser);
  await logIn(page, platform.url, alice);
  assert.equal(await page.locator('li.entry').count(), Object.keys(ALICE).length);
  for (const [name, want] of Object.entries(ALICE)) {
    const row = entry(page, name);
    assert.equal(await row.locator('.entry-name').innerText(), name);
    assert.equal(await row.locator('.badge').innerText(), want.kind, `${name} badge: the kind, one word`);
    assert.equal(await row.locator('.runtime').innerText(), want.runtime, `${name} runtime`);
    assert.equal(await row.locator('.entry-head .phase').innerText(), want.phase, `${name} phase`);
  }
  const counts = await page.locator('ul.counts').innerText();
  assert.match(counts, /function\s+5 functions/);
  assert.match(counts, /service\s+1 service\b/);
  assert.match(counts, /Ready\s+5/);
  assert.match(counts, /Failed\s+1/);

  // Triggers: type, schedule and state of each.
  const greeter = entry(page, 'greeter-node');
  assert.match(await greeter.locator('#trigger-greeter-cron').innerText(), /\*\/5 \* \* \* \*[\s\S]*on/);
  assert.match(await greeter.locator('#trigger-greeter-http').innerText(), /http[\s\S]*on/);

  // A failed build says why, one click away.
  const broken = entry(page, 'broken-node');
  await broken.locator('details.message summary').click();
  assert.match(await broken.locator('details.message pre').innerText(), /package\.json|JSON/i);

  // Filtering through the query string works without script.
  await page.selectOption('select[name="kind"]', 'service');
  await page.getByRole('button', { name: 'Apply' }).click();
  await page.waitForURL(/kind=service/);
  const shown = await page.locator('li.entry .entry-name').allInnerTexts();
  assert.deepEqual(shown, ['clock-service']);
  await context.close();
});

test('expanding an entry shows its highlighted source with line numbers', async () => {
  const { context, page } = await openPage(browser);
  await logIn(page, platform.url, alice);
  const source = entry(page, 'hello-python').locator('details.source');
  const code = source.locator('pre.hl-code');
  assert.equal(await code.isVisible(), false, 'collapsed until asked');
  await source.locator('summary').click();
  await code.waitFor({ state: 'visible' });
  assert.match(await code.innerText(), /def handle\(event\):/);
  const keyword = code.locator('span[class*="hl-"]', { hasText: /^def$/ }).first();
  assert.match(await keyword.getAttribute('class'), /hl-storage|hl-keyword/);
  const [keywordColor, codeColor] = await Promise.all([
    keyword.evaluate((el) => getComputedStyle(el).color),
    code.evaluate((el) => getComputedStyle(el).color),
  ]);
  assert.notEqual(keywordColor, codeColor, 'the theme colours keywords');
  const gutter = (await source.locator('pre.gutter').innerText()).trim().split('\n');
  const lines = (await code.innerText()).trimEnd().split('\n').length;
  assert.deepEqual(gutter, Array.from({ length: lines }, (_, i) => String(i + 1)));
  await context.close();
});

test('■ Stop returns once /fn answers 503 and the card shows it stopped; ▶ Start brings 200 back', async () => {
  const { context, page } = await openPage(browser);
  await logIn(page, platform.url, alice);
  assert.equal((await invoke('hello-python')).status, 200);

  const trigger = () => page.locator('#trigger-hello-http');
  await Promise.all([
    page.waitForNavigation(),
    trigger().getByRole('button', { name: 'Stop trigger hello-http' }).click(),
  ]);
  // No waiting: the page came back only once the platform had stopped it.
  const stopped = await invoke('hello-python');
  assert.equal(stopped.status, 503);
  assert.match((await stopped.json()).error ?? '', /hello-http.* is stopped/);
  await trigger().getByRole('button', { name: 'Start trigger hello-http' }).waitFor();
  assert.equal(await trigger().locator('.state').innerText(), 'stopped');
  const card = entry(page, 'hello-python');
  assert.equal(await card.locator('code.url-stopped').count(), 1, 'the URL is greyed');
  assert.match(await card.locator('.url-cell').innerText(), /stopped/);
  assert.match(await page.locator('.flash').innerText(), /hello-http/);

  // The keyboard works as well as the mouse.
  await trigger().getByRole('button', { name: 'Start trigger hello-http' }).focus();
  await Promise.all([page.waitForNavigation(), page.keyboard.press('Enter')]);
  await trigger().getByRole('button', { name: 'Stop trigger hello-http' }).waitFor();
  assert.equal(await trigger().locator('.state').innerText(), 'on');
  assert.equal(await card.locator('code.url-stopped').count(), 0);
  assert.equal((await invoke('hello-python')).status, 200);
  await context.close();
});

test('invoking from the function page: the answer, the call in the list and the printed line in the logs', async () => {
  const { context, page, errors } = await openPage(browser);
  await logIn(page, platform.url, alice);
  await Promise.all([page.waitForNavigation(), entry(page, 'printer').locator('.entry-name a').click()]);
  assert.equal(page.url(), `${platform.url}/funcs/${alice.namespace}/function/printer`);
  assert.equal(await page.title(), 'printer · sless');
  const total = async () => Number(await page.locator('.calls-total').innerText());
  const before = await total();

  await page.locator('select[name="method"]').selectOption('POST');
  await page.locator('input[name="path"]').fill('/from-the-page');
  await page.locator('#invoke-body').fill('{"n": 42}');
  await Promise.all([page.waitForNavigation(), page.getByRole('button', { name: 'Invoke' }).click()]);

  const outcome = page.locator('#invocation');
  assert.match(await outcome.innerText(), /POST \/from-the-page → 200/);
  assert.match(await outcome.locator('pre.hl-code').innerText(), /"n": 42/);
  assert.equal(await total(), before + 1, 'the call is counted');
  assert.match(await page.locator('table.calls tbody tr').first().innerText(), /POST\s+\/from-the-page\s+200/);
  assert.match(await page.locator('#logs pre.logs').innerText(), new RegExp(printed(42)));
  assert.equal(await page.locator('svg.chart rect.bar-calls').count() > 0, true, 'the chart has a bar');
  assert.deepEqual(errors, []);
  await context.close();
});

test('Live adds each new log line as it is printed; a call links to its own lines', async () => {
  const { context, page, errors } = await openPage(browser);
  await logIn(page, platform.url, alice);
  await page.goto(`${platform.url}/funcs/${alice.namespace}/function/printer`);
  await page.getByRole('button', { name: 'Live' }).click();
  assert.equal(await page.getByRole('button', { name: 'Stop live' }).getAttribute('aria-pressed'), 'true');
  // Once the stream is open, every line printed comes.
  await page.locator('#logs[data-streaming="true"]').waitFor({ timeout: 5000 });
  const answer = await fetch(`${platform.url}/fn/${alice.namespace}/printer`, {
    method: 'POST',
    headers: { 'x-request-id': 'live-e2e-1', 'content-type': 'application/json' },
    body: '{"n": 4242}',
  });
  assert.equal(answer.status, 200);
  await page.locator('#logs pre.logs').getByText(printed(4242)).waitFor({ timeout: 5000 });
  assert.match(await page.locator('#logs pre.logs').innerText(), /\[live-e2e-1\] printer got 4242/);

  await page.reload();
  await Promise.all([page.waitForNavigation(), page.locator('table.calls a', { hasText: 'live-e2e-1' }).click()]);
  assert.match(page.url(), /request_id=live-e2e-1/);
  const lines = (await page.locator('#logs pre.logs').innerText()).trim().split('\n');
  assert.equal(lines.length, 1, lines.join('\n'));
  assert.match(lines[0], /\[live-e2e-1\] printer got 4242/);
  assert.deepEqual(errors, []);
  await context.close();
});

test("at 390 px a failed build's error line and a URL's function name are in sight", async () => {
  const { context, page } = await openPage(browser, { viewport: { width: 390, height: 844 } });
  await logIn(page, platform.url, alice);
  const visible = async (locator, what) => {
    const box = await locator.boundingBox();
    assert.ok(box && box.width > 0, `${what} is shown`);
    assert.ok(box.x >= 0 && box.x + box.width <= 390.5, `${what} fits in 390 px: ${JSON.stringify(box)}`);
  };
  // The list: the error line of the failed card, not folded away, and the whole URL.
  const broken = entry(page, 'broken-node');
  await visible(broken.locator('.error-line'), 'the error line on the list');
  assert.match(await broken.locator('.error-line').innerText(), /npm error/);
  const url = entry(page, 'hello-python').locator('code.url');
  await visible(url, 'the URL');
  assert.match(await url.innerText(), /\/hello-python$/);

  await page.goto(`${platform.url}/funcs/${alice.namespace}/function/broken-node`);
  const line = page.locator('p.error-line');
  await line.scrollIntoViewIfNeeded();
  await visible(line, 'the error line on the page');
  assert.match(await line.innerText(), /npm error .*EJSONPARSE|JSON/);
  assert.equal(await page.locator('details.build-log').getAttribute('open'), '', 'the build log is open');
  const [scrollWidth, clientWidth] = await page.evaluate(() => [
    document.documentElement.scrollWidth,
    document.documentElement.clientWidth,
  ]);
  assert.ok(scrollWidth <= clientWidth, `the page is ${scrollWidth} px wide in ${clientWidth} px`);
  await shot(page, 'function-failed-390.png');
  await context.close();
});

test('Run again on a job shows the new run and its result', async () => {
  const { context, page } = await openPage(browser);
  await logIn(page, platform.url, alice);
  await Promise.all([page.waitForNavigation(), page.getByRole('link', { name: 'Jobs' }).click()]);
  await Promise.all([page.waitForNavigation(), page.getByRole('link', { name: 'nightly' }).click()]);
  // The fixture's first run may still be going: reload until it is over, bounded.
  const deadline = Date.now() + 60_000;
  while (!/Succeeded|Failed/.test(await page.locator('.page-head .phase').innerText()) && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 200));
    await page.reload();
  }
  assert.equal(await page.locator('.run-id').innerText(), '1');

  await page.locator('#event').fill('{"n": 7}');
  await Promise.all([page.waitForNavigation(), page.getByRole('button', { name: 'Run again' }).click()]);
  assert.equal(await page.locator('.run-id').innerText(), '2');
  assert.match(await page.locator('.flash').innerText(), /Run 2 of job nightly: Succeeded/);
  assert.match(await page.locator('#result').innerText(), /"n": 7/);
  assert.match(await page.locator('#job-log').innerText(), new RegExp(printed(7)));
  await shot(page, 'job.png');
  await context.close();
});

test("another user's namespace answers 403 and shows none of its functions", async () => {
  const { context, page } = await openPage(browser);
  await logIn(page, platform.url, alice);
  const response = await page.goto(`${platform.url}/funcs/${bob.namespace}`);
  assert.equal(response.status(), 403);
  const text = await page.locator('body').innerText();
  assert.doesNotMatch(text, /bobs-secret/);
  const source = await page.goto(`${platform.url}/funcs/${bob.namespace}/source/bobs-secret?kind=function`);
  assert.equal(source.status(), 403);
  assert.doesNotMatch(await page.content(), /"secret": "bob"/);
  await context.close();
});

test('a hostile file name and content render as text: no dialog, no injected element', async () => {
  const { context, page, dialogs, errors } = await openPage(browser);
  await logIn(page, platform.url, alice);
  const source = entry(page, 'escape-check').locator('details.source');
  await source.locator('summary').click();
  const names = await source.locator('.file-path').allInnerTexts();
  assert.ok(names.includes(HOSTILE_FILE), `file names shown as text: ${names}`);
  assert.match(await source.innerText(), /<\/script><script>alert\(2\)<\/script>/);

  await page.goto(`${platform.url}/funcs/${alice.namespace}/source/escape-check?kind=function`);
  const files = page.locator('section.file');
  assert.equal(await files.count(), 2);
  const hostile = files.filter({ has: page.locator('.file-path', { hasText: HOSTILE_FILE }) });
  assert.equal((await hostile.locator('pre.hl-code').innerText()).trimEnd(), HOSTILE_CONTENT.trimEnd());

  for (const url of [listUrl(), page.url()]) {
    await page.goto(url);
    await page.waitForLoadState('load');
    assert.equal(await page.locator('img[src="x"]').count(), 0, `no injected <img> on ${url}`);
    const scripts = await page.locator('script').evaluateAll((all) => all.map((s) => s.textContent));
    assert.ok(scripts.every((s) => !s.includes('alert')), `no injected <script> on ${url}`);
  }
  assert.deepEqual(dialogs, [], 'no dialog fired');
  assert.deepEqual(errors, [], 'no script error');
  await context.close();
});

test('at 360 px the list has no horizontal scroll and focus is visible', async () => {
  const { context, page } = await openPage(browser, { viewport: { width: 360, height: 800 } });
  await logIn(page, platform.url, alice);
  const [scrollWidth, clientWidth] = await page.evaluate(() => [
    document.documentElement.scrollWidth,
    document.documentElement.clientWidth,
  ]);
  assert.ok(scrollWidth <= clientWidth, `page is ${scrollWidth} px wide in a ${clientWidth} px viewport`);
  const overflowing = await page.locator('li.entry').evaluateAll((all) =>
    all.filter((el) => el.getBoundingClientRect().right > window.innerWidth + 0.5).map((el) => el.id),
  );
  assert.deepEqual(overflowing, []);

  await page.keyboard.press('Tab');
  const outline = await page.evaluate(() => {
    const style = getComputedStyle(document.activeElement);
    return { tag: document.activeElement.tagName, style: style.outlineStyle, width: style.outlineWidth };
  });
  assert.notEqual(outline.tag, 'BODY', 'Tab moves focus into the page');
  assert.notEqual(outline.style, 'none', `focused ${outline.tag} shows an outline`);
  assert.notEqual(outline.width, '0px');
  await context.close();
});

test('dark mode changes the colours; a screenshot of the list is kept', async () => {
  const background = async (colorScheme) => {
    const { context, page } = await openPage(browser, { colorScheme, viewport: { width: 1200, height: 900 } });
    await logIn(page, platform.url, alice);
    const color = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
    return { context, page, color };
  };
  const light = await background('light');
  const dark = await background('dark');
  assert.notEqual(light.color, dark.color);
  await dark.context.close();

  await shot(light.page, 'console.png');
  await light.page.goto(`${platform.url}/funcs/${alice.namespace}/function/printer`);
  await shot(light.page, 'function.png');
  await light.context.close();
});
