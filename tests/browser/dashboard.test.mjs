// Opens the dashboard in headless Chromium (Debian's, no browser download) while the helper server
// feeds it a changing fake federation, and checks what a person would see: the three sites with
// their layer ranges in stage order, the links between them, charts that grow, the step rising, no
// script errors. Saves dashboard.png in the output directory.
//
//   node dashboard.test.mjs SERVER_BINARY OUTPUT_DIR CHROMIUM
import assert from "node:assert/strict";
import {spawn} from "node:child_process";
import {mkdtempSync, rmSync} from "node:fs";
import {tmpdir} from "node:os";
import {join} from "node:path";
import {createInterface} from "node:readline";
import {chromium} from "playwright-core";

// mode "fake": the helper serves changing fake snapshots; "real": it runs a real strait-gateway with
// three test sites exchanging frames and reporting progress through it.
const [serverBinary, outDir, chromiumPath, mode = "fake"] = process.argv.slice(2);
const TOKEN = "browser-test-token";

// Starts the helper server and resolves with its port.
function startServer() {
  const args = mode === "real" ? ["--token", TOKEN, "--real"]
                               : ["--token", TOKEN, "--interval-ms", "250"];
  if (mode === "replicas") args.push("--replicas");
  if (mode === "teacher") args.push("--teacher");
  const child = spawn(serverBinary, args, {stdio: ["pipe", "pipe", "inherit"]});
  const port = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("the server printed no port in 20 s")), 20000);
    child.on("exit", (code) => reject(new Error(`the server exited early with ${code}`)));
    createInterface({input: child.stdout}).on("line", (line) => {
      const match = /^PORT (\d+)$/.exec(line);
      if (match) { clearTimeout(timer); resolve(Number(match[1])); }
    });
  });
  return {child, port};
}

async function main() {
  const server = startServer();
  const userDataDir = mkdtempSync(join(tmpdir(), "strait-chromium-"));
  let context;
  try {
    const port = await server.port;
    const base = `http://127.0.0.1:${port}`;

    // Without the token nothing is served.
    assert.equal((await fetch(`${base}/api/state`)).status, 401);
    assert.equal((await fetch(`${base}/`)).status, 401);

    context = await chromium.launchPersistentContext(userDataDir, {
      executablePath: chromiumPath,
      headless: true,
      viewport: {width: 1600, height: 1100},
      args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    });
    const page = context.pages()[0] || await context.newPage();
    const errors = [];
    page.on("pageerror", (error) => errors.push(String(error)));
    page.on("console", (message) => { if (message.type() === "error") errors.push(message.text()); });
    const external = [];
    page.on("request", (request) => { if (!request.url().startsWith(base)) external.push(request.url()); });

    // The token once in the address; the cookie it sets carries the page's own requests.
    await page.goto(`${base}/?token=${TOKEN}`);
    // With replicas, two pipelines of the same three stages, one row each.
    const siteCount = mode === "replicas" ? 6 : 3;
    const firstPipeline = mode === "replicas" ? '#pipeline .replica-row[data-replica="0"]' : "#pipeline";
    await page.waitForFunction((n) => document.querySelectorAll("#pipeline .site").length === n,
                               siteCount, {timeout: 15000});
    // A real federation is still joining when the page first loads: wait until every site trains.
    await page.waitForFunction(
        () => [...document.querySelectorAll("#pipeline .site .pill")].every((p) => p.textContent === "training"),
        null, {timeout: 20000});

    const sites = await page.$$eval(`${firstPipeline} .site`, (nodes) => nodes.map((n) => ({
      id: n.dataset.siteId,
      layers: n.querySelector(".site-layers").textContent,
      device: n.querySelector(".site-device").textContent,
      state: n.querySelector(".pill").textContent,
    })));
    assert.deepEqual(sites.map((s) => [s.id, s.layers]),
                     [["dc-a", "layers [0, 2)"], ["dc-b", "layers [2, 5)"], ["dc-c", "layers [5, 8)"]]);
    assert.match(sites[0].device, /cuda × 4/);
    assert.match(sites[1].device, /cpu × 8/);
    assert.deepEqual(sites.map((s) => s.state), ["training", "training", "training"]);
    const links = await page.$$eval(`${firstPipeline} .link-row`, (nodes) => nodes.map((n) => n.dataset.link));
    assert.deepEqual(links, ["0/forward", "0/backward", "1/forward", "1/backward"]);
    assert.match(await page.textContent("#federation"), /fashion-demo/);
    if (mode !== "real") {  // The fake federation's last stage reports its test accuracy.
      assert.equal(await page.textContent("#kpi-eval"), "88.21%");
      assert.equal(await page.textContent("#kpi-eval-sub"), "test accuracy");
      // Its dc-b is a site of two machines: both ranks and their state.
      assert.match(sites[1].device, /cpu × 8 × 2 machines/);
      const ranks = await page.$$eval('#pipeline .site[data-site-id="dc-b"] .site-ranks .rank',
                                      (nodes) => nodes.map((n) => n.textContent));
      assert.deepEqual(ranks, ["r0 leader", "r1 training"]);
    }

    if (mode === "replicas") {
      const rows = await page.$$eval("#pipeline .replica-row", (nodes) => nodes.map((n) =>
          [...n.querySelectorAll(".site")].map((site) => site.dataset.siteId)));
      assert.deepEqual(rows, [["dc-a", "dc-b", "dc-c"], ["dc-d", "dc-e", "dc-f"]]);
      // Each pipeline's links show its own figures (replica 1's carry three times the frames).
      const frames = (r) => page.$$eval(`#pipeline .replica-row[data-replica="${r}"] .link-row`, (nodes) =>
          nodes.map((n) => [n.dataset.link, Number(n.querySelector(".link-extra").textContent.split(" ")[0].replace(/,/g, ""))]));
      const [first, second] = [await frames(0), await frames(1)];
      assert.deepEqual(second.map(([key]) => key), ["0/forward@1", "0/backward@1", "1/forward@1", "1/backward@1"]);
      assert.ok(first[0][1] > 0, `replica 0's forward link has frames: ${JSON.stringify(first)}`);
      assert.ok(second[0][1] >= 2 * first[0][1], `replica 1's figures are its own: ${JSON.stringify(second)}`);
      assert.equal(await page.isVisible("#sums"), true, "the secure sums show");
      await page.waitForFunction(() => {
        const rounds = document.querySelector('#sums [data-sums="rounds"]');
        return rounds && rounds.textContent !== "0";
      }, null, {timeout: 20000});
      assert.notEqual(await page.textContent('#sums [data-sums="bytes-per-round"]'), "—");
    } else {
      assert.equal(await page.isVisible("#sums"), false, "no sums without replicas");
    }
    if (mode === "teacher") {  // Knowledge sharing: the teacher's sites apart from the pipeline.
      const teachers = await page.$$eval("#teacher .site", (nodes) => nodes.map((n) =>
          [n.dataset.siteId, n.querySelector(".stage").textContent]));
      assert.deepEqual(teachers, [["teach-a", "TEACHER 0"], ["teach-b", "TEACHER 1"]]);
      assert.deepEqual(await page.$$eval("#teacher .link-row", (nodes) => nodes.map((n) => n.dataset.link)),
                       ["t0/forward", "t1/forward"]);
      assert.equal(await page.textContent('#teacher [data-teacher="bytes-per-token"]'), "64 B");
      assert.equal(await page.textContent('#teacher [data-teacher="wait"]'), "4.0%");
      assert.ok(await page.$$eval("#sites-table tbody tr", (rows) =>
          rows.some((r) => r.textContent.includes("teach-b"))), "the teacher's sites are in the table");
      assert.equal(await page.textContent('#serving [data-serving="requests"]'), "12");
      assert.equal(await page.textContent('#serving [data-serving="tokens-per-second"]'), "200");
      assert.equal(await page.textContent('#serving [data-serving="latency"]'), "500 ms");
    } else {
      assert.equal(await page.isVisible("#teacher"), false, "no teacher row without a teacher");
      assert.equal(await page.isVisible("#serving"), false, "no serving line without serving");
    }

    // The charts and the step move on their own (the server samples every 250 ms).
    const points = () => page.$eval("#chart-loss", (c) => Number(c.dataset.points || 0));
    const step = () => page.textContent("#kpi-step");
    const points0 = await points();
    const step0 = await step();
    await page.waitForFunction((n) => Number(document.querySelector("#chart-loss").dataset.points) > n + 2,
                               points0, {timeout: 20000});
    await page.waitForFunction((s) => document.querySelector("#kpi-step").textContent !== s,
                               step0, {timeout: 20000});
    assert.equal(await page.getAttribute("#live", "data-status"), "live");
    const throughputPoints = await page.$eval("#chart-throughput", (c) => Number(c.dataset.points));
    assert.ok(throughputPoints > 0, "throughput chart has points");
    assert.equal(await page.$$eval("#timesplit .ts-row", (rows) => rows.length), siteCount);
    assert.ok(await page.$$eval("#alerts .alert", (items) => items.length) >= 1, "alerts listed");
    assert.ok(await page.$$eval("#rejected .bar-row", (rows) => rows.length) >= 1, "rejections listed");

    // Let the curves grow a little for the screenshot.
    await page.waitForTimeout(3000);
    const screenshot = join(outDir, mode === "fake" ? "dashboard.png" : `dashboard-${mode}.png`);
    await page.screenshot({path: screenshot, fullPage: true});
    console.log(`screenshot: ${screenshot}`);

    assert.deepEqual(errors, [], "no script errors");
    assert.deepEqual(external, [], "no request leaves the gateway");
    console.log(`dashboard browser test passed: sites ${sites.map((s) => s.id).join(", ")}, ` +
                `loss chart ${points0} -> ${await points()} points, step ${step0} -> ${await step()}`);
  } finally {
    if (context) await context.close();
    server.child.stdin.end();
    server.child.kill("SIGTERM");
    rmSync(userDataDir, {recursive: true, force: true});
  }
}

main().then(() => process.exit(0), (error) => {
  console.error(`dashboard browser test FAILED: ${error.stack || error}`);
  process.exit(1);
});
