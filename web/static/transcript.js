// Transcript renders one session log (docs/seam.md §1, internal/sessionlog/events.go)
// as a conversation plus a complete event log. Each event is applied once, in
// seq order (EventStream guarantees it); every event gets exactly one row in
// the event log, and the conversation shows the surface: user messages,
// assistant text (streamed live from assistant/chunk, finalised by
// assistant/message), tool calls with their results folded in <details>, and
// turn boundaries as quiet separators with their duration and tokens.
// Log-only events (descriptor, approval policy, inbox splices, steps, unknown
// plugin types) appear only in the event log. Notices, reports and
// delegation tool calls link to the child they name.
//
// The event log keeps every event in memory and shows the newest LOG_PAGE
// rows that pass its type filter ("Show earlier" pages back); assistant/chunk
// rows are folded into their assistant/message row unless asked for.
//
// A long log is drawn from its end: load() builds its last turns, TAIL_ROWS
// conversation rows or a few more (a screenful, so the first frame costs
// what one does), and keeps the turns before them as segments of about
// SEGMENT events each, noted (counts, usage, name, activity) but not drawn. The
// reader scrolling near the top of the conversation, or a link to an
// earlier event, draws the segments above, so opening a log of ten
// thousand events costs what a few screenfuls do. The page may hand load()
// only the newest TAIL_PAGE events of a longer log and the rest later
// (loadEarlier): what is noted of the earlier part is then told once it is
// in, as if it had come first.

import { blocksText, formatClock, formatDuration, formatUsage, h, prettyJSON, stateStyle, toMillis } from './format.js';

/** Event log rows shown per page. */
const LOG_PAGE = 500;
/** Conversation rows at least in the drawn end of a long log: more than a tall pane shows. */
const TAIL_ROWS = 24;
/** Event types that draw a conversation row of their own. */
const ROW_TYPES = new Set(['user/message', 'assistant/message', 'tool/call', 'turn/start', 'turn/end']);
/** Events of one earlier segment, drawn at once. */
const SEGMENT = 300;
/** The newest events of a log to read first: a log no longer than this is drawn whole. */
export const TAIL_PAGE = 500;
/** How close (px) the reader scrolls to the top before the segment above is drawn. */
const EARLIER_MARGIN = 600;

export class Transcript {
  /**
   * @param {object} o
   * @param {HTMLElement} o.conv conversation container (role=log)
   * @param {HTMLElement} o.log event log table body
   * @param {HTMLElement} o.scroller element that scrolls the conversation
   * @param {(n: number) => void} o.onCount number of events in the log
   * @param {(descriptor: object) => void} o.onDescriptor a subagent/descriptor was read
   * @param {(running: boolean) => void} o.onTurn a turn started (true) or ended (false)
   * @param {(evs: {seq: number, type: string, time: string, data: any}[]) => void} o.onUsage assistant/message events with usage were read
   * @param {(text: string) => void} o.onPrompt the first user message of the log was read
   * @param {(q: {text: string, tool: string, from: number|null, until: number|null}) => string} o.resolveChild
   *   the child a tool call names or started: an id named in text, else one started in [from, until]
   * @param {(id: string) => string} o.nameOf the name of a session
   * @param {() => {type: string, chunks: boolean}} o.logFilter the event log's filter
   * @param {(types: string[]) => void} o.onTypes the set of event types seen grew
   */
  constructor(o) {
    this.o = o;
    // The conversation sticks to its end while the reader is there: a
    // scroll says where they are, and a change of size (new rows, or the
    // pane resized by the head above it) keeps them at the end. An event a
    // link showed stays in view the same way until the reader moves.
    this.stick = true;
    this.pinned = null;
    const sc = o.scroller;
    sc.addEventListener('scroll', () => {
      if (sc.clientHeight) this.stick = sc.scrollHeight - sc.scrollTop - sc.clientHeight < 80;
    });
    for (const t of ['wheel', 'touchstart', 'pointerdown', 'keydown']) sc.addEventListener(t, () => { this.pinned = null; }, { passive: true });
    const keep = new ResizeObserver(() => {
      if (this.pinned?.isConnected) this.center(this.pinned);
      else if (this.stick) sc.scrollTop = sc.scrollHeight;
    });
    keep.observe(sc);
    keep.observe(o.conv);
    // Rows above the drawn ones are drawn as the reader nears them.
    this.near = new IntersectionObserver((entries) => {
      if (entries.some((e) => e.isIntersecting)) this.drawEarlierSoon();
    }, { root: sc, rootMargin: `${EARLIER_MARGIN}px 0px 0px 0px` });
    this.earlierFrame = 0;
    this.reset();
  }

  reset() {
    this.near.disconnect();
    this.o.conv.replaceChildren();
    /** [from, to) ranges of this.events not drawn yet, oldest first */
    this.earlier = [];
    /** the "earlier messages" row on top while segments are not drawn */
    this.top = null;
    /** run end markers that belong above the drawn rows: [el, endedAt] */
    this.pendingEnds = [];
    /** whether a turn runs where the noted part of a long log ends; null: it noted none */
    this.turnOn = null;
    /**
     * while the earlier part of a log is still to come (loadEarlier): the
     * newest page's events before its drawn ones, and what its drawn part
     * told that the earlier part must not override — {held, prompt,
     * descriptors, turnSeen, reveal}; null otherwise
     */
    this.awaiting = null;
    /** whether the event log's rows wait for its tab to be shown */
    this.logStale = false;
    /** set while an earlier segment is drawn: its events were noted already */
    this.replaying = false;
    this.o.log.replaceChildren();
    this.count = 0;
    /** every event of the log: {seq, type, time, payload, chunks?} */
    this.events = [];
    this.types = new Set();
    this.logShown = LOG_PAGE;
    /** events that pass the log filter */
    this.matched = 0;
    this.stick = true;
    this.pinned = null;
    this.prompted = false;
    /** turn → {start, input, output} */
    this.turns = new Map();
    /** turn:step → chunks seen before its assistant/message, folded into that row */
    this.pendingChunks = new Map();
    /** tool <details> whose child is not known yet */
    this.unlinked = new Set();
    /** usage events collected while a replayed log is loaded; null otherwise */
    this.bulk = null;
    /** the "no messages yet" note of an empty conversation */
    this.placeholder = null;
    /** where new conversation rows go: the page, or a fragment while a log loads */
    this.target = this.o.conv;
    /** turn:step → live assistant bubble */
    this.streams = new Map();
    /** callId → tool <details> */
    this.tools = new Map();
    /** steers a next-step claim admitted whose user messages are still to come */
    this.admitting = 0;
    /** run id → its end marker */
    this.ends = new Map();
    /** whether the replayed log is on the page; run ends wait for it */
    this.loaded = false;
    /** time of the event being applied */
    this.now = null;
    this.o.conv.setAttribute('aria-busy', 'false');
    this.o.onCount(0);
  }

  /**
   * Applies a replayed log at once: the conversation is built as by apply,
   * the event log window and the counts once at the end. With earlier, the
   * events are the newest page of a longer log whose earlier part follows
   * through loadEarlier.
   */
  load(events, { earlier = false } = {}) {
    this.bulk = [];
    // Rows are built off the page and attached once.
    this.target = document.createDocumentFragment();
    const split = earlier ? tailStart(events) : splitAt(events);
    if (earlier) {
      this.awaiting = { held: events.slice(0, split), prompt: null, descriptors: [], turnSeen: false, reveal: null };
    } else {
      for (let i = 0; i < split; i++) this.note(events[i]);
      // Whether a turn runs, as the noted part ends; the tail's turns say on.
      if (this.turnOn !== null) this.o.onTurn(this.turnOn);
    }
    for (let i = split; i < events.length; i++) this.apply(events[i]);
    if (split || earlier) {
      this.earlier = earlier ? [] : segments(events, split);
      this.top = h('div', { class: 'earlier', 'data-testid': 'conv-earlier' },
        h('button', { type: 'button', class: 'link', onclick: () => this.drawEarlier() }));
      this.o.conv.append(this.top);
      this.countEarlier();
      if (!earlier) this.near.observe(this.top);
    }
    this.o.conv.append(this.target);
    this.target = this.o.conv;
    this.loaded = true;
    const usage = this.bulk;
    this.bulk = null;
    if (usage.length) this.o.onUsage(usage);
    this.o.onCount(this.count);
    this.o.onTypes([...this.types].sort());
    // A long log's event log rows are built when its tab is first shown.
    if ((split || earlier) && this.o.log.closest('[hidden]')) this.logStale = true;
    else this.renderLog();
    if (!this.o.conv.firstChild) {
      this.placeholder = h('p', { class: 'empty', 'data-testid': 'conv-none' }, this.count
        ? `No messages yet: the log holds ${this.count} event${this.count === 1 ? '' : 's'} — see the Event log. New messages appear here as they stream.`
        : 'No events yet. Messages appear here as they stream.');
      this.o.conv.append(this.placeholder);
    }
  }

  /**
   * Takes the earlier part of a log that load() was given the newest page
   * of: every event before that page, in seq order. It is noted as load()
   * notes the part of a log it does not draw — what the drawn part told
   * (the first prompt, descriptors, whether a turn runs) stands over it —
   * and drawn in segments as the reader scrolls up.
   */
  loadEarlier(events) {
    const a = this.awaiting;
    if (!a) return;
    this.awaiting = null;
    const later = this.events;
    const pending = this.pendingChunks;
    const { admitting, now } = this;
    this.events = [];
    this.pendingChunks = new Map();
    this.bulk = [];
    for (const ev of events) this.note(ev);
    for (const ev of a.held) this.note(ev);
    const split = this.events.length;
    for (const ev of later) this.events.push(ev);
    Object.assign(this, { pendingChunks: pending, admitting, now });
    if (!this.prompted && a.prompt !== null) this.notePrompt(a.prompt.d, a.prompt.text);
    for (const d of a.descriptors) this.o.onDescriptor(d);
    if (!a.turnSeen && this.turnOn !== null) this.o.onTurn(this.turnOn);
    const usage = this.bulk;
    this.bulk = null;
    if (usage.length) this.o.onUsage(usage);
    this.o.onCount(this.count);
    this.o.onTypes([...this.types].sort());
    this.earlier = segments(this.events, split);
    if (this.earlier.length) {
      this.countEarlier();
      this.near.observe(this.top);
    } else {
      this.top.remove();
      this.top = null;
    }
    if (this.o.log.closest('[hidden]')) this.logStale = true;
    else this.renderLog();
    if (a.reveal !== null) this.reveal(a.reveal);
  }

  /** The earlier part of a log could not be read: said where it would be. */
  earlierFailed(text) {
    if (!this.awaiting || !this.top) return;
    this.top.replaceChildren(h('span', { class: 'field-error', 'data-testid': 'conv-earlier-error' }, `The earlier messages cannot be read: ${text}`));
  }

  /** Applies one session event; data is the {seq,type,time,data} envelope or the bare payload. */
  apply(ev) {
    const { seq, type, time, payload } = this.take(ev);
    this.render(seq, type, payload || {}, time);
  }

  // note takes an event of a long log's earlier part without drawing it:
  // what its rows would tell the rest of the page (the name, the
  // descriptor, steers being admitted) is told now.
  note(ev) {
    const { type, payload } = this.take(ev);
    const d = payload || {};
    switch (type) {
      case 'user/message': {
        this.notePrompt(d);
        // As userMessage: a steer being admitted is a plain user message.
        const src = d.source || {};
        if (this.admitting > 0 && src.form !== 'notice' && src.kind !== 'subagent-settled' && src.kind !== 'plugin') this.admitting--;
        break;
      }
      case 'subagent/descriptor':
        this.o.onDescriptor(d);
        break;
      case 'turn/start':
      case 'turn/end':
        this.turnOn = type === 'turn/start';
        break;
      case 'agent/inbox/spliced':
      case 'step/start':
        this.render(null, type, d, null);
        break;
      default:
        break;
    }
  }

  // take records one session event; data is the {seq,type,time,data}
  // envelope or the bare payload.
  take({ id, type, data }) {
    const env = data && typeof data === 'object' && 'data' in data && ('seq' in data || data.type === type) ? data : null;
    const payload = env ? env.data : data;
    const seq = id ?? env?.seq ?? null;
    const time = toMillis(env?.time);
    this.now = time;
    this.record(seq, type, time, payload);
    if (type === 'assistant/message' && payload && payload.usage) {
      const u = { seq, type, time: env?.time, data: payload };
      if (this.bulk) this.bulk.push(u);
      else this.o.onUsage([u]);
    }
    return { seq, type, time, payload };
  }

  /** Says how much is above the drawn rows, or that it is being read. */
  countEarlier() {
    const button = this.top.querySelector('button');
    button.disabled = this.awaiting !== null;
    if (this.awaiting) {
      button.textContent = 'Reading earlier messages…';
      return;
    }
    const n = this.earlier.reduce((sum, [from, to]) => sum + to - from, 0);
    button.textContent = `Show earlier messages (${n} earlier event${n === 1 ? '' : 's'})`;
  }

  drawEarlierSoon() {
    if (this.earlierFrame) return;
    this.earlierFrame = requestAnimationFrame(() => {
      this.earlierFrame = 0;
      if (!this.top) return;
      // Still near the top after drawing one segment: draw the next.
      const sc = this.o.scroller.getBoundingClientRect();
      if (this.top.getBoundingClientRect().bottom < sc.top - EARLIER_MARGIN) return;
      this.drawEarlier();
      this.drawEarlierSoon();
    });
  }

  /**
   * Draws the segment just above the drawn rows, keeping the row the
   * reader sees where it is.
   */
  drawEarlier() {
    const seg = this.earlier.pop();
    if (!seg) return;
    const saved = { turns: this.turns, streams: this.streams, tools: this.tools, admitting: this.admitting, now: this.now };
    this.turns = new Map();
    this.streams = new Map();
    this.tools = new Map();
    this.admitting = 0;
    this.replaying = true;
    this.target = document.createDocumentFragment();
    for (let i = seg[0]; i < seg[1]; i++) {
      const ev = this.events[i];
      this.now = ev.time;
      this.render(ev.seq, ev.type, ev.payload || {}, ev.time);
    }
    const rows = this.target;
    Object.assign(this, saved);
    this.replaying = false;
    this.target = this.o.conv;
    this.o.conv.setAttribute('aria-busy', String(this.streams.size > 0));
    const anchor = this.top.nextElementSibling;
    const was = anchor ? anchor.getBoundingClientRect().top : 0;
    this.top.after(rows);
    if (anchor) this.o.scroller.scrollTop += anchor.getBoundingClientRect().top - was;
    if (this.earlier.length) {
      this.countEarlier();
    } else {
      this.near.unobserve(this.top);
      this.top.remove();
      this.top = null;
    }
    const ends = this.pendingEnds;
    this.pendingEnds = [];
    for (const [el, at] of ends) this.placeEnd(el, at);
  }

  record(seq, type, time, payload) {
    const ev = { seq, type, time, payload, chunks: 0 };
    this.events.push(ev);
    this.count++;
    if (!this.types.has(type)) {
      this.types.add(type);
      if (!this.bulk) this.o.onTypes([...this.types].sort());
    }
    if (!this.bulk) this.o.onCount(this.count);
    const d = payload || {};
    if (type === 'assistant/chunk') {
      const key = `${d.turn}:${d.step}`;
      this.pendingChunks.set(key, (this.pendingChunks.get(key) || 0) + 1);
    } else if (type === 'assistant/message') {
      const key = `${d.turn}:${d.step}`;
      ev.chunks = this.pendingChunks.get(key) || 0;
      this.pendingChunks.delete(key);
    }
    if (!this.bulk && !this.logStale && this.shows(ev, this.o.logFilter())) {
      this.o.log.append(this.logRow(ev));
      this.matched++;
      if (this.matched > this.logShown) {
        this.o.log.querySelector(':scope > tr[data-testid="log-row"]').remove();
        this.moreRow();
      }
    }
  }

  shows(ev, f) {
    if (f.type) return ev.type === f.type;
    return f.chunks || ev.type !== 'assistant/chunk';
  }

  /** Re-renders the event log window after a filter change or "Show earlier". */
  /** The event log's tab is shown: its rows are built if they were left for now. */
  showLog() {
    if (this.logStale) this.renderLog();
  }

  renderLog() {
    this.logStale = false;
    const f = this.o.logFilter();
    const match = this.events.filter((ev) => this.shows(ev, f));
    this.matched = match.length;
    this.o.log.replaceChildren(...match.slice(-this.logShown).map((ev) => this.logRow(ev)));
    this.moreRow();
  }

  // moreRow keeps a "Show earlier" row on top while older matching rows are hidden.
  moreRow() {
    const hidden = this.matched - Math.min(this.matched, this.logShown);
    let row = this.o.log.querySelector(':scope > tr.more');
    if (!hidden) {
      if (row) row.remove();
      return;
    }
    if (!row) {
      row = h('tr', { class: 'more' }, h('td', { colspan: '4' }, h('button', {
        type: 'button', class: 'link', 'data-testid': 'log-earlier',
        onclick: () => { this.logShown += LOG_PAGE; this.renderLog(); },
      })));
    }
    row.querySelector('button').textContent = `Show earlier events (${hidden} more)`;
    this.o.log.prepend(row);
  }

  logRow(ev) {
    const { seq, type, time, payload } = ev;
    const when = time ? formatClock(toMillis(time)) : '';
    // The JSON is built when the row is opened: a log of ten thousand
    // events stays cheap to show.
    const details = h('details', {}, h('summary', {}, summarize(type, payload), ev.chunks ? h('span', { class: 'chip', 'data-testid': 'folded-chunks' }, `${ev.chunks} chunk${ev.chunks > 1 ? 's' : ''} folded`) : null));
    details.addEventListener('toggle', () => {
      if (details.open && !details.querySelector('pre')) details.append(h('pre', {}, prettyJSON(payload ?? null)));
    });
    return h('tr', { 'data-seq': seq ?? '', 'data-type': type, 'data-testid': 'log-row' },
      h('td', { class: 'num' }, seq ?? '–'),
      h('td', { class: 'time' }, when),
      h('td', {}, h('code', {}, type)),
      h('td', {}, details));
  }

  render(seq, type, d, time) {
    switch (type) {
      case 'user/message':
        this.userMessage(seq, d);
        break;
      case 'assistant/chunk':
        this.chunk(seq, d);
        break;
      case 'assistant/message':
        this.assistantMessage(seq, d);
        break;
      case 'tool/call':
        this.toolCall(seq, d, time);
        break;
      case 'tool/result':
        this.toolResult(seq, d, time);
        break;
      case 'turn/start':
        this.turns.set(d.turn, { start: time, input: 0, output: 0 });
        if (!this.replaying) this.turnNow(true);
        this.add(h('div', { class: 'sep', role: 'separator', 'data-seq': seq, 'data-testid': 'turn-start' }, `Turn ${d.turn ?? ''}`));
        break;
      case 'turn/end':
        this.turnEnd(seq, d, time);
        if (!this.replaying) this.turnNow(false);
        break;
      case 'subagent/descriptor':
        if (this.replaying) break;
        this.o.onDescriptor(d);
        // Told again after the earlier part's, which it outdates.
        this.awaiting?.descriptors.push(d);
        break;
      case 'agent/inbox/spliced':
        // A claim of next-step messages is the admission of steers: the
        // user messages logged right after it are those steers.
        if (d.target === 'next-step' && d.removedCount > 0 && !(d.inserted && d.inserted.length)) this.admitting = d.removedCount;
        break;
      case 'step/start':
        this.admitting = 0;
        break;
      default:
        // Log-only or unknown type: the event log row is all it gets.
        break;
    }
  }

  // turnNow tells the page whether a turn runs, as a drawn event says.
  turnNow(running) {
    if (this.awaiting) this.awaiting.turnSeen = true;
    this.o.onTurn(running);
  }

  /**
   * Scrolls to the conversation row of event seq (or the last row before
   * it, for an event the conversation does not show) and marks it.
   */
  reveal(seq) {
    // An event of the earlier part still to come: shown once it is in.
    if (this.awaiting && !(this.events[0]?.seq <= seq)) {
      this.awaiting.reveal = seq;
      return;
    }
    // An event above the drawn rows: draw down to it first.
    while (this.earlier.length && this.events[this.earlier.at(-1)[1]].seq > seq) this.drawEarlier();
    let best = null;
    for (const el of this.o.conv.querySelectorAll('[data-seq]')) {
      const at = Number(el.dataset.finalSeq ?? el.dataset.seq);
      if (Number(el.dataset.seq) <= seq) best = el;
      if (at === seq || Number(el.dataset.seq) === seq) {
        best = el;
        break;
      }
    }
    for (const el of this.o.conv.querySelectorAll('[data-hit]')) el.removeAttribute('data-hit');
    if (!best) return;
    best.setAttribute('data-hit', String(seq));
    if (best.tagName === 'DETAILS') best.open = true;
    this.stick = false;
    this.pinned = best;
    this.center(best);
  }

  // center scrolls the conversation (only its own scroller, not the page
  // around it) so that el is in the middle.
  center(el) {
    const sc = this.o.scroller;
    const r = el.getBoundingClientRect();
    const p = sc.getBoundingClientRect();
    sc.scrollTop += r.top - p.top - (p.height - r.height) / 2;
  }

  // add appends a conversation row; a run end marker shown before an event
  // of its run arrived stays after it.
  add(el) {
    if (this.placeholder) {
      this.placeholder.remove();
      this.placeholder = null;
    }
    if (this.now !== null) el.dataset.time = String(this.now);
    let before = null;
    for (let c = this.target.lastElementChild; c && c.dataset.runEnd && this.now !== null && Number(c.dataset.time) >= this.now; c = c.previousElementSibling) before = c;
    this.target.insertBefore(el, before);
    return el;
  }

  /**
   * Marks where each settled run of the session ended that did not
   * complete (its stop reason and diagnostic), after the last event of
   * that run: a failed run never reads as a green completed turn.
   * @param {{runId: string, state: string, stopReason: string, diagnostic?: string, endedAt: number|null}[]} runs
   */
  runEnds(runs) {
    if (!this.loaded) return;
    for (const r of runs) {
      if (r.state === 'running' || !r.stopReason || r.stopReason === 'completed' || this.ends.has(r.runId)) continue;
      const st = stateStyle(r.stopReason);
      const el = h('div', { class: `sep end run-end tone-${st.tone}`, role: 'separator', 'data-testid': 'run-end', 'data-run-end': r.runId, 'data-time': r.endedAt ?? '' },
        h('span', { 'aria-hidden': 'true' }, `${st.icon} `), `${r.taskId ? 'Activation' : 'Run'} ended: ${r.stopReason}`, r.diagnostic ? ` — ${r.diagnostic}` : '');
      this.ends.set(r.runId, el);
      if (this.placeholder) {
        this.placeholder.remove();
        this.placeholder = null;
      }
      this.placeEnd(el, r.endedAt);
    }
  }

  // placeEnd puts a run end marker after the last row of the run (rows
  // are in time order); one that belongs above the drawn rows waits for
  // the segment it belongs in.
  placeEnd(el, at) {
    let after = this.o.conv.lastElementChild;
    while (after && after !== this.top && at !== null && after.dataset.time && Number(after.dataset.time) > at) after = after.previousElementSibling;
    if (after && after === this.top) {
      this.pendingEnds.push([el, at]);
      return;
    }
    this.o.conv.insertBefore(el, after ? after.nextSibling : this.o.conv.firstChild);
  }

  userMessage(seq, d) {
    const src = d.source || {};
    const text = blocksText(d.content);
    const extras = nonText(d.content);
    this.notePrompt(d, text);
    if (src.form === 'notice' || src.kind === 'subagent-settled') {
      this.add(h('details', { class: 'notice', 'data-seq': seq, 'data-testid': 'msg-notice' },
        h('summary', {}, h('span', { 'aria-hidden': 'true' }, '◇ '), src.summary || 'Runtime notice',
          src.senderSessionId ? [' — ', this.childLink(src.senderSessionId)] : null),
        h('div', { class: 'body' }, text), extras));
      return;
    }
    if (src.kind === 'plugin') {
      this.add(h('details', { class: 'notice', 'data-seq': seq, 'data-testid': 'msg-context' },
        h('summary', {}, h('span', { 'aria-hidden': 'true' }, '⋯ '), `Context from ${src.plugin || 'a plugin'}${src.form ? ` (${src.form})` : ''}`),
        h('div', { class: 'body' }, text), extras));
      return;
    }
    let who = ['User'];
    let cls = 'user';
    const steered = this.admitting > 0;
    if (steered) this.admitting--;
    if (src.kind === 'subagent-report') {
      who = ['Report from child ', src.senderSessionId ? this.childLink(src.senderSessionId) : 'unknown'];
      cls = 'relay';
    } else if (src.kind === 'coordinator' || src.form === 'relay') {
      who = ['From parent agent', src.senderSessionId ? [' ', this.childLink(src.senderSessionId)] : null];
      cls = 'relay';
    }
    this.add(h('article', { class: `msg ${cls}`, 'data-seq': seq, 'data-testid': 'msg-user', 'data-steered': steered },
      h('header', {}, h('span', { class: 'who' }, who),
        steered ? h('span', { class: 'chip steered', 'data-testid': 'steered', title: 'Steered into the running turn: a model step admitted it' }, '↪ steered') : null),
      h('div', { class: 'body' }, text),
      extras));
  }

  // notePrompt tells the page the text of the log's first prompt.
  notePrompt(d, text) {
    const src = d.source || {};
    if (this.prompted || !(!src.kind || src.kind === 'user' || src.kind === 'coordinator' || src.form === 'relay')) return;
    // The first prompt may be in the earlier part still to come.
    if (this.awaiting) {
      this.awaiting.prompt ??= { d, text };
      return;
    }
    this.prompted = true;
    this.o.onPrompt(text ?? blocksText(d.content));
  }

  bubble(seq, d) {
    const key = `${d.turn}:${d.step}`;
    let b = this.streams.get(key);
    if (!b) {
      const body = h('div', { class: 'body', 'data-testid': 'assistant-text' });
      const reasoningBody = h('div', { class: 'body' });
      const reasoning = h('details', { class: 'reasoning', hidden: true }, h('summary', {}, 'Reasoning'), reasoningBody);
      const status = h('span', { class: 'streaming' }, 'writing…');
      const el = this.add(h('article', { class: 'msg assistant', 'data-seq': seq, 'data-testid': 'msg-assistant', 'data-state': 'streaming' },
        h('header', {}, h('span', { class: 'who' }, 'Assistant'), status), reasoning, body));
      b = { el, body, reasoning, reasoningBody, status };
      this.streams.set(key, b);
      this.o.conv.setAttribute('aria-busy', 'true');
    }
    return b;
  }

  chunk(seq, d) {
    const c = d.chunk || {};
    if (c.type === 'text-delta' && c.text) {
      this.bubble(seq, d).body.append(c.text);
    } else if (c.type === 'reasoning-delta' && c.text) {
      const b = this.bubble(seq, d);
      b.reasoning.hidden = false;
      b.reasoningBody.append(c.text);
    }
  }

  assistantMessage(seq, d) {
    const key = `${d.turn}:${d.step}`;
    const content = (d.message && d.message.content) || [];
    const text = blocksText(content);
    const reasoning = content.filter((b) => b && b.type === 'reasoning').map((b) => b.text || '').join('');
    const u = d.usage;
    const t = this.turns.get(d.turn);
    if (u && t) {
      t.input += u.inputTokens || 0;
      t.output += u.outputTokens || 0;
    }
    let b = this.streams.get(key);
    if (!b && !text && !reasoning) return; // usage-only record
    b = b || this.bubble(seq, d);
    this.streams.delete(key);
    if (!text && !reasoning && !b.body.textContent && b.reasoning.hidden) {
      b.el.remove();
    } else {
      // The assembled message is the truth; it replaces the streamed deltas.
      if (text || !b.body.textContent) b.body.textContent = text;
      if (reasoning) {
        b.reasoning.hidden = false;
        b.reasoningBody.textContent = reasoning;
      }
      b.el.dataset.state = d.interrupted ? 'interrupted' : 'final';
      b.el.dataset.finalSeq = String(seq);
      b.status.textContent = d.interrupted ? 'interrupted' : '';
      if (u) b.el.querySelector('header').append(h('span', { class: 'tokens', 'data-testid': 'msg-usage' }, formatUsage(u.inputTokens, u.outputTokens)));
    }
    if (this.streams.size === 0) this.o.conv.setAttribute('aria-busy', 'false');
  }

  toolCall(seq, d, time) {
    const args = h('pre', {}, prettyJSON(d.arguments ?? ''));
    const state = h('span', { class: 'tool-state' }, 'running…');
    const result = h('div', { class: 'tool-result', hidden: true });
    const link = h('span', { class: 'tool-child' });
    const el = this.add(h('details', { class: 'tool', 'data-seq': seq, 'data-testid': 'tool', 'data-call-id': d.callId || '' },
      h('summary', {}, h('span', { 'aria-hidden': 'true' }, '⚙ '), 'Tool ', h('code', {}, d.name || '?'), ' ', state, link),
      h('h4', {}, 'Arguments'), args, result));
    const t = { el, state, result, link, from: time, until: null, tool: d.name || '', args: typeof d.arguments === 'string' ? d.arguments : '', text: '' };
    if (d.callId) this.tools.set(d.callId, t);
    this.unlinked.add(t);
    this.relink();
    return t;
  }

  /** Links tool calls to the child they name or started, once that child is known. */
  relink() {
    for (const t of this.unlinked) {
      const id = this.o.resolveChild({ text: `${t.args}\n${t.text}`, tool: t.tool, from: t.from, until: t.until });
      if (!id) continue;
      this.unlinked.delete(t);
      t.el.dataset.child = id;
      t.link.replaceChildren(' → ', this.childLink(id));
    }
  }

  // childLink is a link to a session: its name, and a deep link that
  // survives a reload.
  childLink(id) {
    return h('a', { href: `#s=${encodeURIComponent(id)}`, class: 'child-link', 'data-testid': 'child-link', 'data-id': id }, this.o.nameOf(id));
  }

  toolResult(seq, d, time) {
    const content = d.content;
    const isError = !!d.isError;
    const t = (d.callId && this.tools.get(d.callId)) || this.toolCall(seq, { name: d.name, arguments: '' }, time);
    t.until = time;
    t.text = Array.isArray(content) ? blocksText(content) : typeof content === 'string' ? content : '';
    if (this.unlinked.has(t)) this.relink();
    t.state.textContent = isError ? '✕ error' : '✓ done';
    t.el.dataset.result = isError ? 'error' : 'ok';
    t.result.hidden = false;
    t.result.replaceChildren(h('h4', {}, isError ? 'Error' : 'Result'), h('pre', {}, Array.isArray(content) ? blocksText(content) || prettyJSON(content) : prettyJSON(content ?? '')));
  }

  turnEnd(seq, d, time) {
    const r = d.reason || {};
    const t = this.turns.get(d.turn);
    const kind = r.kind || 'ended';
    const icon = kind === 'completed' ? '✓' : kind === 'aborted' || kind === 'interrupted' ? '⊘' : '✕';
    let text = `Turn ${d.turn ?? ''} ${kind}`;
    if (r.reason && r.reason.kind) text += ` (by ${r.reason.kind})`;
    if (r.message) text += `: ${r.message}`;
    if (r.code) text += ` [${r.code}]`;
    const took = t && t.start !== null && time !== null ? formatDuration(Math.max(0, time - t.start)) : '';
    this.add(h('div', { class: `sep end ${kind === 'completed' ? '' : 'bad'}`, role: 'separator', 'data-seq': seq, 'data-testid': 'turn-end' },
      h('span', { 'aria-hidden': 'true' }, `${icon} `), text,
      took ? h('span', { class: 'dur', 'data-testid': 'turn-duration' }, ` · ${took}`) : null,
      t && (t.input || t.output) ? h('span', { class: 'tokens', 'data-testid': 'turn-usage' }, ` · ${formatUsage(t.input, t.output)}`) : null));
    // A turn that ended leaves no bubble streaming.
    for (const [key, b] of this.streams) {
      if (key.startsWith(`${d.turn}:`)) {
        b.el.dataset.state = 'final';
        b.status.textContent = '';
        this.streams.delete(key);
      }
    }
    if (this.streams.size === 0) this.o.conv.setAttribute('aria-busy', 'false');
  }
}

// splitAt returns where the drawn tail of a replayed log starts: after a
// turn end, so the tail begins with a whole turn (tailStart); 0 (draw it
// all) for a short log or one without turns.
function splitAt(events) {
  return events.length <= TAIL_PAGE ? 0 : tailStart(events);
}

// tailStart returns where the drawn end of events starts: after the last
// turn end that leaves TAIL_ROWS rows or more below it, else 0.
function tailStart(events) {
  let rows = 0;
  for (let i = events.length; i > 0; i--) {
    if (rows >= TAIL_ROWS && events[i - 1].type === 'turn/end') return i;
    if (ROW_TYPES.has(events[i - 1].type)) rows++;
  }
  return 0;
}

// segments cuts events [0, end) into ranges of at least SEGMENT events,
// each after a turn end (the first from 0), oldest first.
function segments(events, end) {
  const out = [];
  let to = end;
  while (to > 0) {
    let from = 0;
    for (let i = to - SEGMENT; i > 0; i--) {
      if (events[i - 1].type === 'turn/end') {
        from = i;
        break;
      }
    }
    out.push([from, to]);
    to = from;
  }
  return out.reverse();
}

function nonText(content) {
  if (!Array.isArray(content)) return null;
  const other = content.filter((b) => b && b.type !== 'text');
  if (other.length === 0) return null;
  return h('details', { class: 'blocks' }, h('summary', {}, `${other.length} non-text block${other.length > 1 ? 's' : ''} (${[...new Set(other.map((b) => b.type))].join(', ')})`), h('pre', {}, prettyJSON(other)));
}

// summarize says in a few words what an event is, for the event log.
function summarize(type, d) {
  if (!d || typeof d !== 'object') return String(d ?? '');
  switch (type) {
    case 'assistant/chunk': {
      const c = d.chunk || {};
      return c.text ? `${c.type}: ${JSON.stringify(c.text)}` : c.type || 'chunk';
    }
    case 'user/message':
    case 'assistant/message':
      return clip(blocksText(d.content || d.message?.content)) || '(no text)';
    case 'tool/call':
    case 'tool/result':
      return `${d.name || ''} ${d.callId || ''}`.trim();
    case 'turn/start':
    case 'step/start':
    case 'step/end':
      return `turn ${d.turn ?? ''}${d.step !== undefined ? ` step ${d.step}` : ''}`;
    case 'turn/end':
      return `turn ${d.turn ?? ''}: ${d.reason?.kind || ''}`;
    case 'a2a/task':
      return `turn ${d.turn ?? ''}: remote task ${d.taskId || '?'}${d.contextId ? ` in context ${d.contextId}` : ''}`;
    case 'subagent/descriptor':
      return `${d.mode || ''} via ${d.provider || '?'}${d.label ? ` — ${d.label}` : ''}`;
    case 'approval/policy':
      return `${d.policy || ''} (${d.source || ''})`;
    case 'history/snapshot':
      return `history of ${d.messages?.length ?? 0} message${d.messages?.length === 1 ? '' : 's'} (resume starts here)`;
    case 'agent/inbox/spliced':
      return `${d.outcome || (d.inserted?.length ? `inserted ${d.inserted.length}` : `claimed ${d.removedCount || 0}`)} → ${d.target || ''}`;
    default:
      return clip(JSON.stringify(d));
  }
}

function clip(s) {
  return s.length > 80 ? `${s.slice(0, 79)}…` : s;
}
