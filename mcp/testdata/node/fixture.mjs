// A small stdio MCP server for the mcp package's tests: the cases the reference
// servers do not cover (a tool set that changes on request, a schema that does not
// compile, an overlong name, every content type, pagination, a crash).
//
// Environment: FIXTURE_PAGE_SIZE (tools per tools/list page, default 3);
// FIXTURE_CURSOR=loop (every page points to the same next cursor) or
// FIXTURE_CURSOR=endless (a new cursor forever).
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { CallToolRequestSchema, ListToolsRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const object = (properties = {}, required = []) => ({ type: "object", properties, required });
const text = (t) => ({ content: [{ type: "text", text: t }] });
const LONG = "a_tool_with_a_name_long_enough_to_need_shortening_by_the_host_0123456789";

const tools = new Map();
const define = (name, description, inputSchema, run, extra = {}) =>
  tools.set(name, { name, description, inputSchema, ...extra, run });

define("echo", "Echoes its message.", object({ message: { type: "string" } }, ["message"]),
  (args) => text(`echo: ${args.message}`));
define("bad_schema", "Has an input schema that does not compile.",
  { type: "object", properties: { x: { type: "no-such-type" } } }, () => text("unreachable"));
define(LONG, "Has an overlong name; answers with the name it was called by.", object(),
  (_args, name) => text(name));
define("mixed", "Returns every content type.", object(), () => ({
  content: [
    { type: "text", text: "first" },
    { type: "resource_link", uri: "file:///tmp/report.txt", name: "report", mimeType: "text/plain", size: 42, description: "the report" },
    { type: "resource", resource: { uri: "mem://note", mimeType: "text/plain", text: "embedded note" } },
    { type: "resource", resource: { uri: "mem://blob", mimeType: "application/octet-stream", blob: Buffer.from([1, 2, 3]).toString("base64") } },
    { type: "audio", mimeType: "audio/wav", data: Buffer.from("RIFF").toString("base64") },
  ],
}));
define("empty", "Takes no arguments; says what it received.", undefined,
  (args) => text(JSON.stringify(args ?? null)));
define("fail", "Fails with isError.", object(), () => ({ isError: true, content: [{ type: "text", text: "it went wrong" }, { type: "text", text: "twice" }] }));
define("wrong_structured", "Declares an output schema and breaks it.", object(),
  () => ({ content: [{ type: "text", text: "{}" }], structuredContent: { n: "not a number" } }),
  { outputSchema: object({ n: { type: "number" } }, ["n"]) });
define("big", "Returns a text of the given size.", object({ bytes: { type: "number" } }, ["bytes"]),
  (args) => text("x".repeat(args.bytes)));
define("sleep", "Sleeps, reporting progress every 50ms, until cancelled or done.", object({ ms: { type: "number" } }),
  async (args, _name, extra) => {
    const token = extra._meta?.progressToken;
    const end = Date.now() + (args.ms ?? 60000);
    let n = 0;
    while (Date.now() < end && !extra.signal.aborted) {
      await new Promise((r) => setTimeout(r, 50));
      if (token !== undefined) {
        await server.notification({ method: "notifications/progress", params: { progressToken: token, progress: ++n } });
      }
    }
    if (extra.signal.aborted) console.error(`sleep ${extra.requestId} aborted by the client`);
    return text(extra.signal.aborted ? "aborted" : "slept");
  });
define("add_tool", "Adds the tool 'extra' and announces the change.", object(), async () => {
  define("extra", "Added at run time.", object(), () => text("extra"));
  await server.sendToolListChanged();
  return text("added");
});
define("change_echo", "Changes echo's description and announces the change.", object(), async () => {
  tools.get("echo").description = "Echoes its message (changed).";
  await server.sendToolListChanged();
  return text("changed");
});
define("exit", "Exits the process at once.", object(), () => process.exit(7));
define("pid", "Returns the server's process id.", object(), () => text(String(process.pid)));

const server = new Server({ name: "fixture", version: "1.0.0" }, { capabilities: { tools: { listChanged: true } } });

const pageSize = Number(process.env.FIXTURE_PAGE_SIZE || 3);
server.setRequestHandler(ListToolsRequestSchema, async (req) => {
  const all = [...tools.values()].map(({ run, ...t }) => t);
  const start = Number(req.params?.cursor?.replace(/^p/, "") || 0);
  const page = all.slice(start, start + pageSize);
  let nextCursor = start + pageSize < all.length ? `p${start + pageSize}` : undefined;
  if (process.env.FIXTURE_CURSOR === "loop") nextCursor = "p0";
  if (process.env.FIXTURE_CURSOR === "endless") nextCursor = `p${start + pageSize}`;
  return { tools: page, nextCursor };
});
server.setRequestHandler(CallToolRequestSchema, async (req, extra) => {
  const tool = tools.get(req.params.name);
  if (!tool) throw new Error(`no tool ${req.params.name}`);
  return tool.run(req.params.arguments, req.params.name, extra);
});

await server.connect(new StdioServerTransport());
console.error("fixture server ready");
