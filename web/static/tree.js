// The session tree, read at a glance: one line per session (state icon,
// name, roll-ups of running and failed descendants, provider, age of its
// newest work, active duration, tokens), newest work first at every level.
// The filter (text, provider, state, time) keeps matching sessions and the
// path to them. The tree is a flat list of the open rows, and only the rows
// near the visible part of the column are on the page (ROW_H apart), so a
// tree of thousands of sessions costs what a screenful does. Arrow keys move
// between rows; Left/Right collapse and expand. A row is rebuilt only when
// what it shows changed.

import { formatAge, formatClock, formatDuration, formatTokensShort, h, stateStyle } from './format.js';

/** Height of one row in px; rows are positioned by index. */
const ROW_H = 30;
/** Rows rendered above and below the visible ones. */
const OVERSCAN = 40;
/**
 * Rows above and below the visible ones until the tree has filled its
 * view once: the rest of OVERSCAN is built once that frame is painted, so
 * the first frame costs what a screenful does.
 */
const FIRST_OVERSCAN = 2;

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
    /** node id → {sig, row} */
    this.rows = new Map();
    /** the open rows in order: {n, depth, kids} */
    this.flat = [];
    /** node id → index in flat */
    this.index = new Map();
    this.list = h('ul', { class: 'tree-list', role: 'list' });
    this.keep = null;
    this.memoAt = -1;
    // The selected row stays in view across re-layouts unless the reader
    // scrolled it away: selVisible says whether it was in view last.
    this.selShown = '';
    this.selVisible = false;
    this.windowFrame = 0;
    // FIRST_OVERSCAN until a window it cuts short is drawn (renderWindow).
    this.overscan = FIRST_OVERSCAN;
    this.widen = 0;
    root.addEventListener('keydown', (e) => this.key(e));
    this.col = root.closest('.sessions-col');
    const onScroll = () => {
      this.selVisible = this.inView(this.index.get(this.store.ui.selected));
      if (!this.windowFrame) {
        this.windowFrame = requestAnimationFrame(() => {
          this.windowFrame = 0;
          this.renderWindow();
        });
      }
    };
    this.col?.addEventListener('scroll', onScroll, { passive: true });
    window.addEventListener('scroll', onScroll, { passive: true });
    window.addEventListener('resize', onScroll, { passive: true });
  }

  /** Renders the tree; returns {matched, total} counts of top-level entries. */
  render() {
    const s = this.store;
    const f = s.ui.filter;
    this.keep = this.filtering(f) ? this.matching(f) : null;
    const roots = this.sorted(s.roots().filter((n) => !this.keep || this.keep.has(n.id)));
    this.rollups = this.rollup(roots);
    this.flat = [];
    this.index = new Map();
    const walk = (n, depth) => {
      let kids = this.children(n.id);
      if (this.keep) kids = kids.filter((k) => this.keep.has(k.id));
      this.index.set(n.id, this.flat.length);
      this.flat.push({ n, depth, kids: kids.length });
      if (kids.length && !this.collapsed.has(n.id)) for (const k of this.sorted(kids)) walk(k, depth + 1);
    };
    for (const r of roots) walk(r, 0);
    if (this.flat.length) {
      if (this.root.firstChild !== this.list) this.root.replaceChildren(this.list);
    } else {
      this.root.replaceChildren();
    }
    this.list.style.height = `${this.flat.length * ROW_H}px`;
    this.list.dataset.rows = String(this.flat.length);
    // The selected row is scrolled to before the rows are drawn, so one
    // window is built, and the page laid out once, per render.
    this.keepSelected();
    this.renderWindow();
    return { matched: roots.length, total: s.nodes.size };
  }

  // view and children are asked for several times per node in a render
  // (sorting, roll-ups, rows): each is worked out once per store version.
  view(n) {
    this.fresh();
    let v = this.views.get(n.id);
    if (!v) {
      v = this.store.view(n);
      this.views.set(n.id, v);
    }
    return v;
  }

  children(id) {
    this.fresh();
    let c = this.kidsOf.get(id);
    if (!c) {
      c = this.store.children(id);
      this.kidsOf.set(id, c);
    }
    return c;
  }

  fresh() {
    if (this.memoAt === this.store.version) return;
    this.memoAt = this.store.version;
    this.views = new Map();
    this.kidsOf = new Map();
  }

  // sorted orders nodes newest work first: by the start of their latest
  // run, else by their creation.
  sorted(list) {
    const at = (n) => {
      const r = this.view(n).latest;
      return Math.max(n.createdAt ?? 0, r?.startedAt ?? 0);
    };
    return list.map((n) => [at(n), n]).sort((a, b) => b[0] - a[0] || b[1].seen - a[1].seen).map((x) => x[1]);
  }

  // rollup counts, for every node shown, its running and failed
  // descendants (itself left out), so a closed or scrolled-away subtree
  // still shows what it does.
  rollup(roots) {
    const out = new Map();
    const walk = (n) => {
      const c = { running: 0, failed: 0 };
      for (const k of this.children(n.id)) {
        const kc = walk(k);
        const st = this.view(k).state;
        c.running += kc.running + (st === 'running' || st === 'starting' ? 1 : 0);
        c.failed += kc.failed + (stateStyle(st).tone === 'bad' ? 1 : 0);
      }
      out.set(n.id, c);
      return c;
    };
    for (const r of roots) walk(r);
    return out;
  }

  // visible returns the range [from, to) of rows in view and overscan
  // rows either side of them.
  visible(overscan) {
    const rect = this.list.getBoundingClientRect();
    const col = this.col ? this.col.getBoundingClientRect() : null;
    const top = Math.max(0, col ? col.top : 0);
    const bottom = Math.min(window.innerHeight, col ? col.bottom : Infinity);
    const first = Math.floor((top - rect.top) / ROW_H);
    const last = Math.ceil((bottom - rect.top) / ROW_H);
    return [Math.max(0, first - overscan), Math.min(this.flat.length, Math.max(0, last + overscan))];
  }

  // renderWindow puts the rows near the view on the page, each at its place.
  // The first window that FIRST_OVERSCAN cuts short of OVERSCAN is widened
  // to it by a task queued behind the frame that draws it.
  renderWindow() {
    const [from, to] = this.visible(this.overscan);
    if (this.overscan < OVERSCAN && !this.widen && String(this.visible(OVERSCAN)) !== String([from, to])) {
      this.widen = setTimeout(() => {
        this.overscan = OVERSCAN;
        this.renderWindow();
      }, 0);
    }
    const focused = document.activeElement && this.root.contains(document.activeElement) ? document.activeElement.id : '';
    const els = [];
    for (let i = from; i < to; i++) {
      const { n, depth, kids } = this.flat[i];
      const row = this.row(n, depth, kids);
      row.style.top = `${i * ROW_H}px`;
      els.push(row);
    }
    const cur = this.list.children;
    if (cur.length !== els.length || !els.every((el, i) => cur[i] === el)) this.list.replaceChildren(...els);
    if (focused && document.activeElement?.id !== focused) document.getElementById(focused)?.focus();
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
    const found = this.store.ui.found.q === f.q.trim() ? this.store.ui.found.ids : null;
    for (const n of this.store.nodes.values()) {
      const v = this.view(n);
      if (f.provider && n.provider !== f.provider) continue;
      if (group && !group(v.state, v)) continue;
      if (since !== null) {
        const at = n.createdAt ?? v.latest?.startedAt ?? null;
        if (at === null || at < since) continue;
      }
      if (q && !found?.has(n.id) && !`${this.store.title(n)}\n${n.label}\n${n.provider}\n${n.id}`.toLowerCase().includes(q)) continue;
      for (let m = n, i = 0; m && !keep.has(m.id) && i < 1000; m = this.store.nodes.get(m.parentId), i++) keep.add(m.id);
    }
    return keep;
  }

  // row returns the node's one-line row, reusing the element when nothing it shows changed.
  row(n, depth, kidCount) {
    const s = this.store;
    const v = this.view(n);
    const title = s.title(n);
    if (!n.label && n.parentId && !s.prompts.has(n.id)) this.o.onNeedPrompt(n.id);
    const selected = s.ui.selected === n.id;
    const open = !this.collapsed.has(n.id);
    const roll = this.rollups.get(n.id) || { running: 0, failed: 0 };
    const u = s.sessionUsage(n);
    const at = Math.max(n.createdAt ?? 0, v.latest?.startedAt ?? 0) || null;
    const waiting = s.pendingFor(n.id);
    const sig = [title, waiting, v.state, v.mode, n.provider, v.tasks, v.stopReason, v.disposed, v.taskId, v.running ? 'running' : formatDuration(v.durationMs),
      kidCount, open, selected, at, depth, roll.running, roll.failed, u.input + u.output].join('\u0001');
    const cached = this.rows.get(n.id);
    if (cached && cached.sig === sig) return cached.row;

    const st = stateStyle(v.state);
    const tail = [];
    if (roll.running) tail.push(h('span', { class: 'rollup tone-run', 'data-testid': 'rollup-running', title: `${roll.running} running below` }, `◐ ${roll.running}`));
    if (roll.failed) tail.push(h('span', { class: 'rollup tone-bad', 'data-testid': 'rollup-failed', title: `${roll.failed} failed below` }, `✕ ${roll.failed}`));
    if (n.provider) tail.push(h('span', { class: 'chip', 'data-testid': 'node-provider' }, n.provider));
    if (v.mode === 'continuable' && v.tasks) tail.push(h('span', { class: 'chip', 'data-testid': 'node-tasks' }, `${v.tasks} task${v.tasks > 1 ? 's' : ''}`));
    if (v.disposed) tail.push(h('span', { class: 'chip', 'data-testid': 'node-disposed' }, 'disposed'));
    if (waiting) tail.push(h('span', { class: 'chip tone-warn', 'data-testid': 'node-waiting', title: `${waiting} approval${waiting > 1 ? 's' : ''} pending: see Approvals` }, h('span', { 'aria-hidden': 'true' }, '◷ '), 'waiting for approval'));
    if (at) tail.push(h('span', { class: 'age', 'data-age': at, 'data-testid': 'node-age', title: formatClock(at, { day: true }) }, formatAge(Date.now() - at)));
    if (v.durationMs !== null) tail.push(h('span', { class: 'dur', 'data-dur-for': n.id }, formatDuration(v.durationMs)));
    if (u.steps) tail.push(h('span', { class: 'tokens', 'data-testid': 'node-tokens', title: `${u.input} in / ${u.output} out tokens` }, `${formatTokensShort(u.input + u.output)} tok`));
    const stop = v.stopReason && v.stopReason !== v.state ? `, stop: ${v.stopReason}` : '';
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
      title: `${title} — ${v.state} (${v.mode}${stop})`,
      onclick: () => this.o.onSelect(n.id),
    },
    h('span', { class: `state tone-${st.tone}`, 'data-testid': 'node-state' },
      h('span', { class: `state-icon${v.state === 'running' ? ' spin' : ''}`, 'aria-hidden': 'true' }, st.icon), h('span', { class: 'visually-hidden' }, ` ${v.state}`)),
    h('span', { class: 'node-title', 'data-testid': 'node-title' }, title),
    h('span', { class: 'node-meta' }, tail));
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
    const row = h('li', { class: 'row', 'data-id': n.id, style: `padding-left:${depth * 0.9}rem` }, toggle, button);
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

  /** Updates the durations of running nodes and the ages in place, once a second. */
  tick() {
    for (const el of this.root.querySelectorAll('[data-dur-for]')) {
      const n = this.store.nodes.get(el.dataset.durFor);
      if (!n) continue;
      const v = this.store.view(n);
      if (v.running && v.durationMs !== null) el.textContent = formatDuration(v.durationMs);
    }
    const now = Date.now();
    for (const el of this.root.querySelectorAll('[data-age]')) el.textContent = formatAge(now - Number(el.dataset.age));
  }

  // inView says whether row i is wholly visible in its column and the window.
  inView(i) {
    if (i === undefined) return false;
    const top = this.list.getBoundingClientRect().top + i * ROW_H;
    const col = this.col?.getBoundingClientRect();
    // A pixel of slack: scroll offsets are rounded, row places are not.
    return top >= Math.max(0, col ? col.top : 0) - 1 && top + ROW_H <= Math.min(window.innerHeight, col ? col.bottom : Infinity) + 1;
  }

  // reveal scrolls row i into view (the column when it scrolls, else the window).
  reveal(i, { draw = true } = {}) {
    const top = this.list.getBoundingClientRect().top + i * ROW_H;
    const col = this.col?.getBoundingClientRect();
    const scrolls = this.col && this.col.scrollHeight > this.col.clientHeight;
    const vTop = scrolls ? Math.max(0, col.top) : 0;
    const vBottom = scrolls ? Math.min(window.innerHeight, col.bottom) : window.innerHeight;
    let d = 0;
    if (top < vTop) d = Math.floor(top - vTop);
    else if (top + ROW_H > vBottom) d = Math.ceil(top + ROW_H - vBottom);
    if (!d) return;
    if (scrolls) this.col.scrollTop += d;
    else window.scrollBy(0, d);
    if (draw) this.renderWindow();
  }

  // keepSelected scrolls the selected row into view when it is newly
  // selected, or when a re-layout moved it out of view.
  keepSelected() {
    const id = this.store.ui.selected;
    const i = this.index.get(id);
    if (i !== undefined && !this.inView(i) && (id !== this.selShown || this.selVisible)) this.reveal(i, { draw: false });
    this.selShown = id;
    this.selVisible = this.inView(i);
  }

  key(e) {
    const btn = e.target.closest('.node');
    if (!btn) return;
    const id = btn.dataset.id;
    const i = this.index.get(id);
    if (i === undefined) return;
    const { n, kids } = this.flat[i];
    let target = null;
    switch (e.key) {
      case 'ArrowDown': target = i + 1; break;
      case 'ArrowUp': target = i - 1; break;
      case 'Home': target = 0; break;
      case 'End': target = this.flat.length - 1; break;
      case 'ArrowRight':
        if (this.collapsed.has(id)) this.toggle(id, true);
        else if (kids) target = i + 1;
        break;
      case 'ArrowLeft':
        if (kids && !this.collapsed.has(id)) this.toggle(id, false);
        else if (n.parentId && this.index.has(n.parentId)) target = this.index.get(n.parentId);
        break;
      default:
        return;
    }
    e.preventDefault();
    if (target === null || target < 0 || target >= this.flat.length) target = this.index.get(id);
    this.reveal(target);
    document.getElementById(`node-${this.flat[target].n.id}`)?.focus();
  }
}
