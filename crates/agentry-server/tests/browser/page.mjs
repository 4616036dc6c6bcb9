// Drives the Agentry page in headless Chromium (playwright-core, no browser download) against a
// server whose model is the test's fake. The Rust test scripted the model's answers and checks
// what reached it; this script does what a person does in the page and checks what it shows.
//
//   node page.mjs   (env: AGENTRY_URL, PLAYWRIGHT_CORE, CHROMIUM, SHOTS)
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { chromium } = require(process.env.PLAYWRIGHT_CORE);
const base = process.env.AGENTRY_URL;
const shots = process.env.SHOTS;
const WAIT = { timeout: 20000 };

function check(condition, what) {
  if (!condition) throw new Error("check failed: " + what);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const page = await browser.newPage({ viewport: { width: 1100, height: 800 } });
const scripts = [];
page.on("dialog", (d) => { scripts.push("dialog: " + d.message()); d.dismiss(); });
page.on("pageerror", (e) => scripts.push("error: " + e.message));
// A script from model output that ran would set this.
await page.exposeFunction("__agentryInjected", () => scripts.push("injected script ran"));

try {
  await page.goto(base + "/", WAIT);
  await page.fill("#new-session-name", "browser");
  await page.click("#new-session button");
  await page.waitForSelector("#chat:not([hidden])", WAIT);

  // 1. A streamed reply, with markup that must stay text.
  await page.fill("#prompt", "say hello");
  await page.press("#prompt", "Enter");
  // The reply streams in pieces: wait for its last piece before reading it.
  await page.waitForFunction(() => {
    const t = document.querySelector(".msg.assistant .text");
    return t && t.textContent.endsWith('onerror="window.__agentryInjected()">');
  }, null, WAIT);
  check(await page.locator(".msg.user >> text=say hello").count() === 1, "the prompt is shown");
  const hello = await page.textContent(".msg.assistant .text");
  check(hello.includes("<script>window.__agentryInjected()</script>") && hello.includes("<img src=x onerror="), "markup shown as text: " + hello);
  check(await page.locator(".msg.assistant img, .msg.assistant script").count() === 0, "no element made from model text");

  // 2. Two calls that ask: approve one, decline the other with a reason.
  await page.fill("#prompt", "write two notes");
  await page.press("#prompt", "Enter");
  await page.waitForSelector("#approval[open]", WAIT);
  await page.click("#approval [data-decision=approve]");
  await page.waitForFunction(() => {
    const d = document.getElementById("approval");
    return d.open && document.getElementById("approval-message").textContent.includes("second");
  }, null, WAIT);
  await page.fill("#approval-reason", "not this one");
  await page.click("#approval [data-decision=decline]");
  await page.waitForSelector(".card.completed", WAIT);
  await page.waitForSelector(".card.declined", WAIT);
  await page.waitForSelector(".msg.assistant >> text=One written, one declined.", WAIT);

  // 3. A slow tool: cancel it while it runs and see its partial results.
  await page.fill("#prompt", "read the book");
  await page.press("#prompt", "Enter");
  await page.waitForSelector(".card.running .progress >> text=page 1", WAIT);
  // Steering: while the reply runs, the box adds to it.
  check((await page.textContent("#send")).trim() === "Add to reply", "the send button steers while a reply runs");
  await page.fill("#prompt", "only the first chapter");
  await page.press("#prompt", "Enter");
  await page.waitForSelector("#status >> text=Added to the running reply", WAIT);
  await page.screenshot({ path: shots + "/mid-cancel-before.png" });
  await page.click(".card.running button.cancel");
  await page.waitForSelector(".card.cancelled .result >> text=read 1 page before the cancel", WAIT);
  await page.screenshot({ path: shots + "/mid-cancel.png" });
  const cancelled = await page.textContent(".card.cancelled");
  check(cancelled.includes("read 1 page before the cancel"), "partial results shown: " + cancelled);
  check(cancelled.includes("cancelled (partial results)"), "final state shown: " + cancelled);
  await page.waitForSelector(".msg.assistant >> text=Stopped reading.", WAIT);

  // 4. Reload: the same history.
  const before = await page.textContent("#transcript");
  await page.reload(WAIT);
  await page.click("#sessions li >> text=browser");
  await page.waitForSelector(".msg.assistant >> text=Stopped reading.", WAIT);
  const after = await page.textContent("#transcript");
  check(await page.locator(".msg.user").count() === 4, "the three prompts and the steering message after the reload");
  for (const piece of ["say hello", "write two notes", "read the book", "Hello <script>", "One written, one declined.", "read 1 page before the cancel", "Stopped reading."]) {
    check(after.includes(piece), "after the reload: " + piece);
  }
  check(await page.locator(".card.cancelled").count() === 1, "the cancelled card after the reload");
  check(await page.locator(".card.declined").count() === 1, "the declined card after the reload");
  check(before.length > 0, "history before");
  await page.screenshot({ path: shots + "/after-reload.png" });

  // A form a tool asks for (as an MCP server's elicitation): one that does not fit is refused
  // and stays open; the filled one is the tool's answer.
  await page.fill("#prompt", "sign me up");
  await page.press("#prompt", "Enter");
  await page.waitForSelector("#input[open]", WAIT);
  check((await page.textContent("#input-title")).includes("club: input asks"), "the form names who asks");
  await page.click("#input [data-input=accept]");
  await page.waitForSelector("#input-error:not([hidden])", WAIT);
  await page.fill("#input [data-name=name]", "Ada");
  await page.check("#input [data-name=news]");
  await page.selectOption("#input [data-name=level]", "high");
  await page.screenshot({ path: shots + "/input-form.png" });
  await page.click("#input [data-input=accept]");
  await page.waitForSelector(".card.completed .result >> text=signed up", WAIT);
  check(!(await page.locator("#input").evaluate((d) => d.open)), "the form closed once answered");
  await page.waitForSelector(".msg.assistant >> text=Signed up.", WAIT);

  // A sub-agent: its own tool calls show nested under the parent's card, as text.
  await page.fill("#prompt", "ask the helper");
  await page.press("#prompt", "Enter");
  await page.waitForSelector(".msg.assistant >> text=The helper found it.", WAIT);
  const nested = await page.locator(".card[data-call=h1] .nested li").allTextContents();
  check(nested.length === 1, "one nested line per call of the sub-agent: " + JSON.stringify(nested));
  check(nested[0].startsWith("helper: lookup → found <b>it</b>"), "the nested call's result: " + nested[0]);
  check(await page.locator(".card .nested b").count() === 0, "no element made from a nested result");
  await page.screenshot({ path: shots + "/nested.png" });

  check(scripts.length === 0, "no dialog, script or page error: " + scripts.join("; "));
  console.log("ok");
} finally {
  await browser.close();
}
