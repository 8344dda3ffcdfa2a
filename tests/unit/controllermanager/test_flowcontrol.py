"""The priority-and-fairness-config controller's decisions: kube's ensurer rules for mandatory and
suggested objects (the autoupdate-spec annotation, generation 1 without one) and the Dangling condition."""
from __future__ import annotations

import copy

from services.apis.flowcontrol_bootstrap import (
    AUTOUPDATE_ANNOTATION,
    MANDATORY_PRIORITY_LEVELS,
    SUGGESTED_PRIORITY_LEVELS,
)
from services.controllermanager.flowcontrol import dangling_condition, revised, should_update_spec

EXEMPT = MANDATORY_PRIORITY_LEVELS[0]
CATCH_ALL = MANDATORY_PRIORITY_LEVELS[1]
SYSTEM = SUGGESTED_PRIORITY_LEVELS[0]


def stored(obj, generation=1, annotation=None, shares=None):
    out = copy.deepcopy(obj)
    out["metadata"].update(generation=generation, resourceVersion="7", uid="u")
    if annotation is not None:
        out["metadata"]["annotations"] = {AUTOUPDATE_ANNOTATION: annotation}
    if shares is not None:
        out["spec"]["limited"]["nominalConcurrencyShares"] = shares
    return out


def test_missing_objects_are_created_with_the_annotation():
    out = revised(None, SYSTEM, mandatory=False)
    assert out["metadata"]["annotations"] == {AUTOUPDATE_ANNOTATION: "true"} and out["spec"] == SYSTEM["spec"]


def test_mandatory_objects_are_always_put_back():
    assert revised(stored(CATCH_ALL, annotation="true"), CATCH_ALL, mandatory=True) is None
    out = revised(stored(CATCH_ALL, generation=3, annotation="false", shares=50), CATCH_ALL, mandatory=True)
    assert out["spec"] == CATCH_ALL["spec"] and out["metadata"]["annotations"][AUTOUPDATE_ANNOTATION] == "true"
    assert out["metadata"]["resourceVersion"] == "7"  # an update of what is there, not a blind write


def test_the_exempt_levels_exempt_member_is_the_administrators():
    mine = stored(EXEMPT, generation=2, annotation="true")
    mine["spec"]["exempt"] = {"nominalConcurrencyShares": 10, "lendablePercent": 20}
    assert revised(mine, EXEMPT, mandatory=True) is None
    mine["spec"]["limited"] = {"nominalConcurrencyShares": 1}
    out = revised(mine, EXEMPT, mandatory=True)
    assert out["spec"] == {"type": "Exempt", "exempt": {"nominalConcurrencyShares": 10, "lendablePercent": 20}}


def test_suggested_objects_follow_the_annotation_or_their_generation():
    assert revised(stored(SYSTEM, generation=4, annotation="false", shares=9), SYSTEM, mandatory=False) is None
    assert revised(stored(SYSTEM, generation=4, annotation="true", shares=9), SYSTEM, mandatory=False)["spec"] == \
        SYSTEM["spec"]
    assert not should_update_spec(stored(SYSTEM, generation=2))
    untouched = revised(stored(SYSTEM, generation=1), SYSTEM, mandatory=False)
    assert untouched["metadata"]["annotations"] == {AUTOUPDATE_ANNOTATION: "true"}


def test_dangling_condition():
    fs = {"spec": {"priorityLevelConfiguration": {"name": "bots"}}}
    assert dangling_condition(fs, {"bots"}) == {
        "type": "Dangling", "status": "False", "reason": "Found",
        "message": 'This FlowSchema references the PriorityLevelConfiguration object named "bots" and it exists'}
    assert dangling_condition(fs, set()) == {
        "type": "Dangling", "status": "True", "reason": "NotFound",
        "message": 'This FlowSchema references the PriorityLevelConfiguration object named "bots" but there is no '
                   "such object"}
