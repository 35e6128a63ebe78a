// One flow of the MCP TypeScript SDK against subagentd's /mcp:
//   node flow.mjs <endpoint> <token>
// It is refused without the token, lists the tools, delegates a run and
// reads its echo, starts a /sleep run with a short wait and polls it with
// get_run, and checks that bad arguments are tool errors and an unknown
// tool is a protocol error. It prints "flow ok" when every check held.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [endpoint, token] = process.argv.slice(2);
const wantTools = ["cancel_tree", "decide_approval", "delegate", "followup", "get_run", "get_task", "interrupt", "list_approvals", "list_providers", "start_subagent"];

function check(ok, what) {
  if (!ok) {
    throw new Error(`check failed: ${what}`);
  }
}

async function connect(token) {
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  const client = new Client({ name: "subagentd-node-check", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(endpoint), { requestInit: { headers } }));
  return client;
}

// A tool's answer: its structuredContent, which its text must repeat.
async function call(client, name, args) {
  const res = await client.callTool({ name, arguments: args });
  check(!res.isError, `${name} succeeds: ${JSON.stringify(res.content)}`);
  check(JSON.stringify(JSON.parse(res.content[0].text)) === JSON.stringify(res.structuredContent), `${name}: text repeats structuredContent`);
  return res.structuredContent;
}

const outputText = (run) => run.result.output.map((b) => b.text).join("");

let refused = false;
try {
  await connect("");
} catch (err) {
  refused = /401|Unauthorized|UNAUTHENTICATED/.test(String(err));
  check(refused, `refused without a token with a 401, got ${err}`);
}
check(refused, "refused without a token");

const client = await connect(token);
const { tools } = await client.listTools();
check(JSON.stringify(tools.map((t) => t.name).sort()) === JSON.stringify(wantTools), `tools ${tools.map((t) => t.name)}`);

const done = await call(client, "delegate", { provider: "spawn", prompt: "hello from node" });
check(done.state === "settled" && done.result.stopReason === "completed", `delegate settles completed: ${JSON.stringify(done)}`);
check(outputText(done) === "echo: hello from node", `delegate reads the echo: ${outputText(done)}`);

const slow = await call(client, "delegate", { provider: "spawn", prompt: "/sleep 3s\nslow from node", wait: 1 });
check(slow.state === "running" && slow.runId, `a /sleep run with wait 1 is still running: ${JSON.stringify(slow)}`);
let polled = slow;
for (let i = 0; i < 60 && polled.state === "running"; i++) {
  polled = await call(client, "get_run", { runId: slow.runId, wait: 1 });
}
check(polled.state === "settled" && outputText(polled) === "echo: /sleep 3s\nslow from node", `get_run polls it to its result: ${JSON.stringify(polled)}`);

const bad = await client.callTool({ name: "delegate", arguments: { prompt: "no provider" } });
check(bad.isError && bad.content[0].text.startsWith("INVALID_REQUEST"), `bad arguments are a tool error: ${JSON.stringify(bad)}`);

let unknown = null;
try {
  await client.callTool({ name: "no_such_tool", arguments: {} });
} catch (err) {
  unknown = err;
}
check(unknown !== null, "an unknown tool is a protocol error");

await client.close();
console.log("flow ok");
