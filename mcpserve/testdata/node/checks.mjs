// checks.mjs is what client.mjs and devreload.mjs share: a check prints one line,
// ok or FAIL, and exitCode says whether any failed.
let failed = false;

export const check = (name, ok, detail) => {
  console.log(`${ok ? "ok" : "FAIL"} ${name}${ok ? "" : ": " + JSON.stringify(detail)}`);
  if (!ok) failed = true;
};

// text joins a tool result's text parts.
export const text = (res) => (res.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("");

export const exitCode = () => (failed ? 1 : 0);

// toolsWith lists the tools until one is named name: toolhost mcp answers before
// its plugins are up and announces their tools with notifications/tools/list_changed.
export const toolsWith = async (client, schema, name) => {
  for (;;) {
    const changed = new Promise((resolve) => client.setNotificationHandler(schema, resolve));
    const { tools } = await client.listTools();
    if (tools.some((t) => t.name === name)) return tools;
    await changed;
  }
};
