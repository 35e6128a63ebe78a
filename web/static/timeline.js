// The timeline (waterfall) of one delegation tree: every run and activation
// of its sessions as a bar on a shared time axis, in tree order, coloured by
// state and labelled in text (name, state, duration, tokens), so a person
// sees at a glance what ran in parallel, what waited and what failed.

import { formatDuration, formatTokens, h, stateStyle } from './format.js';

/** Bars drawn at most; the rest is counted. */
const MAX_BARS = 300;

/**
 * Renders the timeline of the tree rooted at root into el.
 * @param {HTMLElement} el
 * @param {import('./store.js').Store} store
 * @param {object} root a node
 */
export function renderTimeline(el, store, root) {
  const now = Date.now();
  const bars = [];
  for (const n of store.subtree(root)) {
    const usage = store.sessionUsage(n);
    for (const r of store.nodeRuns(n)) {
      if (!r.startedAt) continue;
      bars.push({ n, r, start: r.startedAt, end: r.endedAt || now, usage: usage.byRun.get(r.runId) });
    }
  }
  const t = store.treeUsage(root);
  const summary = h('p', { class: 'timeline-sum', 'data-testid': 'tree-usage' },
    `Tree: ${t.total} session${t.total === 1 ? '' : 's'}, ${bars.length} run${bars.length === 1 ? '' : 's'} · `,
    h('strong', {}, `${formatTokens(t.input)} in / ${formatTokens(t.output)} out tokens`),
    t.read < t.total ? ` (read ${t.read} of ${t.total} logs…)` : '');
  if (!bars.length) {
    el.replaceChildren(summary, h('p', { class: 'empty', 'data-testid': 'timeline-empty' }, 'No runs in this tree yet: bars appear here as children start.'));
    return;
  }
  const t0 = Math.min(...bars.map((b) => b.start));
  const t1 = Math.max(...bars.map((b) => b.end), t0 + 1);
  const span = t1 - t0;
  const pct = (x) => `${((100 * (x - t0)) / span).toFixed(3)}%`;
  const axis = h('div', { class: 'axis', 'aria-hidden': 'true' },
    [0, 0.25, 0.5, 0.75, 1].map((f) => h('span', { class: 'tick', style: `left:${f * 100}%` }, `+${formatDuration(f * span)}`)));
  const rows = bars.slice(0, MAX_BARS).map(({ n, r, start, end, usage }) => {
    const state = r.state === 'running' ? 'running' : r.stopReason || r.state;
    const st = stateStyle(state);
    const kind = r.taskId ? 'activation' : 'run';
    const label = `${store.title(n)} · ${kind} · ${st.icon} ${state} · ${formatDuration(end - start)}${usage ? ` · ${formatTokens(usage.input)} in / ${formatTokens(usage.output)} out` : ''}`;
    const href = `#s=${encodeURIComponent(n.id)}&r=${encodeURIComponent(r.runId)}`;
    return h('li', { class: 'lane' },
      h('a', {
        href,
        class: `bar tone-${st.tone}${store.ui.runId === r.runId ? ' current' : ''}`,
        style: `margin-left:${pct(start)};width:max(${((100 * (end - start)) / span).toFixed(3)}%, 3px)`,
        'data-testid': 'timeline-bar',
        'data-run': r.runId,
        'data-state': state,
        title: label,
      }, h('span', { class: 'visually-hidden' }, label)),
      h('span', { class: 'bar-label', 'data-testid': 'timeline-label' }, label));
  });
  el.replaceChildren(summary, axis, h('ol', { class: 'lanes', 'aria-label': 'Runs on a time axis' }, rows),
    bars.length > MAX_BARS ? h('p', { class: 'help' }, `Showing the first ${MAX_BARS} of ${bars.length} runs.`) : '');
}
