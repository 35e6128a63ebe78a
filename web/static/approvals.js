// The approvals inbox: the pending approvals of the tenant (an ACP agent's
// permission request that policy sends to a person), read once from
// GET /v1/approvals?state=pending and kept live by the lifecycle events
// approval/requested and approval/decided on the stream the page already
// holds. The header's badge counts them; the Approvals page (#v=approvals)
// shows each as a card — the tool call's title, kind, paths and raw input,
// the asking session with a link to it in the tree, and the agent's options
// as buttons. A decision is posted and every open page drops the card when
// approval/decided arrives; one that came second (409 ALREADY_DECIDED) says
// who decided first.

import { api, describeError, listAll } from './api.js';
import { formatAge, formatClock, h, prettyJSON, shortId, toMillis } from './format.js';
import { paths } from './paths.js';

const $ = (id) => document.getElementById(id);

// An option's kind as an icon and a tone, never colour alone.
const OPTION_KINDS = {
  allow_once: { icon: '✓', cls: 'primary' },
  allow_always: { icon: '✓✓', cls: '' },
  reject_once: { icon: '✕', cls: 'danger' },
  reject_always: { icon: '✕✕', cls: 'danger' },
};

export class ApprovalsInbox {
  /**
   * @param {import('./store.js').Store} store
   * @param {object} o
   * @param {(context: string, err: Error) => void} o.showError
   */
  constructor(store, o) {
    this.store = store;
    this.o = o;
    this.open = false;
    /** approval id → its card, kept so a re-render keeps the focus */
    this.cards = new Map();
    /** approval id → what closed it, for a card this page still shows */
    this.closed = new Map();
    // Counts loads, so an older list read that ends late is dropped.
    this.gen = 0;
    // Approvals closed (approval/decided) while a list read was in flight:
    // a list read before the close must not bring them back.
    this.closedSince = new Set();
  }

  // load reads every pending approval again: at the first connection of
  // the lifecycle stream and at a reconnect that could not resume.
  async load() {
    const gen = ++this.gen;
    this.closedSince.clear();
    try {
      const list = await listAll((after) => paths.approvals({ state: 'pending', limit: 100, after }), 'approvals');
      if (gen !== this.gen) return;
      this.store.setApprovals(list.filter((a) => !this.closedSince.has(a.id)));
    } catch (err) {
      this.o.showError('Loading approvals', err);
    }
  }

  // onEvent applies approval/requested (the event is thin: the approval is
  // read for its options and input) and approval/decided.
  async onEvent(type, d) {
    if (!d || !d.approvalId) return;
    if (type === 'approval/decided') {
      this.closedSince.add(d.approvalId);
      if (this.cards.has(d.approvalId)) this.closed.set(d.approvalId, closedText({ state: d.state, decision: d.decision }, this.store.approvals.get(d.approvalId)));
      this.store.dropApproval(d.approvalId);
      return;
    }
    try {
      const a = await api('GET', paths.approval(d.approvalId));
      if (a && a.state === 'pending') this.store.putApproval(a);
    } catch (err) {
      if (err.status !== 404) this.o.showError('Reading an approval', err);
    }
  }

  show(on) {
    this.open = on;
    if (!on) {
      this.closed.clear();
      this.cards.clear();
      $('approvals-list').replaceChildren();
    }
    this.render();
  }

  render() {
    const s = this.store;
    const n = s.approvals.size;
    const badge = $('approvals-badge');
    badge.textContent = String(n);
    badge.hidden = n === 0;
    $('nav-approvals').setAttribute('aria-label', n ? `Approvals, ${n} pending` : 'Approvals, none pending');
    if (!this.open) return;
    $('approvals-count').textContent = `(${n})`;
    const ids = [...s.approvals.keys(), ...[...this.closed.keys()].filter((id) => !s.approvals.has(id))];
    for (const id of [...this.cards.keys()]) if (!ids.includes(id)) this.cards.delete(id);
    const cards = ids.map((id) => {
      let c = this.cards.get(id);
      if (!c) {
        c = this.card(s.approvals.get(id));
        this.cards.set(id, c);
      }
      const why = this.closed.get(id);
      if (why) c.close(why);
      return c.el;
    });
    const list = $('approvals-list');
    if (cards.length !== list.children.length || cards.some((el, i) => list.children[i] !== el)) list.replaceChildren(...cards);
    $('approvals-empty').hidden = ids.length > 0;
  }

  card(a) {
    const s = this.store;
    const tc = a.toolCall || {};
    const status = h('p', { class: 'status-line', role: 'status', 'aria-live': 'polite', 'data-testid': 'ap-status' });
    const buttons = (a.options || []).map((o) => {
      const k = OPTION_KINDS[o.kind] || { icon: '•', cls: '' };
      return h('button', { type: 'button', class: k.cls, 'data-testid': 'ap-option', 'data-option': o.optionId, 'data-kind': o.kind, title: o.kind,
        onclick: () => this.decide(a, o, c) }, h('span', { 'aria-hidden': 'true' }, `${k.icon} `), o.name || o.optionId);
    });
    const locations = (tc.locations || []).map((l) => h('li', { class: 'mono', 'data-testid': 'ap-path' }, l.line ? `${l.path}:${l.line}` : l.path));
    const session = s.nodes.get(a.sessionId);
    const created = toMillis(a.createdAt);
    const expires = toMillis(a.expiresAt);
    const state = h('span', { class: 'state tone-warn', 'data-testid': 'ap-state' }, h('span', { 'aria-hidden': 'true' }, '◷'), ' waiting for a decision');
    const el = h('li', { class: 'panel ap-card', 'data-testid': 'approval', 'data-id': a.id },
      h('div', { class: 'wh-head' },
        state,
        h('strong', { 'data-testid': 'ap-title' }, tc.title || tc.id || 'Tool call'),
        tc.kind ? h('span', { class: 'chip', 'data-testid': 'ap-kind' }, tc.kind) : null),
      h('p', { class: 'wh-meta' },
        h('span', {}, 'Asked by ', h('a', { href: `#s=${encodeURIComponent(a.sessionId)}` + (a.runId ? `&r=${encodeURIComponent(a.runId)}` : ''), class: 'child-link', 'data-testid': 'ap-session' },
          session ? s.title(session) : `session ${shortId(a.sessionId)}`)),
        h('span', { class: 'chip' }, a.provider),
        created !== null ? h('span', { class: 'age', title: new Date(created).toISOString() }, `Asked ${formatClock(created)} (${formatAge(Date.now() - created)})`) : null,
        expires !== null ? h('span', { class: 'age', 'data-testid': 'ap-expires' }, `Rejected by timeout at ${formatClock(expires)}`) : null),
      locations.length ? h('div', {}, h('span', { class: 'help' }, 'Paths'), h('ul', { class: 'ap-paths' }, locations)) : null,
      a.toolCall && a.toolCall.rawInput !== undefined && a.toolCall.rawInput !== null
        ? h('details', { class: 'run-structured', 'data-testid': 'ap-input' }, h('summary', {}, 'Raw input'), h('pre', {}, prettyJSON(a.toolCall.rawInput)))
        : null,
      h('div', { class: 'actions wh-actions', role: 'group', 'aria-label': 'Decide' }, ...buttons),
      status);
    const c = {
      el,
      say: (ok, text) => {
        status.textContent = `${ok ? '✓' : '✕'} ${text}`;
        status.dataset.ok = String(ok);
      },
      // done marks the card closed: its state says so, its buttons are off.
      done: () => {
        for (const b of buttons) b.disabled = true;
        el.dataset.closed = 'true';
        state.className = 'state tone-idle';
        state.replaceChildren(h('span', { 'aria-hidden': 'true' }, '✓'), ' no longer waiting');
      },
      close: (text) => {
        c.done();
        if (!status.textContent) c.say(false, text);
      },
    };
    return c;
  }

  // decide posts the option chosen. The card stays, saying what happened,
  // until the page is left: approval/decided removes the approval from the
  // pending ones (and the badge) on every open page.
  async decide(a, o, c) {
    for (const b of c.el.querySelectorAll('button')) b.disabled = true;
    try {
      const got = await api('POST', paths.approvalDecision(a.id), { optionId: o.optionId });
      c.say(true, `Answered "${o.name || o.optionId}" — the agent goes on.`);
      this.closed.set(a.id, '');
      c.done();
      c.el.dataset.decision = (got && got.decision && got.decision.optionId) || o.optionId;
      this.store.dropApproval(a.id);
    } catch (err) {
      if (err.code === 'ALREADY_DECIDED') {
        let now = null;
        try {
          now = await api('GET', paths.approval(a.id));
        } catch {
          // The problem's own words stand.
        }
        c.say(false, now ? closedText(now, a) : describeError(err));
        this.closed.set(a.id, '');
        c.done();
        this.store.dropApproval(a.id);
        return;
      }
      c.say(false, describeError(err));
      for (const b of c.el.querySelectorAll('button')) b.disabled = false;
    }
  }
}

// closedText says in words how an approval was closed before this page
// could decide it: who decided and what, or that it expired or was cancelled.
function closedText(now, a) {
  const d = now.decision;
  const opt = d && a && (a.options || []).find((o) => o.optionId === d.optionId);
  const what = d ? ` "${opt ? opt.name : d.optionId}"` : '';
  if (now.state === 'decided') return `Already decided by ${d ? d.by : 'someone else'}:${what}${d && d.at ? ` at ${formatClock(toMillis(d.at))}` : ''}.`;
  if (now.state === 'expired') return `Expired: the provider's timeout answered${what || ' it'}.`;
  if (now.state === 'cancelled') return 'Cancelled: the turn ended before anyone decided.';
  return `Closed (${now.state}).`;
}
