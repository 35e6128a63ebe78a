// Every API path the dashboard calls (api/openapi.yaml), built in one place so a
// route change is one edit and ids are always escaped.

const e = encodeURIComponent;

/** Adds a query string from an object, leaving out empty values. */
function q(path, params) {
  const s = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null && v !== '') s.set(k, String(v));
  }
  const t = s.toString();
  return t ? `${path}?${t}` : path;
}

export const paths = {
  authSession: () => '/v1/auth/session',
  providers: () => '/v1/providers',
  sessions: (params) => q('/v1/sessions', params),
  session: (id) => `/v1/sessions/${e(id)}`,
  sessionMessages: (id) => `/v1/sessions/${e(id)}/messages`,
  sessionEvents: (id, params) => q(`/v1/sessions/${e(id)}/events`, params),
  sessionStream: (id) => `/v1/sessions/${e(id)}/stream`,
  sessionCancel: (id) => `/v1/sessions/${e(id)}/cancel`,
  sessionUsage: (id, scope) => q(`/v1/sessions/${e(id)}/usage`, { scope }),
  sessionLimits: (id) => `/v1/sessions/${e(id)}/limits`,
  runs: (params) => q('/v1/runs', params),
  run: (runId) => `/v1/runs/${e(runId)}`,
  runSteer: (runId) => `/v1/runs/${e(runId)}/steer`,
  runCancel: (runId) => `/v1/runs/${e(runId)}/cancel`,
  subagents: () => '/v1/subagents',
  subagent: (childId, params) => q(`/v1/subagents/${e(childId)}`, params),
  followup: (childId) => `/v1/subagents/${e(childId)}/followup`,
  interrupt: (childId) => `/v1/subagents/${e(childId)}/interrupt`,
  lifecycle: () => '/v1/events',
  approvals: (params) => q('/v1/approvals', params),
  approval: (id) => `/v1/approvals/${e(id)}`,
  approvalDecision: (id) => `/v1/approvals/${e(id)}/decision`,
  webhooks: () => '/v1/webhooks',
  webhook: (id) => `/v1/webhooks/${e(id)}`,
  webhookRotate: (id) => `/v1/webhooks/${e(id)}/rotate`,
  webhookTest: (id) => `/v1/webhooks/${e(id)}/test`,
  webhookDeliveries: (id, params) => q(`/v1/webhooks/${e(id)}/deliveries`, params),
  webhookRedeliver: (id, deliveryId) => `/v1/webhooks/${e(id)}/deliveries/${e(deliveryId)}/redeliver`,
};
