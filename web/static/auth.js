// Sign-in (docs/architecture.md §10). GET /v1/auth/session says whether tokens are
// configured; a 401 asks for a token, which POST /v1/auth/session turns into
// an HttpOnly session cookie that the API and both streams accept. A server
// without the endpoint (404) has no sign-in: the page just loads.

import { api, ApiError, describeError } from './api.js';
import { paths } from './paths.js';

const $ = (id) => document.getElementById(id);

/**
 * Resolves once the page may load: signed in, or no sign-in needed.
 * Returns {authRequired, tenant}. first is the answer of a check already
 * sent (boot.js sends one at load); later checks are sent here.
 */
export async function signedIn(first = api('GET', paths.authSession())) {
  for (let check = first; ; check = api('GET', paths.authSession())) {
    try {
      const s = await check;
      return { authRequired: !!(s && s.authRequired), tenant: (s && s.tenant) || '' };
    } catch (err) {
      if (err instanceof ApiError && (err.status === 404 || err.status === 405)) return { authRequired: false, tenant: '' };
      if (!(err instanceof ApiError) || err.status !== 401) throw err;
    }
    await prompt();
  }
}

// prompt shows the token form until the server accepts a token.
function prompt() {
  const dialog = $('signin');
  const form = $('signin-form');
  const input = $('signin-token');
  const error = $('signin-error');
  dialog.hidden = false;
  document.body.classList.add('signing-in');
  input.focus();
  return new Promise((resolve) => {
    const submit = async (e) => {
      e.preventDefault();
      error.textContent = '';
      const token = input.value.trim();
      if (!token) {
        error.textContent = 'Paste your access token first.';
        input.focus();
        return;
      }
      $('signin-submit').disabled = true;
      try {
        await api('POST', paths.authSession(), { token });
        input.value = '';
        dialog.hidden = true;
        document.body.classList.remove('signing-in');
        form.removeEventListener('submit', submit);
        resolve();
      } catch (err) {
        error.textContent = err instanceof ApiError && err.status === 401
          ? `${err.code} — that token was not accepted. Check it and try again.`
          : describeError(err);
        input.select();
      } finally {
        $('signin-submit').disabled = false;
      }
    };
    form.addEventListener('submit', submit);
  });
}

/** Shows who is signed in and a sign-out control when sign-in is on. */
export function showAccount({ authRequired, tenant }) {
  const box = $('account');
  box.hidden = !authRequired;
  if (!authRequired) return;
  $('account-tenant').textContent = tenant ? `Signed in · ${tenant}` : 'Signed in';
  $('signout').onclick = async () => {
    $('signout').disabled = true;
    try {
      await api('DELETE', paths.authSession());
    } finally {
      // A fresh page asks for a token again; nothing of the old one stays.
      location.reload();
    }
  };
}
