"""prometheus_client's two text formats (Prometheus text 0.0.4 and OpenMetrics 1.0), byte for byte, with
the per-series work remembered between scrapes.

prometheus_client escapes every label name and value and formats every number again on each scrape:
for kube's histograms (24 buckets per verb/resource/scope/component) that is most of a scrape's CPU,
although a series' labels never change and most bucket counts repeat. These renderers keep the
rendered label sets, names and numbers in a memo, bounded by the series seen in recent scrapes, and
read a labelled Histogram's children directly instead of through collect()'s Sample per bucket;
tests/unit/common/test_exposition.py holds them equal to prometheus_client's own output."""
from __future__ import annotations

import math
import weakref
from collections.abc import Iterable, Iterator
from typing import Protocol

from prometheus_client import metrics as client_metrics
from prometheus_client.metrics import Histogram
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.exposition import (
    UNDERSCORES,
    _compose_exemplar_string,
    _escape,
    _is_legacy_labelname_rune,
    escape_label_name,
    escape_metric_name,
)
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString


class Collector(Protocol):
    def collect(self) -> Iterable[Metric]: ...


class Parts(Protocol):
    """A registry seen as its collectors in order (services/common/metrics._Snapshot)."""

    def parts(self) -> Iterable[Collector]: ...


def _families(source: Collector | Parts) -> Iterator[Metric | Histogram]:
    """The source's metric families, a labelled Histogram as itself (rendered from its children)."""
    parts = getattr(source, "parts", None)
    for part in parts() if parts else (source,):
        if isinstance(part, Histogram) and part._labelnames and part._is_parent():
            yield part
        else:
            yield from part.collect()


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
        # per labelled Histogram, per child: the rendered sample names and labels of its lines, text and OpenMetrics
        self.series: weakref.WeakKeyDictionary[Histogram, dict[tuple[str, ...], tuple[list[str], list[str]]]] = \
            weakref.WeakKeyDictionary()
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

    def histogram_series(self, h: Histogram, values: tuple[str, ...]) -> tuple[list[str], list[str]]:
        """The `<sample name>{<labels>}` of a child's bucket, count, sum and created lines, text and
        OpenMetrics: the labels its collect() would give each sample."""
        children = self.series.get(h)
        if children is None:
            children = self.series[h] = {}
        found = children.get(values)
        if found is None:
            labels = list(zip(h._labelnames, values))
            names = [(h._name + "_bucket", dict(labels + [("le", floatToGoString(b))])) for b in h._upper_bounds]
            names += [(h._name + suffix, dict(labels)) for suffix in ("_count", "_sum", "_created")]
            found = children[values] = ([self.name(n) + self.labelstr(ls) for n, ls in names],
                                        [self.om_name(n) + self.labelstr(ls) for n, ls in names])
        return found

    def forget_children(self, h: Histogram, live: int) -> None:
        children = self.series.get(h)
        if children is not None and len(children) > 2 * live + 16:
            children.clear()

    def om_name(self, name: str) -> str:
        text = self.om_names.get(name)
        if text is None:
            text = self.om_names[name] = _escape(name, UNDERSCORES, _is_legacy_labelname_rune)
        return text


_MEMO = _Memo()
_TEXT_TYPES = {"counter": "counter", "info": "gauge", "stateset": "gauge", "gaugehistogram": "histogram",
               "unknown": "untyped"}
_OM_ONLY = ("_created", "_gsum", "_gcount")


def text(registry: Collector | Parts) -> bytes:
    """prometheus_client.generate_latest(registry): the Prometheus text format."""
    memo, out, count = _MEMO, [], 0

    def line(s: Sample) -> str:
        ts = "" if s.timestamp is None else f" {int(float(s.timestamp) * 1000):d}"
        return f"{memo.name(s.name)}{memo.labelstr(s.labels)} {memo.number(s.value)}{ts}\n"

    for metric in _families(registry):
        if isinstance(metric, Histogram):
            count += _histogram(metric, out, openmetrics=False)
            continue
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


def openmetrics(registry: Collector | Parts) -> bytes:
    """prometheus_client.openmetrics.exposition.generate_latest(registry): OpenMetrics 1.0.0, exemplars
    included (native histograms are not part of 1.0.0)."""
    memo, out, count = _MEMO, [], 0
    for metric in _families(registry):
        if isinstance(metric, Histogram):
            count += _histogram(metric, out, openmetrics=True)
            continue
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


def _histogram(h: Histogram, out: list[str], openmetrics: bool) -> int:
    """A labelled Histogram's family as collect() and the format's renderer would write it: each child's
    buckets (cumulative, with their exemplars in OpenMetrics), count, sum and created time (text: in a
    gauge `<name>_created` after the family); returns the samples written."""
    memo = _MEMO
    memo_name, doc = memo.name(h._name), h._documentation
    if openmetrics:
        out.append(f"# HELP {memo_name} {_value_escape(doc)}\n# TYPE {memo_name} histogram\n")
        if h._unit:
            out.append(f"# UNIT {memo_name} {h._unit}\n")
    else:
        doc = doc.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {memo_name} {doc}\n# TYPE {memo_name} histogram\n")
    with h._lock:
        children = h._metrics.copy()
    created, with_sum, buckets = client_metrics._use_created, h._upper_bounds[0] >= 0, len(h._upper_bounds)
    number, family = memo.number, None
    text_created: list[str] = []
    for values, child in children.items():
        text_names, om_names = memo.histogram_series(h, values)
        names = om_names if openmetrics else text_names
        acc = 0.0
        for i in range(buckets):
            bucket = child._buckets[i]
            acc += bucket.get()
            exemplar = bucket.get_exemplar() if openmetrics else None
            if exemplar:
                family = family or Metric(h._name, h._documentation, "histogram", h._unit)
                sample = Sample(h._name + "_bucket", {}, acc, None, exemplar)
                out.append(f"{names[i]} {number(acc)}{_compose_exemplar_string(family, sample, exemplar)}\n")
            else:
                out.append(f"{names[i]} {number(acc)}\n")
        out.append(f"{names[buckets]} {number(acc)}\n")
        if with_sum:
            out.append(f"{names[buckets + 1]} {number(child._sum.get())}\n")
        if created:
            line = f"{names[buckets + 2]} {number(child._created)}\n"
            (out if openmetrics else text_created).append(line)
    if text_created:
        created_name = memo.name(h._name + "_created")
        out.append(f"# HELP {created_name} {doc}\n# TYPE {created_name} gauge\n")
        out.extend(text_created)
    memo.forget_children(h, len(children))
    return len(children) * (buckets + 3)
