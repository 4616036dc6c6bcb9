// Drives the page's plan panel in headless Chromium: the checklist appears and changes as the
// model works through its plan (plan_changed events), a subtask name with markup stays text,
// and a reload shows the same plan (from GET /v1/sessions/{id}).
//
//   node plan.mjs   (env: AGENTRY_URL, PLAYWRIGHT_CORE, CHROMIUM, SHOTS)
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
await page.exposeFunction("__agentryInjected", () => scripts.push("injected script ran"));

try {
  await page.goto(base + "/", WAIT);
  await page.fill("#new-session-name", "planned");
  await page.click("#new-session button");
  await page.waitForSelector("#chat:not([hidden])", WAIT);
  check(await page.isHidden("#plan"), "no plan panel before a plan");

  // 1. The model makes a plan and starts it: the panel follows.
  await page.fill("#prompt", "help me move");
  await page.press("#prompt", "Enter");
  await page.waitForSelector("#plan .subtask.in_progress >> text=pack", WAIT);
  await page.waitForSelector(".msg.assistant >> text=Packing.", WAIT);
  check((await page.textContent("#plan h3")).includes("Plan: move (0 of 2 done)"), "the plan's title");
  const drive = await page.textContent("#plan .subtask.todo .name");
  check(drive.startsWith("drive <img src=x"), "markup in a name is text: " + drive);
  check(await page.locator("#plan img").count() === 0, "no element made from model text");

  // 2. It finishes the first subtask: done, with its outcome, and the next one starts.
  await page.fill("#prompt", "packed");
  await page.press("#prompt", "Enter");
  await page.waitForSelector("#plan .subtask.done .outcome >> text=twelve boxes", WAIT);
  await page.waitForSelector("#plan .subtask.in_progress .name >> text=drive", WAIT);
  check((await page.textContent("#plan h3")).includes("(1 of 2 done)"), "one done");
  await page.screenshot({ path: shots + "/plan.png" });

  // 3. Reload: the same plan.
  await page.reload(WAIT);
  await page.click("#sessions li >> text=planned");
  await page.waitForSelector("#plan .subtask.done .outcome >> text=twelve boxes", WAIT);
  check(await page.locator("#plan .subtask.in_progress").count() === 1, "one in progress after the reload");

  check(scripts.length === 0, "no dialog, script or page error: " + scripts.join("; "));
  console.log("ok");
} finally {
  await browser.close();
}
