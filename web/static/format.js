// Small pure helpers: time parsing, durations, state labels and icons.

/** Parses an API time (epoch milliseconds or an RFC 3339 string) to ms, or null. */
export function toMillis(v) {
  if (v === undefined || v === null || v === '') return null;
  if (typeof v === 'number') return Number.isFinite(v) ? v : null;
  const ms = Date.parse(v);
  return Number.isNaN(ms) ? null : ms;
}

/**
 * Formats a non-negative duration in ms to the millisecond: "850 ms",
 * "12.345 s", then minutes and hours ("3m 05.120s", "2h 10m 05s").
 */
export function formatDuration(ms) {
  if (ms === null || ms === undefined || !Number.isFinite(ms) || ms < 0) return '';
  const whole = Math.round(ms);
  if (whole < 1000) return `${whole} ms`;
  const sec = (x) => (x / 1000).toFixed(3);
  if (whole < 60000) return `${sec(whole)} s`;
  const m = Math.floor(whole / 60000);
  const rest = whole - m * 60000;
  if (m < 60) return `${m}m ${sec(rest).padStart(6, '0')}s`;
  const h = Math.floor(m / 60);
  if (h < 24) return `${h}h ${String(m % 60).padStart(2, '0')}m ${String(Math.floor(rest / 1000)).padStart(2, '0')}s`;
  return `${Math.floor(h / 24)}d ${h % 24}h ${String(m % 60).padStart(2, '0')}m`;
}

/**
 * Formats a time as a local clock ("09:28:57"), with the date when day is
 * set and milliseconds when millis is set: just enough to tell apart
 * sessions with the same name.
 */
export function formatClock(ms, { day = false, millis = false } = {}) {
  const d = new Date(ms);
  const pad = (n, w = 2) => String(n).padStart(w, '0');
  const clock = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}${millis ? `.${pad(d.getMilliseconds(), 3)}` : ''}`;
  return day ? `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${clock}` : clock;
}

/**
 * Formats a token count, a whole number, with thousands separators
 * ("12,345"). Not with Intl.NumberFormat or toLocaleString: the first of
 * either in a page initialises the browser's ICU data, 30–70 ms of a fresh
 * tab's main thread before its first frame (bench/README.md).
 */
export function formatTokens(n) {
  return String(Math.round(Number(n || 0))).replace(/\B(?=(\d{3})+(?!\d))/g, ',');
}

/** Says a pair of token counts in words ("1,200 in / 300 out tokens"). */
export function formatUsage(input, output) {
  return `${formatTokens(input)} in / ${formatTokens(output)} out tokens`;
}

/** The first few words of a text, ending "…" when cut. */
export function firstWords(text, n = 6) {
  const words = String(text || '').trim().split(/\s+/).filter(Boolean);
  if (!words.length) return '';
  const head = words.slice(0, n).join(' ');
  const clipped = head.length > 48 ? `${head.slice(0, 47)}…` : head;
  return words.length > n && !clipped.endsWith('…') ? `${clipped}…` : clipped;
}

/** Returns the id shortened for display ("3f2a9c1e…"). */
export function shortId(id) {
  if (!id) return '';
  return id.length > 10 ? `${id.slice(0, 8)}…` : id;
}

// Every state is shown as an icon (a distinct shape) plus its word, never by
// colour alone. Stop reasons other than the known ones count as failures.
const STATES = {
  running: { icon: '◐', tone: 'run' },
  starting: { icon: '◌', tone: 'run' },
  completed: { icon: '✓', tone: 'ok' },
  aborted: { icon: '⊘', tone: 'warn' },
  inactive: { icon: '○', tone: 'idle' },
  disposed: { icon: '⌀', tone: 'idle' },
  root: { icon: '◆', tone: 'root' },
};

/** Returns {icon, tone} for a state word; unknown words are failures. */
export function stateStyle(state) {
  return STATES[state] || { icon: '✕', tone: 'bad' };
}

/** Joins the text blocks of a content array. */
export function blocksText(content) {
  if (!Array.isArray(content)) return typeof content === 'string' ? content : '';
  return content
    .filter((b) => b && b.type === 'text' && typeof b.text === 'string')
    .map((b) => b.text)
    .join('');
}

/** Wraps plain text as a content array of one text block. */
export function textBlocks(text) {
  return [{ type: 'text', text }];
}

/** Pretty-prints JSON text when it parses, else returns it unchanged. */
export function prettyJSON(v) {
  if (typeof v === 'string') {
    try {
      return JSON.stringify(JSON.parse(v), null, 2);
    } catch {
      return v;
    }
  }
  return JSON.stringify(v, null, 2);
}

/** Creates an element with attributes and children (strings become text). */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'text') el.textContent = v;
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

/** Times that change every second (durations, ages); the rest changes only with what they show. */
const TICKING = '.dur, .age';

/**
 * Makes items el's children, keeping in place each child whose markup is
 * one item's but for its ticking times (which it takes from the item), and
 * adding only the other items where they go. A redraw that changes little
 * then keeps the elements a reader is on: a link they are about to click,
 * whose press and release must land on one element, and the keyboard
 * focus. Markup leaves listeners out: a caller whose listeners would act
 * on something else replaces el's children instead.
 * @param {HTMLElement} el
 * @param {HTMLElement[]} items
 */
export function morph(el, items) {
  const spare = [...el.children];
  const shapes = spare.map(shapeOf);
  const next = items.map((item) => {
    const i = shapes.indexOf(shapeOf(item));
    if (i < 0) return item;
    const [old] = spare.splice(i, 1);
    shapes.splice(i, 1);
    const now = item.querySelectorAll(TICKING);
    old.querySelectorAll(TICKING).forEach((t, k) => {
      if (t.textContent !== now[k].textContent) t.textContent = now[k].textContent;
    });
    return old;
  });
  for (const old of spare) old.remove();
  next.forEach((child, i) => {
    if (el.children[i] !== child) el.insertBefore(child, el.children[i] ?? null);
  });
}

/** The markup of node with its ticking times left out. */
function shapeOf(node) {
  const copy = node.cloneNode(true);
  copy.querySelectorAll(TICKING).forEach((t) => { t.textContent = ''; });
  return copy.outerHTML;
}

/** Says how long ago something was, in the largest whole unit ("now", "42s ago", "5m ago", "3h ago", "2d ago"). */
export function formatAge(ms) {
  if (!Number.isFinite(ms)) return '';
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 5) return 'now';
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

/** Formats a token count briefly ("950", "12.3k", "4.1M"). */
export function formatTokensShort(n) {
  const v = Number(n || 0);
  if (v < 1000) return String(v);
  if (v < 1e6) return `${(v / 1000).toFixed(v < 1e4 ? 1 : 0)}k`;
  return `${(v / 1e6).toFixed(1)}M`;
}
