// The overview, the first view before a session is selected: how many runs
// are live and which, what failed in the last hour, and the latest starts
// and ends across every tree, each linking to its run.

import { formatAge, formatDuration, h, morph, stateStyle } from './format.js';

const HOUR = 3600e3;
/** Entries listed per section. */
const LIST = 8;

/**
 * Renders the overview of everything the store knows into el.
 * @param {HTMLElement} el
 * @param {import('./store.js').Store} store
 */
export function renderOverview(el, store) {
  const now = Date.now();
  const runs = [...store.runs.values()].filter((r) => r.childId);
  const live = runs.filter((r) => r.state === 'running').sort((a, b) => (b.startedAt ?? 0) - (a.startedAt ?? 0));
  const failed = runs.filter((r) => r.state !== 'running' && r.stopReason && stateStyle(r.stopReason).tone === 'bad' && r.endedAt && now - r.endedAt <= HOUR)
    .sort((a, b) => b.endedAt - a.endedAt);
  const recent = runs.flatMap((r) => [
    r.startedAt ? { r, at: r.startedAt, what: 'started' } : null,
    r.state !== 'running' && r.endedAt ? { r, at: r.endedAt, what: r.stopReason || r.state } : null,
  ]).filter(Boolean).sort((a, b) => b.at - a.at).slice(0, LIST);
  const roots = store.roots().length;

  const link = (r, ...text) => h('a', { href: `#s=${encodeURIComponent(r.childId)}&r=${encodeURIComponent(r.runId)}`, 'data-run': r.runId },
    store.nodes.has(r.childId) ? store.title(store.nodes.get(r.childId)) : r.childId, ...text);
  const entry = (r, state, ...rest) => {
    const st = stateStyle(state);
    return h('li', { class: 'ov-entry' },
      h('span', { class: `state tone-${st.tone}` }, h('span', { 'aria-hidden': 'true' }, st.icon), h('span', { class: 'visually-hidden' }, ` ${state}`)),
      link(r), r.provider ? h('span', { class: 'chip' }, r.provider) : null, ...rest);
  };
  const section = (id, title, count, items, empty) => h('section', { class: 'panel ov-section', 'data-testid': `overview-${id}`, 'aria-label': title },
    h('h3', {}, title, ' ', h('span', { class: 'count', 'data-testid': `overview-${id}-count` }, String(count))),
    items.length ? h('ul', { class: 'ov-list' }, items) : h('p', { class: 'empty' }, empty));

  const next = h('div', {},
    h('h2', { id: 'overview-h' }, 'Overview'),
    h('p', { class: 'help' }, `${store.nodes.size} session${store.nodes.size === 1 ? '' : 's'} in ${roots} tree${roots === 1 ? '' : 's'}, ${runs.length} run${runs.length === 1 ? '' : 's'}. Select a session in the tree, or follow a link below.`),
    h('div', { class: 'ov-grid' },
      section('live', 'Live runs', live.length, live.slice(0, LIST).map((r) => entry(r, 'running',
        h('span', { class: 'dur' }, formatDuration(now - (r.startedAt ?? now))))), 'Nothing runs right now.'),
      section('failed', 'Failed in the last hour', failed.length, failed.slice(0, LIST).map((r) => entry(r, r.stopReason,
        h('span', { class: 'ov-why' }, r.stopReason, r.diagnostic ? ` — ${r.diagnostic}` : ''), h('span', { class: 'age' }, formatAge(now - r.endedAt)))),
      'No failures in the last hour.'),
      section('recent', 'Recent activity', recent.length, recent.map(({ r, at, what }) => entry(r, what === 'started' ? 'running' : what,
        h('span', {}, what), h('span', { class: 'age' }, formatAge(now - at)))), 'No runs yet.')));
  morph(el, [...next.children]);
}
