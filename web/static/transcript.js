// Transcript renders one session log (seam-spec §3, internal/agent/events.go)
// as a conversation plus a complete event log. Each event is applied once, in
// seq order (EventStream guarantees it); every event gets exactly one row in
// the event log, and the conversation shows the surface: user messages,
// assistant text (streamed live from assistant/chunk, finalised by
// assistant/message), tool calls with their results folded in <details>, and
// turn boundaries as quiet separators. Log-only events (descriptor, approval
// policy, inbox splices, steps, usage, unknown plugin types) appear only in
// the event log.

import { blocksText, h, prettyJSON, shortId, toMillis } from './format.js';

export class Transcript {
  /**
   * @param {object} o
   * @param {HTMLElement} o.conv conversation container (role=log)
   * @param {HTMLElement} o.log event log table body
   * @param {HTMLElement} o.scroller element that scrolls the conversation
   * @param {(n: number) => void} o.onCount number of events in the log
   * @param {(descriptor: object) => void} o.onDescriptor a subagent/descriptor was read
   * @param {(running: boolean) => void} o.onTurn a turn started (true) or ended (false)
   */
  constructor(o) {
    this.o = o;
    this.reset();
  }

  reset() {
    this.o.conv.replaceChildren();
    this.o.log.replaceChildren();
    this.count = 0;
    /** turn:step → live assistant bubble */
    this.streams = new Map();
    /** callId → tool <details> */
    this.tools = new Map();
    this.o.conv.setAttribute('aria-busy', 'false');
    this.o.onCount(0);
  }

  /** Applies one session event; data is the {seq,type,time,data} envelope or the bare payload. */
  apply({ id, type, data }) {
    const env = data && typeof data === 'object' && 'data' in data && ('seq' in data || data.type === type) ? data : null;
    const payload = env ? env.data : data;
    const seq = id ?? env?.seq ?? null;
    const time = toMillis(env?.time);
    const sc = this.o.scroller;
    const atBottom = sc.scrollHeight - sc.scrollTop - sc.clientHeight < 80;

    this.logRow(seq, type, time, payload);
    this.render(seq, type, payload || {});

    if (atBottom) sc.scrollTop = sc.scrollHeight;
  }

  logRow(seq, type, time, payload) {
    this.count++;
    this.o.onCount(this.count);
    const when = time ? new Date(time).toLocaleTimeString() : '';
    this.o.log.append(
      h('tr', { 'data-seq': seq ?? '', 'data-type': type, 'data-testid': 'log-row' },
        h('td', { class: 'num' }, seq ?? '–'),
        h('td', { class: 'time' }, when),
        h('td', {}, h('code', {}, type)),
        h('td', {}, h('details', {}, h('summary', {}, summarize(type, payload)), h('pre', {}, prettyJSON(payload ?? null))))));
  }

  render(seq, type, d) {
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
        this.toolCall(seq, d);
        break;
      case 'tool/result':
        this.toolResult(seq, d);
        break;
      case 'turn/start':
        this.o.onTurn(true);
        this.add(h('div', { class: 'sep', role: 'separator', 'data-seq': seq, 'data-testid': 'turn-start' }, `Turn ${d.turn ?? ''}`));
        break;
      case 'turn/end':
        this.turnEnd(seq, d);
        this.o.onTurn(false);
        break;
      case 'subagent/descriptor':
        this.o.onDescriptor(d);
        break;
      default:
        // Log-only or unknown type: the event log row is all it gets.
        break;
    }
  }

  add(el) {
    this.o.conv.append(el);
    return el;
  }

  userMessage(seq, d) {
    const src = d.source || {};
    const text = blocksText(d.content);
    const extras = nonText(d.content);
    if (src.form === 'notice' || src.kind === 'subagent-settled') {
      this.add(h('details', { class: 'notice', 'data-seq': seq, 'data-testid': 'msg-notice' },
        h('summary', {}, h('span', { 'aria-hidden': 'true' }, '◇ '), src.summary || 'Runtime notice'),
        h('div', { class: 'body' }, text), extras));
      return;
    }
    if (src.kind === 'plugin') {
      this.add(h('details', { class: 'notice', 'data-seq': seq, 'data-testid': 'msg-context' },
        h('summary', {}, h('span', { 'aria-hidden': 'true' }, '⋯ '), `Context from ${src.plugin || 'a plugin'}${src.form ? ` (${src.form})` : ''}`),
        h('div', { class: 'body' }, text), extras));
      return;
    }
    let who = 'User';
    let cls = 'user';
    if (src.kind === 'subagent-report') {
      who = `Report from child ${shortId(src.senderSessionId)}`;
      cls = 'relay';
    } else if (src.kind === 'coordinator' || src.form === 'relay') {
      who = `From parent agent ${shortId(src.senderSessionId)}`.trim();
      cls = 'relay';
    }
    this.add(h('article', { class: `msg ${cls}`, 'data-seq': seq, 'data-testid': 'msg-user' },
      h('header', {}, h('span', { class: 'who' }, who)),
      h('div', { class: 'body' }, text),
      extras));
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
    }
    if (this.streams.size === 0) this.o.conv.setAttribute('aria-busy', 'false');
  }

  toolCall(seq, d) {
    const args = h('pre', {}, prettyJSON(d.arguments ?? ''));
    const state = h('span', { class: 'tool-state' }, 'running…');
    const result = h('div', { class: 'tool-result', hidden: true });
    const el = this.add(h('details', { class: 'tool', 'data-seq': seq, 'data-testid': 'tool', 'data-call-id': d.callId || '' },
      h('summary', {}, h('span', { 'aria-hidden': 'true' }, '⚙ '), 'Tool ', h('code', {}, d.name || '?'), ' ', state),
      h('h4', {}, 'Arguments'), args, result));
    const t = { el, state, result };
    if (d.callId) this.tools.set(d.callId, t);
    return t;
  }

  toolResult(seq, d) {
    const content = d.content;
    const isError = !!d.isError;
    const t = (d.callId && this.tools.get(d.callId)) || this.toolCall(seq, { name: d.name, arguments: '' });
    t.state.textContent = isError ? '✕ error' : '✓ done';
    t.el.dataset.result = isError ? 'error' : 'ok';
    t.result.hidden = false;
    t.result.replaceChildren(h('h4', {}, isError ? 'Error' : 'Result'), h('pre', {}, Array.isArray(content) ? blocksText(content) || prettyJSON(content) : prettyJSON(content ?? '')));
  }

  turnEnd(seq, d) {
    const r = d.reason || {};
    const kind = r.kind || 'ended';
    const icon = kind === 'completed' ? '✓' : kind === 'aborted' || kind === 'interrupted' ? '⊘' : '✕';
    let text = `Turn ${d.turn ?? ''} ${kind}`;
    if (r.reason && r.reason.kind) text += ` (by ${r.reason.kind})`;
    if (r.message) text += `: ${r.message}`;
    if (r.code) text += ` [${r.code}]`;
    this.add(h('div', { class: `sep end ${kind === 'completed' ? '' : 'bad'}`, role: 'separator', 'data-seq': seq, 'data-testid': 'turn-end' },
      h('span', { 'aria-hidden': 'true' }, `${icon} `), text));
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
    case 'subagent/descriptor':
      return `${d.mode || ''} via ${d.provider || '?'}${d.label ? ` — ${d.label}` : ''}`;
    case 'approval/policy':
      return `${d.policy || ''} (${d.source || ''})`;
    case 'agent/inbox/spliced':
      return `${d.outcome || (d.inserted?.length ? `inserted ${d.inserted.length}` : `claimed ${d.removedCount || 0}`)} → ${d.target || ''}`;
    default:
      return clip(JSON.stringify(d));
  }
}

function clip(s) {
  return s.length > 80 ? `${s.slice(0, 79)}…` : s;
}
