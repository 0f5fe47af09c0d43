"""A built-in rule module is named after the rule it implements: `forensics rules show ID` and a
finding's rule id lead to `forensics/rules/<id with underscores>.py`."""

import importlib

from forensics.plugins import RULE_PLUGINS

# Modules of a family of rules, named after the family: every id they declare starts with the prefix.
FAMILIES = {"forensics.rules.stated_cause": "stated-"}  # what a catalogued message states, one id per cause


def _declared_ids(module) -> list[str]:
    return [doc.id for doc in module.forensics_rules()]


def test_every_rule_module_is_named_after_a_rule_id_it_declares():
    misnamed = {}
    for name in RULE_PLUGINS:
        if not name.startswith("forensics.rules."):
            continue  # the YAML rules' loader: its rules are files of their own
        ids = _declared_ids(importlib.import_module(name))
        assert ids, f"{name} declares no rule"
        if name in FAMILIES:
            if not all(rule_id.startswith(FAMILIES[name]) for rule_id in ids):
                misnamed[name] = ids
            continue
        if name.rsplit(".", 1)[1].replace("_", "-") not in ids:
            misnamed[name] = ids
    assert misnamed == {}


def test_the_renamed_modules_are_the_ones_registered():
    from forensics.plugins import Plugins

    registered = {name for name, _ in Plugins(autoload=False).pm.list_name_plugin()}
    for rule_id in ("nccl-opcount-mismatch", "outstanding-async-ops", "concurrent-collectives-one-group",
                    "transport-size-mismatch", "wait-for-cycle"):
        assert f"forensics.rules.{rule_id.replace('-', '_')}" in registered
