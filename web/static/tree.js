// The session tree: roots (newest first, paged), their children and
// grandchildren (paged per parent), each a real <button> showing its name,
// state (icon + word), provider, mode, tasks of a continuable child, stop
// reason and active duration. The filter (text, provider, state, time) keeps
// matching sessions and the path to them. Arrow keys move between nodes;
// Left/Right collapse and expand. A row is rebuilt only when what it shows
// changed, so a live event in a tree of a thousand sessions stays cheap.

import { formatDuration, h, stateStyle } from './format.js';

/** How many children of one parent are shown before "Show more". */
const KIDS_PAGE = 50;

// A state filter names a group of state words.
const STATE_GROUPS = {
  running: (s) => s === 'running' || s === 'starting',
  completed: (s) => s === 'completed',
  failed: (s) => stateStyle(s).tone === 'bad',
  aborted: (s) => s === 'aborted',
  inactive: (s) => s === 'inactive' || s === 'disposed',
  root: (s, v) => v.mode === 'root',
};

const SINCE_MS = { '1h': 3600e3, '24h': 86400e3, '7d': 7 * 86400e3 };

export class Tree {
  /**
   * @param {HTMLElement} root container
   * @param {import('./store.js').Store} store
   * @param {object} o
   * @param {(id: string) => void} o.onSelect
   * @param {(id: string) => void} o.onNeedPrompt an unlabelled child is shown whose prompt is not known yet
   */
  constructor(root, store, o) {
    this.root = root;
    this.store = store;
    this.o = o;
    this.collapsed = new Set();
    /** parent id (or '' for roots) → how many children are shown */
    this.shown = new Map();
    /** node id → {sig, row} */
    this.rows = new Map();
    /** node id → {li, ul}: the node's entry and the list of its children */
    this.items = new Map();
    /** parent id ('' for roots) → its "Show more" entry */
    this.mores = new Map();
    this.top = null;
    // The selected row stays in view across re-layouts unless the reader
    // scrolled it away: selVisible says whether it was in view last.
    this.selShown = '';
    this.selVisible = false;
    root.addEventListener('keydown', (e) => this.key(e));
    const sc = root.closest('.sessions-col');
    (sc || window).addEventListener('scroll', () => { this.selVisible = this.inView(); }, { passive: true });
    window.addEventListener('scroll', () => { this.selVisible = this.inView(); }, { passive: true });
  }

  // inView says whether the selected row is wholly visible in its column and the window.
  inView() {
    const el = this.selectedRow();
    if (!el) return false;
    const r = el.getBoundingClientRect();
    const col = this.root.closest('.sessions-col')?.getBoundingClientRect();
    const top = Math.max(0, col ? col.top : 0);
    const bottom = Math.min(window.innerHeight, col ? col.bottom : Infinity);
    return r.height > 0 && r.top >= top && r.bottom <= bottom;
  }

  selectedRow() {
    const id = this.store.ui.selected;
    return id ? document.getElementById(`node-${id}`) : null;
  }

  // keepSelected scrolls the selected row into view when it is newly
  // selected, or when a re-layout moved it out of view.
  keepSelected() {
    const id = this.store.ui.selected;
    const el = this.selectedRow();
    if (el && !this.inView() && (id !== this.selShown || this.selVisible)) el.scrollIntoView({ block: 'nearest' });
    this.selShown = id;
    this.selVisible = this.inView();
  }

  /** Renders the tree; returns {shown, matched, total} counts of top-level entries. */
  render() {
    const focused = document.activeElement && this.root.contains(document.activeElement) ? document.activeElement.id : '';
    const f = this.store.ui.filter;
    this.keep = this.filtering(f) ? this.matching(f) : null;
    const roots = this.store.roots().filter((n) => !this.keep || this.keep.has(n.id));
    const limit = this.store.ui.rootsShown;
    const page = roots.slice(0, limit);
    if (!this.top) this.top = h('ul', { class: 'tree-list' });
    const els = page.map((n) => this.item(n));
    if (roots.length > page.length) {
      els.push(this.more('', `Show ${Math.min(50, roots.length - page.length)} more of ${roots.length - page.length} older sessions`,
        () => this.store.set({ rootsShown: limit + 50 }), 'roots-more'));
    }
    sync(this.top, els);
    if (page.length) {
      if (this.root.firstChild !== this.top) this.root.replaceChildren(this.top);
    } else {
      this.root.replaceChildren();
    }
    if (focused && document.activeElement?.id !== focused) document.getElementById(focused)?.focus();
    this.keepSelected();
    return { shown: page.length, matched: roots.length, total: this.store.nodes.size };
  }

  // more is the "Show more" entry of a list (parent '' for the roots),
  // kept between renders.
  more(parent, text, onclick, testid) {
    let m = this.mores.get(parent);
    if (!m) {
      const button = h('button', { type: 'button', class: 'link', 'data-testid': testid });
      m = { li: h('li', { class: 'more' }, button), button };
      this.mores.set(parent, m);
    }
    m.button.textContent = text;
    m.button.onclick = onclick;
    return m.li;
  }

  filtering(f) {
    return !!(f.q || f.provider || f.state || f.since);
  }

  // matching returns the ids to keep: every matching node and its ancestors.
  matching(f) {
    const q = f.q.trim().toLowerCase();
    const since = SINCE_MS[f.since] ? Date.now() - SINCE_MS[f.since] : null;
    const group = STATE_GROUPS[f.state];
    const keep = new Set();
    for (const n of this.store.nodes.values()) {
      const v = this.store.view(n);
      if (f.provider && n.provider !== f.provider) continue;
      if (group && !group(v.state, v)) continue;
      if (since !== null) {
        const at = n.createdAt ?? v.latest?.startedAt ?? null;
        if (at === null || at < since) continue;
      }
      if (q && !`${this.store.title(n)}\n${n.label}\n${n.provider}\n${n.id}`.toLowerCase().includes(q)) continue;
      for (let m = n, i = 0; m && !keep.has(m.id) && i < 1000; m = this.store.nodes.get(m.parentId), i++) keep.add(m.id);
    }
    return keep;
  }

  // item returns the node's list entry: its row and, when open, the list
  // of its shown children. Entries are kept between renders and only the
  // parts that changed are replaced, so the page lays out what changed.
  item(n) {
    let kids = this.store.children(n.id);
    if (this.keep) kids = kids.filter((k) => this.keep.has(k.id));
    const open = !this.collapsed.has(n.id);
    let it = this.items.get(n.id);
    if (!it) {
      it = { li: h('li', { class: 'tree-item', 'data-id': n.id }), ul: null };
      this.items.set(n.id, it);
    }
    const row = this.row(n, kids.length, open);
    if (it.li.firstChild !== row) {
      if (it.li.firstChild) it.li.firstChild.replaceWith(row);
      else it.li.append(row);
    }
    if (kids.length && open) {
      const limit = this.shown.get(n.id) || KIDS_PAGE;
      const els = kids.slice(0, limit).map((k) => this.item(k));
      if (kids.length > limit) {
        els.push(this.more(n.id, `Show ${Math.min(KIDS_PAGE, kids.length - limit)} more of ${kids.length - limit} children`,
          () => { this.shown.set(n.id, limit + KIDS_PAGE); this.render(); }, 'kids-more'));
      }
      if (!it.ul) it.ul = h('ul', { class: 'tree-list' });
      sync(it.ul, els);
      if (it.ul.parentNode !== it.li) it.li.append(it.ul);
    } else if (it.ul && it.ul.parentNode) {
      it.ul.remove();
    }
    return it.li;
  }

  // row returns the node's row, reusing the element when nothing it shows changed.
  row(n, kidCount, open) {
    const s = this.store;
    const v = s.view(n);
    const title = s.title(n);
    if (!n.label && n.parentId && !s.prompts.has(n.id)) this.o.onNeedPrompt(n.id);
    const selected = s.ui.selected === n.id;
    const sig = [title, v.state, v.mode, n.provider, v.tasks, v.stopReason, v.disposed, v.taskId, v.running ? 'running' : formatDuration(v.durationMs), kidCount, open, selected, n.createdAt].join('\u0001');
    const cached = this.rows.get(n.id);
    if (cached && cached.sig === sig) return cached.row;

    const st = stateStyle(v.state);
    const meta = [
      h('span', { class: `state tone-${st.tone}`, 'data-testid': 'node-state' },
        h('span', { class: `state-icon${v.state === 'running' ? ' spin' : ''}`, 'aria-hidden': 'true' }, st.icon), ` ${v.state}`),
    ];
    if (n.provider) meta.push(h('span', { class: 'chip' }, n.provider));
    meta.push(h('span', { class: 'chip' }, v.mode));
    if (v.mode === 'continuable' && v.tasks) meta.push(h('span', { class: 'chip', 'data-testid': 'node-tasks' }, `${v.tasks} task${v.tasks > 1 ? 's' : ''}`));
    if (v.stopReason && v.stopReason !== v.state) meta.push(h('span', { class: 'chip' }, `stop: ${v.stopReason}`));
    if (v.disposed) meta.push(h('span', { class: 'chip', 'data-testid': 'node-disposed' }, 'disposed'));
    if (v.durationMs !== null) meta.push(h('span', { class: 'dur', 'data-dur-for': n.id }, formatDuration(v.durationMs)));
    const button = h('button', {
      type: 'button',
      class: 'node',
      id: `node-${n.id}`,
      'data-testid': 'node',
      'data-id': n.id,
      'data-state': v.state,
      'data-mode': v.mode,
      'data-stop-reason': v.stopReason || '',
      'data-task': v.taskId || false,
      'aria-current': selected ? 'true' : false,
      onclick: () => this.o.onSelect(n.id),
    }, h('span', { class: 'node-title', 'data-testid': 'node-title' }, title), h('span', { class: 'node-meta' }, meta));
    const toggle = kidCount
      ? h('button', {
        type: 'button',
        class: 'twisty',
        'aria-expanded': String(open),
        'aria-label': `${open ? 'Collapse' : 'Expand'} ${kidCount} child session${kidCount > 1 ? 's' : ''} of ${title}`,
        'data-testid': 'twisty',
        onclick: () => this.toggle(n.id),
      }, h('span', { 'aria-hidden': 'true' }, open ? '▾' : '▸'))
      : h('span', { class: 'twisty-space', 'aria-hidden': 'true' });
    const row = h('div', { class: 'row' }, toggle, button);
    this.rows.set(n.id, { sig, row });
    return row;
  }

  toggle(id, open) {
    const isOpen = !this.collapsed.has(id);
    if (open === isOpen) return;
    if (isOpen) this.collapsed.add(id);
    else this.collapsed.delete(id);
    this.render();
  }

  /** Updates the durations of running nodes in place, once a second. */
  tick() {
    for (const el of this.root.querySelectorAll('[data-dur-for]')) {
      const n = this.store.nodes.get(el.dataset.durFor);
      if (!n) continue;
      const v = this.store.view(n);
      if (v.running && v.durationMs !== null) el.textContent = formatDuration(v.durationMs);
    }
  }

  key(e) {
    const btn = e.target.closest('.node');
    if (!btn) return;
    const all = [...this.root.querySelectorAll('.node')];
    const i = all.indexOf(btn);
    const id = btn.dataset.id;
    const n = this.store.nodes.get(id);
    const hasKids = this.store.kids.get(id)?.size > 0;
    let target = null;
    switch (e.key) {
      case 'ArrowDown': target = all[i + 1]; break;
      case 'ArrowUp': target = all[i - 1]; break;
      case 'Home': target = all[0]; break;
      case 'End': target = all.at(-1); break;
      case 'ArrowRight':
        if (this.collapsed.has(id)) this.toggle(id, true);
        else target = hasKids ? all[i + 1] : null;
        break;
      case 'ArrowLeft':
        if (hasKids && !this.collapsed.has(id)) this.toggle(id, false);
        else if (n && n.parentId) target = document.getElementById(`node-${n.parentId}`);
        break;
      default:
        return;
    }
    e.preventDefault();
    (target || document.getElementById(`node-${id}`))?.focus();
  }
}

// sync makes els the children of parent, touching the DOM only when they differ.
function sync(parent, els) {
  const cur = parent.children;
  if (cur.length === els.length && els.every((el, i) => cur[i] === el)) return;
  parent.replaceChildren(...els);
}
