// The console's languages. The code is written in English; another language is a
// catalogue (i18n/LANG.json) keyed by the English text, with {name} placeholders, so a
// text missing from it shows in English rather than not at all. The language is the one
// chosen in the header (localStorage "suanli.lang"), else the browser's first that the
// console has; numbers, money and dates follow it.
"use strict";

const LANG_KEY = "suanli.lang";
const LANGUAGES = { en: "English", "zh-CN": "中文" };
let catalogue = {};

function lang() {
  const chosen = localStorage.getItem(LANG_KEY);
  if (chosen in LANGUAGES) return chosen;
  for (const l of navigator.languages || [navigator.language || "en"]) {
    if (/^zh\b/i.test(l)) return "zh-CN";
    if (/^en\b/i.test(l)) return "en";
  }
  return "en";
}

// "Stopping instance {id}." with { id: 3 }: the current language's text, filled in.
function t(text, vars) {
  const s = catalogue[text] ?? text;
  return vars ? s.replace(/\{(\w+)\}/g, (m, k) => (k in vars ? String(vars[k]) : m)) : s;
}

// Load the current language's catalogue and translate the page's fixed parts (data-i18n).
async function loadLanguage() {
  const l = lang();
  try {
    catalogue = l === "en" ? {} : await (await fetch(`i18n/${l}.json`)).json();
  } catch (e) {
    catalogue = {};  // English rather than nothing
  }
  document.documentElement.lang = l;
  document.title = t("Suanli console");
  for (const node of document.querySelectorAll("[data-i18n]")) node.textContent = t(node.dataset.i18n);
}

// The header's language menu; `changed()` runs once the new language is loaded.
function languageSwitch(changed) {
  const select = document.createElement("select");
  select.id = "lang";
  select.setAttribute("aria-label", "Language / 语言");
  for (const [code, name] of Object.entries(LANGUAGES)) select.append(new Option(name, code, false, code === lang()));
  select.addEventListener("change", async () => {
    localStorage.setItem(LANG_KEY, select.value);
    await loadLanguage();
    changed();
  });
  return select;
}
