// The HTTP API client (api/openapi.yaml). Every failure becomes an ApiError carrying
// the problem+json `code`, a readable detail and per-field messages, so the
// page can say "NO_PROVIDER — provider "x" is not registered" next to the
// field or action that caused it.

/** An API failure: an RFC 9457 problem, or a network failure (code NETWORK). */
export class ApiError extends Error {
  constructor({ status, code, title, detail, fields, retryAfter }) {
    super(`${code} — ${detail || title || 'request failed'}`);
    this.status = status;
    this.code = code;
    this.title = title || '';
    this.detail = detail || title || 'request failed';
    /** @type {Map<string,string>} field path → message */
    this.fields = fields || new Map();
    this.retryAfter = retryAfter || '';
  }
}

/** Calls the API and returns the decoded JSON body (null for 204). */
export async function api(method, path, body) {
  const headers = { Accept: 'application/json, application/problem+json' };
  const init = { method, headers };
  // A write signed in by cookie must say application/json even without a
  // body (docs/architecture.md §10: a cross-site form cannot send it).
  if (method !== 'GET') headers['Content-Type'] = 'application/json';
  if (body !== undefined) init.body = JSON.stringify(body);
  return answer(fetch(path, init));
}

/**
 * Decodes the answer to a request already sent (fetch's promise) as api
 * does: the JSON body, or an ApiError.
 */
export async function answer(sent) {
  let res;
  try {
    res = await sent;
  } catch {
    throw new ApiError({ status: 0, code: 'NETWORK', detail: 'the service could not be reached' });
  }
  const text = await res.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }
  if (!res.ok) throw problemError(res, data, text);
  return data;
}

function problemError(res, p, text) {
  const obj = p && typeof p === 'object' ? p : {};
  return new ApiError({
    status: res.status,
    code: typeof obj.code === 'string' && obj.code ? obj.code : `HTTP_${res.status}`,
    title: obj.title,
    detail: obj.detail || obj.title || text.trim().slice(0, 300) || res.statusText,
    fields: problemFields(obj),
    retryAfter: res.headers.get('Retry-After') || '',
  });
}

// problemFields reads per-field messages from the shapes problem+json
// producers use: {errors:[{field|name|pointer, message|detail}]},
// {fields:{path: message}} or {invalidParams:[{name, reason}]}.
function problemFields(p) {
  const out = new Map();
  const list = Array.isArray(p.errors) ? p.errors : Array.isArray(p.invalidParams) ? p.invalidParams : null;
  if (list) {
    for (const e of list) {
      if (!e || typeof e !== 'object') continue;
      const path = normalizePath(e.field ?? e.name ?? e.pointer ?? e.path ?? '');
      const msg = e.message ?? e.detail ?? e.reason ?? '';
      if (msg) out.set(path, String(msg));
    }
  }
  for (const src of [p.fields, !list && p.errors && typeof p.errors === 'object' ? p.errors : null]) {
    if (!src || typeof src !== 'object') continue;
    for (const [k, v] of Object.entries(src)) out.set(normalizePath(k), String(v));
  }
  return out;
}

function normalizePath(path) {
  return String(path).replace(/^#?\//, '').replaceAll('/', '.');
}

/** Says an error in words with its code, plus Retry-After when given. */
export function describeError(err) {
  if (err instanceof ApiError) {
    const retry = err.retryAfter ? ` (retry after ${err.retryAfter}s)` : '';
    return `${err.code} — ${err.detail}${retry}`;
  }
  return `INTERNAL — ${err && err.message ? err.message : String(err)}`;
}

/**
 * Follows cursor pagination of a list endpoint and returns every item;
 * pathFor(cursor) builds a page's path (cursor undefined for the first).
 */
export async function listAll(pathFor, key, maxPages = 50) {
  const items = [];
  let cursor;
  for (let i = 0; i < maxPages; i++) {
    const page = await api('GET', pathFor(cursor));
    const got = (page && page[key]) || [];
    items.push(...got);
    cursor = (page && page.nextCursor) || '';
    if (!cursor || got.length === 0) break;
  }
  return items;
}
