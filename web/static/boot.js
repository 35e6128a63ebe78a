// The page's first reads. index.html sends them before this script is
// fetched (window.firstReads: path → fetch's promise), so the answers are
// on their way while the modules are compiled and evaluated; app.js takes
// them from here. A read index.html did not send, for a path it spelled
// otherwise, is sent now. A read that fails (not signed in yet) is made
// again once the page knows more.

import { answer, api } from './api.js';
import { paths } from './paths.js';
import { TAIL_PAGE } from './transcript.js';

/** Sessions and runs of the tree's first page, drawn before the rest is read. */
export const FIRST_PAGE = 100;

/** Reads path anew. */
const read = (path) => api('GET', path);

/** A before that reads from the end of any log: 2^53-1, which the API accepts as "the end". */
const END_SEQ = Number.MAX_SAFE_INTEGER;

/** Reads the newest page of a session's log (get: how a path is read). */
export const readTail = (id, get = read) => get(paths.sessionEvents(id, { before: END_SEQ, limit: TAIL_PAGE }));

/**
 * Reads the first page of sessions and of runs, oldest first, so parents
 * come before their children: [sessions page, runs page].
 */
export const readFirstPage = (get = read) => Promise.all([
  get(paths.sessions({ limit: FIRST_PAGE })),
  get(paths.runs({ limit: FIRST_PAGE })),
]);

performance.mark('boot');
const linked = new URLSearchParams(location.hash.slice(1)).get('s');

/** A GET of path: the answer to the request index.html sent for it, if it did. */
function first(path) {
  const sent = window.firstReads?.get(path);
  if (!sent) return read(path);
  window.firstReads.delete(path);
  return answer(sent);
}

/**
 * The reads sent at load: the sign-in check (GET /v1/auth/session, as it
 * answered), the tree's first page (null if refused) and, for a link to a
 * session, the newest page of its log ({id, page}, page null if refused).
 */
export const early = {
  session: first(paths.authSession()),
  tree: readFirstPage(first).catch(() => null),
  tail: linked ? { id: linked, page: readTail(linked, first).catch(() => null) } : null,
};
// signedIn reads the answer, or the failure, when app.js starts.
early.session.catch(() => {});
