"""docs/conformance.md is generated from the kit; it must match, and every rule must be covered."""

from __future__ import annotations

from pathlib import Path

from engine.tck import (
    RULES,
    ProcessorVerification,
    PublisherVerification,
    SubscriberBlackboxVerification,
    SubscriberWhiteboxVerification,
)
from engine.tck.report import default_paths, kit_methods, render, rs_part

ROOT = Path(__file__).resolve().parents[2]
KITS = (PublisherVerification, SubscriberBlackboxVerification, SubscriberWhiteboxVerification,
        ProcessorVerification)


def test_conformance_doc_is_up_to_date():
    expected = render(default_paths(ROOT))
    text = (ROOT / "docs" / "conformance.md").read_text(encoding="utf-8")
    assert rs_part(text) == expected, ("docs/conformance.md is out of date: run "
                                "`python -m engine.tck.report --write`")


def test_every_rule_has_a_test_or_a_stated_reason():
    covered = {rule for kit in KITS for method in kit_methods(kit).values()
               for rule in method.rs_rules}
    assert covered == set(RULES)
    assert len(RULES) == 11 + 13 + 17 + 2  # 1.1–1.11, 2.1–2.13, 3.1–3.17, 4.1–4.2


def test_every_rule_except_the_untestable_has_a_real_test():
    tested = {rule for kit in KITS for method in kit_methods(kit).values()
              if not hasattr(method, "rs_untested") for rule in method.rs_rules}
    untestable = set(RULES) - tested
    assert untestable == {"2.2", "2.4", "2.11", "3.1", "3.4", "3.10", "3.11"}, untestable


def test_kit_test_names_cite_their_first_rule():
    for kit in KITS:
        for name, method in kit_methods(kit).items():
            first = method.rs_rules[0].replace(".", "_")
            assert name.startswith(f"test_rs_{first}_"), (kit.__name__, name)


def test_every_doc_row_lists_the_kit_methods():
    text = (ROOT / "docs" / "conformance.md").read_text(encoding="utf-8")
    for kit in KITS:
        for name, method in kit_methods(kit).items():
            if not hasattr(method, "rs_untested"):
                assert name in text, f"{kit.__name__}.{name} missing from docs/conformance.md"
