// The HTML step viewer of `cowstate explain --format html` in a real browser (Debian's
// Chromium, driven by puppeteer-core; no browser is downloaded). For every tour: write the
// page, load it from a file (nothing else may load), step through every step with the right
// arrow key, and check the DOM against the explain model embedded in the page: entry boxes,
// highlighted copies, state boxes, snapshot arrows, rehash buckets (map); cells, changed
// cells, entries and checkpoints (backend); the narration and the step's line. No console
// error and no page error may occur; requests other than the page itself fail the test.
// One screenshot per tour (its busiest step) is kept in OUT_DIR.
//
// usage: node explain_viewer.mjs COWSTATE SOURCE_DIR OUT_DIR
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join, resolve } from "node:path";
import puppeteer from "puppeteer-core";

const [cowstate, sourceDir, outDir] = process.argv.slice(2).map((p) => resolve(p));
if (!cowstate || !sourceDir || !outDir) {
  console.error("usage: node explain_viewer.mjs COWSTATE SOURCE_DIR OUT_DIR");
  process.exit(2);
}
mkdirSync(outDir, { recursive: true });

let failures = 0;
let checks = 0;
function check(ok, what) {
  checks++;
  if (!ok) {
    failures++;
    console.log(`FAIL: ${what}`);
  }
}

const userDataDir = mkdtempSync(join(tmpdir(), "cowstate-chromium-"));
const browser = await puppeteer.launch({
  executablePath: "/usr/bin/chromium",
  headless: true,
  userDataDir,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         `--user-data-dir=${userDataDir}`],
});

// What the DOM shows of the current step.
function domOf(page) {
  return page.evaluate(() => {
    const q = (s) => document.querySelectorAll(s).length;
    return {
      step: Number(document.body.getAttribute("data-step")),
      entries: q("#picture g.entry"),
      copied: [...document.querySelectorAll("#picture g.entry.copied")].map((e) => Number(e.dataset.slot)).sort((a, b) => a - b),
      retired: q("#picture g.entry.retired"),
      states: q("#picture g.state"),
      arrows: [...document.querySelectorAll("#picture path.snapshot-arrow")].map((p) => `${p.dataset.snapshot}:${p.dataset.slot}`).sort(),
      rehashBuckets: q('#picture g.bucket[data-table="1"]'),
      cells: q("#picture td.cell"),
      changed: [...document.querySelectorAll("#picture td.cell.changed")].map((c) => `${c.dataset.state}@${c.dataset.keyGroup}`).sort(),
      cellEntries: q("#picture td.cell .entry"),
      checkpoints: q("#picture .checkpoint[data-checkpoint]"),
      narration: document.getElementById("narration").textContent,
      line: document.getElementById("line").textContent,
      copies: q("#copies li.copy-reason"),
    };
  });
}

function expectedMap(step) {
  const m = step.map;
  const shown = new Set(m.entries.map((e) => e.slot));
  const arrows = [];
  for (const s of m.snapshots) for (const h of s.heads) if (h && shown.has(h)) arrows.push(`${s.name}:${h}`);
  return {
    entries: m.entries.length,
    copied: m.entries.filter((e) => e.copied).map((e) => e.slot).sort((a, b) => a - b),
    retired: m.entries.filter((e) => e.retired).length,
    states: m.states.length,
    arrows: arrows.sort(),
    rehashBuckets: m.tables.length > 1 ? m.tables[1].length : 0,
    copies: (step.copies || []).length,
  };
}

function expectedBackend(step) {
  const b = step.backend;
  return {
    cells: (b.key_groups[1] - b.key_groups[0] + 1) * b.states.length,
    changed: b.cells.filter((c) => c.changed).map((c) => `${c.state}@${c.key_group}`).sort(),
    cellEntries: b.cells.reduce((n, c) => n + c.entries.length, 0),
    checkpoints: b.checkpoints.length,
  };
}

// Every tour, and the smoke scenarios of the storage faults and async I/O (their serializer,
// io and power-loss steps have narrations of their own).
const tours = readdirSync(join(sourceDir, "scenarios/tours")).filter((f) => f.endsWith(".scenario")).sort()
  .map((f) => join("scenarios/tours", f));
const faultPages = ["backend-async-io", "backend-crash-states", "backend-power-loss", "backend-write-faults"]
  .map((f) => join("scenarios/smoke", `${f}.scenario`));
const started = Date.now();
let steps = 0;
for (const tour of [...tours, ...faultPages]) {
  const stem = basename(tour, ".scenario");
  const html = join(outDir, `${stem}.html`);
  execFileSync(cowstate, ["explain", join(sourceDir, tour), "--format", "html", "--out", html]);
  const page = await browser.newPage();
  await page.setViewport({ width: 1400, height: 900 });
  const problems = [];
  page.on("console", (m) => { if (m.type() === "error" || m.type() === "warning") problems.push(`console ${m.type()}: ${m.text()}`); });
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  await page.setRequestInterception(true);
  page.on("request", (r) => {
    if (r.url() === `file://${html}`) return r.continue();
    problems.push(`request: ${r.url()}`);
    return r.abort();
  });
  await page.goto(`file://${html}`, { waitUntil: "load" });
  const model = await page.evaluate(() => JSON.parse(document.getElementById("model").textContent));
  check(model.steps.length > 0, `${tour}: the model has steps`);
  let busiest = { step: 1, size: -1 };
  for (let i = 0; i < model.steps.length; i++) {
    if (i > 0) await page.keyboard.press("ArrowRight");
    const step = model.steps[i];
    const dom = await domOf(page);
    const where = `${tour} step ${i + 1}`;
    check(dom.step === i + 1, `${where}: the viewer shows step ${dom.step}`);
    check(dom.narration === step.narration, `${where}: the narration is the model's`);
    check(dom.line.startsWith(`${step.task}: `), `${where}: the line names task ${step.task}: '${dom.line}'`);
    const want = step.map ? expectedMap(step) : expectedBackend(step);
    for (const [k, v] of Object.entries(want)) {
      check(JSON.stringify(dom[k]) === JSON.stringify(v), `${where}: ${k} is ${JSON.stringify(dom[k])}, the model says ${JSON.stringify(v)}`);
    }
    const size = step.map ? dom.entries + dom.arrows.length : dom.cellEntries + dom.checkpoints;
    if (size > busiest.size) busiest = { step: i + 1, size };
    steps++;
  }
  // The left arrow goes back, the slider jumps.
  await page.keyboard.press("ArrowLeft");
  check((await domOf(page)).step === Math.max(1, model.steps.length - 1), `${tour}: ArrowLeft goes back one step`);
  await page.$eval("#slider", (s, v) => { s.value = v; s.dispatchEvent(new Event("input")); }, busiest.step);
  check((await domOf(page)).step === busiest.step, `${tour}: the slider jumps to step ${busiest.step}`);
  await page.screenshot({ path: join(outDir, `${stem}.png`), fullPage: true });
  check(problems.length === 0, `${tour}: no console errors, page errors or requests: ${problems.join("; ")}`);
  await page.close();
}
await browser.close();
rmSync(userDataDir, { recursive: true, force: true });
const seconds = ((Date.now() - started) / 1000).toFixed(1);
console.log(`${tours.length} tours and ${faultPages.length} storage-fault scenarios, ${steps} steps, ${checks} checks, ${failures} failed, ${seconds} s; screenshots in ${outDir}`);
process.exit(failures === 0 && tours.length > 0 ? 0 : 1);
