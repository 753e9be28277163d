// The console in a real browser against a real `sless up` with real functions.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir, copyFile } from 'node:fs/promises';
import path from 'node:path';

import { Platform, repoRoot } from '../lib/platform.mjs';
import { launchChromium, openPage, logIn } from '../lib/browser.mjs';
import { ALICE, HOSTILE_CONTENT, HOSTILE_FILE, deployFixtures } from '../lib/fixtures.mjs';

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
/** Calls the function until it answers `want` or the time is up; the last status. */
async function statusWithin(name, want, ms) {
  const deadline = Date.now() + ms;
  for (;;) {
    const { status } = await invoke(name);
    if (status === want || Date.now() > deadline) return status;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
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

  await Promise.all([page.waitForURL(/\/login$/), page.getByRole('button', { name: 'Log out' }).click()]);
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
    assert.equal(await row.locator('.badge').innerText(), want.badge, `${name} badge`);
    assert.equal(await row.locator('.runtime').innerText(), want.runtime, `${name} runtime`);
    assert.equal(await row.locator('.entry-head .phase').innerText(), want.phase, `${name} phase`);
  }
  const counts = await page.locator('ul.counts').innerText();
  assert.match(counts, /job\s+4 functions/);
  assert.match(counts, /always-on\s+1 service\b/);
  assert.match(counts, /Ready\s+4/);
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

test('■ Stop makes /fn answer 503 and the button turn to ▶ Start; ▶ Start brings 200 back', async () => {
  const { context, page } = await openPage(browser);
  await logIn(page, platform.url, alice);
  assert.equal((await invoke('hello-python')).status, 200);

  const trigger = () => page.locator('#trigger-hello-http');
  await trigger().getByRole('button', { name: 'Stop trigger hello-http' }).click();
  await trigger().getByRole('button', { name: 'Start trigger hello-http' }).waitFor();
  assert.equal(await trigger().locator('.state').innerText(), 'off');
  assert.match(await page.locator('.flash').innerText(), /hello-http/);
  // The runner applies the change asynchronously (milliseconds): wait, bounded.
  assert.equal(await statusWithin('hello-python', 503, 5_000), 503);
  const stopped = await invoke('hello-python');
  assert.equal(stopped.status, 503);
  assert.match((await stopped.json()).error ?? '', /hello-http.* is stopped/);

  // The keyboard works as well as the mouse.
  await trigger().getByRole('button', { name: 'Start trigger hello-http' }).focus();
  await Promise.all([page.waitForNavigation(), page.keyboard.press('Enter')]);
  await trigger().getByRole('button', { name: 'Stop trigger hello-http' }).waitFor();
  assert.equal(await trigger().locator('.state').innerText(), 'on');
  // Stopping scaled the function to nothing; once the runner has seen the change, calls
  // wait for the new process (a call in the milliseconds before may still see 503).
  assert.equal(await statusWithin('hello-python', 200, 15_000), 200);
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

  const out = path.join(repoRoot, 'end2end', 'test-results');
  await mkdir(out, { recursive: true });
  const shot = path.join(out, 'console.png');
  await light.page.screenshot({ path: shot, fullPage: true });
  if (process.env.SLESS_UPDATE_SCREENSHOT === '1') {
    await copyFile(shot, path.join(repoRoot, 'docs', 'console.png'));
  }
  await light.context.close();
});
