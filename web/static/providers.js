// The providers panel: each registered provider with where it runs, the
// model its children use and which capabilities it enforces.

import { h } from './format.js';

const $ = (id) => document.getElementById(id);

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

/** Renders the providers of the store into the panel and the model note. */
export function renderProviders(store) {
  const list = [...store.providers.values()];
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
}
