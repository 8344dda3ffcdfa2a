"""prometheus_client's two text formats (Prometheus text 0.0.4 and OpenMetrics 1.0), byte for byte, with
the per-series work remembered between scrapes.

prometheus_client escapes every label name and value and formats every number again on each scrape:
for kube's histograms (24 buckets per verb/resource/scope/component) that is most of a scrape's CPU,
although a series' labels never change and most bucket counts repeat. These renderers keep the
rendered label sets, names and numbers in a memo, bounded by the series seen in recent scrapes;
tests/unit/common/test_exposition.py holds them equal to prometheus_client's own output."""
from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Protocol

from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.exposition import (
    UNDERSCORES, _compose_exemplar_string, _escape, _is_legacy_labelname_rune, escape_label_name,
    escape_metric_name)
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString


class Collector(Protocol):
    def collect(self) -> Iterable[Metric]: ...


def _value_escape(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


class _Memo:
    """Rendered label sets, sample names and numbers; cleared when it outgrows the recent scrapes'
    series, so that series that went away do not stay."""

    def __init__(self) -> None:
        self.labels: dict[tuple[tuple[str, str], ...], str] = {}
        self.names: dict[str, str] = {}  # text format: escape_metric_name
        self.om_names: dict[str, str] = {}  # OpenMetrics: the sample name escaped as a label name
        self.numbers: dict[float, str] = {}
        self.limit = 4096

    def settle(self, samples: int) -> None:
        """After a scrape of `samples` series: forget everything once the memo holds far more."""
        self.limit = max(self.limit, 4 * samples)
        if len(self.labels) > self.limit or len(self.numbers) > self.limit:
            self.labels.clear()
            self.numbers.clear()

    def labelstr(self, labels: dict[str, str]) -> str:
        if not labels:
            return ""
        key = tuple(labels.items())
        text = self.labels.get(key)
        if text is None:
            text = self.labels[key] = "{" + ",".join(
                f'{escape_label_name(k, UNDERSCORES)}="{_value_escape(v)}"' for k, v in sorted(labels.items())) + "}"
        return text

    def number(self, value: float) -> str:
        if not value:  # 0.0 and -0.0 compare (and hash) equal but render apart
            return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
        text = self.numbers.get(value)
        if text is None:
            text = self.numbers[value] = floatToGoString(value)
        return text

    def name(self, name: str) -> str:
        text = self.names.get(name)
        if text is None:
            text = self.names[name] = escape_metric_name(name, UNDERSCORES)
        return text

    def om_name(self, name: str) -> str:
        text = self.om_names.get(name)
        if text is None:
            text = self.om_names[name] = _escape(name, UNDERSCORES, _is_legacy_labelname_rune)
        return text


_MEMO = _Memo()
_TEXT_TYPES = {"counter": "counter", "info": "gauge", "stateset": "gauge", "gaugehistogram": "histogram",
               "unknown": "untyped"}
_OM_ONLY = ("_created", "_gsum", "_gcount")


def text(registry: Collector) -> bytes:
    """prometheus_client.generate_latest(registry): the Prometheus text format."""
    memo, out, count = _MEMO, [], 0

    def line(s: Sample) -> str:
        ts = "" if s.timestamp is None else f" {int(float(s.timestamp) * 1000):d}"
        return f"{memo.name(s.name)}{memo.labelstr(s.labels)} {memo.number(s.value)}{ts}\n"

    for metric in registry.collect():
        mname, mtype = metric.name, metric.type
        if mtype == "counter":
            mname += "_total"
        elif mtype == "info":
            mname += "_info"
        mtype = _TEXT_TYPES.get(mtype, mtype)
        doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
        name = memo.name(mname)
        out.append(f"# HELP {name} {doc}\n# TYPE {name} {mtype}\n")
        suffixed = {metric.name + suffix: suffix for suffix in _OM_ONLY}
        om_samples: dict[str, list[str]] = {}
        for s in metric.samples:
            suffix = suffixed.get(s.name)
            if suffix is None:
                out.append(line(s))
            else:  # OpenMetrics-only samples go into a gauge of their own after the family
                om_samples.setdefault(suffix, []).append(line(s))
        count += len(metric.samples)
        for suffix, lines in sorted(om_samples.items()):
            name = memo.name(metric.name + suffix)
            out.append(f"# HELP {name} {doc}\n# TYPE {name} gauge\n")
            out.extend(lines)
    memo.settle(count)
    return "".join(out).encode()


def openmetrics(registry: Collector) -> bytes:
    """prometheus_client.openmetrics.exposition.generate_latest(registry): OpenMetrics 1.0.0, exemplars
    included (native histograms are not part of 1.0.0)."""
    memo, out, count = _MEMO, [], 0
    for metric in registry.collect():
        name = memo.name(metric.name)
        out.append(f"# HELP {name} {_value_escape(metric.documentation)}\n# TYPE {name} {metric.type}\n")
        if metric.unit:
            out.append(f"# UNIT {name} {metric.unit}\n")
        for s in metric.samples:
            exemplar = _compose_exemplar_string(metric, s, s.exemplar) if s.exemplar else ""
            if s.native_histogram:
                continue
            ts = "" if s.timestamp is None else f" {s.timestamp}"
            value = "" if s.value is None else memo.number(s.value)
            out.append(f"{memo.om_name(s.name)}{memo.labelstr(s.labels)} {value}{ts}{exemplar}\n")
        count += len(metric.samples)
    out.append("# EOF\n")
    memo.settle(count)
    return "".join(out).encode()
