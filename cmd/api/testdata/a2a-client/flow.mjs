// One flow of the A2A JavaScript SDK (@a2a-js/sdk) against subagentd's
// A2A face, over JSON-RPC and HTTP+JSON:
//   node flow.mjs <base URL> <token>
// It resolves the spawn provider's card, streams a turn and reads the
// echo, continues the context with a second message, cancels a /sleep
// turn, drops a stream mid-task and subscribes to the task again (which
// replays it from its start and follows it to its end), and is refused
// without the token. It prints "flow ok" when every check held.
import { Role, TaskState } from "@a2a-js/sdk";
import { ClientFactory, JsonRpcTransportFactory, RestTransportFactory } from "@a2a-js/sdk/client";

const [base, token] = process.argv.slice(2);

function check(ok, what) {
  if (!ok) {
    throw new Error(`check failed: ${what}`);
  }
}

// client returns a client of the spawn provider over transport, sending
// token when given.
async function client(transport, token) {
  const fetchImpl = (url, init = {}) => {
    const headers = new Headers(init.headers);
    if (token) {
      headers.set("Authorization", `Bearer ${token}`);
    }
    return fetch(url, { ...init, headers });
  };
  const factory = new ClientFactory({
    transports: [new JsonRpcTransportFactory({ fetchImpl }), new RestTransportFactory({ fetchImpl })],
    preferredTransports: [transport],
  });
  // The trailing slash: the SDK resolves the card path relative to it.
  return factory.createFromUrl(`${base}/a2a/spawn/`);
}

let n = 0;
function message(text, contextId = "", taskId = "") {
  return {
    messageId: `node-${process.pid}-${++n}`,
    contextId,
    taskId,
    role: Role.ROLE_USER,
    parts: [{ content: { $case: "text", value: text }, metadata: undefined, filename: "", mediaType: "" }],
    metadata: undefined,
    extensions: [],
    referenceTaskIds: [],
  };
}

const partsText = (parts) => parts.map((p) => (p.content?.$case === "text" ? p.content.value : "")).join("");
const artifactsText = (task) => (task.artifacts ?? []).map((a) => partsText(a.parts)).join("");
// taskOf is the task of a send's result, whichever shape it has.
const taskOf = (res) => (res?.payload ? (res.payload.$case === "task" ? res.payload.value : null) : res);

// collect reads a stream until it ends, or until stop(state) says so.
async function collect(events, stop) {
  const s = { task: null, text: "", final: null };
  for await (const ev of events) {
    const { $case, value } = ev.payload ?? {};
    if ($case === "task") {
      check(s.task === null, "one task event");
      s.task = value;
    } else if ($case === "artifactUpdate") {
      check(s.task && value.taskId === s.task.id, "artifact updates follow the task");
      check(value.append === (s.text !== ""), `append is set after the first update (${value.append}, ${JSON.stringify(s.text)})`);
      s.text += partsText(value.artifact.parts);
    } else if ($case === "statusUpdate") {
      check(s.task && value.taskId === s.task.id, "status updates follow the task");
      s.final = value.status.state;
    } else {
      throw new Error(`unexpected event ${JSON.stringify(ev)}`);
    }
    if (stop && stop(s)) {
      return s;
    }
  }
  return s;
}

for (const transport of ["JSONRPC", "HTTP+JSON"]) {
  const c = await client(transport, token);

  const first = await collect(c.sendMessageStream({ message: message(`hello from node over ${transport}`) }));
  check(first.task && first.task.contextId, `${transport}: the stream begins with the task`);
  check(first.text === `echo: hello from node over ${transport}`, `${transport}: streamed the echo: ${JSON.stringify(first.text)}`);
  check(first.final === TaskState.TASK_STATE_COMPLETED, `${transport}: the stream ends completed (${first.final})`);
  const contextId = first.task.contextId;

  const second = taskOf(await c.sendMessage({ message: message("and again", contextId) }));
  check(second && second.contextId === contextId && second.id !== first.task.id, `${transport}: a second message continues the context: ${JSON.stringify(second)}`);
  check(second.status.state === TaskState.TASK_STATE_COMPLETED && artifactsText(second) === "echo: and again", `${transport}: the second task completes with its echo`);

  const slow = taskOf(await c.sendMessage({ message: message("/sleep 30s\nslow", contextId), configuration: { returnImmediately: true } }));
  check(slow && slow.status.state === TaskState.TASK_STATE_WORKING, `${transport}: a /sleep turn is working: ${JSON.stringify(slow)}`);
  const cancelled = await c.cancelTask({ id: slow.id });
  check(cancelled.status.state === TaskState.TASK_STATE_CANCELED, `${transport}: cancel stops it (${cancelled.status.state})`);
  const read = await c.getTask({ id: slow.id });
  check(read.status.state === TaskState.TASK_STATE_CANCELED, `${transport}: getTask reads it cancelled`);

  // A stream dropped mid-task, then a subscription to the task.
  const want1 = "echo: /sleep 3s\nfirst";
  const want2 = "echo: /sleep 3s\nsecond";
  const abort = new AbortController();
  let steered = null;
  const before = await collect(c.sendMessageStream({ message: message("/sleep 3s\nfirst") }, { signal: abort.signal }), (s) => {
    if (steered === null) {
      steered = c.sendMessage({ message: message("/sleep 3s\nsecond", s.task.contextId, s.task.id), configuration: { returnImmediately: true } });
    }
    return s.text === want1;
  });
  abort.abort();
  check(before.text === want1, `${transport}: before the drop the stream carried ${JSON.stringify(before.text)}`);
  const into = taskOf(await steered);
  check(into && into.id === before.task.id, `${transport}: the message to the running task went into it: ${JSON.stringify(into)}`);
  const after = await collect(c.resubscribeTask({ id: before.task.id }));
  check(after.task && after.task.id === before.task.id, `${transport}: the subscription begins with the task`);
  check(after.text === want1 + want2, `${transport}: the subscription replays the task from its start: ${JSON.stringify(after.text)}`);
  check(after.final === TaskState.TASK_STATE_COMPLETED, `${transport}: and follows it to its end (${after.final})`);

  const anon = await client(transport, "");
  let refused = null;
  try {
    await anon.getTask({ id: first.task.id });
  } catch (err) {
    refused = err;
  }
  check(refused !== null, `${transport}: refused without the token`);
}

console.log("flow ok");
