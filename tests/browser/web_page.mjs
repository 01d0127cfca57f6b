// The web page at / in Debian's chromium (playwright-core): the pickers from /languages,
// a translation with its alternatives, source "auto" with the detected language, a
// screenshot, and a .docx uploaded through /translate_file with the download of its
// translation (test_browser.py reads the downloaded file). Every control is found by its accessible name (label, role),
// so an unlabelled control fails here. Any request to another origin, any console error (a
// Content-Security-Policy violation among them) and any page error fails the run.
//   node web_page.mjs CONFIG_JSON   (test_browser.py writes it: url, expected answers, paths)
import { readFileSync } from "node:fs";
import { chromium } from "playwright-core";

const config = JSON.parse(process.argv[2]);
let failures = 0;
function check(cond, what) {
  console.log(`${cond ? "ok   " : "FAIL "} ${what}`);
  if (!cond) failures++;
}

const origin = new URL(config.url).origin;
// --no-sandbox: the test runs as root in CI, where chromium's sandbox refuses to start.
const browser = await chromium.launch({ executablePath: config.chromium, args: ["--no-sandbox"] });
try {
  const context = await browser.newContext({ acceptDownloads: true, viewport: { width: 1100, height: 900 } });
  const page = await context.newPage();
  const outside = [], problems = [];
  page.on("request", (r) => {
    if (!r.url().startsWith(origin) && !r.url().startsWith("data:")) outside.push(r.url());
  });
  page.on("console", (m) => { if (m.type() === "error") problems.push(`console: ${m.text()}`); });
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));

  const answer = await page.goto(config.url);
  check(answer.status() === 200, `GET / answers 200 (got ${answer.status()})`);
  await page.waitForSelector("body[data-ready=true]", { timeout: 30000 });
  const source = page.getByLabel("From", { exact: true }), target = page.getByLabel("To", { exact: true });
  const sources = await source.locator("option").evaluateAll((os) => os.map((o) => o.value));
  check(JSON.stringify(sources) === JSON.stringify(["auto", "en"]),
        `the source picker: Detect language, then /languages' sources (${sources})`);
  const targets = await target.locator("option").evaluateAll((os) => os.map((o) => o.value));
  check(JSON.stringify(targets) === JSON.stringify(["de"]), `the target picker: the targets of /languages (${targets})`);

  // The status line (the translation's <output> is a status region too).
  const result = page.locator("#result"), status = page.locator("#status");
  // A sentence from English: the server's translation and its alternatives.
  await source.selectOption("en");
  await target.selectOption("de");
  await page.getByLabel("Text to translate").fill(config.sentence);
  await page.getByRole("button", { name: "Translate", exact: true }).click();
  await status.filter({ hasText: "Translated." }).waitFor({ timeout: 60000 });
  check(await result.textContent() === config.expected.text,
        `the page shows the server's translation: "${await result.textContent()}"`);
  check(await result.getAttribute("lang") === "de", "the translation is marked as German (lang=de)");
  const alternatives = await page.getByRole("region", { name: "Alternatives" }).getByRole("listitem").allTextContents();
  check(JSON.stringify(alternatives) === JSON.stringify(config.expected.alternatives),
        `the alternatives as the server lists them: ${JSON.stringify(alternatives)}`);
  check(await page.locator("#detected").isHidden(), "no detected language when the source is named");

  // A paragraph with the source detected, translated from the keyboard.
  await source.selectOption("auto");
  await page.getByLabel("Text to translate").fill(config.paragraph);
  await status.evaluate((s) => { s.textContent = ""; });
  await page.getByLabel("Text to translate").press("Control+Enter");
  await status.filter({ hasText: "Translated." }).waitFor({ timeout: 60000 });
  check(await result.textContent() === config.expected_auto.translatedText,
        `source auto: the server's translation of the whole paragraph: "${await result.textContent()}"`);
  const detected = await page.locator("#detected").textContent();
  check(await page.locator("#detected").isVisible() &&
        detected.includes(`(${config.expected_auto.detectedLanguage.language})`),
        `the detected language is shown: "${detected}"`);
  await page.screenshot({ path: `${config.artifacts}/web_page.png`, fullPage: true });

  // (Chromium logs a refused request's status as a console error: the checks below stop here.)
  const problemsSoFar = [...problems];
  // An error from the server is shown, not swallowed: an empty text.
  await page.getByLabel("Text to translate").fill(" ");
  await page.getByRole("button", { name: "Translate", exact: true }).click();
  await page.locator("#status.error").waitFor({ timeout: 30000 });
  check((await status.textContent()).length > 0,
        `a refused request shows the server's error: "${await status.textContent()}"`);

  // A .docx uploaded, its translation downloaded from the answer's translatedFileUrl.
  await source.selectOption("en");
  await page.getByLabel("File").setInputFiles(config.docx);
  await page.getByRole("button", { name: "Translate the document" }).click();
  const link = page.getByRole("link", { name: /^Download / });
  await link.waitFor({ timeout: 120000 });
  const [download] = await Promise.all([page.waitForEvent("download"), link.click()]);
  await download.saveAs(config.docx_out);
  check(download.suggestedFilename().endsWith(".docx"),
        `the translated document downloads as a .docx (${download.suggestedFilename()})`);
  await page.screenshot({ path: `${config.artifacts}/web_page_document.png`, fullPage: true });

  check(outside.length === 0, `nothing is requested from another origin (${outside})`);
  check(problemsSoFar.length === 0, `no console error nor page error (${problemsSoFar})`);

  // The npm registry's `libretranslate` client, run in the browser from another origin
  // (localhost beside 127.0.0.1): its GET /languages carries a Content-Type, which makes the
  // browser ask a CORS preflight first; it sends source "auto" when none is given.
  const client = await context.newPage();
  await client.goto(`${config.url.replace("127.0.0.1", "localhost")}languages`);
  const code = readFileSync(new URL("node_modules/libretranslate/dist/translate.js", import.meta.url), "utf8");
  const fromOtherOrigin = await client.evaluate(async ({ code, apiurl, query }) => {
    const exports = {};
    new Function("exports", code)(exports);
    return exports.translate({ query, target: "de", apiurl });
  }, { code, apiurl: origin, query: config.paragraph });
  check(fromOtherOrigin === config.expected_auto.translatedText,
        `the libretranslate package in the browser from another origin (CORS), source auto: "${fromOtherOrigin}"`);
} finally {
  await browser.close();
}
console.log(`web_page.mjs: ${failures} failed checks`);
process.exit(failures ? 1 : 0);
