// One flow through the SDK @hey-api/openapi-ts generated from
// api/openapi.yaml: create a session, run with wait, get the run, dispose it.
// Run as: node flow_hey_api.js <base URL>.
import { client } from "./hey/client.gen";
import { createRun, createSession, disposeRun, getRun } from "./hey/sdk.gen";

declare const process: { argv: string[]; exitCode: number };

async function flow(baseUrl: string): Promise<void> {
  client.setConfig({ baseUrl });
  const session = await createSession({ body: { label: "hey-api" } });
  if (!session.data) throw new Error(`create session: ${session.response.status} ${JSON.stringify(session.error)}`);

  const prompt = "hello from hey-api";
  const run = await createRun({
    query: { wait: true },
    body: { provider: "spawn", parentSessionId: session.data.id, prompt: [{ type: "text", text: prompt }] },
  });
  if (!run.data) throw new Error(`create run: ${run.response.status} ${JSON.stringify(run.error)}`);
  const runId = run.data.runId;
  const text = run.data.result?.output.map((b) => b.text ?? "").join("");
  if (run.data.state !== "settled" || run.data.result?.stopReason !== "completed" || text !== `echo: ${prompt}`) {
    throw new Error(`run did not settle with the echo: ${JSON.stringify(run.data)}`);
  }

  const got = await getRun({ path: { runId } });
  if (got.data?.runId !== runId || got.data.state !== "settled") {
    throw new Error(`get run: ${got.response.status} ${JSON.stringify(got.data ?? got.error)}`);
  }

  const disposed = await disposeRun({ path: { runId } });
  if (disposed.response.status !== 204) throw new Error(`dispose: ${disposed.response.status} ${JSON.stringify(disposed.error)}`);
  console.log("flow ok: run " + runId);
}

flow(process.argv[2]).catch((err) => {
  console.error(err);
  process.exitCode = 1;
});
