"""What the billing commands print: plans as the flags take them (``on-demand``), the
price book without its research notes unless asked (``--sources``), and the first
version's date as what it is (effective since the platform started), not 1970-01-01."""

from __future__ import annotations

import json
from pathlib import Path

from tests.control.control_helpers import Server


def test_prices_list_shows_prices_not_research_notes(server: Server, cli) -> None:  # type: ignore[no-untyped-def]
    out = cli("prices", "list")
    assert "SOURCE" not in out and "seed 00" not in out, out
    assert "since the platform started" in out and "1970" not in out, out
    cli("prices", "set", "4090", "on-demand", "2.10", "--note", "new quote")
    out = cli("prices", "list", "--sources")
    assert "SOURCE" in out and "seed 00" in out, out
    assert "v2 from 20" in out, out  # a later version says when it took effect
    versions = json.loads(cli("prices", "list", "--json"))["versions"]
    assert versions[0]["since_start"] and versions[0]["created_at"] and not versions[1]["since_start"]
    assert versions[0]["effective_at"].startswith("1970")  # the JSON keeps the effective time rating uses


def test_tables_print_plans_as_the_flags_take_them(server: Server, cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    task = tmp_path / "task.yaml"
    task.write_text("resources: {accelerators: h100:2}\nrun: 'true'\n")
    out = cli("quote", str(task), "--hours", "1")
    assert "on-demand" in out and "on_demand" not in out, out
    assert json.loads(cli("quote", str(task), "--json"))["quotes"][0]["plan"] == "on_demand"  # the API's key stays
    out = cli("advise", "cost", "--gpu", "h100", "--hours", "10", "--plan", "on-demand", "--plan", "spot")
    assert "on-demand" in out and "on_demand" not in out and "spot" in out, out
