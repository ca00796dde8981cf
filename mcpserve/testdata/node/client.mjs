// client.mjs drives `toolhost mcp` with the TypeScript SDK's client over stdio:
// node client.mjs TOOLHOST_BINARY LOCATION_DIR. It prints one line per check and
// exits 1 if any failed.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ElicitRequestSchema, LoggingMessageNotificationSchema, ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
import { check, exitCode, text, toolsWith } from "./checks.mjs";

const [bin, dir] = process.argv.slice(2);

const transport = new StdioClientTransport({ command: bin, args: ["mcp", "--location", dir], env: process.env, stderr: "inherit" });
const client = new Client({ name: "ts-test", version: "1" }, { capabilities: { elicitation: {} } });
const logs = [];
client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => logs.push(n.params.data?.message));
client.setRequestHandler(ElicitRequestSchema, async (req) => ({ action: "accept", content: { decision: "once" } }));
await client.connect(transport);
await client.setLoggingLevel("info");

const tools = await toolsWith(client, ToolListChangedNotificationSchema, "echo");
const echo = tools.find((t) => t.name === "echo");
check("list", echo && tools.some((t) => t.name === "wait"), tools.map((t) => t.name));
check("title and annotations", echo?.title === "Echo" && echo?.annotations?.readOnlyHint === true, echo);

const res = await client.callTool({ name: "echo", arguments: { text: "from node" } });
check("call", !res.isError && text(res) === "from node", res);

const stats = await client.callTool({ name: "stats", arguments: { text: "abc" } });
check("structured output", stats.structuredContent?.length === 3, stats);

const fail = await client.callTool({ name: "fail", arguments: { text: "x" } });
check("tool failure is a result", fail.isError === true && text(fail).includes("failed on purpose"), fail);

let seen = 0;
const waited = await client.callTool({ name: "wait", arguments: { steps: 3, step_ms: 10 } }, undefined, { onprogress: () => seen++ });
// The plugin may settle before its last progress event reaches the host, so not
// every event is guaranteed to precede the result.
check("progress", !waited.isError && seen >= 1 && seen <= 3, { seen, waited });

const ac = new AbortController();
const long = client.callTool({ name: "wait", arguments: { steps: 1000, step_ms: 20 } }, undefined, {
  signal: ac.signal,
  onprogress: () => ac.abort("enough"),
});
const outcome = await long.then(() => "resolved", (e) => "rejected");
check("cancel", outcome === "rejected", outcome);
for (let i = 0; i < 100 && !logs.includes("probe: work stopped"); i++) await new Promise((r) => setTimeout(r, 50));
check("the plugin's work stopped (notifications/message)", logs.includes("probe: work stopped"), logs);

const guarded = await client.callTool({ name: "guarded", arguments: { text: "go" } });
check("elicitation", !guarded.isError && text(guarded) === "approved: go", guarded);

await client.close();
process.exit(exitCode());
