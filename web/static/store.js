// The dashboard's one store: providers, session nodes and runs merged from
// the list endpoints, POST answers and the lifecycle stream; token usage and
// first prompts read from session logs; and the UI state (selection, filters,
// connection). Every other module keeps no mutable state of its own outside
// an instance it is handed. Merging is idempotent and monotonic (a run that
// ended never goes back to running, a disposed run never back to settled), so
// replayed events can arrive in any order without corrupting the view.

import { firstWords, formatClock, shortId, toMillis } from './format.js';

const RUN_RANK = { running: 0, settled: 1, disposed: 2 };

// The log events trace.js builds spans from.
const TRACE_TYPES = new Set(['user/message', 'turn/start', 'turn/end', 'step/start', 'step/end', 'assistant/message', 'tool/call', 'tool/result']);

export class Store {
  constructor() {
    /** @type {Map<string, object>} provider name → provider, in registration order */
    this.providers = new Map();
    /** @type {Map<string, object>} session id → node */
    this.nodes = new Map();
    /** @type {Map<string, object>} run id → run */
    this.runs = new Map();
    /** @type {Map<string, Set<string>>} parent id → child ids */
    this.kids = new Map();
    /** @type {Map<string, Map<number, {time: number|null, input: number, output: number}>>} session id → seq → usage of one step */
    this.usage = new Map();
    /** @type {Set<string>} sessions whose whole log has been read into usage */
    this.logsRead = new Set();
    /** @type {Map<string, object[]>} session id → the {seq, type, time, data} events of its log the trace reads */
    this.traces = new Map();
    /** @type {Set<string>} sessions this page saw disposed (its own dispose, or a 409 DISPOSED) */
    this.disposed = new Set();
    /** @type {Map<string, object>} approval id → pending approval (GET /v1/approvals), oldest first */
    this.approvals = new Map();
    /** @type {Map<string, string>} session id → text of its first prompt */
    this.prompts = new Map();
    this.seen = 0;
    this.version = 0;
    this.rootsCache = null;
    this.listeners = new Set();
    /**
     * UI state. Views read it; a change that must re-render goes through
     * set(), one that a view applies itself (the event log filter, the
     * Delegate form's parent pick) is assigned.
     */
    this.ui = {
      selected: '',
      runId: '',
      // The Delegate form's parent: '' is a new root session, null follows
      // the root of the selected tree.
      parentChoice: null,
      filter: { q: '', provider: '', state: '', since: '' },
      // Sessions whose conversation says q (search.js): the tree keeps them too.
      found: { q: '', ids: new Set() },
      log: { type: '', chunks: false },
      tab: 'conv',
      // The page shown: '' the sessions, 'webhooks' the Webhooks page,
      // 'approvals' the approvals inbox.
      page: '',
      conn: { lifecycle: 'connecting', session: '', detail: '' },
      baselineLoaded: false,
    };
  }

  /** Changes UI state fields and tells the listeners. */
  set(patch) {
    Object.assign(this.ui, patch);
    this.changed();
  }

  onChange(fn) {
    this.listeners.add(fn);
  }

  changed() {
    this.version++;
    for (const fn of this.listeners) fn();
  }

  setProviders(list) {
    this.providers = new Map(list.map((p) => [p.name, p]));
    this.changed();
  }

  node(id) {
    let n = this.nodes.get(id);
    if (!n) {
      n = { id, parentId: null, provider: '', mode: '', label: '', createdAt: null, status: '', runIds: [], taskId: '', seedLength: 0, known: false, seen: this.seen++ };
      this.nodes.set(id, n);
    }
    return n;
  }

  // setParent keeps the parent → children index in step with n.parentId.
  setParent(n, parentId) {
    if (!parentId || n.parentId === parentId) return;
    if (n.parentId) this.kids.get(n.parentId)?.delete(n.id);
    n.parentId = parentId;
    let set = this.kids.get(parentId);
    if (!set) {
      set = new Set();
      this.kids.set(parentId, set);
    }
    set.add(n.id);
  }

  /** Merges a session header from GET /v1/sessions or POST /v1/sessions. */
  mergeSession(s) {
    if (!s || !s.id) return;
    const n = this.node(s.id);
    n.known = true;
    this.setParent(n, s.parentSessionId);
    if (s.label) n.label = s.label;
    if (s.seedLength) n.seedLength = s.seedLength;
    const ms = toMillis(s.createdAt);
    if (ms !== null) n.createdAt = ms;
    if (s.mode) n.mode = s.mode;
    if (s.provider) n.provider = s.provider;
    if (s.activity) n.status = s.activity;
    this.changed();
  }

  /** Merges a run from GET /v1/runs, POST /v1/runs or GET /v1/runs/{id}. */
  mergeRun(r) {
    if (!r || !r.runId) return;
    const result = r.result || {};
    this.upsertRun({
      runId: r.runId,
      childId: r.childSessionId,
      provider: r.provider,
      local: r.local,
      parentId: r.parentSessionId,
      taskId: r.taskId,
      state: r.state,
      stopReason: result.stopReason,
      output: result.output,
      structured: result.structured,
      diagnostic: result.diagnostic,
      startedAt: toMillis(r.startedAt),
      endedAt: toMillis(r.endedAt),
      mode: r.kind === 'activation' ? 'continuable' : r.kind === 'one-shot' ? 'one-shot' : '',
    });
  }

  /** Applies a subagent/start or subagent/end lifecycle event. */
  applyLifecycle(type, d) {
    if (!d || !d.runId) return;
    const now = Date.now();
    if (type === 'subagent/start') {
      this.upsertRun({ runId: d.runId, childId: d.id, provider: d.provider, local: d.local, parentId: d.parentSessionId, taskId: d.taskId, state: 'running', seenStart: now });
    } else if (type === 'subagent/end') {
      this.upsertRun({ runId: d.runId, childId: d.id, provider: d.provider, local: d.local, parentId: d.parentSessionId, taskId: d.taskId, state: 'settled', stopReason: d.stopReason || 'unknown', seenEnd: now, lastAssistantMessage: d.lastAssistantMessage });
    }
  }

  upsertRun(u) {
    let r = this.runs.get(u.runId);
    if (!r) {
      r = { runId: u.runId, childId: '', provider: '', parentId: '', taskId: '', state: 'running', stopReason: '', startedAt: null, endedAt: null, local: undefined, mode: '' };
      this.runs.set(u.runId, r);
    }
    for (const k of ['childId', 'provider', 'parentId', 'taskId', 'mode', 'stopReason']) {
      if (u[k]) r[k] = u[k];
    }
    if (typeof u.local === 'boolean') r.local = u.local;
    if (u.lastAssistantMessage) r.output = r.output || u.lastAssistantMessage;
    if (Array.isArray(u.output) && u.output.length) r.output = u.output;
    if (u.structured !== undefined) r.structured = u.structured;
    if (u.diagnostic) r.diagnostic = u.diagnostic;
    if (u.state && (RUN_RANK[u.state] ?? 0) >= (RUN_RANK[r.state] ?? 0)) r.state = u.state;
    // Server times win over the times this page saw the events.
    if (u.startedAt) r.startedAt = u.startedAt;
    else if (u.seenStart && !r.startedAt) r.startedAt = u.seenStart;
    if (u.endedAt) r.endedAt = u.endedAt;
    else if (u.seenEnd && !r.endedAt) r.endedAt = u.seenEnd;
    if (r.state !== 'running' && !r.endedAt && r.startedAt) r.endedAt = Math.max(r.startedAt, Date.now());
    if (r.taskId && !r.mode) r.mode = 'continuable';

    if (r.childId) {
      const n = this.node(r.childId);
      this.setParent(n, r.parentId);
      if (r.provider && !n.provider) n.provider = r.provider;
      if (r.mode) n.mode = r.mode;
      else if (!n.mode && !r.taskId) n.mode = 'one-shot';
      if (!n.runIds.includes(r.runId)) n.runIds.push(r.runId);
    }
    if (r.parentId) this.node(r.parentId);
    this.changed();
  }

  /**
   * Records a continuable child this page just created (POST /v1/subagents)
   * with its first task, whose activation may not have started yet.
   */
  addContinuableChild({ id, parentId, provider, label, taskId }) {
    const n = this.node(id);
    this.setParent(n, parentId);
    n.provider = provider;
    n.mode = 'continuable';
    if (label) n.label = label;
    this.announceTask(id, taskId);
  }

  /**
   * Records the task an API answer named for a continuable child (a start,
   * or a followup that started a new task): until its subagent/start
   * arrives, the child shows as starting.
   */
  announceTask(id, taskId) {
    if (!taskId) return;
    this.node(id).taskId = taskId;
    this.changed();
  }

  /** Records whether a root session's own agent is running a turn, as its log shows. */
  setActivity(id, running) {
    const n = this.nodes.get(id);
    if (!n) return;
    const status = running ? 'running' : 'inactive';
    if (n.status === status) return;
    n.status = status;
    this.changed();
  }

  /** Applies a subagent/descriptor payload read from the node's own log. */
  applyDescriptor(id, d) {
    if (!d || typeof d !== 'object') return;
    const n = this.node(id);
    if (d.mode) n.mode = d.mode;
    if (d.label) n.label = d.label;
    if (d.provider && !n.provider) n.provider = d.provider;
    this.changed();
  }

  isRoot(n) {
    return !n.parentId && n.runIds.length === 0 && n.mode !== 'one-shot' && n.mode !== 'continuable';
  }

  /** The runs of a node, oldest first (by start; unknown starts last). */
  nodeRuns(n) {
    return n.runIds.map((id) => this.runs.get(id)).filter(Boolean)
      .sort((a, b) => (a.startedAt ?? Infinity) - (b.startedAt ?? Infinity));
  }

  /**
   * What a node shows: mode (root | one-shot | continuable), state word,
   * stop reason of the latest settled run, active duration, latest run,
   * whether that run was disposed, and for continuable children the
   * current task and how many tasks ran.
   */
  view(n) {
    const runs = this.nodeRuns(n);
    const latest = runs.at(-1) || null;
    const root = this.isRoot(n);
    const mode = root ? 'root' : n.mode || (latest && latest.taskId ? 'continuable' : 'one-shot');
    // A task an answer announced whose activation has not been seen yet.
    const announced = n.taskId && !runs.some((r) => r.taskId === n.taskId) ? n.taskId : '';
    let state;
    const running = runs.some((r) => r.state === 'running');
    if (root) state = n.status || 'root';
    else if (running) state = 'running';
    else if (announced) state = 'starting';
    else if (!latest) state = n.status || 'inactive';
    else if (mode === 'continuable') state = 'inactive';
    else state = latest.stopReason || 'settled';
    const stopReason = latest && !announced && latest.state !== 'running' ? latest.stopReason : '';
    let durationMs = null;
    const now = Date.now();
    for (const r of runs) {
      if (!r.startedAt) continue;
      durationMs = (durationMs || 0) + Math.max(0, (r.endedAt || now) - r.startedAt);
    }
    const taskId = announced || (latest && latest.taskId) || '';
    const tasks = runs.filter((r) => r.taskId).length + (announced ? 1 : 0);
    const disposed = this.disposed.has(n.id) || (!!latest && latest.state === 'disposed');
    return { mode, state, stopReason, durationMs, running, latest, disposed, taskId, tasks };
  }

  /**
   * Records that session id was disposed: a root's tree (with every
   * continuable child in it, as the server disposes them), or one child.
   */
  markDisposed(id, { tree = false } = {}) {
    const n = this.nodes.get(id);
    if (!n) return;
    this.disposed.add(id);
    if (tree) for (const m of this.subtree(n)) if (this.view(m).mode === 'continuable') this.disposed.add(m.id);
    this.changed();
  }

  /** Replaces the pending approvals with list (GET /v1/approvals?state=pending). */
  setApprovals(list) {
    this.approvals = new Map(list.filter((a) => a && a.id && a.state === 'pending').map((a) => [a.id, a]));
    this.changed();
  }

  /** Adds or updates one pending approval. */
  putApproval(a) {
    this.approvals.set(a.id, a);
    this.changed();
  }

  /** Forgets approval id: it was decided, expired or cancelled. */
  dropApproval(id) {
    if (this.approvals.delete(id)) this.changed();
  }

  /** How many pending approvals session id waits on. */
  pendingFor(id) {
    let n = 0;
    for (const a of this.approvals.values()) if (a.sessionId === id) n++;
    return n;
  }

  children(id) {
    const set = this.kids.get(id);
    if (!set) return [];
    return [...set].map((k) => this.nodes.get(k)).filter(Boolean).sort(byAge);
  }

  /** The root of the tree n is in (n itself for a root). */
  treeRoot(n) {
    let cur = n;
    for (let i = 0; i < 1000 && cur.parentId && this.nodes.has(cur.parentId); i++) cur = this.nodes.get(cur.parentId);
    return cur;
  }

  /** n and every node below it, in tree order. */
  subtree(n) {
    const out = [];
    const walk = (m) => {
      out.push(m);
      for (const c of this.children(m.id)) walk(c);
    };
    walk(n);
    return out;
  }

  /**
   * Drops a node nothing else refers to (no runs, no children, not read
   * from the API), such as one a link named that does not exist. Returns
   * whether it was dropped.
   */
  forget(id) {
    const n = this.nodes.get(id);
    if (!n || n.known || n.runIds.length || this.kids.get(id)?.size) return false;
    this.nodes.delete(id);
    if (n.parentId) this.kids.get(n.parentId)?.delete(id);
    this.changed();
    return true;
  }

  /** Records the usage of assistant/message events read from a session's log. */
  recordUsage(id, events) {
    let m = this.usage.get(id);
    let added = false;
    for (const ev of events) {
      if (ev.type !== 'assistant/message') continue;
      const u = ev.data && ev.data.usage;
      if (!u || ev.seq === null || ev.seq === undefined) continue;
      if (!m) {
        m = new Map();
        this.usage.set(id, m);
      }
      if (m.has(ev.seq)) continue;
      m.set(ev.seq, { time: toMillis(ev.time), input: u.inputTokens || 0, output: u.outputTokens || 0 });
      added = true;
    }
    if (added) this.changed();
  }

  /** Records the events of a session's log (read whole) that make up its trace. */
  recordTrace(id, events) {
    this.traces.set(id, events.filter((e) => TRACE_TYPES.has(e.type)));
    this.changed();
  }

  /** Records the text of a session's first prompt, for its name. */
  recordPrompt(id, text) {
    if (this.prompts.has(id) && (this.prompts.get(id) || !text)) return;
    this.prompts.set(id, text || '');
    this.changed();
  }

  /**
   * Token usage of a session's own steps (its fork seed left out), and of
   * each of its runs: a step belongs to the latest run that started before
   * it. Returns {input, output, steps, byRun: Map<runId, {input, output}>}.
   */
  sessionUsage(n) {
    const out = { input: 0, output: 0, steps: 0, byRun: new Map() };
    const m = this.usage.get(n.id);
    if (!m) return out;
    const runs = this.nodeRuns(n).filter((r) => r.startedAt);
    for (const [seq, u] of m) {
      if (seq < n.seedLength) continue;
      out.input += u.input;
      out.output += u.output;
      out.steps++;
      let owner = null;
      for (const r of runs) if (u.time === null || r.startedAt <= u.time) owner = r;
      owner = owner || runs[0];
      if (!owner) continue;
      const b = out.byRun.get(owner.runId) || { input: 0, output: 0 };
      b.input += u.input;
      b.output += u.output;
      out.byRun.set(owner.runId, b);
    }
    return out;
  }

  /** Summed usage of n's whole tree, and how many of its sessions' logs were read. */
  treeUsage(n) {
    const all = this.subtree(n);
    const out = { input: 0, output: 0, steps: 0, read: 0, total: all.length };
    for (const m of all) {
      const u = this.sessionUsage(m);
      out.input += u.input;
      out.output += u.output;
      out.steps += u.steps;
      if (this.logsRead.has(m.id)) out.read++;
    }
    return out;
  }

  /**
   * The name a person knows a session by: its label; for an unlabelled
   * child its provider and the first words of its prompt; for roots with
   * the same name, their creation time tells them apart.
   */
  title(n) {
    const base = this.baseName(n);
    if (!this.isRoot(n) && n.parentId) return base;
    this.roots();
    const twins = this.rootsCache.names.get(base);
    if (!twins || twins.length < 2 || !n.createdAt) return base;
    // Just enough of the creation time to tell the twins apart.
    const day = new Set(twins.map((t) => new Date(t).toDateString())).size > 1;
    const millis = new Set(twins.map((t) => Math.floor(t / 1000))).size < twins.length;
    return `${base} · ${formatClock(n.createdAt, { day, millis })}`;
  }

  baseName(n) {
    if (n.label) return n.label;
    if (this.isRoot(n)) return 'Root session';
    const words = firstWords(this.prompts.get(n.id) || '');
    if (n.provider && words) return `${n.provider}: ${words}`;
    return `${n.provider || 'child'} ${shortId(n.id)}`;
  }

  /** Top-level nodes (no parent, or a parent this page does not know), newest first. */
  roots() {
    if (this.rootsCache && this.rootsCache.version === this.version) return this.rootsCache.list;
    const list = [...this.nodes.values()]
      .filter((n) => !n.parentId || !this.nodes.has(n.parentId))
      .sort(byAge)
      .reverse();
    const names = new Map();
    for (const r of list) {
      const b = this.baseName(r);
      if (!names.has(b)) names.set(b, []);
      names.get(b).push(r.createdAt ?? 0);
    }
    this.rootsCache = { version: this.version, list, names };
    return list;
  }
}

function byAge(a, b) {
  const ak = a.createdAt ?? Infinity;
  const bk = b.createdAt ?? Infinity;
  if (ak !== bk && ak !== Infinity && bk !== Infinity) return ak - bk;
  return a.seen - b.seen;
}
