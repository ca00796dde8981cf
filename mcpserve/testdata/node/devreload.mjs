// devreload.mjs drives `toolhost mcp --dev` with the TypeScript SDK's client over
// stdio: node devreload.mjs TOOLHOST_BINARY LOCATION_DIR. The Location's one plugin
// is built from a source that serves the tool "alpha". The script calls alpha, then
// prints "EDIT" on a line of its own: the test then rewrites the plugin's source to
// serve "beta" too. The client must get notifications/tools/list_changed, list beta
// and call it. It prints one line per check and exits 1 if any failed. No check
// measures time; the one timeout (WAIT_MS) only ends a hung run.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
import { check, exitCode, text } from "./checks.mjs";

const WAIT_MS = 240_000; // a rebuild on a loaded machine can take a while
// The SDK ends a request after 60 s by default; the initialize waits for the
// plugin's first build.
const slow = { timeout: WAIT_MS };
const [bin, dir] = process.argv.slice(2);
const names = (tools) => tools.map((t) => t.name);

const hung = setTimeout(() => {
  console.log(`FAIL no reload seen within ${WAIT_MS} ms`);
  process.exit(1); // toolhost mcp sees its stdin close and ends
}, WAIT_MS);

const transport = new StdioClientTransport({
  command: bin,
  args: ["mcp", "--dev", "--debounce", "100ms", "--location", dir],
  env: process.env,
  stderr: "inherit",
});
const client = new Client({ name: "ts-dev", version: "1" }, { capabilities: {} });
// notified counts notifications/tools/list_changed; waitNotified resolves once
// there is one the script has not acted on yet.
let notified = 0;
let consumed = 0;
let wake = () => {};
client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
  notified++;
  wake();
});
const waitNotified = () =>
  new Promise((resolve) => {
    const poll = () => {
      if (notified > consumed) {
        consumed = notified;
        wake = () => {};
        resolve();
      } else {
        wake = poll;
      }
    };
    poll();
  });
await client.connect(transport, slow);

const before = await client.listTools(undefined, slow);
check("list before the edit", names(before.tools).includes("alpha") && !names(before.tools).includes("beta"), names(before.tools));
const alpha = await client.callTool({ name: "alpha", arguments: {} }, undefined, slow);
check("call alpha", !alpha.isError && text(alpha) === "alpha", alpha);

// Notifications from before the edit (none are expected) do not count.
consumed = notified;
const baseline = notified;
console.log("EDIT");

// Each notification is followed by a listing, until beta is listed: a notification
// for a change made before the rebuilt plugin registered lists the old tools.
let after = [];
while (!after.includes("beta")) {
  await waitNotified();
  after = names((await client.listTools(undefined, slow)).tools);
}
check("notifications/tools/list_changed after the edit", notified > baseline, { notified, baseline });
check("list after the reload", after.includes("alpha") && after.includes("beta"), after);
const beta = await client.callTool({ name: "beta", arguments: {} }, undefined, slow);
check("call beta", !beta.isError && text(beta) === "beta", beta);

clearTimeout(hung);
await client.close();
process.exit(exitCode());
