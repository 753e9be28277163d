// The lifecycle from the console with JavaScript off, at 390 px: create with a zip,
// watch it build, delete it through the confirmation step.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { Platform, zipOf } from '../lib/platform.mjs';
import { launchChromium, openPage, logIn, shot } from '../lib/browser.mjs';

let platform;
let browser;
let alice;

before(async () => {
  platform = await Platform.start();
  alice = platform.user('alice');
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
  await platform?.stop();
});

/** Nothing wider than the viewport: no sideways scrolling on a phone. */
async function fitsWidth(page, what) {
  const { scrollWidth, clientWidth } = await page.evaluate(() => ({
    scrollWidth: document.documentElement.scrollWidth,
    clientWidth: document.documentElement.clientWidth,
  }));
  assert.ok(scrollWidth <= clientWidth, `${what}: ${scrollWidth} px wide in ${clientWidth} px`);
}

test('without JavaScript at 390 px: create with a zip, see it Ready, delete it after confirming', async () => {
  const { context, page, errors } = await openPage(browser, {
    javaScriptEnabled: false,
    viewport: { width: 390, height: 844 },
  });
  await logIn(page, platform.url, alice);
  await Promise.all([page.waitForURL(/\/new$/), page.getByRole('link', { name: '+ New' }).click()]);
  await fitsWidth(page, 'the create form');
  await page.locator('input[name="name"]').fill('made-here');
  await page.locator('select[name="runtime"]').selectOption('python3.11');
  await page.locator('input[name="memory_mb"]').fill('256');
  await page.locator('input[name="code"]').setInputFiles({
    name: 'code.zip',
    mimeType: 'application/zip',
    buffer: await zipOf({ 'handler.py': 'def handle(event):\n    return {"made": "here"}\n' }),
  });
  await Promise.all([
    page.waitForURL(/\/function\/made-here\?follow=1/),
    page.getByRole('button', { name: 'Create' }).click(),
  ]);
  assert.match(await page.locator('.flash-ok').innerText(), /Created function made-here/);

  const base = `/v1/namespaces/${alice.namespace}/functions/made-here`;
  const deadline = Date.now() + 120_000;
  while ((await alice.api('GET', base)).phase !== 'Ready') {
    assert.ok(Date.now() < deadline, 'built in time');
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  await page.goto(`${platform.url}/funcs/${alice.namespace}/function/made-here`);
  assert.equal(await page.locator('.page-head .phase').innerText(), 'Ready');
  assert.equal((await alice.api('GET', base)).memory_mb, 256);
  await fitsWidth(page, 'the function page');

  await Promise.all([page.waitForURL(/\?delete=1/), page.getByRole('link', { name: /Delete function made-here/ }).click()]);
  assert.match(await page.locator('#delete').innerText(), /its uploaded code/);
  await fitsWidth(page, 'the confirmation step');
  await Promise.all([
    page.waitForURL(`**/funcs/${alice.namespace}`),
    page.getByRole('button', { name: 'Yes, delete made-here' }).click(),
  ]);
  assert.match(await page.locator('.flash-ok').innerText(), /Deleted function made-here/);
  await assert.rejects(alice.api('GET', base), /404/);
  assert.deepEqual(errors, []);
  await context.close();
});

/** What `name` answers through /fn, as JSON (null while it cannot answer). */
async function answer(user, name) {
  const response = await fetch(`${platform.url}/fn/${user.namespace}/${name}`, { method: 'POST', body: '{}' });
  return response.ok ? response.json() : null;
}

async function until(what, check) {
  const deadline = Date.now() + 120_000;
  while (!(await check())) {
    assert.ok(Date.now() < deadline, `${what} in time`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

test('upload two versions from the console, roll back to the first and see what changed', async () => {
  const { context, page, dialogs, errors } = await openPage(browser);
  const base = `/v1/namespaces/${alice.namespace}/functions/versioned`;
  await alice.api('POST', `/v1/namespaces/${alice.namespace}/functions`, { name: 'versioned', runtime: 'python3.11' });
  // A function runs while an enabled trigger needs it.
  await alice.trigger({ name: 'versioned-http', type: 'http', function_ref: 'versioned' });
  await logIn(page, platform.url, alice);
  const functionPage = `${platform.url}/funcs/${alice.namespace}/function/versioned`;
  const handler = (n) => `def handle(event):\n    return {"version": ${n}}\n`;
  const upload = async (n) => {
    await page.goto(functionPage);
    await page.locator('#upload input[name="code"]').setInputFiles({
      name: `v${n}.zip`,
      mimeType: 'application/zip',
      buffer: await zipOf({ 'handler.py': handler(n), 'notes.txt': `<b>v${n}</b> notes\n` }),
    });
    await Promise.all([page.waitForURL(/\?follow=1#build$/), page.getByRole('button', { name: 'Upload' }).click()]);
    assert.match(await page.locator('.flash-ok').innerText(), /Uploaded a new version of versioned/);
    await until(`version ${n} serving`, async () => (await answer(alice, 'versioned'))?.version === n);
    await until(`version ${n} Ready`, async () => (await alice.api('GET', base)).phase === 'Ready');
  };
  await upload(1);
  await upload(2);

  const versions = await alice.api('GET', `${base}/versions`);
  assert.equal(versions.length, 2);
  const [v2, v1] = versions.map((v) => v.version);
  await page.goto(functionPage);
  const panel = page.locator('#versions');
  assert.equal(await panel.getByRole('button', { name: /Roll back to version/ }).count(), 1, 'only to the inactive one');
  await Promise.all([
    page.waitForURL(/#versions$/),
    panel.getByRole('button', { name: `Roll back to version ${v1}` }).click(),
  ]);
  assert.match(await page.locator('.flash-ok').innerText(), new RegExp(`back to version ${v1}`));
  await until('version 1 serving again', async () => (await answer(alice, 'versioned'))?.version === 1);
  assert.equal((await alice.api('GET', `${base}/versions`))[1].active, true, 'v1 is the active one');

  // The picker compares the two newest by default: from v1 to v2.
  await page.goto(functionPage);
  await Promise.all([page.waitForURL(/\/diff\?/), page.locator('#versions').getByRole('button', { name: 'Compare' }).click()]);
  assert.equal(new URL(page.url()).searchParams.get('from'), v1);
  assert.equal(new URL(page.url()).searchParams.get('to'), v2);
  assert.match(await page.locator('.diff-summary').innerText(), /2 changed, 0 added, 0 removed, 0 unchanged files; \+2 −2 lines/);
  const removed = await page.locator('.diff-del').allInnerTexts();
  const added = await page.locator('.diff-add').allInnerTexts();
  assert.ok(removed.some((line) => line.includes('return {"version": 1}')), removed.join('\n'));
  assert.ok(added.some((line) => line.includes('<b>v2</b> notes')), added.join('\n'));
  assert.equal(await page.locator('.diff-add b').count(), 0, 'code is text, not markup');
  await shot(page, 'diff.png');
  await Promise.all([page.waitForURL(/from=.*&to=/), page.getByRole('link', { name: 'Swap' }).click()]);
  assert.equal(new URL(page.url()).searchParams.get('from'), v2);
  assert.deepEqual(dialogs, []);
  assert.deepEqual(errors, []);
  await context.close();
});
