// Taking work out of the page: a run as the curl command that starts it
// again, and a whole tree (headers, runs, logs) as one JSON file.

import { api, listAll } from './api.js';
import { paths } from './paths.js';
import { textBlocks } from './format.js';

/** A text as one single-quoted shell word. */
function shellQuote(s) {
  return `'${String(s).replace(/'/g, `'\\''`)}'`;
}

/**
 * The curl command that starts r again: the same provider, parent, label
 * and prompt (the first prompt of its session), as POST /v1/runs for a
 * one-shot run or POST /v1/subagents for a continuable child.
 */
export function runAsCurl(store, n, r) {
  const prompt = textBlocks(store.prompts.get(n.id) || '');
  const continuable = !!r.taskId;
  const body = { provider: r.provider || n.provider, parentSessionId: r.parentId || n.parentId, prompt };
  if (n.label || continuable) body.label = n.label || n.id;
  const path = continuable ? paths.subagents() : paths.runs();
  return `curl -X POST ${shellQuote(location.origin + path)} \\\n  -H 'Content-Type: application/json' \\\n  -d ${shellQuote(JSON.stringify(body))}`;
}

/**
 * Reads root's whole tree from the API — each session's header, its runs
 * and its whole log — as one object.
 */
export async function exportTree(store, root) {
  const sessions = [];
  for (const n of store.subtree(root)) {
    const [header, runs, events] = await Promise.all([
      api('GET', paths.session(n.id)),
      listAll((after) => paths.runs({ childSessionId: n.id, limit: 1000, after }), 'runs'),
      readLog(n.id),
    ]);
    sessions.push({ session: header, runs, events });
  }
  return { format: 'subagentd-tree/1', exportedAt: new Date().toISOString(), rootSessionId: root.id, sessions };
}

async function readLog(id) {
  const out = [];
  let after = null;
  for (;;) {
    const page = await api('GET', paths.sessionEvents(id, { limit: 1000, after }));
    const events = (page && page.events) || [];
    out.push(...events);
    if (!page || !page.hasMore || !events.length) return out;
    after = events.at(-1).seq;
  }
}
