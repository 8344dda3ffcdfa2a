"""Watch options are checked before the stream starts, with kube's messages."""
import random

import pytest

from services.common.errors import BadRequest
from services.proxy.handlers.watch import MIN_REQUEST_TIMEOUT, watch_timeout


def test_timeouts():
    assert watch_timeout({"timeoutSeconds": "7"}) == 7.0
    assert watch_timeout({"timeoutSeconds": "-5"}) == 0.0  # kube: a timer that has already fired
    for q in ({}, {"timeoutSeconds": "0"}, {"timeoutSeconds": ""}):
        assert MIN_REQUEST_TIMEOUT <= watch_timeout(q, rng=random.Random(1)) <= 2 * MIN_REQUEST_TIMEOUT


@pytest.mark.parametrize("query, message", [
    ({"timeoutSeconds": "abc"}, 'strconv.ParseInt: parsing "abc": invalid syntax'),
    ({"timeoutSeconds": "1.5"}, 'strconv.ParseInt: parsing "1.5": invalid syntax'),
    ({"timeoutSeconds": "9" * 30}, f'strconv.ParseInt: parsing "{"9" * 30}": value out of range'),
    ({"resourceVersion": "abc"}, 'resourceVersion: Invalid value: "abc": must be a valid resource version'),
    ({"resourceVersion": "-1"}, 'resourceVersion: Invalid value: "-1": must be a valid resource version'),
    ({"resourceVersion": "9" * 20}, f'resourceVersion: Invalid value: "{"9" * 20}": must be a valid resource version'),
])
def test_bad_options_are_400(query, message):
    with pytest.raises(BadRequest) as e:
        watch_timeout(query)
    assert e.value.message == message


def test_good_resource_versions():
    assert watch_timeout({"resourceVersion": "0", "timeoutSeconds": "1"}) == 1.0
    assert watch_timeout({"resourceVersion": "12345", "timeoutSeconds": "1"}) == 1.0
