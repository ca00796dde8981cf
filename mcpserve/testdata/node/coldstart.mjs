// coldstart.mjs connects the TypeScript SDK's client to `toolhost mcp` while its
// plugin's build is held (the test's gated go command):
// node coldstart.mjs TOOLHOST_BINARY LOCATION_DIR GATE_FILE. initialize and
// tools/list are answered during the build; once the script creates GATE_FILE the
// build goes on, and the plugin's tools arrive with list_changed. It prints one
// line per check and exits 1 if any failed.
import { writeFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
import { check, exitCode, text, toolsWith } from "./checks.mjs";

const [bin, dir, gate] = process.argv.slice(2);

const transport = new StdioClientTransport({ command: bin, args: ["mcp", "--location", dir], env: process.env, stderr: "inherit" });
const client = new Client({ name: "ts-cold", version: "1" });
await client.connect(transport);
check("initialize during the build", true);

const { tools } = await client.listTools();
const names = tools.map((t) => t.name);
check("tools/list during the build: the built-ins", names.includes("read") && !names.includes("echo"), names);

const early = client.callTool({ name: "echo", arguments: { text: "early" } });
writeFileSync(gate, "");
const after = await toolsWith(client, ToolListChangedNotificationSchema, "echo");
check("the plugin's tools arrive with list_changed", after.some((t) => t.name === "echo"), after.map((t) => t.name));
const res = await early;
check("a call made before the plugin was up waited for it", !res.isError && text(res) === "early", res);

await client.close();
process.exit(exitCode());
