// Search inside conversations: while the tree filter holds three or more
// characters, the server is asked which session logs say them
// (GET /v1/sessions?q=) and each hit is listed with the words around it,
// linking to that event in the transcript (#s=<session>&e=<seq>).

import { api, describeError } from './api.js';
import { h } from './format.js';
import { paths } from './paths.js';

/** Shortest text searched for (the server's minimum). */
const MIN = 3;
/** Hits listed. */
const HITS = 20;
/** Quiet time after typing before the server is asked, in ms. */
const DEBOUNCE = 250;

export class ConversationSearch {
  /**
   * @param {HTMLElement} el where hits are listed
   * @param {import('./store.js').Store} store
   */
  constructor(el, store) {
    this.el = el;
    this.store = store;
    this.timer = 0;
    this.asked = '';
  }

  /** Searches for text after a pause in typing; text too short clears the hits. */
  query(text) {
    const q = text.trim();
    clearTimeout(this.timer);
    if (q.length < MIN) {
      this.asked = '';
      if (this.store.ui.found.q) this.store.set({ found: { q: '', ids: new Set() } });
      this.el.hidden = true;
      this.el.replaceChildren();
      return;
    }
    if (q === this.asked) return;
    this.timer = setTimeout(() => this.run(q), DEBOUNCE);
  }

  async run(q) {
    this.asked = q;
    this.el.hidden = false;
    this.el.setAttribute('aria-busy', 'true');
    let hits;
    try {
      const res = await api('GET', paths.sessions({ q, limit: HITS }));
      hits = (res && res.sessions) || [];
    } catch (err) {
      if (this.asked === q) this.el.replaceChildren(h('p', { class: 'field-error' }, `Searching conversations: ${describeError(err)}`));
      return;
    } finally {
      this.el.setAttribute('aria-busy', 'false');
    }
    if (this.asked !== q) return; // a newer search is under way
    for (const s of hits) this.store.mergeSession(s);
    this.store.set({ found: { q, ids: new Set(hits.map((s) => s.id)) } });
    const title = (id) => (this.store.nodes.has(id) ? this.store.title(this.store.nodes.get(id)) : id);
    this.el.replaceChildren(
      h('p', { class: 'help', 'data-testid': 'search-count' }, hits.length
        ? `Said in ${hits.length}${hits.length === HITS ? '+' : ''} conversation${hits.length === 1 ? '' : 's'}:`
        : `No conversation says “${q}”.`),
      hits.length ? h('ul', { class: 'search-hits' }, hits.map((s) => h('li', {},
        h('a', { href: `#s=${encodeURIComponent(s.id)}&e=${s.match.seq}`, 'data-testid': 'search-hit', 'data-id': s.id, 'data-seq': s.match.seq },
          h('span', { class: 'hit-title' }, title(s.id)), ' ', h('span', { class: 'chip' }, s.match.type)),
        h('p', { class: 'hit-snippet' }, mark(s.match.snippet, q))))) : null);
  }
}

// mark returns text with each occurrence of q (ignoring case) in <mark>.
function mark(text, q) {
  const out = [];
  const lower = text.toLowerCase();
  const needle = q.toLowerCase();
  let at = 0;
  for (let i = lower.indexOf(needle); i >= 0 && lower.length === text.length; i = lower.indexOf(needle, at)) {
    out.push(text.slice(at, i), h('mark', {}, text.slice(i, i + q.length)));
    at = i + q.length;
  }
  out.push(text.slice(at));
  return out;
}
