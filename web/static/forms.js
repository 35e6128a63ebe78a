// Form helpers: client-side checks shown next to the field before submit,
// and server field errors (problem+json) mapped back onto the same fields.

import { ApiError, describeError } from './api.js';

/**
 * Checks an output schema text: empty is fine (absent); otherwise it must
 * parse as JSON and be an object-rooted schema. Returns {value, error}.
 */
export function parseSchema(text) {
  const src = text.trim();
  if (!src) return { value: undefined, error: '' };
  let v;
  try {
    v = JSON.parse(src);
  } catch (e) {
    return { value: undefined, error: `Not valid JSON: ${jsonErrorAt(src, e)}` };
  }
  if (!v || typeof v !== 'object' || Array.isArray(v)) return { value: undefined, error: 'The schema must be a JSON object.' };
  if (v.type !== undefined && v.type !== 'object') return { value: undefined, error: 'The schema root must have "type": "object".' };
  return { value: v, error: '' };
}

// jsonErrorAt turns the engine's message into one with line and column when
// it names a position.
function jsonErrorAt(src, e) {
  const msg = String(e && e.message ? e.message : e);
  const m = /position (\d+)/.exec(msg);
  if (!m) return msg;
  const pos = Number(m[1]);
  const before = src.slice(0, pos);
  const line = before.split('\n').length;
  const col = pos - before.lastIndexOf('\n');
  return `${msg.replace(/ \(line \d+ column \d+\)/, '')} (line ${line}, column ${col})`;
}

/** Checks a max depth text: empty is absent, else a non-negative safe integer. */
export function parseMaxDepth(text) {
  const src = text.trim();
  if (!src) return { value: undefined, error: '' };
  const n = Number(src);
  if (!Number.isSafeInteger(n) || n < 0 || Object.is(n, -0)) return { value: undefined, error: 'Max depth must be a whole number, 0 or more.' };
  return { value: n, error: '' };
}

/** Splits a comma-separated tool list; empty text is an absent list. */
export function parseList(text) {
  const items = text.split(',').map((s) => s.trim()).filter(Boolean);
  return items.length ? items : undefined;
}

/** Shows (or clears, with '') a message under a field and marks it invalid. */
export function setFieldError(form, field, msg) {
  const el = form.querySelector(`.field-error[data-field="${field}"]`);
  if (!el) return false;
  el.textContent = msg;
  const input = el.id ? form.querySelector(`[aria-describedby~="${el.id}"]`) : null;
  if (input) {
    if (msg) input.setAttribute('aria-invalid', 'true');
    else input.removeAttribute('aria-invalid');
  }
  return true;
}

/** Clears every field error of a form. */
export function clearErrors(form) {
  for (const el of form.querySelectorAll('.field-error')) el.textContent = '';
  for (const el of form.querySelectorAll('[aria-invalid]')) el.removeAttribute('aria-invalid');
}

/**
 * Shows an API error on a form: field messages under their fields (matched
 * by the first segment of the path, e.g. "outputSchema.properties.a"), the
 * code and detail in the form's error line. Focuses the first bad field.
 */
export function showApiError(form, errorLine, err) {
  errorLine.textContent = describeError(err);
  if (!(err instanceof ApiError)) return;
  const byField = new Map();
  for (const [path, msg] of err.fields) {
    const field = path.split(/[.[]/)[0];
    const sub = path.slice(field.length).replace(/^\./, '');
    const text = sub && !msg.includes(sub) ? `${msg} (${path})` : msg;
    byField.set(field, [...(byField.get(field) || []), text]);
  }
  let first = null;
  for (const [field, msgs] of byField) {
    if (setFieldError(form, field, msgs.join('; ')) && !first) first = form.querySelector(`.field-error[data-field="${field}"]`);
  }
  if (first && first.id) form.querySelector(`[aria-describedby~="${first.id}"]`)?.focus();
}
