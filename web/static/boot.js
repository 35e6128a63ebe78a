// The page's first reads, sent as soon as this module runs: app.js imports
// it first, so the answers are on their way while the other modules are
// evaluated, and app.js takes them from here. A read that fails (not signed
// in yet) is made again once the page knows more.

import { api } from './api.js';
import { paths } from './paths.js';
import { TAIL_PAGE } from './transcript.js';

/** Sessions and runs of the tree's first page, drawn before the rest is read. */
export const FIRST_PAGE = 100;

/** A before that reads from the end of any log: 2^53-1, which the API accepts as "the end". */
const END_SEQ = Number.MAX_SAFE_INTEGER;

/** Reads the newest page of a session's log. */
export const readTail = (id) => api('GET', paths.sessionEvents(id, { before: END_SEQ, limit: TAIL_PAGE }));

/**
 * Reads the first page of sessions and of runs, oldest first, so parents
 * come before their children: [sessions page, runs page].
 */
export const readFirstPage = () => Promise.all([
  api('GET', paths.sessions({ limit: FIRST_PAGE })),
  api('GET', paths.runs({ limit: FIRST_PAGE })),
]);

performance.mark('boot');
const linked = new URLSearchParams(location.hash.slice(1)).get('s');

/**
 * The reads sent at load: the sign-in check (GET /v1/auth/session, as it
 * answered), the tree's first page (null if refused) and, for a link to a
 * session, the newest page of its log ({id, page}, page null if refused).
 */
export const early = {
  session: api('GET', paths.authSession()),
  tree: readFirstPage().catch(() => null),
  tail: linked ? { id: linked, page: readTail(linked).catch(() => null) } : null,
};
// signedIn reads the answer, or the failure, when app.js starts.
early.session.catch(() => {});
