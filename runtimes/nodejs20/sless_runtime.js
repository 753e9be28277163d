'use strict';
// sless runtime for nodejs20 (runtime version v0.1.0).
// Wraps the user's `handle(event)` in a small HTTP server, or calls it once in
// job mode (SLESS_MODE=job). Stdlib only. The contract is in runtimes/README.md.

const http = require('node:http');
const { AsyncLocalStorage } = require('node:async_hooks');
const fs = require('node:fs');
const path = require('node:path');
const { pathToFileURL } = require('node:url');

// Exit codes shared by all runtimes.
const EXIT_HANDLER_ERROR = 1;
const EXIT_BAD_EVENT = 2;
const EXIT_LOAD_ERROR = 3;

// Longer than any sane proxy pool idle timeout, so the server never closes a
// pooled connection the proxy is about to reuse (Node's default is 5 s).
const IDLE_TIMEOUT_MS = 620 * 1000;
const SHUTDOWN_GRACE_MS = 10 * 1000;

// Response headers computed by the runtime itself; a handler's values are ignored.
const MANAGED_HEADERS = new Set(['content-length', 'transfer-encoding', 'connection']);
const TOKEN_RE = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

class ResponseError extends Error {}
ResponseError.prototype.name = 'ResponseError';

function errorMessage(err) {
  if (err instanceof Error) {
    return err.message ? `${err.name}: ${err.message}` : err.name;
  }
  return String(err);
}

// JSON.stringify returns undefined for undefined/functions: that is `null`.
function toJson(value) {
  const text = JSON.stringify(value);
  return text === undefined ? 'null' : text;
}

function wrapEvent(value) {
  // The handler always gets a plain object.
  return value !== null && typeof value === 'object' && !Array.isArray(value) ? value : { body: value };
}

// Tells the runner the server listens (a byte on SLESS_READY_FD), so it need not poll.
function announceReady() {
  const fd = process.env.SLESS_READY_FD || '';
  delete process.env.SLESS_READY_FD;
  if (!/^\d+$/.test(fd)) return;
  try {
    fs.writeSync(Number(fd), '1');
    fs.closeSync(Number(fd)); // the handler's own child processes must not hold it
  } catch {
    // Not a pipe we were given: the runner polls instead.
  }
}

// ---------------------------------------------------------------- call logs
// Each line a call prints goes out as "[<request id>] line", lines printed outside a
// call as "[-] line": sless shows a call's lines with its record (runtimes/README.md).

const OUTSIDE_CALL = '[-] ';
const REQUEST_ID_RE = /^[A-Za-z0-9._-]{1,64}$/;
// An unended line longer than this goes out cut, its rest dropped (sless keeps 16 KiB
// of a line), so an endless line holds no memory.
const MAX_PENDING_CHARS = 16384;
// The tag of the call whose code is running.
const currentCall = new AsyncLocalStorage();
const callLogEnders = [];

function callTag(requestId) {
  return typeof requestId === 'string' && REQUEST_ID_RE.test(requestId) ? `[${requestId}] ` : OUTSIDE_CALL;
}

// Every line written to `stream` goes out whole behind the tag of the call that wrote it.
function tagCallOutput(stream) {
  const write = stream.write.bind(stream);
  const pending = new Map(); // tag -> the start of a line not ended yet
  const cut = new Set(); // tags whose current line went out cut: its rest is dropped
  stream.write = (chunk, encoding, callback) => {
    if (typeof encoding === 'function') {
      callback = encoding;
      encoding = undefined;
    }
    const tag = currentCall.getStore() || OUTSIDE_CALL;
    let text = typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString(encoding === 'buffer' || !encoding ? 'utf8' : encoding);
    if (cut.has(tag)) {
      const end = text.indexOf('\n');
      if (end < 0) text = '';
      else {
        cut.delete(tag);
        text = text.slice(end + 1);
      }
    }
    const lines = ((pending.get(tag) || '') + text).split('\n');
    let rest = lines.pop();
    pending.delete(tag);
    if (rest.length > MAX_PENDING_CHARS) {
      lines.push(rest.slice(0, MAX_PENDING_CHARS));
      cut.add(tag);
      rest = '';
    }
    if (rest) pending.set(tag, rest);
    if (lines.length) return write(lines.map((line) => `${tag}${line}\n`).join(''), callback);
    if (callback) process.nextTick(callback);
    return true;
  };
  // The call is over: its unended line goes out.
  callLogEnders.push((tag) => {
    cut.delete(tag);
    const rest = pending.get(tag);
    pending.delete(tag);
    if (rest) write(`${tag}${rest}\n`);
  });
}

function endCallLogs(tag) {
  for (const end of callLogEnders) end(tag);
}

// ------------------------------------------------------------- handler load

// `require` finds only the function's own node_modules, as in the image, where only
// its package.json dependencies are installed: no NODE_PATH, ~/.node_modules,
// ~/.node_libraries, <prefix>/lib/node, nor node_modules above the function folder.
function confineModuleLookup(fnDir) {
  const Module = require('node:module');
  const inside = (p) => p === fnDir || p.startsWith(fnDir + path.sep);
  const lookupPaths = Module._resolveLookupPaths;
  Module._resolveLookupPaths = function (request, parent) {
    const paths = lookupPaths.call(this, request, parent);
    // Relative requests look beside their parent module, wherever it is.
    if (!Array.isArray(paths) || request.startsWith('.')) return paths;
    return paths.filter(inside);
  };
}

async function loadHandler() {
  const fnDir = path.resolve(process.env.SLESS_FUNCTION_DIR || process.cwd());
  const entry = process.env.SLESS_ENTRYPOINT || 'handler.handle';
  const dot = entry.lastIndexOf('.');
  if (dot <= 0 || dot === entry.length - 1) {
    throw new Error(`SLESS_ENTRYPOINT must be module.function, got ${JSON.stringify(entry)}`);
  }
  const moduleName = entry.slice(0, dot);
  const funcName = entry.slice(dot + 1);
  if (!fs.statSync(fnDir, { throwIfNoEntry: false })?.isDirectory()) {
    throw new Error(`function directory ${fnDir} does not exist`);
  }
  // Relative file access in the handler resolves against its own directory.
  process.chdir(fnDir);
  confineModuleLookup(fnDir);

  // `handler` means handler.js (or .cjs/.mjs, or handler/index.js); requiring
  // it by absolute path makes node_modules in fnDir resolve as usual.
  const base = path.join(fnDir, moduleName);
  let mod;
  let resolved = null;
  try {
    resolved = require.resolve(base); // .js, .json, .node, <dir>/index.js
  } catch (err) {
    if (err.code !== 'MODULE_NOT_FOUND') throw err;
  }
  for (const ext of ['.cjs', '.mjs']) {
    if (resolved === null && fs.existsSync(base + ext)) resolved = base + ext;
  }
  if (resolved === null) throw new Error(`cannot find module ${moduleName} (${base}.js) in ${fnDir}`);
  if (resolved.endsWith('.mjs')) {
    mod = await import(pathToFileURL(resolved).href);
  } else {
    try {
      mod = require(resolved);
    } catch (err) {
      // "type": "module" in package.json: handler.js is an ES module.
      if (err.code !== 'ERR_REQUIRE_ESM') throw err;
      mod = await import(pathToFileURL(resolved).href);
    }
  }
  let func = mod[funcName];
  if (func === undefined && mod.default && typeof mod.default === 'object') func = mod.default[funcName];
  if (func === undefined) throw new Error(`module ${moduleName} does not export ${funcName}`);
  if (typeof func !== 'function') throw new Error(`${entry} is not a function`);
  return func;
}

// --------------------------------------------------------------- responses

function headerValue(name, value) {
  const text = typeof value === 'string' ? value : toJson(value);
  if (/[\r\n\0]/.test(text)) throw new ResponseError(`invalid value for response header ${JSON.stringify(name)}`);
  return text;
}

// Returns {status, headers: [[name, value]], body: Buffer} for a handler result.
function buildResponse(result) {
  const isObject = result !== null && typeof result === 'object' && !Array.isArray(result);
  const statusCode = isObject ? result.statusCode : undefined;
  if (typeof statusCode !== 'number' || !Number.isInteger(statusCode)) {
    return { status: 200, headers: [['Content-Type', 'application/json']], body: Buffer.from(toJson(result)) };
  }
  if (statusCode < 200 || statusCode > 599) {
    throw new ResponseError(`invalid statusCode ${statusCode}: must be 200-599`);
  }
  const rawHeaders = result.headers == null ? {} : result.headers;
  if (typeof rawHeaders !== 'object' || Array.isArray(rawHeaders)) throw new ResponseError('headers must be an object');
  const headers = [];
  for (const [name, value] of Object.entries(rawHeaders)) {
    if (!TOKEN_RE.test(name)) throw new ResponseError(`invalid response header name ${JSON.stringify(name)}`);
    if (MANAGED_HEADERS.has(name.toLowerCase()) || value == null) continue;
    for (const v of Array.isArray(value) ? value : [value]) headers.push([name, headerValue(name, v)]);
  }
  const hasType = headers.some(([n]) => n.toLowerCase() === 'content-type');

  const body = result.body;
  let data;
  let defaultType;
  if (body == null) {
    data = Buffer.alloc(0);
  } else if (typeof body === 'string') {
    data = Buffer.from(body);
    defaultType = 'text/plain; charset=utf-8';
  } else if (body instanceof Uint8Array) {
    data = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
    defaultType = 'application/octet-stream';
  } else {
    data = Buffer.from(toJson(body));
    defaultType = 'application/json';
  }
  if (data.length > 0 && !hasType) headers.push(['Content-Type', defaultType]);
  return { status: statusCode, headers, body: data };
}

function send(req, res, { status, headers, body }) {
  const noBody = status === 204 || status === 304;
  res.statusCode = status;
  // Group repeated names (e.g. Set-Cookie) into one setHeader call.
  const grouped = new Map();
  for (const [name, value] of headers) {
    const key = name.toLowerCase();
    if (!grouped.has(key)) grouped.set(key, { name, values: [] });
    grouped.get(key).values.push(value);
  }
  for (const { name, values } of grouped.values()) res.setHeader(name, values.length === 1 ? values[0] : values);
  if (!noBody) res.setHeader('Content-Length', body.length);
  // Node drops the body itself for HEAD.
  res.end(noBody ? undefined : body);
}

function sendJson(req, res, status, value) {
  send(req, res, { status, headers: [['Content-Type', 'application/json']], body: Buffer.from(toJson(value)) });
}

// ----------------------------------------------------------------- HTTP mode

function splitTarget(target) {
  if (target.startsWith('/')) {
    const q = target.indexOf('?');
    const p = q < 0 ? target : target.slice(0, q);
    const hash = p.indexOf('#');
    return [hash < 0 ? p : p.slice(0, hash), q < 0 ? '' : target.slice(q + 1)];
  }
  try {
    const u = new URL(target); // absolute-form request target
    return [u.pathname || '/', u.search.replace(/^\?/, '')];
  } catch {
    return [target, ''];
  }
}

function buildEvent(req, body, reqPath, rawQuery) {
  const text = body.toString('utf8');
  let event;
  if (text.trim() === '') {
    event = {};
  } else {
    try {
      event = wrapEvent(JSON.parse(text));
    } catch {
      event = { body: text };
    }
  }
  const headers = {};
  const raw = req.rawHeaders;
  for (let i = 0; i < raw.length; i += 2) {
    const key = raw[i].toLowerCase();
    headers[key] = key in headers ? `${headers[key]}, ${raw[i + 1]}` : raw[i + 1];
  }
  const query = {};
  for (const [k, v] of new URLSearchParams(rawQuery)) if (!(k in query)) query[k] = v;
  event._http = { method: req.method, path: reqPath || '/', query, raw_query: rawQuery, headers };
  const amqp = triggerProperties(headers['x-sless-amqp']);
  if (amqp) event._amqp = amqp;
  if (headers['x-request-id']) event._request_id = headers['x-request-id'];
  return event;
}

// The message properties an event trigger sends (base64 of JSON), or null.
function triggerProperties(header) {
  if (!header) return null;
  try {
    const value = JSON.parse(Buffer.from(header, 'base64').toString('utf8'));
    return value && typeof value === 'object' && !Array.isArray(value) ? value : null;
  } catch {
    return null;
  }
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
    // Never call the handler with a truncated body.
    req.on('close', () => {
      if (!req.complete) reject(new Error('client closed the connection mid-body'));
    });
  });
}

// Listens at once (a standby holds its port), answers once `loaded` gives the handler.
function serve(loaded, standby) {
  const host = process.env.SLESS_HOST || '0.0.0.0';
  const port = Number(process.env.PORT || 8080);
  let active = 0;
  let func = null;
  loaded.then((f) => {
    func = f;
  }, () => {});

  const server = http.createServer(async (req, res) => {
    const [reqPath, rawQuery] = splitTarget(req.url);
    if (func === null) await loaded; // healthy means loaded
    if (reqPath === '/health' && (req.method === 'GET' || req.method === 'HEAD')) {
      sendJson(req, res, 200, { status: 'ok' });
      return;
    }
    active++;
    const tag = callTag(req.headers['x-request-id']);
    try {
      let body;
      try {
        body = await readBody(req);
      } catch {
        return; // client went away
      }
      const response = await currentCall.run(tag, async () => {
        try {
          return buildResponse(await func(buildEvent(req, body, reqPath, rawQuery)));
        } catch (err) {
          // The server keeps serving.
          console.error(err instanceof Error && err.stack ? err.stack : err);
          return { status: 500, headers: [['Content-Type', 'application/json']], body: Buffer.from(toJson({ error: errorMessage(err) })) };
        }
      });
      endCallLogs(tag);
      if (!res.headersSent && !res.destroyed) send(req, res, response);
    } finally {
      active--;
    }
  });
  server.keepAliveTimeout = IDLE_TIMEOUT_MS;
  server.headersTimeout = IDLE_TIMEOUT_MS + 1000;
  // The platform's proxy enforces the function timeout; no second limit here.
  server.requestTimeout = 0;

  // The listening socket sless made for this instance, else PORT.
  const listenFd = process.env.SLESS_LISTEN_FD || '';
  delete process.env.SLESS_LISTEN_FD;
  const where = /^\d+$/.test(listenFd) ? `descriptor ${listenFd}` : `${host}:${port}`;
  server.on('error', (err) => {
    console.error(`sless-runtime: cannot listen on ${where}: ${err.message}`);
    process.exit(1);
  });
  // A standby's byte says it has loaded and listens, before it is bound.
  const listening = standby ? announceReady : () => loaded.then(announceReady, () => {});
  if (/^\d+$/.test(listenFd)) server.listen({ fd: Number(listenFd) }, listening);
  else server.listen(port, host, listening);

  // As PID 1 in a container SIGTERM has no default action: stop accepting,
  // let in-flight requests finish briefly, then exit.
  const stop = () => {
    server.close();
    server.closeIdleConnections();
    const deadline = Date.now() + SHUTDOWN_GRACE_MS;
    const timer = setInterval(() => {
      if (active === 0 || Date.now() > deadline) process.exit(0);
    }, 50);
    timer.unref();
    if (active === 0) process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

// ------------------------------------------------------------------ job mode

function runJob() {
  // Remember whether stdout ended a line, so the result gets a line of its own.
  let atLineStart = true;
  const write = process.stdout.write.bind(process.stdout);
  process.stdout.write = (chunk, ...rest) => {
    const s = typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8');
    if (s.length > 0) atLineStart = s.endsWith('\n');
    return write(chunk, ...rest);
  };
  // Exit right after the result line even if the handler left timers or
  // sockets open; the write callback makes sure the line is out first.
  const finish = (value, code) => {
    write((atLineStart ? '' : '\n') + toJson(value) + '\n', () => process.exit(code));
  };

  const raw = process.env.SLESS_EVENT_JSON || '{}';
  let event;
  try {
    event = raw.trim() === '' ? {} : wrapEvent(JSON.parse(raw));
  } catch (err) {
    const msg = `invalid SLESS_EVENT_JSON: ${err.message}`;
    console.error(`sless-runtime: ${msg}`);
    finish({ error: msg }, EXIT_BAD_EVENT);
    return;
  }
  loadHandler().then(
    async (func) => {
      let result;
      try {
        result = await func(event);
        toJson(result); // not encodable (BigInt, cycles) counts as a handler error
      } catch (err) {
        console.error(err instanceof Error && err.stack ? err.stack : err);
        finish({ error: errorMessage(err) }, EXIT_HANDLER_ERROR);
        return;
      }
      finish(result, 0);
    },
    (err) => {
      console.error(err instanceof Error && err.stack ? err.stack : err);
      const msg = `cannot load handler: ${errorMessage(err)}`;
      console.error(`sless-runtime: ${msg}`);
      finish({ error: msg }, EXIT_LOAD_ERROR);
    },
  );
}

function main() {
  // A stray rejected promise in user code must not take the server down.
  process.on('unhandledRejection', (reason) => {
    console.error('sless-runtime: unhandled promise rejection:', reason instanceof Error && reason.stack ? reason.stack : reason);
  });
  if ((process.env.SLESS_MODE || 'http') === 'job') {
    runJob();
    return;
  }
  tagCallOutput(process.stdout);
  tagCallOutput(process.stderr);
  const standby = process.env.SLESS_STANDBY === '1';
  const loaded = readFunctionDir().then(loadHandler);
  loaded.catch((err) => {
    console.error(err instanceof Error && err.stack ? err.stack : err);
    console.error(`sless-runtime: cannot load handler: ${errorMessage(err)}`);
    process.exit(EXIT_LOAD_ERROR);
  });
  serve(loaded, standby);
}

// A pre-started runtime (SLESS_STANDBY=1) has loaded and holds its port; when a
// function needs it, the runner sends one JSON line on stdin, the function's directory
// and its env ({"dir": ..., "env": {...}}), and closes it. Its ready byte, once it
// listens, says it has loaded (the runner binds a loaded standby first); bound, it
// serves unannounced.
function readFunctionDir() {
  if (process.env.SLESS_STANDBY !== '1') return Promise.resolve();
  delete process.env.SLESS_STANDBY;
  return new Promise((resolve) => {
    let text = '';
    process.stdin.setEncoding('utf8');
    process.stdin.on('data', (chunk) => {
      text += chunk;
    });
    process.stdin.on('end', () => {
      const line = text.split('\n')[0];
      if (!line.trim()) process.exit(0); // let go unused
      let bound;
      try {
        bound = JSON.parse(line);
        if (typeof bound.dir !== 'string' || typeof bound.env !== 'object' || !bound.env) {
          throw new Error('expected {"dir": string, "env": object}');
        }
      } catch (err) {
        console.error(`sless-runtime: bad standby message on stdin: ${errorMessage(err)}`);
        process.exit(EXIT_LOAD_ERROR);
      }
      Object.assign(process.env, bound.env);
      process.env.SLESS_FUNCTION_DIR = bound.dir;
      resolve();
    });
  });
}

main();
