// A session runner in Node.js: it drives `toolhost serve` over the serve API
// (internal/servepb/serve.proto) with @grpc/grpc-js, the way an agent runtime does,
// and prints what happens, one line per event.
//
// It starts `toolhost serve` on a private socket (or uses the server at --address),
// opens a client handle, activates the example workspace, prepares a Request, and
// then:
//   - settles `upper` with the unary Settle;
//   - settles `countdown` with SettleStream, printing its progress, and cancels it
//     mid-way (CancelCall): it ends as an interruption;
//   - settles `feature_toggle`, whose rule is "ask": the runner watches asks
//     (WatchAsks) and answers "once" (AnswerAsk), and the call completes;
//   - settles `title`, which asks the model for a title (sdk.Sample) and the person
//     to confirm it (sdk.Ask): the runner watches them (WatchInteractions), answers
//     the sampling request with a completion (AnswerSample) and the question with a
//     JSON value valid against its schema (AnswerQuestion), and the call completes;
//   - settles `find` with a bad pattern: a tool failure the model would see;
//   - shows that a second client on the same HTTP/2 connection (grpc-js shares one
//     per address by default) cannot settle the first one's Request;
//   - activates a second workspace whose MCP server exits at start, lists its
//     sources (ListSources), watches it spend its restart budget (WatchSources),
//     fixes the script it runs and restarts it by name (RestartSource): its tools
//     are then advertised.
//
// From the repository root, after `make build` and `npm ci --prefix examples/node-runner`:
//
//   node examples/node-runner/runner.mjs --toolhost bin/toolhost --workspace examples/workspace
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

import grpc from "@grpc/grpc-js";
import protoLoader from "@grpc/proto-loader";

const here = path.dirname(fileURLToPath(import.meta.url));
const protoPath = path.join(here, "..", "..", "internal", "servepb", "serve.proto");

// keepCase: the proto's field names; enums as their names; oneofs: a field naming
// the member that is set. No `longs` option: every integer of the API is 32 bits
// wide, so it arrives as a number.
const definition = protoLoader.loadSync(protoPath, { keepCase: true, enums: String, defaults: true, oneofs: true });
const { Toolhost } = grpc.loadPackageDefinition(definition).toolhost.serve.v1;

const say = (line) => console.log(line);

// call promisifies a unary method.
const call = (client, method, request) =>
  new Promise((resolve, reject) => client[method](request, (err, resp) => (err ? reject(err) : resolve(resp))));

// text joins a settlement's text parts.
const text = (s) => s.content.filter((p) => p.part === "text").map((p) => p.text).join("");

// startServe starts `toolhost serve` and resolves with its address: the first line
// of its stdout is "serving on ADDRESS".
function startServe(toolhost) {
  const dir = mkdtempSync(path.join(tmpdir(), "node-runner-"));
  const proc = spawn(toolhost, ["serve", "--socket", path.join(dir, "toolhost.sock")], { stdio: ["ignore", "pipe", "inherit"] });
  const exited = new Promise((resolve) => proc.on("exit", (code, signal) => resolve(code ?? signal)));
  return new Promise((resolve, reject) => {
    const lines = createInterface({ input: proc.stdout });
    lines.once("line", (first) => {
      const m = /^serving on (.*?)(, token in .*)?$/.exec(first);
      if (!m) return reject(new Error(`unexpected first line from serve: ${first}`));
      say(`started toolhost serve (pid ${proc.pid}) on ${m[1]}`);
      resolve({
        address: m[1],
        async stop() {
          proc.kill("SIGTERM");
          const code = await exited;
          rmSync(dir, { recursive: true, force: true });
          say(`toolhost serve stopped (exit ${code})`);
        },
      });
    });
    proc.on("error", reject);
    exited.then((code) => reject(new Error(`serve exited (${code}) before listening`)));
  });
}

async function main() {
  const { values } = parseArgs({
    options: {
      toolhost: { type: "string", default: "toolhost" },
      address: { type: "string" },
      workspace: { type: "string", default: "examples/workspace" },
    },
  });
  let serve = null;
  let address = values.address;
  if (!address) {
    serve = await startServe(values.toolhost);
    address = serve.address;
  }
  const client = new Toolhost(address, grpc.credentials.createInsecure());
  try {
    await run(client, address, path.resolve(values.workspace));
    await failAndRestart(client, path.resolve(values.toolhost));
  } finally {
    client.close();
    if (serve) await serve.stop();
  }
}

async function run(client, address, workspace) {
  const { client_id } = await call(client, "OpenClient", {});
  say(`opened client handle ${client_id}`);

  say(`activating ${workspace} (plugins are built on first use)`);
  const { location } = await call(client, "ActivateLocation", { directory: workspace });
  for (const p of location.plugins) {
    say(`  plugin ${p.name}: ${p.state}, generation ${p.generation} (${typeof p.generation}), pid ${p.pid} (${typeof p.pid})`);
  }

  const prepared = await call(client, "PrepareRequest", { client_id, location_id: location.id, provider: "anthropic" });
  const names = prepared.definitions.map((d) => d.name);
  say(`prepared ${prepared.request_id}: ${names.length} tools (${names.join(", ")})`);
  const upperDef = prepared.definitions.find((d) => d.name === "upper");
  say(`upper's input schema has properties: ${Object.keys(JSON.parse(upperDef.input_schema_json).properties).join(", ")}`);
  const request_id = prepared.request_id;
  const invocation = (id) => ({ session_id: "session_1", agent: "node-runner", assistant_message_id: "msg_1", tool_call_id: id });

  // The unary Settle: no progress, one round trip.
  const upper = await call(client, "Settle", { client_id, request_id, name: "upper", input_json: '{"text": "hello from node"}', invocation: invocation("call_1") });
  say(`call_1 upper: ${upper.settlement.outcome}: ${text(upper.settlement)}`);

  // SettleStream with progress, cancelled mid-way.
  const countdown = await new Promise((resolve, reject) => {
    const stream = client.SettleStream({ client_id, request_id, name: "countdown", input_json: '{"seconds": 10, "step_ms": 100}', invocation: invocation("call_2") });
    stream.on("data", (ev) => {
      if (ev.event === "progress") {
        say(`call_2 countdown: progress ${ev.progress.progress}/${ev.progress.total} ${ev.progress.message}`);
        if (ev.progress.progress === 3) {
          say("call_2 countdown: cancelling");
          call(client, "CancelCall", { client_id, request_id, tool_call_id: "call_2" }).catch(reject);
        }
      } else {
        resolve(ev);
      }
    });
    stream.on("error", reject);
  });
  say(countdown.event === "error" ? `call_2 countdown: ${countdown.error.kind}: ${countdown.error.message}` : `call_2 countdown: ${countdown.settlement.outcome}`);

  // An ask: watch first (an ask nobody watches is denied at once), then settle.
  const watch = client.WatchAsks({ client_id, location_id: location.id });
  await new Promise((resolve, reject) => {
    watch.on("data", (ev) => {
      if (ev.event === "synced") resolve();
      if (ev.event === "asked") {
        const a = ev.asked;
        say(`${a.call_id} ${a.source_tool}: permission asked for "${a.action}"; answering once`);
        call(client, "AnswerAsk", { client_id, id: a.id, reply: "ONCE" }).catch((err) => say(`answering failed: ${err.message}`));
      }
    });
    watch.on("error", (err) => (err.code === grpc.status.CANCELLED ? undefined : reject(err)));
  });
  const toggle = await call(client, "Settle", { client_id, request_id, name: "feature_toggle", input_json: '{"enabled": true}', invocation: invocation("call_3") });
  say(`call_3 feature_toggle: ${toggle.settlement.outcome}: ${text(toggle.settlement)}`);
  watch.cancel();

  // A question and a sampling request: watch first (with nobody watching, the
  // tool's Ask and Sample fail at once with "no one to answer"), then settle.
  const interactions = client.WatchInteractions({ client_id, location_id: location.id });
  await new Promise((resolve, reject) => {
    interactions.on("data", (ev) => {
      if (ev.event === "synced") resolve();
      if (ev.event === "sample") {
        const smp = ev.sample;
        const prompt = smp.messages.map((m) => `${m.role}: ${m.content.text}`).join(" | ");
        say(`${smp.call.tool_call_id} ${smp.call.tool}: the model is asked (max ${smp.max_tokens} tokens): ${JSON.stringify(prompt)}; answering with a completion`);
        // A real runner asks its model here.
        const completion = { message: { role: "assistant", content: { text: "Greetings from Node" } }, model: "example-model", stop_reason: "endTurn" };
        call(client, "AnswerSample", { client_id, id: smp.id, completion }).catch((err) => say(`answering failed: ${err.message}`));
      }
      if (ev.event === "question") {
        const q = ev.question;
        const fields = Object.keys(JSON.parse(q.schema_json).properties).join(", ");
        say(`${q.call.tool_call_id} ${q.call.tool}: the person is asked ${JSON.stringify(q.message)} (fields: ${fields}); accepting`);
        // A real runner shows the person a form built from the schema here.
        const content_json = JSON.stringify({ title: "Greetings from Node, confirmed" });
        call(client, "AnswerQuestion", { client_id, id: q.id, action: "ACCEPT", content_json }).catch((err) => say(`answering failed: ${err.message}`));
      }
    });
    interactions.on("error", (err) => (err.code === grpc.status.CANCELLED ? undefined : reject(err)));
  });
  const titled = await call(client, "Settle", { client_id, request_id, name: "title", input_json: '{"text": "hello from node\\nand more"}', invocation: invocation("call_6") });
  say(`call_6 title: ${titled.settlement.outcome}: ${text(titled.settlement)}`);
  interactions.cancel();

  const find = await call(client, "Settle", { client_id, request_id, name: "find", input_json: '{"text": "x", "pattern": "("}', invocation: invocation("call_4") });
  say(`call_4 find: ${find.settlement.outcome}: ${text(find.settlement)}`);

  // A second client of the same address shares the HTTP/2 connection, but not the
  // Requests: its handle cannot settle the first one's.
  const other = new Toolhost(address, grpc.credentials.createInsecure());
  try {
    const { client_id: otherID } = await call(other, "OpenClient", {});
    try {
      await call(other, "Settle", { client_id: otherID, request_id, name: "upper", input_json: '{"text": "x"}', invocation: invocation("call_5") });
      say("other client: settled the first client's Request (wrong)");
    } catch (err) {
      say(`other client: ${grpc.status[err.code]}: ${err.details}`);
    }
    await call(other, "CloseClient", { client_id: otherID });
  } finally {
    other.close();
  }

  await call(client, "ReleaseRequest", { client_id, request_id });
  await call(client, "CloseClient", { client_id });
  say("closed client handle");
}

// failAndRestart activates a workspace whose MCP server "flaky" runs a script that
// exits at start, watches the server fail for good, fixes the script (it then runs
// `toolhost mcp` on an empty workspace, an MCP server with the built-in tools) and
// restarts the server by name.
async function failAndRestart(client, toolhost) {
  const dir = mkdtempSync(path.join(tmpdir(), "node-runner-flaky-"));
  const empty = path.join(dir, "empty");
  mkdirSync(path.join(dir, ".toolhost"), { recursive: true });
  mkdirSync(empty);
  const script = path.join(dir, "flaky.sh");
  writeFileSync(script, "echo 'boom: missing API key' >&2\nexit 1\n");
  const env = { PATH: "/usr/bin:/bin", XDG_DATA_HOME: path.join(dir, "data"), XDG_CACHE_HOME: path.join(dir, "cache") };
  writeFileSync(path.join(dir, ".toolhost", "config.json"), JSON.stringify({
    mcp_servers: [{ name: "flaky", command: "/bin/sh", args: [script], env, start_timeout: "10s" }],
  }));
  const sourceLine = (s) => `${s.id}: ${s.state}, generation ${s.generation}, restarts ${s.restarts}` +
    (s.error ? `, error: ${s.error.split("\n")[0]}` : "");
  try {
    const { location } = await call(client, "ActivateLocation", { directory: dir });
    say(`activated ${location.id} (a source that fails does not fail the Location)`);
    const { sources } = await call(client, "ListSources", { location_id: location.id });
    for (const s of sources) say(`  source ${sourceLine(s)}`);

    // Watch until the server has spent its restart budget.
    const watch = client.WatchSources({ location_id: location.id });
    const failed = await new Promise((resolve, reject) => {
      watch.on("data", (ev) => {
        for (const s of ev.sources) {
          if (s.id !== "mcp:flaky") continue;
          say(`  watch: ${sourceLine(s)}`);
          if (s.state === "SOURCE_STATE_FAILED") resolve(s);
        }
      });
      watch.on("error", (err) => (err.code === grpc.status.CANCELLED ? undefined : reject(err)));
    });
    watch.cancel();
    say(`mcp:flaky failed; its stderr ends with: ${failed.stderr_tail.trim().split("\n").pop()}`);

    writeFileSync(script, `exec '${toolhost}' mcp --location '${empty}'\n`);
    const { source } = await call(client, "RestartSource", { location_id: location.id, name: "flaky" });
    say(`restarted after fixing the script: ${sourceLine(source)}`);
    const { client_id } = await call(client, "OpenClient", {});
    const prepared = await call(client, "PrepareRequest", { client_id, location_id: location.id });
    const names = prepared.definitions.map((d) => d.name).filter((n) => n.startsWith("flaky_"));
    say(`flaky's tools are back: ${names.join(", ")}`);
    await call(client, "CloseClient", { client_id });
    await call(client, "DeactivateLocation", { location_id: location.id });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((err) => {
  console.error(`node-runner: ${err.stack ?? err}`);
  process.exitCode = 1;
});
