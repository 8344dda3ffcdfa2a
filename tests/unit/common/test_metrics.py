"""KubeCounter: a counter served under kube's exact name (prometheus_client would add _total)."""
from __future__ import annotations

from services.common.metrics import KubeCounter, exposition


def test_kube_counter_keeps_its_name() -> None:
    c = KubeCounter("apiary_test_things_count", 'Things "counted".', ["name", "type"])
    c.labels("a\\b", "x").inc()
    c.labels("a\\b", "x").inc(2)
    c.labels("z", "y").inc()
    text = exposition().decode()
    assert "# HELP apiary_test_things_count Things \"counted\".\n# TYPE apiary_test_things_count counter\n" in text
    assert 'apiary_test_things_count{name="a\\\\b",type="x"} 3.0\n' in text
    assert 'apiary_test_things_count{name="z",type="y"} 1.0\n' in text
    assert "apiary_test_things_count_total" not in text
    assert c.value("z", "y") == 1.0
    # the default registry is still there
    assert "python_gc_objects_collected_total" in text
