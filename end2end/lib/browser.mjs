// Debian's Chromium driven by playwright-core (no downloaded browser builds here).

import { mkdir, copyFile } from 'node:fs/promises';
import path from 'node:path';

import { chromium } from 'playwright-core';

import { repoRoot } from './platform.mjs';

export function launchChromium() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      // Containers often give /dev/shm only 64 MB.
      '--disable-dev-shm-usage',
    ],
  });
}

/**
 * A fresh browser context with every dialog recorded (and dismissed): a test that
 * renders hostile input asserts the list stays empty.
 */
export async function openPage(browser, options = {}) {
  const context = await browser.newContext(options);
  const page = await context.newPage();
  const dialogs = [];
  page.on('dialog', async (dialog) => {
    dialogs.push(dialog.message());
    await dialog.dismiss();
  });
  const errors = [];
  page.on('pageerror', (error) => errors.push(error.message));
  return { context, page, dialogs, errors };
}

/** Logs in through the form, as a person pasting a token would. */
export async function logIn(page, baseUrl, user) {
  await page.goto(`${baseUrl}/funcs/${user.namespace}`);
  await page.locator('input[name="token"]').fill(user.token);
  await Promise.all([page.waitForURL(`**/funcs/${user.namespace}`), page.getByRole('button', { name: 'Log in' }).click()]);
}

/** Keeps a screenshot in test-results/, and in docs/ with SLESS_UPDATE_SCREENSHOT=1. */
export async function shot(page, name) {
  const out = path.join(repoRoot, 'end2end', 'test-results');
  await mkdir(out, { recursive: true });
  const file = path.join(out, name);
  await page.screenshot({ path: file, fullPage: true });
  if (process.env.SLESS_UPDATE_SCREENSHOT === '1') {
    await copyFile(file, path.join(repoRoot, 'docs', name));
  }
}
