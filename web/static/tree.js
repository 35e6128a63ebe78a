// The session tree: roots (newest first), their children and grandchildren,
// each a real <button> showing title, state (icon + word), provider, mode,
// the number of tasks of a continuable child, stop reason and active
// duration. Arrow keys move between nodes; Left/Right collapse and expand.

import { formatDuration, h, shortId, stateStyle } from './format.js';

export class Tree {
  /**
   * @param {HTMLElement} root container
   * @param {import('./model.js').Model} model
   * @param {(id: string) => void} onSelect
   */
  constructor(root, model, onSelect) {
    this.root = root;
    this.model = model;
    this.onSelect = onSelect;
    this.selected = '';
    this.collapsed = new Set();
    root.addEventListener('keydown', (e) => this.key(e));
  }

  render() {
    const focused = document.activeElement && this.root.contains(document.activeElement) ? document.activeElement.id : '';
    const roots = this.model.roots();
    this.root.replaceChildren(roots.length ? this.list(roots) : '');
    if (focused) document.getElementById(focused)?.focus();
    this.tick();
    return roots.length;
  }

  list(nodes) {
    return h('ul', { class: 'tree-list' }, nodes.map((n) => this.item(n)));
  }

  item(n) {
    const v = this.model.view(n);
    const kids = this.model.children(n.id);
    const st = stateStyle(v.state);
    const title = n.label || (v.mode === 'root' ? `Session ${shortId(n.id)}` : shortId(n.id));
    const open = !this.collapsed.has(n.id);
    const meta = [
      h('span', { class: `state tone-${st.tone}`, 'data-testid': 'node-state' },
        h('span', { class: `state-icon${v.state === 'running' ? ' spin' : ''}`, 'aria-hidden': 'true' }, st.icon), ` ${v.state}`),
    ];
    if (n.provider) meta.push(h('span', { class: 'chip' }, n.provider));
    meta.push(h('span', { class: 'chip' }, v.mode));
    if (v.mode === 'continuable' && v.tasks) meta.push(h('span', { class: 'chip', 'data-testid': 'node-tasks' }, `${v.tasks} task${v.tasks > 1 ? 's' : ''}`));
    if (v.stopReason && v.stopReason !== v.state) meta.push(h('span', { class: 'chip' }, `stop: ${v.stopReason}`));
    if (v.disposed) meta.push(h('span', { class: 'chip', 'data-testid': 'node-disposed' }, 'disposed'));
    if (v.durationMs !== null) meta.push(h('span', { class: 'dur', 'data-dur-for': n.id }, formatDuration(v.durationMs)));
    const button = h('button', {
      type: 'button',
      class: 'node',
      id: `node-${n.id}`,
      'data-testid': 'node',
      'data-id': n.id,
      'data-state': v.state,
      'data-mode': v.mode,
      'data-stop-reason': v.stopReason || '',
      'data-task': v.taskId || false,
      'aria-current': this.selected === n.id ? 'true' : false,
      onclick: () => this.onSelect(n.id),
    }, h('span', { class: 'node-title' }, title), h('span', { class: 'node-meta' }, meta));
    const toggle = kids.length
      ? h('button', {
        type: 'button',
        class: 'twisty',
        'aria-expanded': String(open),
        'aria-label': `${open ? 'Collapse' : 'Expand'} ${kids.length} child session${kids.length > 1 ? 's' : ''} of ${title}`,
        'data-testid': 'twisty',
        onclick: () => this.toggle(n.id),
      }, h('span', { 'aria-hidden': 'true' }, open ? '▾' : '▸'))
      : h('span', { class: 'twisty-space', 'aria-hidden': 'true' });
    return h('li', { class: 'tree-item', 'data-id': n.id },
      h('div', { class: 'row' }, toggle, button),
      kids.length && open ? this.list(kids) : null);
  }

  toggle(id, open) {
    const isOpen = !this.collapsed.has(id);
    if (open === isOpen) return;
    if (isOpen) this.collapsed.add(id);
    else this.collapsed.delete(id);
    this.render();
  }

  /** Updates the durations of running nodes in place, once a second. */
  tick() {
    for (const el of this.root.querySelectorAll('[data-dur-for]')) {
      const n = this.model.nodes.get(el.dataset.durFor);
      if (!n) continue;
      const v = this.model.view(n);
      if (v.durationMs !== null) el.textContent = formatDuration(v.durationMs);
    }
  }

  key(e) {
    const btn = e.target.closest('.node');
    if (!btn) return;
    const all = [...this.root.querySelectorAll('.node')];
    const i = all.indexOf(btn);
    const id = btn.dataset.id;
    const n = this.model.nodes.get(id);
    let target = null;
    switch (e.key) {
      case 'ArrowDown': target = all[i + 1]; break;
      case 'ArrowUp': target = all[i - 1]; break;
      case 'Home': target = all[0]; break;
      case 'End': target = all.at(-1); break;
      case 'ArrowRight':
        if (this.collapsed.has(id)) this.toggle(id, true);
        else target = this.model.children(id).length ? all[i + 1] : null;
        break;
      case 'ArrowLeft':
        if (this.model.children(id).length && !this.collapsed.has(id)) this.toggle(id, false);
        else if (n && n.parentId) target = document.getElementById(`node-${n.parentId}`);
        break;
      default:
        return;
    }
    e.preventDefault();
    (target || document.getElementById(`node-${id}`))?.focus();
  }
}
