// The trace of one delegation tree, read from its session logs: one time
// axis, one row per span, nested as the work was — a root's turns, their
// steps, each step's model call and tool calls, the child runs a tool call
// started and, inside those, the child's own turns and steps. Spans carry
// the OpenTelemetry GenAI names the service's own traces use:
// `invoke_agent {provider}` for a run or activation, `chat {model}` for a model call, `execute_tool {name}` for a
// tool call; turns and steps are named as the log names them. Each row
// says its duration, tokens and status in words; names sit in a column of
// their own and axis ticks are spaced by the width, so no text overlaps.
// Clicking a span shows its inputs and outputs in the side panel.

import { blocksText, formatDuration, formatTokens, h, prettyJSON, stateStyle, toMillis } from './format.js';

/** Rows drawn at most; the rest is counted. */
const MAX_ROWS = 1500;
/** Least room between two axis ticks, in px. */
const TICK_PX = 110;

/**
 * Builds the span tree of root's delegation tree.
 * @param {import('./store.js').Store} store
 * @param {object} root a node
 * @returns {{spans: object[], t0: number, t1: number}}
 */
export function buildTrace(store, root) {
  const now = Date.now();
  const seen = new Set();
  const spans = sessionSpans(store, root, now, seen);
  let t0 = Infinity;
  let t1 = -Infinity;
  const walk = (list) => {
    for (const s of list) {
      if (s.start !== null) t0 = Math.min(t0, s.start);
      if (s.end !== null) t1 = Math.max(t1, s.end);
      walk(s.kids);
    }
  };
  walk(spans);
  if (t0 === Infinity) return { spans, t0: now, t1: now + 1 };
  return { spans, t0, t1: Math.max(t1, t0 + 1) };
}

// sessionSpans returns the spans of one session: for a child, one
// invoke_agent span per run holding the turns that ran in it; for a root,
// its turns. Child runs no tool call of the session started follow.
function sessionSpans(store, n, now, seen) {
  if (seen.has(n.id)) return [];
  seen.add(n.id);
  const evs = store.traces.get(n.id) || [];
  const turns = turnSpans(store, n, evs, now, seen);
  const runs = store.nodeRuns(n);
  let out;
  if (runs.length) {
    out = runs.map((r) => runSpan(store, n, r, now));
    for (const t of turns) {
      const owner = [...out].reverse().find((s) => s.start !== null && t.start !== null && s.start <= t.start + 5) || out[0];
      owner.kids.push(t);
    }
  } else {
    out = turns;
  }
  // Children no tool call claimed hang under the session's last span, or at its top level.
  const claimed = new Set();
  const mark = (list) => {
    for (const s of list) {
      if (s.kind === 'invoke_agent' && s.child) claimed.add(s.child);
      mark(s.kids);
    }
  };
  mark(out);
  for (const c of store.children(n.id)) {
    if (claimed.has(c.id)) continue;
    out.push(...sessionSpans(store, c, now, seen));
  }
  return out;
}

function runSpan(store, n, r, now) {
  const state = r.state === 'running' ? 'running' : r.stopReason || r.state;
  const u = store.sessionUsage(n).byRun.get(r.runId);
  return {
    kind: 'invoke_agent', name: `invoke_agent ${r.provider || n.provider || ''}`.trim(), title: store.title(n),
    start: r.startedAt, end: r.endedAt ?? (r.state === 'running' ? now : r.startedAt), state,
    tokens: u ? u.input + u.output : null, child: n.id, runId: r.runId, kids: [],
    detail: () => [
      kv('Session', h('a', { href: `#s=${encodeURIComponent(n.id)}&r=${encodeURIComponent(r.runId)}`, 'data-testid': 'span-open' }, store.title(n))),
      kv('Run', h('code', {}, r.runId)),
      r.stopReason ? kv('Stop reason', r.stopReason, r.diagnostic ? ` — ${r.diagnostic}` : '') : null,
      blocksText(r.output) ? section('Output', blocksText(r.output)) : null,
      r.structured !== undefined && r.structured !== null ? section('Structured output', prettyJSON(r.structured)) : null,
    ],
  };
}

// turnSpans folds a session's log into turn → step → chat / execute_tool
// spans; a tool call that started a child holds that child's spans.
function turnSpans(store, n, evs, now, seen) {
  const model = modelOf(store, n);
  const turns = [];
  let turn = null;
  let step = null;
  let prompt = null;
  const calls = new Map();
  for (const e of evs) {
    const d = e.data || {};
    const t = toMillis(e.time);
    switch (e.type) {
      case 'user/message':
        prompt = d;
        break;
      case 'turn/start':
        turn = span('turn', `turn ${d.turn ?? ''}`, t, 'running', prompt ? () => [section('Prompt', blocksText(prompt.content) || prettyJSON(prompt.content))] : null);
        turns.push(turn);
        break;
      case 'turn/end': {
        if (!turn) break;
        const r = d.reason || {};
        turn.end = t;
        turn.state = r.kind || 'ended';
        const why = r.message ? ` — ${r.message}` : '';
        const before = turn.detail;
        turn.detail = () => [...(before ? before() : []), kv('Ended', turn.state, why)];
        turn = null;
        step = null;
        break;
      }
      case 'step/start':
        step = span('step', `step ${d.step ?? ''}`, t, 'running');
        step.chat = span('chat', `chat ${model}`.trim(), t, 'running');
        step.kids.push(step.chat);
        (turn ? turn.kids : turns).push(step);
        break;
      case 'step/end':
        if (step) {
          step.end = t;
          step.state = step.state === 'running' ? 'completed' : step.state;
          if (step.chat.end === null) {
            step.chat.end = t;
            step.chat.state = 'completed';
          }
          step = null;
        }
        break;
      case 'assistant/message': {
        const c = step ? step.chat : span('chat', `chat ${model}`.trim(), t, 'running');
        if (!step) (turn ? turn.kids : turns).push(c);
        c.end = t;
        c.state = d.interrupted ? 'interrupted' : 'completed';
        const u = d.usage;
        if (u) c.tokens = (u.inputTokens || 0) + (u.outputTokens || 0);
        const content = (d.message && d.message.content) || [];
        c.detail = () => [
          u ? kv('Tokens', `${formatTokens(u.inputTokens)} in / ${formatTokens(u.outputTokens)} out`) : null,
          section('Output', blocksText(content) || prettyJSON(content)),
        ];
        if (step && u) step.tokens = (step.tokens || 0) + c.tokens;
        if (turn && u) turn.tokens = (turn.tokens || 0) + c.tokens;
        break;
      }
      case 'tool/call': {
        const s = span('execute_tool', `execute_tool ${d.name || '?'}`, t, 'running');
        s.args = d.arguments;
        s.tool = d.name || '';
        s.detail = () => [section('Arguments', prettyJSON(s.args ?? '')), s.result !== undefined ? section(s.isError ? 'Error' : 'Result', s.result) : null];
        if (d.callId) calls.set(d.callId, s);
        (step || turn || { kids: turns }).kids.push(s);
        break;
      }
      case 'tool/result': {
        const s = d.callId && calls.get(d.callId);
        if (!s) break;
        s.end = t;
        s.isError = !!d.isError;
        s.state = d.isError ? 'error' : 'completed';
        s.result = Array.isArray(d.content) ? blocksText(d.content) || prettyJSON(d.content) : prettyJSON(d.content ?? '');
        break;
      }
      default:
        break;
    }
  }
  // Spans still open run until now.
  const close = (list) => {
    for (const s of list) {
      if (s.end === null) s.end = s.state === 'running' ? now : s.start;
      close(s.kids);
    }
  };
  close(turns);
  // A tool call holds the children it started: one it names, else one of
  // the provider its name says, started while it ran.
  const kids = store.children(n.id);
  const tools = [];
  const collect = (list) => {
    for (const s of list) {
      if (s.kind === 'execute_tool') tools.push(s);
      collect(s.kids);
    }
  };
  collect(turns);
  for (const c of kids) {
    const first = store.nodeRuns(c)[0];
    const text = (s) => `${typeof s.args === 'string' ? s.args : JSON.stringify(s.args ?? '')}\n${s.result ?? ''}`;
    const call = tools.find((s) => text(s).includes(c.id)) ||
      tools.find((s) => s.tool === `subagent_${c.provider}` && first && first.startedAt !== null && s.start !== null && first.startedAt >= s.start - 5 && first.startedAt <= (s.end ?? now) + 5);
    if (call) call.kids.push(...sessionSpans(store, c, now, seen));
  }
  return turns;
}

function modelOf(store, n) {
  const p = store.providers.get(n.provider);
  return (p && p.model && (p.model.model || p.model.route)) || '';
}

function span(kind, name, start, state, detail = null) {
  return { kind, name, start, end: null, state, tokens: null, kids: [], detail };
}

function kv(term, ...value) {
  return h('div', { class: 'kv' }, h('dt', {}, term), h('dd', {}, ...value));
}

function section(title, text) {
  return h('div', {}, h('h4', {}, title), h('pre', { class: 'span-io' }, text));
}

/** What each element's trace was last drawn from, and its first child then. */
const drawn = new WeakMap();

/**
 * Renders the trace of the tree rooted at root into el.
 * @param {HTMLElement} el
 * @param {import('./store.js').Store} store
 * @param {object} root a node
 * @param {{selected: string, onPick: (key: string) => void}} ui the picked span's key and how to pick one
 */
export function renderTrace(el, store, root, ui) {
  const { spans, t0, t1 } = buildTrace(store, root);
  const total = t1 - t0;
  const t = store.treeUsage(root);
  const rows = [];
  let picked = null;
  const walk = (list, depth, path) => {
    list.forEach((s, i) => {
      const key = `${path}${i}`;
      if (rows.length < MAX_ROWS) rows.push({ s, depth, key });
      if (key === ui.selected) picked = s;
      walk(s.kids, depth + 1, `${key}.`);
    });
  };
  walk(spans, 0, '');
  let count = 0;
  const countAll = (list) => list.forEach((s) => { count++; countAll(s.kids); });
  countAll(spans);
  // What the rows would show; unchanged, the drawn trace stays as it is,
  // so a re-render for some other part of the page neither replaces the
  // span a reader focused or is clicking nor costs a rebuild.
  const shown = JSON.stringify([ui.selected, t0, total, count, t.total, t.read, t.input, t.output, el.clientWidth,
    rows.map(({ s, key }) => [key, s.name, s.title, s.state, s.start, s.end, s.tokens])]);
  const last = drawn.get(el);
  if (last && last.shown === shown && last.first === el.firstChild) return;
  const summary = h('p', { class: 'timeline-sum', 'data-testid': 'tree-usage' },
    `Tree: ${t.total} session${t.total === 1 ? '' : 's'}, ${count} span${count === 1 ? '' : 's'} over ${formatDuration(total)} · `,
    h('strong', {}, `${formatTokens(t.input)} in / ${formatTokens(t.output)} out tokens`),
    t.read < t.total ? ` (read ${t.read} of ${t.total} logs…)` : '');
  if (!rows.length) {
    el.replaceChildren(summary, h('p', { class: 'empty', 'data-testid': 'timeline-empty' }, 'Nothing in this tree has run yet: spans appear here as turns and runs start.'));
    drawn.set(el, { shown, first: summary });
    return;
  }
  const pct = (x) => (100 * (x - t0)) / total;
  const axis = h('div', { class: 'trace-axis', 'aria-hidden': 'true' });
  const list = h('ol', { class: 'trace-rows', 'aria-label': 'Spans on one time axis' }, rows.map(({ s, depth, key }) => {
    const st = stateStyle(s.state === 'ended' ? 'error' : s.state);
    const dur = formatDuration((s.end ?? s.start) - s.start);
    const words = `${s.name}${s.title ? ` · ${s.title}` : ''} · ${st.icon} ${s.state} · ${dur}${s.tokens ? ` · ${formatTokens(s.tokens)} tok` : ''}`;
    const left = pct(s.start);
    const w = pct(s.end ?? s.start) - left;
    return h('li', { class: `trace-row${key === ui.selected ? ' picked' : ''}` },
      h('button', {
        type: 'button', class: 'span-name', style: `padding-left:${depth * 0.8 + 0.3}rem`, title: words,
        'data-testid': 'span', 'data-kind': s.kind, 'data-name': s.name, 'data-state': s.state, 'data-key': key, 'data-run': s.runId || false,
        'data-depth': depth, 'aria-pressed': String(key === ui.selected), onclick: () => ui.onPick(key),
      }, h('span', { class: `tone-${st.tone}`, 'aria-hidden': 'true' }, `${st.icon} `), h('span', { class: 'span-label', 'data-testid': 'span-label' }, s.name, s.title ? h('span', { class: 'span-title' }, ` ${s.title}`) : null),
      h('span', { class: 'span-dur', 'data-testid': 'span-dur' }, dur), s.tokens ? h('span', { class: 'tokens' }, `${formatTokens(s.tokens)} tok`) : null),
      h('span', { class: 'span-track', 'aria-hidden': 'true' },
        h('span', { class: `span-bar kind-${s.kind} tone-${st.tone}`, style: `left:${left.toFixed(3)}%;width:max(${w.toFixed(3)}%, 2px)` })));
  }));
  const panel = h('aside', { class: 'span-panel', 'data-testid': 'span-panel', 'aria-live': 'polite' },
    picked
      ? [h('h3', {}, picked.name, picked.title ? ` · ${picked.title}` : ''),
        h('dl', { class: 'meta' }, kv('Status', picked.state), kv('Duration', formatDuration((picked.end ?? picked.start) - picked.start)),
          picked.tokens ? kv('Tokens', formatTokens(picked.tokens)) : null, kv('Starts at', `+${formatDuration(picked.start - t0)}`)),
        ...(picked.detail ? picked.detail() : [])]
      : h('p', { class: 'empty' }, 'Click a span to see its inputs and outputs.'));
  // A reader on a span (keyboard focus) stays on it across the redraw.
  const focused = el.contains(document.activeElement) ? document.activeElement.dataset.key : undefined;
  el.replaceChildren(summary, h('div', { class: 'trace' }, panel, h('div', { class: 'trace-main' }, h('div', { class: 'trace-head' }, h('span', {}, 'Span'), axis), list,
    count > MAX_ROWS ? h('p', { class: 'help' }, `Showing the first ${MAX_ROWS} of ${count} spans.`) : null)));
  drawn.set(el, { shown, first: summary });
  if (focused !== undefined) el.querySelector(`[data-testid="span"][data-key="${CSS.escape(focused)}"]`)?.focus();
  // As many ticks as the axis, laid out, has room for.
  const n = Math.max(1, Math.min(8, Math.floor(axis.clientWidth / TICK_PX)));
  axis.replaceChildren(...Array.from({ length: n + 1 }, (_, i) => h('span', { class: 'tick', style: `left:${(100 * i) / n}%` }, `+${formatDuration((i / n) * total)}`)));
}
