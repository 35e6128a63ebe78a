// subagentd dashboard: boots (sign-in, providers, one baseline), follows the
// lifecycle stream from its cursor, routes deep links (#s=<session>&r=<run>
// plus the tree filter) and wires the views — tree, session head, transcript,
// trace, search, overview, Delegate form — to the one store. See web/web.go for the
// overview. The only module-level binding is the App instance; all state
// lives in its store or in the views it owns.

// First: boot.js sends the page's first reads before the other modules run.
import { early, readFirstPage, readTail } from './boot.js';
import { api, describeError, listAll } from './api.js';
import { ApprovalsInbox } from './approvals.js';
import { showAccount, signedIn } from './auth.js';
import { DelegateForm } from './delegate.js';
import { h } from './format.js';
import { paths } from './paths.js';
import { renderOverview } from './overview.js';
import { renderProviders } from './providers.js';
import { ConversationSearch } from './search.js';
import { renderTrace } from './trace.js';
import { SessionView } from './session.js';
import { Store } from './store.js';
import { EventStream } from './stream.js';
import { Transcript } from './transcript.js';
import { Tree } from './tree.js';
import { WebhooksPage } from './webhooks.js';

const $ = (id) => document.getElementById(id);

const LIFECYCLE_TYPES = ['subagent/start', 'subagent/end', 'subagent/provider-added', 'subagent/provider-removed',
  'tree/cancelled', 'approval/requested', 'approval/decided'];
// EventSource reports only the named events it listens for. Types missing
// here still reach the event log: their seq leaves a gap that EventStream
// repairs from GET /v1/sessions/{id}/events.
const SESSION_TYPES = [
  'turn/start', 'turn/end', 'step/start', 'step/end', 'user/message', 'assistant/chunk',
  'assistant/message', 'tool/call', 'tool/result', 'agent/inbox/spliced', 'session/end-seed',
  'approval/policy', 'sandbox/mode', 'subagent/descriptor', 'request/header', 'request/context',
  'acp/tool-call', 'acp/tool-call-update', 'acp/plan', 'acp/permission', 'a2a/task', 'history/snapshot',
];

const CONN_TEXT = {
  connected: 'Connected — live',
  connecting: 'Connecting…',
  reconnecting: 'Reconnecting…',
  offline: 'Offline',
};
const CONN_RANK = { connected: 0, connecting: 1, reconnecting: 2, offline: 3 };

// Filter fields and their keys in the URL fragment.
const FILTER_KEYS = { q: 'q', provider: 'p', state: 'st', since: 't' };

/** Background reads of session logs at once (names, tree usage). */
const READERS = 3;
/** Tries of a log read that fails (a busy server's 429, a dropped connection) before it counts as read. */
const READ_TRIES = 3;
/** A log with more earlier events than this is read after the tree's first draw. */
const YIELD_EVENTS = 2000;
/** Trees up to this size have their usage read as soon as one is selected. */
const SMALL_TREE = 50;
/** The longest (ms) the first draw waits for the answers to the reads sent at load. */
const FIRST_DRAW_WAIT = 500;

class App {
  constructor() {
    const store = new Store();
    this.store = store;
    this.frame = 0;
    // Set until the first draw may be made (start).
    this.drawHeld = true;
    this.sessionStream = null;
    /** the newest page of the linked session's log, read at start: {id, page: Promise} */
    this.tailRead = null;
    // Counts transcript openings, so a slow read of a log the user has
    // left is dropped.
    this.transcriptGen = 0;
    this.providersShown = null;
    this.inflight = new Set();
    /** queued background reads: id → 'prompt' | 'log' */
    this.queue = new Map();
    /** sessions whose log is to be read again once the read in flight ends */
    this.again = new Set();
    /** Failed log reads so far, by session. */
    this.failedReads = new Map();
    this.readers = 0;
    // How many sessions were known when tool calls were last linked.
    this.linkedAt = -1;
    // Settles once the tree's first page is merged (or the baseline could
    // not be read): a long log's earlier part waits for it, so the tree is
    // drawn first.
    this.firstPage = new Promise((resolve) => { this.firstPageDone = resolve; });
    // Whether the baseline read its first page: the one read at load is
    // then too old to merge.
    this.baselineRead = false;

    this.tree = new Tree($('tree'), store, {
      onSelect: (id) => this.select(id),
      onNeedPrompt: (id) => this.enqueue(id, 'prompt'),
    });
    this.transcript = new Transcript({
      conv: $('conversation'),
      log: $('eventlog-body'),
      scroller: $('pane-conv'),
      onCount: (n) => { $('log-count').textContent = n ? `(${n})` : ''; },
      onDescriptor: (d) => { if (store.ui.selected) store.applyDescriptor(store.ui.selected, d); },
      onTurn: (running) => { if (store.ui.selected) store.setActivity(store.ui.selected, running); },
      onUsage: (evs) => { if (store.ui.selected) store.recordUsage(store.ui.selected, evs); },
      onPrompt: (text) => { if (store.ui.selected) store.recordPrompt(store.ui.selected, text); },
      resolveChild: (q) => this.resolveChild(q),
      nameOf: (id) => (store.nodes.has(id) ? store.title(store.nodes.get(id)) : `session ${id.slice(0, 8)}…`),
      logFilter: () => store.ui.log,
      onTypes: (types) => this.renderLogTypes(types),
    });
    this.session = new SessionView(store, { showError: (c, e) => this.showError(c, e) });
    this.search = new ConversationSearch($('search-hits'), store);
    // The seq of an event a link (#…&e=<seq>) asked to show once the
    // transcript has it.
    this.revealSeq = null;
    // The span picked in the trace (its path of indexes), shown in the side panel.
    this.spanKey = '';
    this.delegate = new DelegateForm(store, { select: (id, o) => this.select(id, o) });
    this.webhooks = new WebhooksPage();
    this.approvals = new ApprovalsInbox(store, { showError: (c, e) => this.showError(c, e) });
  }

  // ---- connection indicator and errors ------------------------------------

  setStreamState(which, state, detail) {
    const c = this.store.ui.conn;
    c[which] = state === 'failed' ? '' : state;
    if (detail || state !== 'offline') c.detail = detail;
    const worst = [c.lifecycle, c.session].filter(Boolean)
      .reduce((a, b) => (CONN_RANK[b] > CONN_RANK[a] ? b : a), 'connected');
    $('conn').dataset.state = worst;
    $('conn-text').textContent = CONN_TEXT[worst] + (worst === 'offline' && c.detail ? ` — ${c.detail}` : '');
    $('transcript-conn').textContent = c.session && c.session !== 'connected'
      ? `Transcript ${CONN_TEXT[c.session].toLowerCase()}` : '';
  }

  showError(context, err) {
    const box = $('errors');
    const msg = `${context}: ${describeError(err)}`;
    const item = h('div', { class: 'error-item', 'data-testid': 'error' },
      h('span', { 'aria-hidden': 'true' }, '✕ '), h('span', {}, msg),
      h('button', { type: 'button', class: 'link', onclick: () => item.remove(), 'aria-label': `Dismiss: ${msg}` }, 'Dismiss'));
    box.append(item);
    while (box.children.length > 4) box.firstElementChild.remove();
  }

  // ---- loading --------------------------------------------------------------

  async loadProviders() {
    try {
      const res = await api('GET', paths.providers());
      this.store.setProviders((res && res.providers) || []);
    } catch (err) {
      this.showError('Loading providers', err);
    }
  }

  // mergeFirstPage merges the tree's first page and returns the runs it
  // held back: a run whose child's header is on a later page waits for it,
  // since drawn alone its child would be a nameless row whose first prompt
  // is read, only to be named by the header a moment later.
  mergeFirstPage([sp, rp]) {
    const s = this.store;
    for (const x of (sp && sp.sessions) || []) s.mergeSession(x);
    const runs = (rp && rp.runs) || [];
    const known = (r) => s.nodes.get(r.childSessionId)?.known;
    for (const r of runs.filter(known)) s.mergeRun(r);
    this.firstPageDone();
    return runs.filter((r) => !known(r));
  }

  // loadBaseline reads every session and run once, after the lifecycle
  // stream opened (the server has subscribed us, so no start or end falls
  // between the two). Later reconnects resume the stream from its cursor
  // instead. Its first page is drawn as soon as it is read — the one read
  // at load was drawn already if it came first; merged over it, this one
  // says what changed in between, as the store never moves a run back — and
  // the rest follows in pages of a thousand while the page is in use. The
  // tree is aria-busy until then.
  async loadBaseline() {
    const s = this.store;
    $('tree').setAttribute('aria-busy', 'true');
    try {
      const [sp, rp] = await readFirstPage();
      this.baselineRead = true;
      const held = this.mergeFirstPage([sp, rp]);
      const rest = (page, key, pathFor) => (page && page.nextCursor && (page[key] || []).length
        ? listAll((after) => pathFor(after ?? page.nextCursor), key) : []);
      const [sessions, runs] = await Promise.all([
        rest(sp, 'sessions', (after) => paths.sessions({ limit: 1000, after })),
        rest(rp, 'runs', (after) => paths.runs({ limit: 1000, after })),
      ]);
      for (const x of sessions) s.mergeSession(x);
      for (const r of [...held, ...runs]) s.mergeRun(r);
      s.set({ baselineLoaded: true });
      this.readTreeLogs();
    } catch (err) {
      this.firstPageDone();
      this.showError('Loading sessions', err);
    } finally {
      $('tree').setAttribute('aria-busy', 'false');
    }
  }

  // once runs fn for key unless a call for key is still running.
  async once(key, fn) {
    if (this.inflight.has(key)) return;
    this.inflight.add(key);
    try {
      await fn();
    } catch {
      // What the lifecycle events said stands; the next event tries again.
    } finally {
      this.inflight.delete(key);
    }
  }

  onLifecycle(ev) {
    const s = this.store;
    const d = ev.data || {};
    if (ev.type === 'subagent/start' || ev.type === 'subagent/end') {
      s.applyLifecycle(ev.type, d);
      if (ev.type === 'subagent/end') {
        this.once(`run:${d.runId}`, async () => s.mergeRun(await api('GET', paths.run(d.runId))));
        // A settled child's log is read (again) for its final usage.
        if (d.id) {
          s.logsRead.delete(d.id);
          this.readTreeLogs();
        }
      }
      const child = d.id && s.nodes.get(d.id);
      if (child && !child.known && child.parentId) this.once(`session:${d.id}`, async () => s.mergeSession(await api('GET', paths.session(d.id))));
    } else if (ev.type === 'subagent/provider-added' || ev.type === 'subagent/provider-removed') {
      this.loadProviders();
    } else if (ev.type === 'approval/requested' || ev.type === 'approval/decided') {
      this.approvals.onEvent(ev.type, d);
    }
  }

  // ---- background log reads: first prompts (names) and tree usage ----------

  enqueue(id, kind) {
    const cur = this.queue.get(id);
    if (cur === 'log' || (cur && kind === 'prompt')) return;
    if (this.inflight.has(`read:${id}`)) {
      // The log grew while it was read (a run ended): read it once more.
      if (kind === 'log') this.again.add(id);
      return;
    }
    this.queue.set(id, kind);
    this.pump();
  }

  pump() {
    while (this.readers < READERS && this.queue.size) {
      const [id, kind] = this.queue.entries().next().value;
      this.queue.delete(id);
      this.readers++;
      this.once(`read:${id}`, () => this.read(id, kind)).finally(() => {
        this.readers--;
        if (this.again.delete(id)) {
          this.store.logsRead.delete(id);
          this.enqueue(id, 'log');
        }
        this.pump();
      });
    }
  }

  // read reads a session's first prompt or its whole log. A log that cannot
  // be read (a remote child has none here) counts as read, so it is not
  // asked for again on every render.
  async read(id, kind) {
    const s = this.store;
    const n = s.nodes.get(id);
    const seed = n ? n.seedLength : 0;
    const after = seed > 0 ? seed - 1 : null;
    try {
      if (kind === 'prompt') {
        const page = await api('GET', paths.sessionEvents(id, { after, limit: 8 }));
        const first = ((page && page.events) || []).find((e) => e.type === 'user/message');
        s.recordPrompt(id, first ? blocks(first.data) : '');
        return;
      }
      const events = await fetchEvents(id, after, Infinity);
      const first = events.find((e) => e.type === 'user/message');
      if (first) s.recordPrompt(id, blocks(first.data.data));
      s.recordUsage(id, events.map((e) => e.data));
      s.recordTrace(id, events.map((e) => e.data));
      this.failedReads.delete(id);
    } catch {
      if (kind === 'prompt') s.recordPrompt(id, '');
      const tries = (this.failedReads.get(id) || 0) + 1;
      if (kind === 'log' && tries < READ_TRIES) {
        // Read it again after a pause, rather than count a log whose
        // read failed on a busy server as read and empty.
        this.failedReads.set(id, tries);
        setTimeout(() => this.enqueue(id, 'log'), 250 * tries);
        return;
      }
      this.failedReads.delete(id);
    }
    if (kind === 'log') {
      s.logsRead.add(id);
      s.changed();
    }
  }

  // readTreeLogs reads the logs of the selected tree for its usage: while
  // the trace shows it, or at once for a tree of a few sessions.
  readTreeLogs() {
    const s = this.store;
    const n = s.ui.selected && s.nodes.get(s.ui.selected);
    // Before the baseline the tree's size is not known: a big tree would
    // pass for a small one. loadBaseline calls again.
    if (!n || !s.ui.baselineLoaded) return;
    const all = s.subtree(s.treeRoot(n));
    if (s.ui.tab !== 'timeline' && all.length > SMALL_TREE) return;
    for (const m of all) if (!s.logsRead.has(m.id)) this.enqueue(m.id, 'log');
  }

  // resolveChild finds the child a tool call names or started: a session id
  // in its arguments or result, else — for a delegation tool
  // (subagent_<provider>) — the child of that provider of the selected
  // session whose first run started while the call ran.
  resolveChild({ text, tool, from, until }) {
    const s = this.store;
    for (const m of (text || '').matchAll(/[0-9A-Za-z][0-9A-Za-z_-]{7,127}/g)) if (s.nodes.has(m[0]) && m[0] !== s.ui.selected) return m[0];
    if (from === null || from === undefined || !tool.startsWith('subagent_')) return '';
    const provider = tool.slice('subagent_'.length);
    const end = until ?? Infinity;
    for (const c of s.children(s.ui.selected)) {
      if (c.provider !== provider) continue;
      const first = s.nodeRuns(c)[0];
      if (first && first.startedAt !== null && first.startedAt >= from - 5 && first.startedAt <= end + 5) return c.id;
    }
    return '';
  }

  // ---- rendering --------------------------------------------------------------

  scheduleRender() {
    if (this.frame || this.drawHeld) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.renderAll();
    });
  }

  renderAll() {
    const s = this.store;
    if (this.providersShown !== s.providers) {
      this.providersShown = s.providers;
      renderProviders(s);
    }
    const c = this.tree.render();
    $('tree-empty').hidden = c.total > 0;
    $('tree-nomatch').hidden = !(c.total > 0 && c.matched === 0);
    $('session-count').textContent = s.nodes.size ? `(${c.matched === c.total || !this.tree.keep ? s.nodes.size : `${this.tree.keep.size} of ${s.nodes.size}`})` : '';
    this.renderProviderFilter();
    this.approvals.render();
    this.delegate.render();
    const none = !s.ui.selected;
    $('session-view').classList.toggle('no-selection', none);
    $('overview').hidden = !none;
    if (none) renderOverview($('overview'), s);
    this.session.render();
    const sel = s.ui.selected && s.nodes.get(s.ui.selected);
    if (sel) this.transcript.runEnds(s.nodeRuns(sel));
    // Unlinked tool calls are tried again when the sessions known changed.
    if (s.nodes.size !== this.linkedAt) {
      this.linkedAt = s.nodes.size;
      this.transcript.relink();
    }
    if (s.ui.tab === 'timeline') {
      const n = s.ui.selected && s.nodes.get(s.ui.selected);
      if (n) renderTrace($('timeline'), s, s.treeRoot(n), { selected: this.spanKey, onPick: (key) => { this.spanKey = key; this.scheduleRender(); } });
      else $('timeline').replaceChildren(h('p', { class: 'empty' }, 'Select a session to see the trace of its tree.'));
    }
  }

  renderProviderFilter() {
    const sel = $('filter-provider');
    const names = [...new Set([...this.store.providers.keys(), ...[...this.store.nodes.values()].map((n) => n.provider).filter(Boolean)])].sort();
    const key = names.join();
    if (sel.dataset.key === key) return;
    sel.dataset.key = key;
    sel.replaceChildren(h('option', { value: '' }, 'Any provider'), ...names.map((p) => h('option', { value: p }, p)));
    sel.value = this.store.ui.filter.provider;
  }

  renderLogTypes(types) {
    const sel = $('log-type');
    const cur = this.store.ui.log.type;
    const all = cur && !types.includes(cur) ? [...types, cur] : types;
    sel.replaceChildren(h('option', { value: '' }, 'All types'), ...all.map((t) => h('option', { value: t }, t)));
    sel.value = cur;
  }

  // ---- routing: #s=<session>&r=<run>&q=…&p=…&st=…&t=…&v=<page> -----------------

  writeHash() {
    const u = this.store.ui;
    const q = new URLSearchParams();
    if (u.page) q.set('v', u.page);
    if (u.selected) q.set('s', u.selected);
    if (u.runId) q.set('r', u.runId);
    for (const [k, key] of Object.entries(FILTER_KEYS)) if (u.filter[k]) q.set(key, u.filter[k]);
    const hash = q.toString() ? `#${q}` : '';
    if (hash !== location.hash) history.replaceState(null, '', hash || location.pathname + location.search);
  }

  // route follows the URL fragment: on load, and when a link in the page
  // changes it (such links name a session or run and keep the filter).
  async route({ initial = false } = {}) {
    const s = this.store;
    const q = new URLSearchParams(location.hash.slice(1));
    const v = q.get('v');
    this.showPage(v === 'webhooks' || v === 'approvals' ? v : '');
    if (initial || Object.values(FILTER_KEYS).some((key) => q.has(key))) {
      const filter = {};
      for (const [k, key] of Object.entries(FILTER_KEYS)) filter[k] = q.get(key) || '';
      s.set({ filter });
      for (const [k, el] of [['q', 'filter-q'], ['provider', 'filter-provider'], ['state', 'filter-state'], ['since', 'filter-since']]) $(el).value = filter[k];
      this.search.query(filter.q);
    }
    const seq = q.get('e');
    this.revealSeq = seq !== null && /^\d+$/.test(seq) ? Number(seq) : null;
    let id = q.get('s') || '';
    const runId = q.get('r') || '';
    if (runId && !id) {
      try {
        const r = await api('GET', paths.run(runId));
        s.mergeRun(r);
        id = r.childSessionId;
      } catch (err) {
        this.showError('Opening the linked run', err);
      }
    }
    if (id) this.select(id, { runId });
    if (id && id === s.ui.selected && this.transcript.loaded) this.reveal();
    this.writeHash();
  }

  // showPage shows the sessions (''), the approvals inbox ('approvals') or
  // the Webhooks page ('webhooks'), which reads the API only while it is shown.
  showPage(page) {
    this.store.set({ page });
    $('sessions-page').hidden = page !== '';
    $('webhooks-page').hidden = page !== 'webhooks';
    $('approvals-page').hidden = page !== 'approvals';
    if (this.approvals.open !== (page === 'approvals')) this.approvals.show(page === 'approvals');
    for (const [id, p] of [['nav-sessions', ''], ['nav-approvals', 'approvals'], ['nav-webhooks', 'webhooks']]) {
      if (p === page) $(id).setAttribute('aria-current', 'page');
      else $(id).removeAttribute('aria-current');
    }
    if (page === 'webhooks') this.webhooks.open();
    else this.webhooks.close();
  }

  // select shows a session (and, with runId, one of its runs). The
  // Delegate form's parent becomes the root of its tree unless keepParent.
  select(id, { keepParent = false, runId = '' } = {}) {
    const s = this.store;
    if (!id) return;
    if (id === s.ui.selected) {
      if (runId !== s.ui.runId) {
        s.set({ runId });
        this.writeHash();
      }
      document.getElementById(`node-${id}`)?.focus();
      return;
    }
    if (!s.nodes.has(id)) this.once(`session:${id}`, () => this.loadLinked(id));
    s.node(id);
    const patch = { selected: id, runId };
    // null: the Delegate form follows the root of the selected tree.
    if (!keepParent) patch.parentChoice = null;
    s.set(patch);
    this.writeHash();
    this.session.setStatus('');
    this.openTranscript(id);
    this.readTreeLogs();
  }

  // loadLinked reads a session a link named before the baseline knew it;
  // one that does not exist is dropped from the tree and said in words.
  async loadLinked(id) {
    try {
      this.store.mergeSession(await api('GET', paths.session(id)));
    } catch (err) {
      if (err.status === 404 && this.store.forget(id)) this.showError('Opening the linked session', err);
    }
  }

  // openTranscript reads the newest page of the session's log, draws it at
  // once and follows the stream after its last seq; the earlier part is
  // read backwards in the background and handed to the transcript, which
  // notes it and draws it as the reader scrolls up.
  async openTranscript(id) {
    if (this.sessionStream) this.sessionStream.close();
    this.sessionStream = null;
    this.transcript.reset();
    $('conv-empty').hidden = true;
    const gen = ++this.transcriptGen;
    let events = [];
    let more = false;
    const read = this.tailRead?.id === id ? this.tailRead.page : null;
    this.tailRead = null;
    try {
      const page = (await read) || await readTail(id);
      events = ((page && page.events) || []).map(streamEvent);
      more = !!(page && page.hasMore) && events.length > 0;
    } catch {
      // The stream replays from the start and reports a log it cannot read.
    }
    if (gen !== this.transcriptGen) return;
    this.transcript.load(events, { earlier: more });
    this.reveal();
    this.scheduleRender();
    this.sessionStream = new EventStream(paths.sessionStream(id), {
      types: SESSION_TYPES,
      contiguous: true,
      after: events.length ? events.at(-1).id : null,
      onEvent: (ev) => this.transcript.apply(ev),
      onState: (state, detail) => this.setStreamState('session', state, detail),
      fill: (after, until) => fetchEvents(id, after, until),
      probe: () => api('GET', paths.sessionEvents(id, { limit: 1 })),
      onFail: (err) => {
        $('conversation').append(h('p', { class: 'field-error', 'data-testid': 'transcript-error' }, `The log cannot be read: ${describeError(err)}`));
      },
    }).start();
    if (more) this.openEarlier(id, gen, events[0].id);
  }

  // openEarlier reads the events before seq before and hands them to the
  // transcript. Reading and noting a long log holds the page for a while:
  // the tree's first page (soon there, or there already) is drawn before
  // the read starts, waiting a second at most for a baseline slow to come.
  async openEarlier(id, gen, before) {
    // Seqs start at 0: before is how many events come earlier.
    if (before > YIELD_EVENTS) {
      await Promise.race([this.firstPage, delay(1000)]);
      await nextFrame();
      if (gen !== this.transcriptGen) return;
    }
    let earlier;
    try {
      earlier = await fetchEarlier(id, before);
    } catch (err) {
      if (gen === this.transcriptGen) this.transcript.earlierFailed(describeError(err));
      return;
    }
    if (gen === this.transcriptGen) this.transcript.loadEarlier(earlier);
  }

  // reveal shows the event a link asked for in the conversation, once.
  reveal() {
    if (this.revealSeq === null) return;
    this.showTab('tab-conv');
    this.transcript.reveal(this.revealSeq);
    this.revealSeq = null;
  }

  // ---- tabs and filters -------------------------------------------------------

  showTab(which) {
    for (const [tab, pane, name] of [['tab-conv', 'pane-conv', 'conv'], ['tab-log', 'pane-log', 'log'], ['tab-timeline', 'pane-timeline', 'timeline']]) {
      const on = tab === which;
      $(tab).setAttribute('aria-selected', String(on));
      $(tab).tabIndex = on ? 0 : -1;
      $(pane).hidden = !on;
      if (on) this.store.set({ tab: name });
      if (on && name === 'log') this.transcript.showLog();
    }
    this.readTreeLogs();
  }

  wire() {
    const s = this.store;
    const tabs = ['tab-conv', 'tab-log', 'tab-timeline'];
    for (const t of tabs) {
      $(t).addEventListener('click', () => this.showTab(t));
      $(t).addEventListener('keydown', (e) => {
        if (e.key !== 'ArrowLeft' && e.key !== 'ArrowRight') return;
        const next = tabs[(tabs.indexOf(t) + (e.key === 'ArrowRight' ? 1 : tabs.length - 1)) % tabs.length];
        this.showTab(next);
        $(next).focus();
      });
    }
    // The trace's axis ticks are spaced by its width: a resized pane redraws it.
    new ResizeObserver(() => {
      if (s.ui.tab === 'timeline') this.scheduleRender();
    }).observe($('timeline'));
    const setFilter = () => {
      s.set({ filter: { q: $('filter-q').value, provider: $('filter-provider').value, state: $('filter-state').value, since: $('filter-since').value } });
      this.search.query($('filter-q').value);
      this.writeHash();
    };
    $('filter-form').addEventListener('input', setFilter);
    $('filter-form').addEventListener('change', setFilter);
    $('filter-form').addEventListener('submit', (e) => e.preventDefault());
    const clear = () => {
      $('filter-form').reset();
      setFilter();
    };
    $('filter-clear').addEventListener('click', clear);
    $('tree-nomatch-clear').addEventListener('click', clear);
    const setLog = () => {
      s.ui.log = { type: $('log-type').value, chunks: $('log-chunks').checked };
      this.transcript.renderLog();
    };
    $('log-type').addEventListener('change', setLog);
    $('log-chunks').addEventListener('change', setLog);
    // Links in the page (#s=…&r=…) select what they name.
    window.addEventListener('hashchange', () => this.route());
  }

  async start() {
    const s = this.store;
    s.onChange(() => this.scheduleRender());
    this.wire();
    // The reads boot.js sent at load: the newest page of the transcript a
    // link names (read again once the session opens if it was refused) and
    // the tree's first page (drawn unless the baseline's own read came
    // first), while the sign-in is checked.
    this.tailRead = early.tail;
    early.tree.then((page) => { if (page && !this.baselineRead) this.mergeFirstPage(page); });
    // The first draw waits for those answers (FIRST_DRAW_WAIT at most), so
    // that it draws them: drawn before, the tree would be the linked
    // session's one row, drawn again a moment later.
    Promise.race([Promise.allSettled([early.tree, early.tail?.page]), delay(FIRST_DRAW_WAIT)]).then(() => {
      this.drawHeld = false;
      this.scheduleRender();
    });
    let account;
    try {
      account = await signedIn(early.session);
    } catch (err) {
      this.showError('Checking sign-in', err);
      account = { authRequired: false, tenant: '' };
    }
    showAccount(account);
    setInterval(() => {
      this.tree.tick();
      this.session.tick();
      if (!this.store.ui.selected) renderOverview($('overview'), this.store);
    }, 1000);
    new EventStream(paths.lifecycle(), {
      types: LIFECYCLE_TYPES,
      onEvent: (ev) => this.onLifecycle(ev),
      onState: (state, detail) => this.setStreamState('lifecycle', state, detail),
      // The first connection loads the baseline; a reconnect resumes after
      // the cursor (EventSource's Last-Event-ID, or ?after= when the stream
      // is recreated) and reloads nothing — unless it had no cursor to
      // resume from.
      onOpen: ({ resumed }) => {
        if (!s.ui.baselineLoaded || !resumed) {
          this.loadBaseline();
          this.approvals.load();
        }
      },
    }).start();
    this.loadProviders();
    await this.route({ initial: true });
    this.scheduleRender();
  }
}

const delay = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });

// nextFrame settles after the next frame is drawn, or after 100 ms in a tab
// that draws none.
function nextFrame() {
  return new Promise((resolve) => {
    requestAnimationFrame(() => setTimeout(resolve, 0));
    setTimeout(resolve, 100);
  });
}

function blocks(d) {
  const c = d && d.content;
  return Array.isArray(c) ? c.filter((b) => b && b.type === 'text').map((b) => b.text).join('') : '';
}

/** Events per page of a log read; the API's largest page. */
const EVENT_PAGE = 1000;
/**
 * Pages of one log read in flight at once. A browser opens six connections
 * to a server and the streams hold one or two: the baseline's two lists
 * must not wait behind a log.
 */
const PAGES_AHEAD = 2;

// streamEvent is a page's event as the stream delivers it.
const streamEvent = (e) => ({ id: e.seq, type: e.type, data: e });

// fetchEarlier reads every event of a session's log before seq before,
// backwards in pages, and returns them in seq order. Seqs are contiguous
// (0, 1, 2, …), so each page's bound is known ahead and PAGES_AHEAD pages
// are read at once.
async function fetchEarlier(id, before) {
  const pages = [];
  const inflight = [];
  let next = before;
  const ask = () => {
    const res = api('GET', paths.sessionEvents(id, { before: next, limit: EVENT_PAGE }));
    // A page after a failure is not waited for.
    res.catch(() => {});
    inflight.push(res);
    next -= EVENT_PAGE;
  };
  while (inflight.length < PAGES_AHEAD && next > 0) ask();
  while (inflight.length) {
    const got = await inflight.shift();
    pages.push(((got && got.events) || []).map(streamEvent));
    if (next > 0) ask();
  }
  return pages.reverse().flat();
}

// fetchEvents reads a session's durable log: events after `after` (null:
// from the start) with seq below `until`, as stream events. Seqs are
// contiguous (0, 1, 2, …), so page k of a whole log starts after
// after + k·EVENT_PAGE and PAGES_AHEAD pages are read at once; a page that
// comes back short while more follow (a gap) ends the guessing, and the rest
// is read page by page after its last seq.
async function fetchEvents(id, after, until) {
  const out = [];
  const start = after ?? -1;
  const page = (from) => api('GET', paths.sessionEvents(id, { limit: EVENT_PAGE, after: from < 0 ? null : from }));
  let cursor = start;
  if (until === Infinity) {
    const inflight = [];
    let next = start;
    const ask = () => {
      const res = page(next);
      // A page guessed past the end, or after a failure, is not waited for.
      res.catch(() => {});
      inflight.push({ from: next, res });
      next += EVENT_PAGE;
    };
    while (inflight.length < PAGES_AHEAD) ask();
    for (;;) {
      const { from, res } = inflight.shift();
      const got = await res;
      const events = (got && got.events) || [];
      for (const e of events) out.push(streamEvent(e));
      if (events.length) cursor = events.at(-1).seq;
      if (!got || !got.hasMore || events.length === 0) return out;
      if (cursor !== from + EVENT_PAGE) break;
      ask();
    }
  }
  for (;;) {
    const got = await page(cursor);
    const events = (got && got.events) || [];
    for (const e of events) {
      if (e.seq >= until) return out;
      out.push(streamEvent(e));
      cursor = e.seq;
    }
    if (!got || !got.hasMore || events.length === 0) return out;
  }
}

new App().start();
