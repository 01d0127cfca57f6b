// The page's behaviour: the pickers from GET /languages, POST /translate (alternatives,
// source "auto" with the detected language shown), POST /translate_file and the download
// of its translatedFileUrl. LibreTranslate's API, same origin: no CORS, nothing external.
"use strict";

const ALTERNATIVES = 3;
const $ = (id) => document.getElementById(id);
let languages = [];  // GET /languages: [{code, name, targets}]

function setStatus(message, isError = false) {
  $("status").textContent = message;
  $("status").classList.toggle("error", isError);
}

function nameOf(code) {
  const found = languages.find((l) => l.code === code);
  return found ? found.name : code;
}

function option(code, label) {
  const o = document.createElement("option");
  o.value = code;
  o.textContent = label;
  return o;
}

// The targets of the picked source; for "auto", every language some source reaches.
function fillTargets() {
  const source = $("source").value;
  const previous = $("target").value;
  const targets = new Set();
  for (const l of languages) {
    if (source === "auto" || l.code === source) l.targets.forEach((t) => targets.add(t));
  }
  $("target").replaceChildren(...[...targets].sort().map((t) => option(t, nameOf(t))));
  if (targets.has(previous)) $("target").value = previous;
}

async function loadLanguages() {
  const response = await fetch("/languages");
  if (!response.ok) throw new Error(`GET /languages answered ${response.status}`);
  languages = await response.json();
  const sources = languages.filter((l) => l.targets.length > 0);
  $("source").append(...sources.map((l) => option(l.code, l.name)));
  fillTargets();
  if (sources.length === 0) setStatus("This server serves no language pair.", true);
}

// The API key field, when filled: LibreTranslate's api_key.
function withKey(fields) {
  const key = $("api-key").value.trim();
  return key ? { ...fields, api_key: key } : fields;
}

// The answer's JSON, or an Error carrying LibreTranslate's {"error"} message.
async function answerOf(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    // not JSON: the status says what happened
  }
  if (!response.ok) throw new Error(body && body.error ? body.error : `the server answered ${response.status}`);
  return body;
}

async function busy(button, work) {
  button.disabled = true;
  try {
    await work();
  } catch (e) {
    setStatus(e.message, true);
  } finally {
    button.disabled = false;
  }
}

function showTranslation(body, target) {
  $("result").textContent = body.translatedText;
  $("result").lang = target;  // read out in its language
  const alternatives = body.alternatives || [];
  $("alternatives").replaceChildren(...alternatives.map((a) => {
    const li = document.createElement("li");
    li.textContent = a;
    return li;
  }));
  $("alternatives-section").hidden = alternatives.length === 0;
  const detected = body.detectedLanguage;
  $("detected").hidden = !detected;
  if (detected) {
    $("detected").textContent =
      `Detected: ${nameOf(detected.language)} (${detected.language}), confidence ${detected.confidence}%`;
    $("detected").dataset.language = detected.language;
  }
}

async function translateText(event) {
  event.preventDefault();
  await busy($("translate"), async () => {
    setStatus("Translating…");
    const response = await fetch("/translate", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(withKey({
        q: $("text").value, source: $("source").value, target: $("target").value,
        format: "text", alternatives: ALTERNATIVES,
      })),
    });
    showTranslation(await answerOf(response), $("target").value);
    setStatus("Translated.");
  });
}

async function translateFile(event) {
  event.preventDefault();
  const file = $("file").files[0];
  if (!file) return setStatus("Choose a file first.", true);
  await busy($("translate-file"), async () => {
    setStatus(`Translating ${file.name}…`);
    $("download").hidden = true;
    const form = new FormData();
    form.append("file", file);
    const fields = withKey({ source: $("source").value, target: $("target").value });
    for (const [name, value] of Object.entries(fields)) form.append(name, value);
    const body = await answerOf(await fetch("/translate_file", { method: "POST", body: form }));
    if (!body || !body.translatedFileUrl) throw new Error("the answer has no translatedFileUrl");
    // The translation keeps the file's name, as LibreTranslate's does (the URL's last segment
    // has a unique prefix before it).
    const link = $("download-link");
    link.href = body.translatedFileUrl;
    link.download = file.name;
    link.textContent = `Download the translation of ${file.name}`;
    $("download").hidden = false;
    setStatus(`Translated ${file.name}.`);
  });
}

function swap() {
  const source = $("source").value;
  const target = $("target").value;
  const reversible = languages.some((l) => l.code === target && l.targets.length > 0);
  if (source === "auto" || !reversible) return setStatus("These languages cannot be swapped.", true);
  $("source").value = target;
  fillTargets();
  $("target").value = source;
  if ($("result").textContent) $("text").value = $("result").textContent;
}

document.addEventListener("DOMContentLoaded", () => {
  $("source").addEventListener("change", fillTargets);
  $("swap").addEventListener("click", swap);
  $("text-form").addEventListener("submit", translateText);
  // Ctrl+Enter (or Cmd+Enter) in the text box translates, as the button does.
  $("text").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) $("text-form").requestSubmit();
  });
  $("file-form").addEventListener("submit", translateFile);
  loadLanguages()
    .then(() => document.body.setAttribute("data-ready", "true"))
    .catch((e) => setStatus(`Cannot list the languages: ${e.message}`, true));
});
