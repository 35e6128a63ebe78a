// One flow through the openapi-fetch client over the types openapi-typescript
// generated from api/openapi.yaml: create a session, run with wait, get the
// run, dispose it. Run as: node flow_openapi_fetch.js <base URL>.
import createClient from "openapi-fetch";
import type { paths } from "./schema";

declare const process: { argv: string[]; exitCode: number };

async function flow(baseUrl: string): Promise<void> {
  const client = createClient<paths>({ baseUrl });
  const session = await client.POST("/v1/sessions", { body: { label: "openapi-fetch" } });
  if (!session.data) throw new Error(`create session: ${session.response.status} ${JSON.stringify(session.error)}`);

  const prompt = "hello from openapi-fetch";
  const run = await client.POST("/v1/runs", {
    params: { query: { wait: true } },
    body: { provider: "spawn", parentSessionId: session.data.id, prompt: [{ type: "text", text: prompt }] },
  });
  if (!run.data) throw new Error(`create run: ${run.response.status} ${JSON.stringify(run.error)}`);
  const runId = run.data.runId;
  const text = run.data.result?.output.map((b) => b.text ?? "").join("");
  if (run.data.state !== "settled" || run.data.result?.stopReason !== "completed" || text !== `echo: ${prompt}`) {
    throw new Error(`run did not settle with the echo: ${JSON.stringify(run.data)}`);
  }

  const got = await client.GET("/v1/runs/{runId}", { params: { path: { runId } } });
  if (got.data?.runId !== runId || got.data.state !== "settled") {
    throw new Error(`get run: ${got.response.status} ${JSON.stringify(got.data ?? got.error)}`);
  }

  const disposed = await client.DELETE("/v1/runs/{runId}", { params: { path: { runId } } });
  if (disposed.response.status !== 204) throw new Error(`dispose: ${disposed.response.status} ${JSON.stringify(disposed.error)}`);
  console.log("flow ok: run " + runId);
}

flow(process.argv[2]).catch((err) => {
  console.error(err);
  process.exitCode = 1;
});
