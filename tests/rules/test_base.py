"""The rule vocabulary (webhook/rules/base.py): how a violation reads, short and in full."""

from __future__ import annotations

from webhook.rules.base import Violation


def test_the_short_form_of_a_violation_without_a_subject_names_the_field():
    assert Violation("r", "spec.x", "", "is wrong").short() == "spec.x: is wrong"
    assert Violation("r", "spec.x", "pod", "is wrong").short() == "pod: is wrong"


def test_a_violation_message_without_a_subject_or_a_fix_has_no_empty_parts():
    assert Violation("r", "spec.x", "", "is wrong").message() == "spec.x: is wrong"
    assert Violation("r", "spec.x", "pod", "is wrong").message() == "spec.x: pod: is wrong"
    assert Violation("r", "spec.x", "pod", "is wrong", "fix it").message() == "spec.x: pod: is wrong; fix it"
