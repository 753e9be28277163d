// A real `sless up` for the browser tests: its own data dir and port, real runtime
// processes, fixtures created through the REST API like a user would.

import { spawn, spawnSync, execFileSync } from 'node:child_process';
import { mkdtemp, mkdir, readFile, writeFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const repoRoot = path.resolve(here, '..', '..');
// run.sh sets it to the binary cargo built, wherever the target dir is.
const sless = process.env.SLESS_BIN ?? path.join(repoRoot, 'target', 'debug', 'sless');

export class Platform {
  static async start() {
    const dataDir = await mkdtemp(path.join(tmpdir(), 'sless-e2e-'));
    const child = spawn(sless, ['up', '--listen', '127.0.0.1:0', '--data-dir', dataDir], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, SLESS_LOG: process.env.SLESS_LOG ?? 'warn' },
    });
    const log = [];
    child.stderr.on('data', (chunk) => log.push(chunk.toString()));
    const url = await new Promise((resolve, reject) => {
      let out = '';
      const timer = setTimeout(() => reject(new Error(`sless up printed no URL in 60 s:\n${out}${log.join('')}`)), 60_000);
      child.stdout.on('data', (chunk) => {
        out += chunk.toString();
        const match = out.match(/sless is up on (http:\/\/\S+)/);
        if (match) {
          clearTimeout(timer);
          resolve(match[1]);
        }
      });
      child.on('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`sless up exited with ${code}:\n${out}${log.join('')}`));
      });
      // E.g. ENOENT: fail now with the cause, not after the URL wait.
      child.on('error', (error) => {
        clearTimeout(timer);
        reject(new Error(`cannot start ${sless} (set SLESS_BIN or run end2end/run.sh): ${error.message}`));
      });
    });
    return new Platform(child, url, dataDir, log);
  }

  constructor(child, url, dataDir, log) {
    this.child = child;
    this.url = url;
    this.dataDir = dataDir;
    this.log = log;
  }

  async stop() {
    if (this.child.exitCode === null) {
      const exited = new Promise((resolve) => this.child.once('exit', resolve));
      this.child.kill('SIGTERM');
      await exited;
    }
    await rm(this.dataDir, { recursive: true, force: true });
  }

  /** A user: a token signed with the data dir's key, and the namespace derived from it. */
  user(sub) {
    const run = spawnSync(sless, ['token', '--sub', sub, '--data-dir', this.dataDir], { encoding: 'utf8' });
    const namespace = run.stderr.match(/token for namespace ([a-z0-9-]+),/)?.[1];
    if (run.status !== 0 || !namespace) throw new Error(`sless token failed: ${run.stderr}`);
    return new User(this, run.stdout.trim(), namespace);
  }
}

export class User {
  constructor(platform, token, namespace) {
    this.platform = platform;
    this.token = token;
    this.namespace = namespace;
  }

  async api(method, route, body) {
    const headers = { authorization: `Bearer ${this.token}` };
    let payload = body;
    if (body !== undefined && !(body instanceof FormData)) {
      headers['content-type'] = 'application/json';
      payload = JSON.stringify(body);
    }
    const response = await fetch(`${this.platform.url}${route}`, { method, headers, body: payload });
    const text = await response.text();
    if (!response.ok) throw new Error(`${method} ${route} → ${response.status}: ${text}`);
    return text ? JSON.parse(text) : null;
  }

  /**
   * Creates a Function ("functions") or Service ("services"), uploads `files` as a zip
   * and waits for the phase `want` (Ready unless said otherwise).
   */
  async deploy(kind, spec, files, want = 'Ready') {
    const base = `/v1/namespaces/${this.namespace}/${kind}`;
    await this.api('POST', base, spec);
    const form = new FormData();
    form.append('code', new Blob([await zipOf(files)]), 'code.zip');
    // One upload at a time per user: a namespace's uploads in flight are limited.
    const upload = (this.uploading ?? Promise.resolve()).then(() =>
      this.api('POST', `${base}/${spec.name}/upload`, form));
    this.uploading = upload.catch(() => {});
    await upload;
    const deadline = Date.now() + 120_000;
    for (;;) {
      const current = await this.api('GET', `${base}/${spec.name}`);
      if (current.phase === want) return current;
      if (current.phase === 'Failed' && want !== 'Failed') {
        throw new Error(`${spec.name} failed: ${current.message}`);
      }
      if (Date.now() > deadline) throw new Error(`${spec.name} stuck in ${current.phase}`);
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }

  trigger(spec) {
    return this.api('POST', `/v1/namespaces/${this.namespace}/triggers`, spec);
  }
}

/** Zips files with Python's zipfile module (always present: the Python runtime needs it). */
export async function zipOf(files) {
  const dir = await mkdtemp(path.join(tmpdir(), 'sless-e2e-zip-'));
  try {
    const names = [];
    for (const [name, content] of Object.entries(files)) {
      await mkdir(path.dirname(path.join(dir, 'src', name)), { recursive: true });
      await writeFile(path.join(dir, 'src', name), content);
      names.push(name);
    }
    const script =
      'import sys, zipfile\n' +
      'with zipfile.ZipFile(sys.argv[1], "w") as z:\n' +
      '    for name in sys.argv[2:]:\n' +
      '        z.write(name, name)\n';
    execFileSync('python3', ['-c', script, path.join(dir, 'code.zip'), ...names], {
      cwd: path.join(dir, 'src'),
    });
    return await readFile(path.join(dir, 'code.zip'));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
