// The dashboard's state: providers, session nodes and runs, merged from the
// list endpoints, POST answers and the lifecycle stream. Merging is
// idempotent and monotonic (a run that ended never goes back to running, a
// disposed run never back to settled), so baseline reloads and replayed
// events can arrive in any order without corrupting the view.

import { toMillis } from './format.js';

const RUN_RANK = { running: 0, settled: 1, disposed: 2 };

export class Model {
  constructor() {
    /** @type {Map<string, object>} provider name → provider, in registration order */
    this.providers = new Map();
    /** @type {Map<string, object>} session id → node */
    this.nodes = new Map();
    /** @type {Map<string, object>} run id → run */
    this.runs = new Map();
    this.seen = 0;
    this.listeners = new Set();
  }

  onChange(fn) {
    this.listeners.add(fn);
  }

  changed() {
    for (const fn of this.listeners) fn();
  }

  setProviders(list) {
    this.providers = new Map(list.map((p) => [p.name, p]));
    this.changed();
  }

  node(id) {
    let n = this.nodes.get(id);
    if (!n) {
      n = { id, parentId: null, provider: '', mode: '', label: '', createdAt: null, status: '', runIds: [], taskId: '', known: false, seen: this.seen++ };
      this.nodes.set(id, n);
    }
    return n;
  }

  /** Merges a session header from GET /v1/sessions or POST /v1/sessions. */
  mergeSession(s) {
    if (!s || !s.id) return;
    const n = this.node(s.id);
    n.known = true;
    if (s.parentSessionId) n.parentId = s.parentSessionId;
    if (s.label) n.label = s.label;
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
    if (u.lastAssistantMessage) r.lastAssistantMessage = u.lastAssistantMessage;
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
      if (r.parentId) n.parentId = r.parentId;
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
    n.parentId = parentId;
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
    return { mode, state, stopReason, durationMs, running, latest, disposed: !!latest && latest.state === 'disposed', taskId, tasks };
  }

  children(id) {
    return [...this.nodes.values()].filter((n) => n.parentId === id).sort(byAge);
  }

  /** Top-level nodes (no parent, or a parent this page does not know), newest first. */
  roots() {
    return [...this.nodes.values()]
      .filter((n) => !n.parentId || !this.nodes.has(n.parentId))
      .sort(byAge)
      .reverse();
  }

  /** Every node in tree order with its depth, for the parent picker. */
  flatten() {
    const out = [];
    const walk = (n, depth) => {
      out.push({ node: n, depth });
      for (const c of this.children(n.id)) walk(c, depth + 1);
    };
    for (const r of this.roots()) walk(r, 0);
    return out;
  }
}

function byAge(a, b) {
  const ak = a.createdAt ?? Infinity;
  const bk = b.createdAt ?? Infinity;
  if (ak !== bk && ak !== Infinity && bk !== Infinity) return ak - bk;
  return a.seen - b.seen;
}
