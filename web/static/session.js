// The selected session's head: its name, state, ids and usage; its runs and
// activations with result, structured output, stop reason, duration and
// tokens at a glance (each with a deep link); the actions its mode allows;
// and the composer that sends what fits it.

import { api } from './api.js';
import { blocksText, formatClock, formatDuration, formatTokens, formatUsage, h, morph, prettyJSON, shortId, stateStyle, textBlocks, toMillis } from './format.js';
import { exportTree, runAsCurl } from './export.js';
import { clearErrors, showApiError } from './forms.js';
import { paths } from './paths.js';

const $ = (id) => document.getElementById(id);

// afterFrame settles in a task of its own: asked while a frame is drawn,
// after that frame is painted. The head's reads are sent then, so the
// requests (about a millisecond of the main thread each) are not part of
// the frame that draws the head.
const afterFrame = () => new Promise((resolve) => { setTimeout(resolve, 0); });

export class SessionView {
  /**
   * @param {import('./store.js').Store} store
   * @param {object} o
   * @param {(context: string, err: Error) => void} o.showError
   */
  constructor(store, o) {
    this.store = store;
    this.o = o;
    // The keys name what is on show, so a render that changes nothing keeps
    // the elements (and the keyboard focus on them).
    this.actionsKey = '';
    this.composerKey = '';
    /** the session whose head #session-meta shows */
    this.metaId = '';
    this.runsKey = '';
    /** `${id}:${scope}` → the last GET /v1/sessions/{id}/usage answer and when to read it again */
    this.usageReads = new Map();
    /** root id → its limits (GET /v1/sessions/{id}) and what its tree spent, read again when its runs change */
    this.budgets = new Map();
    $('message-form').addEventListener('submit', (e) => this.send(e));
    $('message-text').addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) $('message-form').requestSubmit();
    });
  }

  node() {
    const id = this.store.ui.selected;
    return id ? this.store.nodes.get(id) : null;
  }

  render() {
    const n = this.node();
    if (!n) {
      $('session-title').textContent = 'No session selected';
      $('session-meta').replaceChildren();
      this.metaId = '';
      $('actions').replaceChildren();
      $('runs').replaceChildren();
      this.actionsKey = '';
      this.runsKey = '';
      this.setStatus('');
      $('message-form').hidden = true;
      $('readonly-note').hidden = true;
      return;
    }
    const s = this.store;
    const v = s.view(n);
    const st = stateStyle(v.state);
    $('session-title').textContent = s.title(n);
    const items = [
      metaItem('State', h('span', { class: `state tone-${st.tone}`, 'data-testid': 'head-state', 'data-state': v.state },
        h('span', { class: `state-icon${v.state === 'running' ? ' spin' : ''}`, 'aria-hidden': 'true' }, st.icon), ` ${v.state}`)),
      metaItem('Mode', v.mode),
    ];
    if (n.provider) items.push(metaItem('Provider', n.provider));
    if (v.stopReason) items.push(metaItem('Stop reason', h('span', { 'data-testid': 'head-stop-reason' }, v.stopReason)));
    if (v.durationMs !== null) items.push(metaItem('Active', h('span', { 'data-dur-head': '' }, formatDuration(v.durationMs))));
    if (n.createdAt) items.push(metaItem('Created', formatClock(toMillis(n.createdAt), { day: true })));
    const u = s.sessionUsage(n);
    // The API's sums answer first; the logs this page read are summed only
    // until it answers, or when it cannot.
    const own = this.apiUsage(n.id, 'self', runsSig(s, [n]));
    items.push(metaItem('Tokens', h('span', { 'data-testid': 'head-usage', 'data-source': own ? 'api' : 'logs' },
      own ? usageText(own) : u.steps ? formatUsage(u.input, u.output) : 'none reported yet')));
    const root = s.treeRoot(n);
    if (s.kids.get(root.id)?.size) {
      const all = s.subtree(root);
      const tree = this.apiUsage(root.id, 'tree', runsSig(s, all));
      const t = tree ? null : s.treeUsage(root);
      items.push(metaItem('Tree tokens', h('span', { 'data-testid': 'head-tree-usage', 'data-source': tree ? 'api' : 'logs' },
        ...(tree ? [usageText(tree)] : [t.steps ? formatUsage(t.input, t.output) : 'none reported yet',
          t.read < t.total ? ` (${t.read} of ${t.total} logs read so far; the Trace reads them all)` : '']))));
    }
    const budget = this.budget(root, runsSig(s, s.subtree(root)));
    if (budget) items.push(metaItem('Budget', this.budgetBar(root.id, budget)));
    if (n.parentId) {
      items.push(metaItem('Parent', h('a', { href: `#s=${encodeURIComponent(n.parentId)}`, class: 'child-link', 'data-testid': 'head-parent' },
        s.nodes.has(n.parentId) ? s.title(s.nodes.get(n.parentId)) : shortId(n.parentId))));
    }
    items.push(metaItem('Id', h('code', { 'data-testid': 'head-id' }, n.id)));
    if (v.mode === 'continuable' && v.taskId) {
      items.push(metaItem(v.tasks > 1 ? `Task (${v.tasks} so far)` : 'Task', h('code', { 'data-testid': 'head-task' }, v.taskId)));
    } else if (v.latest) {
      items.push(metaItem('Run', h('code', { 'data-testid': 'head-run' }, v.latest.runId), v.disposed ? ' (disposed)' : ''));
    }
    // The budget's Raise button acts on this session's tree, so another
    // session's head replaces every item.
    if (this.metaId === n.id) morph($('session-meta'), items);
    else $('session-meta').replaceChildren(...items);
    this.metaId = n.id;
    this.renderRuns(n, u);
    this.renderActions(n, v);
    this.renderComposer(n, v);
  }

  // apiUsage returns the usage GET /v1/sessions/{id}/usage reported for id
  // in scope, and reads it again when sig (the runs of what it counts, and
  // their states) changed since; null until the first answer, and when the
  // API cannot answer (a server without usage sums).
  apiUsage(id, scope, sig) {
    const key = `${id}:${scope}`;
    let e = this.usageReads.get(key);
    if (!e) {
      e = { sig: null, data: null, failed: false, inflight: false, again: false };
      this.usageReads.set(key, e);
    }
    if (e.sig !== sig && !e.failed) {
      e.sig = sig;
      if (e.inflight) e.again = true;
      else this.readUsage(id, scope, e);
    }
    return e.data;
  }

  async readUsage(id, scope, e) {
    e.inflight = true;
    await afterFrame();
    try {
      e.data = await api('GET', paths.sessionUsage(id, scope));
    } catch {
      // The sums of the logs read stand in.
      e.failed = true;
    } finally {
      e.inflight = false;
    }
    if (e.again && !e.failed) {
      e.again = false;
      this.readUsage(id, scope, e);
      return;
    }
    this.store.changed();
  }

  // budget returns the token budget of root's tree — {budget, used,
  // paused} — or null when it has none (or is not read yet): its limits
  // from GET /v1/sessions/{id}, what it spent from GET …/usage?scope=tree,
  // both read again when sig (the tree's runs and their states) changed.
  budget(root, sig) {
    let e = this.budgets.get(root.id);
    if (!e) {
      e = { sig: null, limits: null, used: null, failed: false };
      this.budgets.set(root.id, e);
    }
    if (e.sig !== sig && !e.failed) {
      e.sig = sig;
      this.readBudget(root.id, e);
    }
    const budget = e.limits?.tokenBudget;
    if (budget === undefined || budget === null || e.used === null) return null;
    return { budget, used: e.used, paused: e.used >= budget };
  }

  async readBudget(id, e) {
    await afterFrame();
    try {
      const [sess, usage] = await Promise.all([api('GET', paths.session(id)), api('GET', paths.sessionUsage(id, 'tree'))]);
      e.limits = sess.limits || {};
      e.used = (usage.inputTokens || 0) + (usage.outputTokens || 0);
    } catch {
      e.failed = true; // a server without limits: no bar
    }
    this.store.changed();
  }

  // budgetBar draws used of budget as a bar; a spent (paused) budget says
  // so and offers to raise it: PATCH …/limits with twice what the tree
  // spent, whose answer is on show at once.
  budgetBar(rootId, b) {
    const pct = b.budget > 0 ? Math.min(100, Math.round((100 * b.used) / b.budget)) : 100;
    const parts = [
      h('span', { class: `budget-bar${b.paused ? ' paused' : ''}`, role: 'meter', 'aria-valuemin': '0', 'aria-valuemax': String(b.budget),
        'aria-valuenow': String(Math.min(b.used, b.budget)), 'aria-label': 'Token budget used' },
      h('span', { class: 'budget-fill', style: `width: ${pct}%` })),
      h('span', { 'data-testid': 'head-budget', 'data-paused': String(b.paused) },
        ` ${formatTokens(b.used)} of ${formatTokens(b.budget)} tokens${b.paused ? ' — paused' : ''}`),
    ];
    if (b.paused) {
      const raised = Math.max(2 * b.budget, 2 * b.used, 1);
      parts.push(' ', h('button', { type: 'button', 'data-testid': 'budget-raise', title: `Raise the tree's token budget to ${formatTokens(raised)}; what waits then runs`,
        onclick: (ev) => this.raiseBudget(ev.currentTarget, rootId, raised) }, 'Raise budget'));
    }
    return h('span', { class: 'budget' }, ...parts);
  }

  async raiseBudget(button, rootId, tokenBudget) {
    button.disabled = true;
    try {
      const t = await api('PATCH', paths.sessionLimits(rootId), { tokenBudget });
      const e = this.budgets.get(rootId);
      if (e) {
        e.limits = t.limits;
        e.used = t.usage.tokens;
      }
      this.store.changed();
    } catch (err) {
      button.disabled = false;
      this.o.showError('Raising the budget failed', err);
    }
  }

  /** Ticks the running durations in the head and on the cards of running runs. */
  tick() {
    const n = this.node();
    const el = document.querySelector('[data-dur-head]');
    if (n && el) el.textContent = formatDuration(this.store.view(n).durationMs);
    const now = Date.now();
    for (const d of $('runs').querySelectorAll('[data-run-start]')) d.textContent = formatDuration(now - Number(d.dataset.runStart));
  }

  // renderRuns lists the session's runs and activations, newest first, each
  // a card with what it produced and a deep link of its own.
  renderRuns(n, usage) {
    const s = this.store;
    const runs = s.nodeRuns(n).reverse();
    const key = JSON.stringify([n.id, s.ui.runId, runs.map((r) => [r.runId, r.state, r.stopReason, r.endedAt, !!r.output, r.structured !== undefined]), [...usage.byRun]]);
    if (key === this.runsKey) return;
    this.runsKey = key;
    const cards = runs.map((r) => {
      const state = r.state === 'running' ? 'running' : r.stopReason || r.state;
      const st = stateStyle(state);
      const u = usage.byRun.get(r.runId);
      const output = blocksText(r.output);
      const current = s.ui.runId === r.runId;
      return h('li', { class: `run-card${current ? ' current' : ''}`, id: `run-${r.runId}`, 'data-testid': 'run-card', 'data-run': r.runId, 'aria-current': current ? 'true' : false },
        h('div', { class: 'run-head' },
          h('a', { href: `#s=${encodeURIComponent(n.id)}&r=${encodeURIComponent(r.runId)}`, 'data-testid': 'run-link' }, r.taskId ? 'Activation' : 'Run', ' ', h('code', {}, shortId(r.runId))),
          h('span', { class: `state tone-${st.tone}`, 'data-testid': 'run-state' }, h('span', { 'aria-hidden': 'true' }, st.icon), ` ${state}`),
          r.startedAt ? h('span', { class: 'dur', 'data-testid': 'run-duration', 'data-run-start': r.state === 'running' ? r.startedAt : false }, formatDuration((r.endedAt || Date.now()) - r.startedAt)) : null,
          h('span', { class: 'tokens', 'data-testid': 'run-usage' }, u ? formatUsage(u.input, u.output) : 'no tokens counted'),
          h('button', { type: 'button', class: 'link', 'data-testid': 'run-copy-curl', title: 'Copy the curl command that starts this run again', onclick: (e) => this.copyCurl(e.currentTarget, n, r) }, 'Copy as curl')),
        r.stopReason ? h('p', { class: 'run-line' }, 'Stop reason: ', h('strong', { 'data-testid': 'run-stop' }, r.stopReason), r.diagnostic ? ` — ${r.diagnostic}` : '') : null,
        output ? h('p', { class: 'run-line' }, 'Result: ', h('span', { 'data-testid': 'run-result' }, output.length > 300 ? `${output.slice(0, 299)}…` : output)) : null,
        r.structured !== undefined && r.structured !== null
          ? h('details', { class: 'run-structured' }, h('summary', {}, 'Structured output'), h('pre', { 'data-testid': 'run-structured' }, prettyJSON(r.structured)))
          : null);
    });
    const counted = usage.steps ? `${formatUsage(usage.input, usage.output)} in ${usage.steps} step${usage.steps === 1 ? '' : 's'}` : 'no tokens reported';
    const total = runs.length ? h('p', { class: 'help' }, `${runs.length} ${runs.some((r) => r.taskId) ? 'activation' : 'run'}${runs.length > 1 ? 's' : ''} · ${counted}`) : null;
    $('runs').replaceChildren(...(runs.length ? [total, h('ol', { class: 'run-list' }, cards)] : []));
    if (s.ui.runId) document.getElementById(`run-${s.ui.runId}`)?.scrollIntoView({ block: 'nearest' });
  }

  // copyCurl puts the command that starts r again on the clipboard and
  // shows it under the card, where it can be selected when the clipboard
  // is not available.
  async copyCurl(button, n, r) {
    const text = runAsCurl(this.store, n, r);
    const card = button.closest('.run-card');
    card.querySelector('[data-testid="run-curl"]')?.remove();
    card.append(h('pre', { class: 'run-curl', 'data-testid': 'run-curl' }, text));
    try {
      await navigator.clipboard.writeText(text);
      this.setStatus('Copied the curl command that starts this run again.');
    } catch {
      this.setStatus('The clipboard is not available here: the curl command is shown under the run.');
    }
  }

  // setStatus says what the last action did; route is the followup's answer
  // (steered | started | parked), kept for tests and styling.
  setStatus(text, route = '') {
    $('action-status').textContent = text;
    $('action-status').dataset.route = route;
  }

  actionButton(id, label, help, fn) {
    return h('button', { type: 'button', id: `action-${id}`, 'data-testid': `action-${id}`, title: help, onclick: (e) => this.run(e.currentTarget, label, fn) }, label);
  }

  // run disables button while fn runs and says what it did, or the error.
  async run(button, label, fn) {
    button.disabled = true;
    this.setStatus(`${label}…`);
    try {
      const said = await fn();
      if (said !== null) this.setStatus(said);
    } catch (err) {
      this.setStatus('');
      this.o.showError(label, err);
    } finally {
      button.disabled = false;
    }
  }

  // confirmButton is an action that asks first, in place, as the Webhooks
  // page asks before a delete: the button gives way to the question, a
  // "Yes, …" button that acts and a "Keep it" button that takes it back.
  confirmButton(id, label, help, question, yes, fn) {
    const ask = (on) => {
      confirm.hidden = !on;
      button.hidden = on;
      (on ? no : button).focus();
    };
    const button = h('button', { type: 'button', id: `action-${id}`, 'data-testid': `action-${id}`, title: help, onclick: () => ask(true) }, label);
    const sure = h('button', { type: 'button', class: 'danger', 'data-testid': `action-${id}-yes`, onclick: async () => {
      no.disabled = true;
      await this.run(sure, label, fn);
      no.disabled = false;
      if (sure.isConnected) ask(false);
    } }, yes);
    const no = h('button', { type: 'button', 'data-testid': `action-${id}-no`, onclick: () => ask(false) }, 'Keep it');
    const confirm = h('span', { class: 'wh-confirm', role: 'group', 'aria-label': `Confirm: ${label}`, 'data-testid': `action-${id}-confirm`, hidden: true },
      h('span', {}, question), sure, no);
    return h('span', { class: 'action-confirmable' }, button, confirm);
  }

  // renderActions offers only what the child's mode, provider and state
  // allow: cancel while a one-shot run runs, dispose until it is disposed,
  // interrupt while a continuable child runs; Cancel tree for a root or a
  // session with children (it stops what runs below it), Dispose for a root's tree and Dispose
  // child for a continuable child, until this page saw them disposed.
  // Steering and followups are the composer's.
  renderActions(n, v) {
    const run = v.latest;
    const wanted = [];
    if (v.mode === 'one-shot' && run) {
      if (v.running) wanted.push('cancel');
      if (!v.disposed) wanted.push('dispose');
    }
    if (v.mode === 'continuable' && v.running) wanted.push('interrupt');
    if (v.mode === 'root' || this.store.kids.get(n.id)?.size) wanted.push('cancel-tree');
    if (v.mode === 'root' && !v.disposed) wanted.push('dispose-tree');
    if (v.mode === 'continuable' && !v.disposed) wanted.push('dispose-child');
    wanted.push('export');
    const key = `${n.id}:${run ? run.runId : ''}:${wanted.join()}`;
    if (key === this.actionsKey) return;
    this.actionsKey = key;
    const s = this.store;
    const below = s.subtree(n).length - 1;
    const make = {
      cancel: () => this.actionButton('cancel', 'Cancel', 'Abort the run; it settles "aborted"', async () => {
        await api('POST', paths.runCancel(run.runId));
        return 'Cancel requested — the run settles as aborted.';
      }),
      dispose: () => this.actionButton('dispose', 'Dispose', 'Cancel if running, wait until it is quiet, release it', async () => {
        await api('DELETE', paths.run(run.runId));
        s.upsertRun({ runId: run.runId, state: 'disposed' });
        return 'Run disposed — it is released and its transcript stays readable.';
      }),
      'cancel-tree': () => this.confirmButton('cancel-tree', 'Cancel tree', 'Abort every run and task below this session (and a root\'s running turn); later messages run normally',
        `Stop everything that runs ${below ? `in this tree (${below} session${below === 1 ? '' : 's'} below)` : 'below this session'}?`, 'Yes, cancel the tree', async () => {
          const res = await api('POST', paths.sessionCancel(n.id));
          const c = (res && res.cancelled) || 0;
          return c ? `Tree cancelled — stopped ${c} run${c === 1 ? '' : 's'}, task${c === 1 ? '' : 's'} or turn${c === 1 ? '' : 's'}; they settle as aborted.`
            : 'Tree cancelled — nothing was running, so nothing was stopped.';
        }),
      'dispose-tree': () => this.confirmButton('dispose-tree', 'Dispose', 'Cancel the tree, dispose every continuable child in it and close the root; later prompts are refused',
        'Dispose this root and its whole tree? Later prompts and followups are refused.', 'Yes, dispose the tree', async () => {
          await api('DELETE', paths.session(n.id));
          s.markDisposed(n.id, { tree: true });
          return 'Tree disposed — the root and its continuable children take no more messages; their transcripts stay readable.';
        }),
      'dispose-child': () => this.confirmButton('dispose-child', 'Dispose child', 'Cancel its running task and release it; later followups are refused',
        'Dispose this child? Later followups are refused.', 'Yes, dispose the child', async () => {
          await api('DELETE', paths.subagent(n.id, { parentSessionId: n.parentId }));
          s.markDisposed(n.id);
          return 'Child disposed — it takes no more followups; its transcript stays readable.';
        }),
      export: () => this.actionButton('export', 'Export tree', 'Download this tree — headers, runs and logs — as one JSON file', async () => {
        const root = s.treeRoot(n);
        const data = await exportTree(s, root);
        const url = URL.createObjectURL(new Blob([JSON.stringify(data, null, 2)], { type: 'application/json' }));
        const link = h('a', { href: url, download: `subagentd-tree-${root.id}.json`, 'data-testid': 'export-link' }, 'download it again');
        link.click();
        $('action-status').replaceChildren(`Exported ${data.sessions.length} session${data.sessions.length === 1 ? '' : 's'} of the tree — `, link, '.');
        return null;
      }),
      interrupt: () => this.actionButton('interrupt', 'Interrupt', 'Stop the current turn; followups not yet admitted stay queued', async () => {
        await api('POST', paths.interrupt(n.id), { parentSessionId: n.parentId });
        return 'Interrupt accepted — the current turn stops; a followup resumes the child.';
      }),
    };
    $('actions').replaceChildren(...wanted.map((id) => make[id]()));
  }

  // composerMode: a message to a root session's own agent, a followup to a
  // continuable child, or a steer into a running one-shot run whose
  // provider supports steering.
  composerMode(n, v) {
    const p = this.store.providers.get(n.provider) || null;
    if (v.disposed && v.mode === 'root') return { disposed: true, readonly: 'This root session was disposed (DISPOSED): its tree is released and it takes no more messages. Its transcript stays readable.' };
    if (v.disposed && v.mode === 'continuable') return { disposed: true, readonly: 'This child was disposed (DISPOSED): it takes no more followups. Its transcript stays readable.' };
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

  renderComposer(n, v) {
    const m = this.composerMode(n, v);
    const form = $('message-form');
    const note = $('readonly-note');
    form.hidden = !!m.readonly;
    note.hidden = !m.readonly;
    note.textContent = m.readonly || '';
    note.dataset.disposed = String(!!m.disposed);
    if (m.readonly) return;
    form.dataset.kind = m.kind;
    $('message-label').textContent = m.label;
    $('message-send').textContent = m.button;
    $('message-help').textContent = m.help;
    const key = `${n.id}:${m.kind}`;
    if (key !== this.composerKey) {
      this.composerKey = key;
      clearErrors(form);
    }
  }

  async send(e) {
    e.preventDefault();
    const form = $('message-form');
    const n = this.node();
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
    const s = this.store;
    // A followup or steer to a running child is answered once a model step
    // admitted it, which can take as long as the step in progress.
    this.setStatus(kind === 'root' ? 'Sending…' : s.view(n).running
      ? 'Sent — waiting until the child\'s next model step admits it…' : 'Sending…');
    try {
      if (kind === 'root') {
        const res = await api('POST', paths.sessionMessages(n.id), { content });
        this.setStatus(`Accepted${res.messageId ? ` (message ${shortId(res.messageId)})` : ''} — the agent runs a turn; it streams below.`);
      } else if (kind === 'followup') {
        const res = await api('POST', paths.followup(n.id), { parentSessionId: n.parentId, content });
        if (res.route === 'steered') {
          this.setStatus(`Followup steered into the running task ${shortId(res.taskId)}: its next model step read it.`, res.route);
        } else if (res.route === 'parked') {
          this.setStatus('Followup accepted while an interrupt stopped the child: it waits and runs first with the next followup.', res.route);
        } else {
          s.announceTask(n.id, res.taskId);
          this.setStatus(`Followup started a new task ${shortId(res.taskId)}: the child resumes from its log.`, res.route);
        }
      } else {
        const run = s.view(n).latest;
        const res = await api('POST', paths.runSteer(run.runId), { content });
        this.setStatus(`Steer admitted by the model${res.messageId ? ` (message ${shortId(res.messageId)})` : ''}.`);
      }
      $('message-text').value = '';
    } catch (err) {
      this.setStatus('');
      // A session disposed elsewhere says so, and its composer gives way
      // to the note; the draft stays so nothing typed is lost.
      if (err.code === 'DISPOSED' && kind !== 'steer') s.markDisposed(n.id, { tree: kind === 'root' });
      showApiError(form, $('message-error'), err);
    } finally {
      btn.disabled = false;
    }
  }
}

// runsSig names what a usage read counts: the sessions' runs and their
// states, and a root's activity (its own turns add to its usage).
function runsSig(s, nodes) {
  let runs = 0;
  let settled = 0;
  for (const m of nodes) {
    for (const id of m.runIds) {
      runs++;
      if (s.runs.get(id)?.state !== 'running') settled++;
    }
  }
  return `${nodes.length}:${runs}:${settled}:${nodes[0] ? nodes[0].status : ''}`;
}

// usageText says a usage answer in words: "not reported" when the
// provider reported none, a lower bound when some calls reported none,
// and the runs still running, whose usage is counted once they settle.
function usageText(d) {
  const tokens = (d.inputTokens || 0) + (d.outputTokens || 0);
  const live = d.liveRuns ? ` (+${d.liveRuns} running, counted once settled)` : '';
  if (!d.known && tokens === 0) return `not reported${live}`;
  if (d.known && tokens === 0 && !d.modelCalls) return `none reported yet${live}`;
  return `${formatUsage(d.inputTokens, d.outputTokens)}${d.known ? '' : ' at least (some calls reported none)'}${live}`;
}

function metaItem(term, ...value) {
  return h('div', { class: 'kv' }, h('dt', {}, term), h('dd', {}, ...value));
}
