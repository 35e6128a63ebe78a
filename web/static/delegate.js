// The Delegate form (start a one-shot run or a continuable child) and the
// "Create root" form. The parent defaults to the root of the selected
// session's tree, never to a settled one-shot child, and stays on a start:
// the new child is shown, the parent is kept.

import { api, describeError } from './api.js';
import { h, shortId, textBlocks } from './format.js';
import { clearErrors, parseList, parseMaxDepth, parseSchema, setFieldError, showApiError } from './forms.js';
import { paths } from './paths.js';

const $ = (id) => document.getElementById(id);

/** Roots offered as parents at most (newest first). */
const PARENT_ROOTS = 100;

export class DelegateForm {
  /**
   * @param {import('./store.js').Store} store
   * @param {object} o
   * @param {(id: string, opts?: {keepParent?: boolean}) => void} o.select
   */
  constructor(store, o) {
    this.store = store;
    this.o = o;
    this.parentKey = '';
    this.providersKey = null;
    $('start-form').addEventListener('submit', (e) => this.submit(e));
    $('start-form').addEventListener('change', (e) => {
      if (e.target.name === 'kind' || e.target.name === 'provider') this.update();
      if (e.target.name === 'parent') store.ui.parentChoice = e.target.value;
    });
    $('start-schema').addEventListener('input', () => this.checkSchema());
    $('start-maxdepth').addEventListener('input', () => setFieldError($('start-form'), 'maxDepth', parseMaxDepth($('start-maxdepth').value).error));
    $('root-form').addEventListener('submit', (e) => this.submitRoot(e));
  }

  render() {
    if (this.providersKey !== this.store.providers) {
      this.providersKey = this.store.providers;
      this.renderProviderSelect();
    }
    this.renderParentSelect();
  }

  renderProviderSelect() {
    const sel = $('start-provider');
    const cur = sel.value;
    sel.replaceChildren(...[...this.store.providers.values()].map((p) => h('option', { value: p.name }, p.name)));
    if (cur && this.store.providers.has(cur)) sel.value = cur;
    this.update();
  }

  // renderParentSelect offers a new root, the newest roots and the chosen
  // parent; it is rebuilt only when those change.
  renderParentSelect() {
    const s = this.store;
    const choice = s.ui.parentChoice ?? this.defaultParent();
    const roots = s.roots().filter((n) => s.isRoot(n)).slice(0, PARENT_ROOTS);
    const chosen = choice && s.nodes.get(choice);
    if (chosen && !roots.includes(chosen)) roots.unshift(chosen);
    const opts = roots.map((n) => [n.id, `${s.title(n)} (${s.view(n).mode})`]);
    const key = JSON.stringify([choice, opts]);
    if (key === this.parentKey) return;
    this.parentKey = key;
    const sel = $('start-parent');
    sel.replaceChildren(h('option', { value: '' }, 'New root session'), ...opts.map(([id, text]) => h('option', { value: id }, text)));
    sel.value = chosen ? choice : '';
  }

  // defaultParent is the root of the selected session's tree ('' for a new
  // root when nothing is selected or the tree's root is not known).
  defaultParent() {
    const n = this.store.ui.selected && this.store.nodes.get(this.store.ui.selected);
    if (!n) return '';
    const root = this.store.treeRoot(n);
    return this.store.isRoot(root) ? root.id : '';
  }

  kind() {
    return document.querySelector('input[name="kind"]:checked').value;
  }

  // update shows only the options the chosen provider enforces; output
  // schemas belong to one-shot runs only.
  update() {
    const p = this.store.providers.get($('start-provider').value) || null;
    // Continuable children need a provider that can resume them.
    const canResume = !p || p.resume !== false;
    $('kind-child').disabled = !canResume;
    if (!canResume) $('kind-run').checked = true;
    const kind = this.kind();
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

  checkSchema() {
    const { error } = parseSchema($('start-schema').value);
    setFieldError($('start-form'), 'outputSchema', error);
    return !error;
  }

  async submit(e) {
    e.preventDefault();
    const s = this.store;
    const form = $('start-form');
    clearErrors(form);
    $('start-error').textContent = '';
    const kind = this.kind();
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
      const sc = parseSchema($('start-schema').value);
      if (sc.error) fail('outputSchema', sc.error, $('start-schema'));
      else if (sc.value) body.outputSchema = sc.value;
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
        const root = await api('POST', paths.sessions(), {});
        s.mergeSession(root);
        parentId = root.id;
      }
      body.parentSessionId = parentId;
      s.ui.parentChoice = parentId;
      if (kind === 'run') {
        const res = await api('POST', paths.runs(), body);
        s.mergeRun(res);
        $('start-prompt').value = '';
        s.recordPrompt(res.childSessionId, prompt);
        $('start-status').textContent = `Run ${shortId(res.runId)} started — child ${shortId(res.childSessionId)}.`;
        this.o.select(res.childSessionId, { keepParent: true });
      } else {
        const res = await api('POST', paths.subagents(), body);
        s.addContinuableChild({ id: res.childId, parentId, provider: providerName, label, taskId: res.taskId });
        $('start-prompt').value = '';
        $('start-status').textContent = `Child ${shortId(res.childId)} accepted — task ${shortId(res.taskId)} started.`;
        this.o.select(res.childId, { keepParent: true });
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

  async submitRoot(e) {
    e.preventDefault();
    const label = $('root-label').value.trim();
    $('root-error').textContent = '';
    try {
      const sess = await api('POST', paths.sessions(), label ? { label } : {});
      this.store.mergeSession(sess);
      $('root-label').value = '';
      this.o.select(sess.id);
    } catch (err) {
      $('root-error').textContent = describeError(err);
    }
  }
}
