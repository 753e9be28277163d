// The lifecycle from the console with JavaScript off, at 390 px: create with a zip,
// watch it build, delete it through the confirmation step.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { Platform, zipOf } from '../lib/platform.mjs';
import { launchChromium, openPage, logIn } from '../lib/browser.mjs';

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
