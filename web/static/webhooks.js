// The Webhooks page: the tenant's endpoints with their state, one form that
// adds an endpoint or edits one's URL, events and description, a secret shown once (at creation and rotation) with a copy button,
// enable/disable, delete (confirmed in place), Send test, and each
// endpoint's delivery log in pages with a Redeliver button per attempt.
// While the page is open it reads everything again every few seconds and
// after every action. Cards and delivery rows are kept by id and updated in
// place, so a refresh never takes the focus from a button.

import { api, describeError } from './api.js';
import { clearErrors, setFieldError, showApiError } from './forms.js';
import { formatAge, formatClock, formatDuration, h, shortId, toMillis } from './format.js';
import { paths } from './paths.js';

const $ = (id) => document.getElementById(id);

/**
 * The event types an endpoint subscribes to (the WebhookEventType enum of
 * api/openapi.yaml, less webhook.test: that one is sent only by Send test,
 * whatever an endpoint subscribed to).
 */
export const SUBSCRIBABLE = [
  ['run.started', 'a one-shot run started'],
  ['run.settled', 'a one-shot run settled'],
  ['task.started', 'a continuable child began a task'],
  ['task.settled', 'a continuable child settled a task'],
  ['approval.requested', 'an agent asks a person'],
  ['approval.decided', 'an approval closed'],
  ['tree.paused', 'a tree spent its token budget'],
  ['tree.resumed', 'a paused tree resumed'],
  ['tree.cancelled', 'a tree was cancelled'],
];
const DEFAULT_EVENTS = new Set(['run.settled', 'task.settled']);

/** How often the open page reads the endpoints and open logs again. */
const REFRESH_MS = 5000;
/** Deliveries read per page of a log. */
const PAGE = 20;

// An endpoint's state as an icon and words, never colour alone.
function endpointState(w) {
  if (w.enabled) return { icon: '✓', tone: 'ok', text: 'Enabled' };
  if (w.disabledReason === 'gone') return { icon: '✕', tone: 'bad', text: 'Disabled — the receiver answered 410 Gone' };
  if (w.disabledReason === 'manual') return { icon: '‖', tone: 'idle', text: 'Disabled by request' };
  return { icon: '‖', tone: 'idle', text: w.disabledReason ? `Disabled — ${w.disabledReason}` : 'Disabled' };
}

const DELIVERY_STATES = {
  succeeded: { icon: '✓', tone: 'ok' },
  retrying: { icon: '↻', tone: 'warn' },
  failed: { icon: '✕', tone: 'bad' },
};

function stateSpan(icon, tone, text, testid) {
  return h('span', { class: `state tone-${tone}`, 'data-testid': testid },
    h('span', { class: 'state-icon', 'aria-hidden': 'true' }, icon), h('span', {}, ` ${text}`));
}

// attemptText says an attempt's outcome in one line, for the status line
// after Send test and Redeliver.
function attemptText(d) {
  const http = d.httpStatus ? `HTTP ${d.httpStatus}` : 'no answer';
  const err = d.error && d.error !== http ? ` — ${d.error}` : '';
  return `${d.type} attempt ${d.attempt} ${d.status}: ${http} in ${formatDuration(d.latencyMs)}${err}`;
}

const ACTION_NAMES = { test: 'Send test', redeliver: 'Redeliver', rotate: 'Rotate secret', delete: 'Delete' };

export class WebhooksPage {
  constructor() {
    this.cards = new Map(); // webhook id → card
    this.timer = 0;
    this.busy = false;
    this.again = false;
    this.loadFailed = false;
    this.form = $('wh-form');
    this.form.querySelector('#wh-events-list').replaceChildren(...SUBSCRIBABLE.map(([type, what]) => h('label', {},
      h('input', { type: 'checkbox', name: 'events', value: type, checked: DEFAULT_EVENTS.has(type), 'data-testid': `wh-event-${type}` }),
      h('span', { class: 'mono' }, type), h('span', { class: 'help' }, ` ${what}`))));
    /** The endpoint the form edits; null while it adds one. */
    this.editing = null;
    this.form.addEventListener('submit', (e) => {
      e.preventDefault();
      this.submit();
    });
    $('wh-cancel').addEventListener('click', () => this.resetForm());
  }

  /** Shows the page: reads it now and then every REFRESH_MS until close. */
  open() {
    if (this.timer) return;
    this.timer = setInterval(() => this.refresh(), REFRESH_MS);
    this.refresh();
  }

  close() {
    clearInterval(this.timer);
    this.timer = 0;
  }

  // refresh reads the endpoints and every open delivery log; a call while
  // one runs makes it read once more when done.
  async refresh() {
    if (this.busy) {
      this.again = true;
      return;
    }
    this.busy = true;
    try {
      do {
        this.again = false;
        await this.load();
      } while (this.again);
    } finally {
      this.busy = false;
    }
  }

  async load() {
    const status = $('wh-load-status');
    let list;
    try {
      list = ((await api('GET', paths.webhooks())) || {}).webhooks || [];
    } catch (err) {
      status.textContent = `✕ Loading webhook endpoints: ${describeError(err)}`;
      this.loadFailed = true;
      return;
    }
    // A failure said earlier is over; what an action said stays.
    if (this.loadFailed) status.textContent = '';
    this.loadFailed = false;
    const ids = new Set(list.map((w) => w.id));
    for (const [id, card] of this.cards) {
      if (!ids.has(id)) {
        card.el.remove();
        this.cards.delete(id);
      }
    }
    const box = $('wh-list');
    let prev = null;
    for (const w of list) {
      let card = this.cards.get(w.id);
      if (!card) {
        card = new EndpointCard(w.id, this);
        this.cards.set(w.id, card);
      }
      card.update(w);
      // Moved only when out of order: moving a card would take its focus.
      const want = prev ? prev.nextSibling : box.firstChild;
      if (want !== card.el) box.insertBefore(card.el, want);
      prev = card.el;
    }
    $('wh-count').textContent = `(${list.length})`;
    $('wh-empty').hidden = list.length > 0;
    await Promise.all([...this.cards.values()].filter((c) => c.log.open).map((c) => c.loadLog()));
  }

  // submit creates an endpoint from the form, or saves the one it edits.
  async submit() {
    const f = this.form;
    const errLine = $('wh-form-error');
    clearErrors(f);
    errLine.textContent = '';
    const url = f.elements.url.value.trim();
    const events = [...f.querySelectorAll('input[name="events"]:checked')].map((c) => c.value);
    let bad = false;
    if (!url) bad = setFieldError(f, 'url', 'Enter the URL that receives the deliveries.');
    if (!events.length) bad = setFieldError(f, 'events', 'Choose at least one event type.') || bad;
    if (bad) return;
    const body = { url, events, description: f.elements.description.value.trim() };
    const editing = this.editing;
    const submit = $('wh-create');
    submit.disabled = true;
    try {
      if (editing) {
        // Types the form does not offer (webhook.test) stay subscribed.
        body.events.push(...editing.events.filter((e) => !SUBSCRIBABLE.some(([t]) => t === e)));
        await api('PATCH', paths.webhook(editing.id), body);
        this.cards.get(editing.id)?.say(true, 'Changes saved');
      } else {
        this.showSecret(await api('POST', paths.webhooks(), body), 'created');
      }
      this.resetForm();
      this.refresh();
    } catch (err) {
      showApiError(f, errLine, err);
    } finally {
      submit.disabled = false;
    }
  }

  /** Fills the form with an endpoint to change its URL, events or description. */
  edit(w) {
    const f = this.form;
    this.editing = w;
    clearErrors(f);
    $('wh-form-error').textContent = '';
    f.elements.url.value = w.url;
    f.elements.description.value = w.description || '';
    for (const c of f.querySelectorAll('input[name="events"]')) c.checked = (w.events || []).includes(c.value);
    $('wh-form-h').textContent = `Edit endpoint ${w.id}`;
    $('wh-create').textContent = 'Save changes';
    $('wh-cancel').hidden = false;
    f.scrollIntoView({ block: 'nearest' });
    f.elements.url.focus();
  }

  // resetForm empties the form back to adding an endpoint.
  resetForm() {
    const f = this.form;
    this.editing = null;
    clearErrors(f);
    $('wh-form-error').textContent = '';
    f.elements.url.value = '';
    f.elements.description.value = '';
    for (const c of f.querySelectorAll('input[name="events"]')) c.checked = DEFAULT_EVENTS.has(c.value);
    $('wh-form-h').textContent = 'Add an endpoint';
    $('wh-create').textContent = 'Add endpoint';
    $('wh-cancel').hidden = true;
  }

  /** Shows a secret the API answered once ('created' or 'rotated'). */
  showSecret(w, how) {
    const box = $('wh-secret');
    const copied = h('span', { class: 'status-line', role: 'status', 'data-testid': 'wh-secret-copied' });
    const value = h('input', { type: 'text', readonly: true, class: 'mono', value: w.secret, 'aria-label': 'Signing secret', 'data-testid': 'wh-secret-value', spellcheck: 'false' });
    const copy = async () => {
      try {
        await navigator.clipboard.writeText(w.secret);
        copied.textContent = '✓ Copied to the clipboard';
      } catch (err) {
        value.select();
        copied.textContent = `✕ The browser refused the clipboard (${err && err.message ? err.message : err}); the secret is selected, copy it by hand`;
      }
    };
    box.dataset.webhook = w.id;
    box.replaceChildren(
      h('h3', {}, how === 'created' ? 'Endpoint created — its signing secret' : 'Secret rotated — the new signing secret'),
      h('p', { class: 'mono wh-url' }, w.url),
      h('div', { class: 'wh-secret-row' }, value,
        h('button', { type: 'button', 'data-testid': 'wh-secret-copy', onclick: copy }, 'Copy')),
      copied,
      h('p', { class: 'wh-warning', 'data-testid': 'wh-secret-warning' }, h('span', { 'aria-hidden': 'true' }, '⚠ '),
        'You will not see this secret again: store it now where your receiver reads it.',
        how === 'rotated' ? ' The previous secret keeps signing deliveries too for 24 hours, so the receiver can switch over.' : ''),
      h('div', { class: 'form-actions' },
        h('button', { type: 'button', class: 'primary', 'data-testid': 'wh-secret-done', onclick: () => this.hideSecret() }, 'I have stored it')));
    box.hidden = false;
    value.focus();
    value.select();
  }

  hideSecret() {
    const box = $('wh-secret');
    box.hidden = true;
    box.replaceChildren();
    delete box.dataset.webhook;
  }
}

// EndpointCard is one endpoint on the page: its state, its actions and its
// delivery log.
class EndpointCard {
  constructor(id, page) {
    this.id = id;
    this.page = page;
    this.hook = null;
    this.rows = new Map(); // delivery id → row
    this.log = { open: false, items: [], next: '' };
    this.reads = Promise.resolve();

    const btn = (testid, text, onclick, attrs = {}) => h('button', { type: 'button', 'data-testid': testid, onclick, ...attrs }, text);
    this.state = h('span', {});
    this.url = h('span', { class: 'mono wh-url', 'data-testid': 'wh-url' });
    this.meta = h('p', { class: 'wh-meta' });
    this.status = h('p', { class: 'status-line', role: 'status', 'aria-live': 'polite', 'data-testid': 'wh-status' });
    this.toggle = btn('wh-toggle', '', () => this.act('toggle'));
    this.confirm = h('span', { class: 'wh-confirm', role: 'group', 'aria-label': 'Confirm delete', 'data-testid': 'wh-confirm', hidden: true },
      h('span', {}, 'Delete this endpoint and its delivery log?'),
      btn('wh-delete-yes', 'Yes, delete', () => this.act('delete'), { class: 'danger' }),
      btn('wh-delete-no', 'Keep it', () => this.askDelete(false)));
    this.del = btn('wh-delete', 'Delete', () => this.askDelete(true));
    this.body = h('tbody', { 'data-testid': 'wh-deliveries' });
    this.more = btn('wh-more', 'Show older deliveries', () => this.loadOlder(), { class: 'link', hidden: true });
    this.logEmpty = h('p', { class: 'empty', hidden: true }, 'No deliveries yet. Send a test, or wait for a subscribed event.');
    this.logError = h('p', { class: 'field-error', role: 'alert', 'data-testid': 'wh-log-error' });
    const details = h('details', { class: 'wh-log', 'data-testid': 'wh-log' },
      h('summary', {}, 'Delivery log'),
      h('div', { class: 'wh-table' },
        h('table', { class: 'eventlog' },
          h('caption', { class: 'visually-hidden' }, 'Delivery attempts, newest first'),
          h('thead', {}, h('tr', {}, ...['Time', 'Type', 'Attempt', 'Status', 'HTTP', 'Error', 'Latency', ''].map((c) => h('th', { scope: 'col' }, c)))),
          this.body)),
      this.logEmpty, this.logError, this.more);
    // A closed log is forgotten; opening it reads the newest page.
    details.addEventListener('toggle', () => {
      this.log = { open: details.open, items: [], next: '' };
      if (details.open) this.loadLog();
      else this.renderLog();
    });
    this.el = h('li', { class: 'panel wh-item', 'data-testid': 'webhook', 'data-id': id },
      h('div', { class: 'wh-head' }, this.state, this.url),
      this.meta,
      h('div', { class: 'actions wh-actions', role: 'group', 'aria-label': 'Endpoint actions' },
        btn('wh-test', 'Send test', () => this.act('test')),
        btn('wh-rotate', 'Rotate secret', () => this.act('rotate')),
        btn('wh-edit', 'Edit', () => page.edit(this.hook)),
        this.toggle, this.del, this.confirm),
      this.status, details);
  }

  update(w) {
    this.hook = w;
    this.el.dataset.enabled = String(w.enabled);
    const st = endpointState(w);
    this.state.replaceChildren(stateSpan(st.icon, st.tone, st.text, 'wh-state'));
    this.url.textContent = w.url;
    const created = toMillis(w.createdAt);
    this.meta.replaceChildren(
      w.description ? h('span', { class: 'wh-desc' }, w.description) : null,
      h('span', { class: 'wh-events', 'data-testid': 'wh-events' }, 'Events: ', ...(w.events || []).map((e) => h('span', { class: 'chip mono' }, e))),
      created !== null ? h('span', { class: 'age', title: new Date(created).toISOString() }, `Created ${formatClock(created, { day: true })} (${formatAge(Date.now() - created)})`) : null,
      h('span', { class: 'chip mono', title: w.id }, shortId(w.id)));
    this.toggle.textContent = w.enabled ? 'Disable' : 'Enable';
    this.toggle.dataset.testid = w.enabled ? 'wh-disable' : 'wh-enable';
  }

  askDelete(on) {
    this.confirm.hidden = !on;
    this.del.hidden = on;
    (on ? this.confirm.querySelector('[data-testid="wh-delete-no"]') : this.del).focus();
  }

  say(ok, text) {
    this.status.textContent = `${ok ? '✓' : '✕'} ${text}`;
    this.status.dataset.ok = String(ok);
  }

  // act runs one action on the endpoint, says its outcome in the card and
  // reads the page again.
  async act(what, deliveryId) {
    const w = this.hook;
    // Every button of the card waits, so a double click acts once.
    const buttons = [...this.el.querySelectorAll('button')];
    for (const b of buttons) b.disabled = true;
    try {
      if (what === 'test') {
        const d = await api('POST', paths.webhookTest(w.id));
        this.say(d.status === 'succeeded', `Test sent — ${attemptText(d)}`);
        this.openLog();
      } else if (what === 'redeliver') {
        const d = await api('POST', paths.webhookRedeliver(w.id, deliveryId));
        this.say(d.status === 'succeeded', `Redelivered — ${attemptText(d)}`);
      } else if (what === 'rotate') {
        this.page.showSecret(await api('POST', paths.webhookRotate(w.id)), 'rotated');
        this.say(true, 'Secret rotated');
      } else if (what === 'toggle') {
        const u = await api('PATCH', paths.webhook(w.id), { enabled: !w.enabled });
        this.update(u);
        this.say(true, u.enabled ? 'Enabled: delivery resumes where it stopped' : 'Disabled: nothing is delivered until it is enabled again');
      } else if (what === 'delete') {
        await api('DELETE', paths.webhook(w.id));
        if ($('wh-secret').dataset.webhook === w.id) this.page.hideSecret();
        if (this.page.editing?.id === w.id) this.page.resetForm();
        $('wh-load-status').textContent = `✓ Deleted ${w.url}`;
        // The card and its focused button go: the focus moves to the page heading.
        $('webhooks-h').focus();
      }
    } catch (err) {
      const name = what === 'toggle' ? (w.enabled ? 'Disable' : 'Enable') : ACTION_NAMES[what];
      const msg = `${name} failed: ${describeError(err)}`;
      this.say(false, msg);
      // The refresh removes the card of an endpoint deleted elsewhere: the
      // page says it instead.
      if (err.code === 'WEBHOOK_NOT_FOUND') $('wh-load-status').textContent = `✕ ${w.url}: ${msg}`;
    } finally {
      for (const b of buttons) b.disabled = false;
      this.page.refresh();
    }
  }

  openLog() {
    const d = this.el.querySelector('details.wh-log');
    if (!d.open) d.open = true;
  }

  // read runs the log's reads one after another, so their answers never
  // cross; fn(log) reads into log, and what it read is dropped when the log
  // was closed (or closed and opened again) meanwhile.
  read(fn) {
    const log = this.log;
    this.reads = this.reads.then(async () => {
      if (log !== this.log) return;
      try {
        const err = await fn(log);
        if (log !== this.log) return;
        this.logError.textContent = err || '';
      } catch (err) {
        if (log === this.log) this.logError.textContent = describeError(err);
      }
      if (log === this.log) this.renderLog();
    });
    return this.reads;
  }

  // loadLog reads the newest page of the delivery log and puts it before
  // the older pages already read; when it shares no delivery with them,
  // more arrived than a page holds and the log starts over from this page.
  // log.next always continues after the oldest delivery held.
  loadLog() {
    return this.read(async (log) => {
      let page;
      try {
        page = (await api('GET', paths.webhookDeliveries(this.id, { limit: PAGE }))) || {};
      } catch (err) {
        return `Reading the delivery log: ${describeError(err)}`;
      }
      const first = page.deliveries || [];
      const seen = new Set(first.map((d) => d.id));
      if (log.items.some((d) => seen.has(d.id))) {
        log.items = [...first, ...log.items.filter((d) => !seen.has(d.id))];
      } else {
        log.items = first;
        log.next = page.nextCursor || '';
      }
      return '';
    });
  }

  loadOlder() {
    return this.read(async (log) => {
      let page;
      try {
        page = (await api('GET', paths.webhookDeliveries(this.id, { limit: PAGE, after: log.next }))) || {};
      } catch (err) {
        return `Reading older deliveries: ${describeError(err)}`;
      }
      const seen = new Set(log.items.map((d) => d.id));
      log.items.push(...(page.deliveries || []).filter((d) => !seen.has(d.id)));
      log.next = page.nextCursor || '';
      return '';
    });
  }

  renderLog() {
    const items = this.log.items;
    const ids = new Set(items.map((d) => d.id));
    for (const [id, row] of this.rows) {
      if (!ids.has(id)) {
        row.remove();
        this.rows.delete(id);
      }
    }
    let prev = null;
    for (const d of items) {
      let row = this.rows.get(d.id);
      if (!row) {
        row = this.row(d);
        this.rows.set(d.id, row);
      }
      const want = prev ? prev.nextSibling : this.body.firstChild;
      if (want !== row) this.body.insertBefore(row, want);
      prev = row;
    }
    this.logEmpty.hidden = items.length > 0;
    this.more.hidden = !this.log.next;
  }

  // row renders one attempt; attempts never change, so a row is built once.
  row(d) {
    const st = DELIVERY_STATES[d.status] || { icon: '?', tone: 'idle' };
    const at = toMillis(d.at);
    return h('tr', { 'data-testid': 'wh-delivery', 'data-id': d.id, 'data-status': d.status, 'data-type': d.type },
      h('td', { class: 'time', title: at !== null ? new Date(at).toISOString() : '' }, at !== null ? formatClock(at, { day: true }) : ''),
      h('td', { class: 'mono', title: `webhook-id ${d.eventId}` }, d.type),
      h('td', { class: 'num' }, String(d.attempt)),
      h('td', {}, stateSpan(st.icon, st.tone, d.status, 'wh-delivery-status')),
      h('td', { class: 'num', 'data-testid': 'wh-delivery-http' }, d.httpStatus ? String(d.httpStatus) : '—'),
      h('td', { class: 'wh-error', 'data-testid': 'wh-delivery-error' }, d.error || ''),
      h('td', { class: 'num' }, formatDuration(d.latencyMs)),
      h('td', {}, h('button', { type: 'button', class: 'link', 'data-testid': 'wh-redeliver', 'aria-label': `Redeliver ${d.type} attempt ${d.attempt}`, onclick: () => this.act('redeliver', d.id) }, 'Redeliver')));
  }
}
