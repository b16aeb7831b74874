"""Issue 15: the console in Chinese and English. Every text of the page is in the
catalogue (i18n/zh-CN.json, keyed by the English text); a browser whose language is
Chinese gets the Chinese console, a switch in the header changes it and is kept."""

from __future__ import annotations

import json
import re

from playwright.sync_api import Page, expect

from suanli.api.console import STATIC
from tests.console.console_helpers import new_context, row, sign_in
from tests.control.control_helpers import LiveServer

ZH = json.loads((STATIC / "i18n" / "zh-CN.json").read_text())
STR = r'"((?:[^"\\]|\\.)*)"'


def _texts_of_the_code() -> set[str]:
    """What console.js and index.html show: every ``t("...")``, table heading and table
    empty text, and every ``data-i18n``."""
    js = (STATIC / "console.js").read_text()
    texts = set(re.findall(r"(?<![\w.$])t\(\s*" + STR, js))
    for columns in re.findall(r"\btable\(\s*\[([^\]]*)\]", js):
        texts |= set(re.findall(STR, columns))
    texts |= {s for s in re.findall(STR, js) if re.match(r"(No|Nothing) [a-z]", s)}  # a table's text for no rows
    texts |= set(re.findall(r'data-i18n="([^"]+)"', (STATIC / "index.html").read_text()))
    return {json.loads(f'"{s}"') for s in texts if s}


def test_every_text_of_the_console_has_its_chinese_with_the_same_placeholders() -> None:
    texts = _texts_of_the_code()
    assert len(texts) > 200, len(texts)  # the extraction finds the console's texts
    missing = sorted(texts - ZH.keys())
    assert not missing, f"not in i18n/zh-CN.json: {missing}"
    for en in texts:
        names = set(re.findall(r"\{(\w+)\}", en))
        assert set(re.findall(r"\{(\w+)\}", ZH[en])) == names, (en, ZH[en])


def test_a_chinese_browser_gets_the_chinese_console_and_the_switch_keeps_english(chromium, console_server: LiveServer) -> None:  # type: ignore[no-untyped-def]
    context = new_context(chromium, console_server.url, locale="zh-CN")
    page: Page = context.new_page()
    page.set_default_timeout(20_000)
    try:
        sign_in(page, console_server.token)
        expect(page.locator("#who")).to_contain_text("admin (管理员)")
        expect(page.locator("a[href='#instances']")).to_have_text("实例")
        assert page.evaluate("document.documentElement.lang") == "zh-CN"
        for view in ("gpus", "instances", "jobs", "keys", "images", "advisor", "billing", "nodes", "events"):
            page.click(f"a[href='#{view}']")
            expect(page.locator("#view section").first).to_be_visible()
            page.wait_for_timeout(300)  # the live part's first render
            shown = page.evaluate(
                """() => { const out = []; const w = document.createTreeWalker(document.getElementById("view"), NodeFilter.SHOW_TEXT);
                     while (w.nextNode()) { const s = w.currentNode.textContent.trim(); if (s) out.push(s); } return out; }"""
            )
            english = [s for s in shown if s in ZH and ZH[s] != s]
            assert not english, f"{view}: shown in English in the Chinese console: {english}"
        page.click("a[href='#instances']")
        form = page.locator("#create-instance")
        form.locator("input[name=name]").fill("zh-box")
        form.locator("select[name=gpu_model]").select_option("RTX4090")
        expect(page.locator("#instance-price")).to_contain_text("每小时")
        form.locator("button[type=submit]").click()
        expect(page.locator("#flash")).to_have_text("已申请实例。")
        expect(row(page, "zh-box").locator(".state")).to_have_text("运行中")
        page.select_option("#lang", "en")
        expect(page.locator("a[href='#instances']")).to_have_text("Instances")
        expect(row(page, "zh-box").locator(".state")).to_have_text("running")
        page.reload()
        expect(page.locator("a[href='#instances']")).to_have_text("Instances")  # the choice is kept
        assert page.evaluate("document.documentElement.lang") == "en"
    finally:
        context.close()
