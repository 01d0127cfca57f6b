// The LibreTranslate clients of the npm registry (versions pinned in package.json) against the
// server, in Node.js, with an API key (the server runs with server.auth_token_file): what
// each sends is what their published code sends.
// - `libretranslate` (translate({query, source, target, format, apiurl, apiKey})): GET
//   /languages with a JSON Content-Type, then POST /translate JSON {q, source, target,
//   format, apiKey} (apiKey, not LibreTranslate's api_key: the server takes both); source
//   "auto" when none is given; it returns translatedText.
// - `translate` (Translate({engine: "libre", url: the /translate URL})): POST JSON {q, source, target,
//   api_key}; throws the body's `error` when there is one. It checks languages itself
//   against ISO 639-1 before sending: "auto" is refused by the package, never sent.
//   node npm_clients.mjs CONFIG_JSON   (test_browser.py writes it: base URL, expected answers)
import { translate as libretranslate } from "libretranslate";
import { Translate } from "translate";

const config = JSON.parse(process.argv[2]);
let failures = 0;
function check(cond, what) {
  console.log(`${cond ? "ok   " : "FAIL "} ${what}`);
  if (!cond) failures++;
}
async function attempt(work) {
  try {
    return { value: await work() };
  } catch (e) {
    return { error: e };
  }
}

const apiurl = config.base, apiKey = config.key;
let got = await libretranslate({ query: config.sentence, source: "en", target: "de", apiurl, apiKey });
check(got === config.expected, `libretranslate, source en: "${got}"`);
got = await libretranslate({ query: config.paragraph, target: "de", apiurl, apiKey });
check(got === config.expected_auto, `libretranslate, no source (it sends auto): the whole paragraph "${got}"`);
got = await libretranslate({ query: config.paragraph, source: "auto", target: "de", apiurl, apiKey, format: "text" });
check(got === config.expected_auto, `libretranslate, source auto: "${got}"`);

// The package's engine and URL are settings of an instance.
const translate = Translate({ engine: "libre", url: `${config.base}/translate`, key: config.key });
got = await translate(config.sentence, { from: "en", to: "de" });
check(got === config.expected, `translate, from en: "${got}"`);
got = await translate(config.paragraph, { from: "English", to: "German" });
check(got === config.expected_paragraph, `translate, language names, the whole paragraph: "${got}"`);
// The server's error body reaches the caller as the package's Error message.
const refused = await attempt(() => translate(config.sentence, { from: "en", to: "fr" }));
check(refused.error && refused.error.message === config.refused.error,
      `translate, an unserved target: the server's error "${refused.error && refused.error.message}"`);
// (A text not asked before: the package answers repeats from a cache of its own.)
const keyless = await attempt(() => Translate({ engine: "libre", url: `${config.base}/translate` })(
  "A dog runs in the park.", { from: "en", to: "de" }));
check(keyless.error && keyless.error.message === config.no_key.error,
      `translate without a key: the server's error "${keyless.error && keyless.error.message}"`);
const auto = await attempt(() => translate(config.paragraph, { from: "auto", to: "de" }));
check(auto.error && /ISO 639-1/.test(auto.error.message),
      `translate, from auto: refused by the package itself, never sent (${auto.error && auto.error.message})`);

console.log(`npm_clients.mjs: ${failures} failed checks`);
process.exit(failures ? 1 : 0);
