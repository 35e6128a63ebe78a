// subagentd dashboard: wires the API, the two SSE streams, the session tree,
// the transcript and the forms together. See web/web.go for the overview.

import { api, describeError, listAll } from './api.js';
import { formatDuration, h, shortId, stateStyle, textBlocks } from './format.js';
import { clearErrors, parseList, parseMaxDepth, parseSchema, setFieldError, showApiError } from './forms.js';
import { Model } from './model.js';
import { EventStream } from './stream.js';
import { Transcript } from './transcript.js';
import { Tree } from './tree.js';

const $ = (id) => document.getElementById(id);

const LIFECYCLE_TYPES = ['subagent/start', 'subagent/end', 'subagent/provider-added', 'subagent/provider-removed'];
// EventSource reports only the named events it listens for. Types missing
// here still reach the event log: their seq leaves a gap that EventStream
// repairs from GET /v1/sessions/{id}/events.
const SESSION_TYPES = [
  'turn/start', 'turn/end', 'step/start', 'step/end', 'user/message', 'assistant/chunk',
  'assistant/message', 'tool/call', 'tool/result', 'agent/inbox/spliced', 'session/end-seed',
  'approval/policy', 'sandbox/mode', 'subagent/descriptor', 'request/header', 'request/context',
  'acp/tool-call', 'acp/tool-call-update', 'acp/plan', 'acp/permission',
];

const model = new Model();
const tree = new Tree($('tree'), model, select);
const transcript = new Transcript({
  conv: $('conversation'),
  log: $('eventlog-body'),
  scroller: $('pane-conv'),
  onCount: (n) => { $('log-count').textContent = n ? `(${n})` : ''; },
  onDescriptor: (d) => { if (selected) model.applyDescriptor(selected, d); },
  onTurn: (running) => { if (selected) model.setActivity(selected, running); },
});

let selected = '';
// parentChoice is the start form's parent: the selected session unless the
// user picked another one ('' = a new root session).
let parentChoice = '';
let sessionStream = null;
const streamStates = { lifecycle: 'connecting', session: '' };

// ---- connection indicator -------------------------------------------------

const CONN_TEXT = {
  connected: 'Connected — live',
  connecting: 'Connecting…',
  reconnecting: 'Reconnecting…',
  offline: 'Offline',
};
const CONN_RANK = { connected: 0, connecting: 1, reconnecting: 2, offline: 3 };
let connDetail = '';

function setStreamState(which, state, detail) {
  streamStates[which] = state === 'failed' ? '' : state;
  if (detail || state !== 'offline') connDetail = detail;
  const worst = Object.values(streamStates).filter(Boolean)
    .reduce((a, b) => (CONN_RANK[b] > CONN_RANK[a] ? b : a), 'connected');
  const conn = $('conn');
  conn.dataset.state = worst;
  $('conn-text').textContent = CONN_TEXT[worst] + (worst === 'offline' && connDetail ? ` — ${connDetail}` : '');
  $('transcript-conn').textContent = streamStates.session && streamStates.session !== 'connected'
    ? `Transcript ${CONN_TEXT[streamStates.session].toLowerCase()}` : '';
}

// ---- errors ---------------------------------------------------------------

function showError(context, err) {
  const box = $('errors');
  const msg = `${context}: ${describeError(err)}`;
  const item = h('div', { class: 'error-item', 'data-testid': 'error' },
    h('span', { 'aria-hidden': 'true' }, '✕ '), h('span', {}, msg),
    h('button', { type: 'button', class: 'link', onclick: () => item.remove(), 'aria-label': `Dismiss: ${msg}` }, 'Dismiss'));
  box.append(item);
  while (box.children.length > 4) box.firstElementChild.remove();
}

// ---- providers ------------------------------------------------------------

async function loadProviders() {
  try {
    const res = await api('GET', '/v1/providers');
    model.setProviders((res && res.providers) || []);
  } catch (err) {
    showError('Loading providers', err);
  }
}

// modelName says which model route a provider's children use: the route,
// its model when that differs, and whether it is the offline echo model.
function modelName(p) {
  const m = p.model;
  if (!m) return '';
  const name = m.model && m.route && m.model !== m.route ? `${m.route} · ${m.model}` : m.route || m.model || '';
  return name && m.offline ? `${name} (offline: children echo their prompt)` : name;
}

const CAPS = [
  ['outputSchema', 'output schema', (p) => p.capabilities?.outputSchema],
  ['depthLimit', 'depth limit', (p) => p.capabilities?.depthLimit],
  ['toolFilter', 'tool filter', (p) => p.capabilities?.toolFilter],
  ['persona', 'persona', (p) => p.capabilities?.persona],
  ['steer', 'steer', (p) => p.steer],
  ['resume', 'resume', (p) => p.resume],
];

function renderProviders() {
  const list = [...model.providers.values()];
  $('provider-count').textContent = `(${list.length})`;
  $('providers').replaceChildren(...list.map((p) => {
    const m = modelName(p);
    return h('li', { class: 'provider', 'data-testid': `provider-${p.name}`, 'data-name': p.name },
      h('div', { class: 'provider-head' },
        h('strong', {}, p.name),
        h('span', { class: 'chip' }, p.local ? 'in-process' : 'external process'),
        p.inheritsParentContext ? h('span', { class: 'chip' }, 'sees parent context') : null),
      p.description ? h('p', { class: 'desc' }, p.description) : null,
      m ? h('p', { class: 'model', 'data-testid': 'provider-model' }, 'Children use model: ', h('strong', {}, m)) : null,
      h('ul', { class: 'caps', 'aria-label': `${p.name} capabilities` }, CAPS.map(([key, label, get]) => {
        const on = !!get(p);
        return h('li', { class: on ? 'cap on' : 'cap off', 'data-cap': key, 'data-on': String(on) },
          h('span', { 'aria-hidden': 'true' }, on ? '✓ ' : '✗ '), label,
          h('span', { class: 'visually-hidden' }, on ? ' supported' : ' not supported'));
      })));
  }));
  const models = [...new Set(list.map(modelName).filter(Boolean))];
  const note = $('model-note');
  note.hidden = models.length === 0;
  note.textContent = models.length ? `Model: ${models.join(', ')}` : '';
  renderProviderSelect();
}

function renderProviderSelect() {
  const sel = $('start-provider');
  const cur = sel.value;
  sel.replaceChildren(...[...model.providers.values()].map((p) => h('option', { value: p.name }, p.name)));
  if (cur && model.providers.has(cur)) sel.value = cur;
  updateStartForm();
}

// ---- baseline and lifecycle stream ----------------------------------------

async function loadBaseline() {
  try {
    const [sessions, runs] = await Promise.all([listAll('/v1/sessions', 'sessions'), listAll('/v1/runs', 'runs')]);
    for (const s of sessions) model.mergeSession(s);
    for (const r of runs) model.mergeRun(r);
  } catch (err) {
    showError('Loading sessions', err);
  }
}

const refreshing = new Set();
async function refreshRun(runId) {
  if (refreshing.has(runId)) return;
  refreshing.add(runId);
  try {
    model.mergeRun(await api('GET', `/v1/runs/${encodeURIComponent(runId)}`));
  } catch {
    // Times and results from the lifecycle events stand.
  } finally {
    refreshing.delete(runId);
  }
}

function onLifecycle(ev) {
  const d = ev.data || {};
  if (ev.type === 'subagent/start' || ev.type === 'subagent/end') {
    model.applyLifecycle(ev.type, d);
    if (ev.type === 'subagent/end') refreshRun(d.runId);
    const child = d.id && model.nodes.get(d.id);
    if (child && !child.known && child.parentId) loadSession(d.id);
  } else if (ev.type === 'subagent/provider-added' || ev.type === 'subagent/provider-removed') {
    loadProviders();
  }
}

const loadingSessions = new Set();
async function loadSession(id) {
  if (loadingSessions.has(id)) return;
  loadingSessions.add(id);
  try {
    model.mergeSession(await api('GET', `/v1/sessions/${encodeURIComponent(id)}`));
  } catch {
    // The node keeps what the lifecycle events said; the next event for it
    // tries again.
  } finally {
    loadingSessions.delete(id);
  }
}

// ---- rendering ------------------------------------------------------------

let frame = 0;
function scheduleRender() {
  if (frame) return;
  frame = requestAnimationFrame(() => {
    frame = 0;
    renderAll();
  });
}

let providersShown = null;
function renderAll() {
  if (providersShown !== model.providers) {
    providersShown = model.providers;
    renderProviders();
  }
  const count = tree.render();
  $('tree-empty').hidden = count > 0;
  $('session-count').textContent = model.nodes.size ? `(${model.nodes.size})` : '';
  renderParentSelect();
  renderHead();
}

function renderParentSelect() {
  const sel = $('start-parent');
  const opts = [h('option', { value: '' }, 'New root session')];
  for (const { node, depth } of model.flatten()) {
    const v = model.view(node);
    const name = node.label || shortId(node.id);
    opts.push(h('option', { value: node.id }, `${'  '.repeat(depth)}${depth ? '↳ ' : ''}${name} (${v.mode})`));
  }
  sel.replaceChildren(...opts);
  sel.value = model.nodes.has(parentChoice) ? parentChoice : '';
}

function provider(name) {
  return model.providers.get(name) || null;
}

function metaItem(term, ...value) {
  return h('div', { class: 'kv' }, h('dt', {}, term), h('dd', {}, ...value));
}

function renderHead() {
  const n = selected && model.nodes.get(selected);
  const actions = $('actions');
  if (!n) {
    $('session-title').textContent = 'No session selected';
    $('session-meta').replaceChildren();
    actions.replaceChildren();
    actionsKey = '';
    setStatus('');
    $('message-form').hidden = true;
    $('readonly-note').hidden = true;
    return;
  }
  const v = model.view(n);
  const st = stateStyle(v.state);
  $('session-title').textContent = n.label || (v.mode === 'root' ? `Session ${shortId(n.id)}` : `Child ${shortId(n.id)}`);
  const items = [
    metaItem('State', h('span', { class: `state tone-${st.tone}`, 'data-testid': 'head-state', 'data-state': v.state },
      h('span', { class: `state-icon${v.state === 'running' ? ' spin' : ''}`, 'aria-hidden': 'true' }, st.icon), ` ${v.state}`)),
    metaItem('Mode', v.mode),
  ];
  if (n.provider) items.push(metaItem('Provider', n.provider));
  if (v.stopReason) items.push(metaItem('Stop reason', h('span', { 'data-testid': 'head-stop-reason' }, v.stopReason)));
  if (v.durationMs !== null) items.push(metaItem('Active', h('span', { 'data-dur-head': '' }, formatDuration(v.durationMs))));
  if (n.parentId) {
    const parent = model.nodes.get(n.parentId);
    items.push(metaItem('Parent', h('button', { type: 'button', class: 'link', onclick: () => select(n.parentId) },
      parent && parent.label ? parent.label : shortId(n.parentId))));
  }
  items.push(metaItem('Id', h('code', { 'data-testid': 'head-id' }, n.id)));
  if (v.mode === 'continuable' && v.taskId) {
    items.push(metaItem(v.tasks > 1 ? `Task (${v.tasks} so far)` : 'Task', h('code', { 'data-testid': 'head-task' }, v.taskId)));
  } else if (v.latest) {
    items.push(metaItem('Run', h('code', { 'data-testid': 'head-run' }, v.latest.runId), v.disposed ? ' (disposed)' : ''));
  }
  $('session-meta').replaceChildren(...items);
  renderActions(n, v);
  renderComposer(n, v);
}

// setStatus says what the last action did; route is the followup's answer
// (steered | started), kept for tests and styling.
function setStatus(text, route = '') {
  $('action-status').textContent = text;
  $('action-status').dataset.route = route;
}

function actionButton(id, label, help, fn) {
  return h('button', { type: 'button', id: `action-${id}`, 'data-testid': `action-${id}`, title: help, onclick: async (e) => {
    const btn = e.currentTarget;
    btn.disabled = true;
    setStatus(`${label}…`);
    try {
      setStatus(await fn());
    } catch (err) {
      setStatus('');
      showError(label, err);
    } finally {
      btn.disabled = false;
    }
  } }, label);
}

// actionsKey names the buttons on show, so that a render that changes
// nothing keeps them (and the keyboard focus on them).
let actionsKey = '';
// renderActions offers only what the child's mode, provider and state
// allow: cancel while a one-shot run runs, dispose until it is disposed,
// interrupt while a continuable child runs. Steering and followups are the
// composer's.
function renderActions(n, v) {
  const run = v.latest;
  const wanted = [];
  if (v.mode === 'one-shot' && run) {
    if (v.running) wanted.push('cancel');
    if (!v.disposed) wanted.push('dispose');
  }
  if (v.mode === 'continuable' && v.running) wanted.push('interrupt');
  const key = `${n.id}:${run ? run.runId : ''}:${wanted.join()}`;
  if (key === actionsKey) return;
  actionsKey = key;
  const make = {
    cancel: () => actionButton('cancel', 'Cancel', 'Abort the run; it settles "aborted"', async () => {
      await api('POST', `/v1/runs/${encodeURIComponent(run.runId)}/cancel`);
      return 'Cancel requested — the run settles as aborted.';
    }),
    dispose: () => actionButton('dispose', 'Dispose', 'Cancel if running, wait until it is quiet, release it', async () => {
      await api('DELETE', `/v1/runs/${encodeURIComponent(run.runId)}`);
      model.upsertRun({ runId: run.runId, state: 'disposed' });
      return 'Run disposed — it is released and its transcript stays readable.';
    }),
    interrupt: () => actionButton('interrupt', 'Interrupt', 'Stop the current turn; followups not yet admitted stay queued', async () => {
      await api('POST', `/v1/subagents/${encodeURIComponent(n.id)}/interrupt`, { parentSessionId: n.parentId });
      return 'Interrupt accepted — the current turn stops; a followup resumes the child.';
    }),
  };
  $('actions').replaceChildren(...wanted.map((id) => make[id]()));
}

// The composer sends what fits the selected session: a message to a root
// session's own agent, a followup to a continuable child, or a steer into a
// running one-shot run whose provider supports steering.
function composerMode(n, v) {
  const p = provider(n.provider);
  if (v.mode === 'root') return { kind: 'root', label: 'Message the root agent', button: 'Send', help: 'Runs a turn of this session\'s own agent, which can start children with its tools.' };
  if (v.mode === 'continuable') {
    if (v.running || v.state === 'starting') return { kind: 'followup', label: 'Follow up', button: 'Send followup', help: 'The child is running: the followup is steered into its next model step.' };
    if (p && p.resume === false) return { readonly: `${n.provider} cannot resume a stopped child, so followups are unavailable.` };
    return { kind: 'followup', label: 'Follow up', button: 'Send followup', help: 'The child is inactive: the followup starts a new task that resumes it from its log.' };
  }
  if (v.running) {
    if (p && p.steer) return { kind: 'steer', label: 'Steer the running child', button: 'Steer', help: 'Delivered into the next model step; answered once the model admitted it.' };
    return { readonly: `${n.provider || 'This provider'} cannot be steered. You can cancel the run.` };
  }
  if (!v.latest) return { readonly: 'Waiting for the run to start…' };
  return { readonly: `This one-shot run settled (${v.stopReason || v.state}). Its transcript is a read-only record.` };
}

let composerKey = '';
function renderComposer(n, v) {
  const m = composerMode(n, v);
  const form = $('message-form');
  const note = $('readonly-note');
  form.hidden = !!m.readonly;
  note.hidden = !m.readonly;
  note.textContent = m.readonly || '';
  if (m.readonly) return;
  form.dataset.kind = m.kind;
  $('message-label').textContent = m.label;
  $('message-send').textContent = m.button;
  $('message-help').textContent = m.help;
  const key = `${n.id}:${m.kind}`;
  if (key !== composerKey) {
    composerKey = key;
    clearErrors(form);
  }
}

async function sendMessage(e) {
  e.preventDefault();
  const form = $('message-form');
  const n = model.nodes.get(selected);
  const text = $('message-text').value;
  clearErrors(form);
  if (!n) return;
  if (!text.trim()) {
    $('message-error').textContent = 'Write a message first.';
    $('message-text').focus();
    return;
  }
  const btn = $('message-send');
  btn.disabled = true;
  const content = textBlocks(text);
  const kind = form.dataset.kind;
  // A followup or steer to a running child is answered once a model step
  // admitted it, which can take as long as the step in progress.
  setStatus(kind === 'root' ? 'Sending…' : model.view(n).running
    ? 'Sent — waiting until the child\'s next model step admits it…' : 'Sending…');
  try {
    if (kind === 'root') {
      const res = await api('POST', `/v1/sessions/${encodeURIComponent(n.id)}/messages`, { content });
      setStatus(`Accepted${res.messageId ? ` (message ${shortId(res.messageId)})` : ''} — the agent runs a turn; it streams below.`);
    } else if (kind === 'followup') {
      const res = await api('POST', `/v1/subagents/${encodeURIComponent(n.id)}/followup`, { parentSessionId: n.parentId, content });
      if (res.route === 'steered') {
        setStatus(`Followup steered into the running task ${shortId(res.taskId)}: its next model step read it.`, res.route);
      } else if (res.route === 'parked') {
        setStatus('Followup accepted while an interrupt stopped the child: it waits and runs first with the next followup.', res.route);
      } else {
        model.announceTask(n.id, res.taskId);
        setStatus(`Followup started a new task ${shortId(res.taskId)}: the child resumes from its log.`, res.route);
      }
    } else {
      const run = model.view(n).latest;
      const res = await api('POST', `/v1/runs/${encodeURIComponent(run.runId)}/steer`, { content });
      setStatus(`Steer admitted by the model${res.messageId ? ` (message ${shortId(res.messageId)})` : ''}.`);
    }
    $('message-text').value = '';
  } catch (err) {
    setStatus('');
    // The draft stays so nothing typed is lost.
    showApiError(form, $('message-error'), err);
  } finally {
    btn.disabled = false;
  }
}

// ---- selection and the transcript stream ----------------------------------

// select shows a session. The start form's parent follows the selection,
// except after a start: the new child is shown, the parent stays.
function select(id, { keepParent = false } = {}) {
  if (!id || id === selected) {
    if (id) document.getElementById(`node-${id}`)?.focus();
    return;
  }
  selected = id;
  tree.selected = id;
  history.replaceState(null, '', `#s=${encodeURIComponent(id)}`);
  setStatus('');
  if (!keepParent) parentChoice = id;
  openTranscript(id);
  scheduleRender();
}

function openTranscript(id) {
  if (sessionStream) sessionStream.close();
  transcript.reset();
  $('conv-empty').hidden = true;
  const base = `/v1/sessions/${encodeURIComponent(id)}`;
  sessionStream = new EventStream(`${base}/stream`, {
    types: SESSION_TYPES,
    contiguous: true,
    onEvent: (ev) => transcript.apply(ev),
    onState: (state, detail) => setStreamState('session', state, detail),
    fill: (after, until) => fetchEvents(base, after, until),
    probe: () => api('GET', `${base}/events?limit=1`),
    onFail: (err) => {
      $('conversation').append(h('p', { class: 'field-error', 'data-testid': 'transcript-error' }, `The log cannot be read: ${describeError(err)}`));
    },
  }).start();
}

// fetchEvents reads the durable log page by page: events after `after` (null:
// from the start) with seq below `until`.
async function fetchEvents(base, after, until) {
  const out = [];
  let cursor = after;
  for (;;) {
    const q = new URLSearchParams({ limit: '500' });
    if (cursor !== null) q.set('after', String(cursor));
    const page = await api('GET', `${base}/events?${q}`);
    const events = (page && page.events) || [];
    for (const e of events) {
      if (e.seq >= until) return out;
      out.push({ id: e.seq, type: e.type, data: e });
      cursor = e.seq;
    }
    if (!page || !page.hasMore || events.length === 0) return out;
  }
}

// ---- start form -----------------------------------------------------------

function startKind() {
  return document.querySelector('input[name="kind"]:checked').value;
}

// updateStartForm shows only the options the chosen provider enforces;
// output schemas belong to one-shot runs only.
function updateStartForm() {
  const p = provider($('start-provider').value);
  // Continuable children need a provider that can resume them.
  const canResume = !p || p.resume !== false;
  $('kind-child').disabled = !canResume;
  if (!canResume) $('kind-run').checked = true;
  const kind = startKind();
  $('kind-help').textContent = !canResume
    ? `${p.name} cannot resume children, so it starts one-shot runs only.`
    : kind === 'run'
      ? `Runs once and settles; while it runs you can ${p && p.steer ? 'steer or cancel' : 'cancel'} it.`
      : 'Keeps its conversation: send it followups later; each activation is a task.';
  const caps = (p && p.capabilities) || {};
  const groups = [
    ['group-schema', 'output schema', kind === 'run' && caps.outputSchema],
    ['group-tools', 'tool filter', caps.toolFilter],
    ['group-persona', 'persona', caps.persona],
    ['group-depth', 'max depth', caps.depthLimit],
  ];
  const missing = [];
  for (const [id, label, on] of groups) {
    $(id).hidden = !on;
    if (!on && !(id === 'group-schema' && kind !== 'run')) missing.push(label);
  }
  $('options-note').textContent = p && missing.length ? `— not available with ${p.name}: ${missing.join(', ')}` : '';
  $('start-submit').textContent = kind === 'run' ? 'Start run' : 'Start child';
  $('start-label').required = kind === 'child';
  $('label-req').textContent = kind === 'child' ? '(required)' : '(optional)';
}

function checkSchema() {
  const { error } = parseSchema($('start-schema').value);
  setFieldError($('start-form'), 'outputSchema', error);
  return !error;
}

async function submitStart(e) {
  e.preventDefault();
  const form = $('start-form');
  clearErrors(form);
  $('start-error').textContent = '';
  const kind = startKind();
  const providerName = $('start-provider').value;
  const prompt = $('start-prompt').value;
  const label = $('start-label').value.trim();
  let bad = null;
  const fail = (field, msg, el) => {
    setFieldError(form, field, msg);
    bad = bad || el;
  };
  if (!providerName) fail('provider', 'Choose a provider.', $('start-provider'));
  if (kind === 'child' && !label) fail('label', 'A continuable child needs a label.', $('start-label'));
  if (!prompt.trim()) fail('prompt', 'Write a prompt.', $('start-prompt'));
  const body = { provider: providerName, prompt: textBlocks(prompt) };
  if (label) body.label = label;
  if (!$('group-schema').hidden) {
    const s = parseSchema($('start-schema').value);
    if (s.error) fail('outputSchema', s.error, $('start-schema'));
    else if (s.value) body.outputSchema = s.value;
  }
  if (!$('group-tools').hidden) {
    const allow = parseList($('start-allow').value);
    const deny = parseList($('start-deny').value);
    if (allow || deny) body.toolFilter = { ...(allow && { allow }), ...(deny && { deny }) };
  }
  if (!$('group-persona').hidden && $('start-persona').value.trim()) body.persona = $('start-persona').value;
  if (!$('group-depth').hidden) {
    const d = parseMaxDepth($('start-maxdepth').value);
    if (d.error) fail('maxDepth', d.error, $('start-maxdepth'));
    else if (d.value !== undefined) body.maxDepth = d.value;
  }
  if (bad) {
    if (bad.closest('details')) bad.closest('details').open = true;
    bad.focus();
    return;
  }

  const btn = $('start-submit');
  btn.disabled = true;
  $('start-status').textContent = 'Starting…';
  try {
    let parentId = $('start-parent').value;
    if (!parentId) {
      const root = await api('POST', '/v1/sessions', {});
      model.mergeSession(root);
      parentId = root.id;
    }
    body.parentSessionId = parentId;
    parentChoice = parentId;
    if (kind === 'run') {
      const res = await api('POST', '/v1/runs', body);
      model.mergeRun(res);
      $('start-prompt').value = '';
      $('start-status').textContent = `Run ${shortId(res.runId)} started — child ${shortId(res.childSessionId)}.`;
      select(res.childSessionId, { keepParent: true });
    } else {
      const res = await api('POST', '/v1/subagents', body);
      model.addContinuableChild({ id: res.childId, parentId, provider: providerName, label, taskId: res.taskId });
      $('start-prompt').value = '';
      $('start-status').textContent = `Child ${shortId(res.childId)} accepted — task ${shortId(res.taskId)} started.`;
      select(res.childId, { keepParent: true });
    }
  } catch (err) {
    $('start-status').textContent = '';
    showApiError(form, $('start-error'), err);
    const open = form.querySelector('[aria-invalid="true"]');
    if (open && open.closest('details')) open.closest('details').open = true;
  } finally {
    btn.disabled = false;
  }
}

async function submitRoot(e) {
  e.preventDefault();
  const label = $('root-label').value.trim();
  $('root-error').textContent = '';
  try {
    const s = await api('POST', '/v1/sessions', label ? { label } : {});
    model.mergeSession(s);
    $('root-label').value = '';
    select(s.id);
  } catch (err) {
    $('root-error').textContent = describeError(err);
  }
}

// ---- tabs -----------------------------------------------------------------

function showTab(which) {
  for (const [tab, pane] of [['tab-conv', 'pane-conv'], ['tab-log', 'pane-log']]) {
    const on = tab === which;
    $(tab).setAttribute('aria-selected', String(on));
    $(tab).tabIndex = on ? 0 : -1;
    $(pane).hidden = !on;
  }
}

function tabKeys(e) {
  if (e.key !== 'ArrowLeft' && e.key !== 'ArrowRight') return;
  const next = e.currentTarget.id === 'tab-conv' ? 'tab-log' : 'tab-conv';
  showTab(next);
  $(next).focus();
}

// ---- start ----------------------------------------------------------------

function init() {
  model.onChange(scheduleRender);
  $('start-form').addEventListener('submit', submitStart);
  $('start-form').addEventListener('change', (e) => {
    if (e.target.name === 'kind' || e.target.name === 'provider') updateStartForm();
    if (e.target.name === 'parent') parentChoice = e.target.value;
  });
  $('start-schema').addEventListener('input', checkSchema);
  $('start-maxdepth').addEventListener('input', () => setFieldError($('start-form'), 'maxDepth', parseMaxDepth($('start-maxdepth').value).error));
  $('root-form').addEventListener('submit', submitRoot);
  $('message-form').addEventListener('submit', sendMessage);
  $('message-text').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) $('message-form').requestSubmit();
  });
  for (const t of ['tab-conv', 'tab-log']) {
    $(t).addEventListener('click', () => showTab(t));
    $(t).addEventListener('keydown', tabKeys);
  }
  setInterval(() => {
    tree.tick();
    const n = selected && model.nodes.get(selected);
    const el = document.querySelector('[data-dur-head]');
    if (n && el) el.textContent = formatDuration(model.view(n).durationMs);
  }, 1000);

  // The baseline is loaded each time the lifecycle stream opens: the server
  // has subscribed us by then, so no start or end falls between the two, and
  // merging is order-independent.
  new EventStream('/v1/events', {
    types: LIFECYCLE_TYPES,
    onEvent: onLifecycle,
    onState: (state, detail) => setStreamState('lifecycle', state, detail),
    onOpen: loadBaseline,
  }).start();
  loadProviders();
  loadBaseline();
  const m = /^#s=(.+)$/.exec(location.hash);
  if (m) select(decodeURIComponent(m[1]));
  renderAll();
}

init();
