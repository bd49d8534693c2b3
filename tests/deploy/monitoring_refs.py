"""What the committed deploy/monitoring/ files query, and what a real /metrics page serves.

Shared by tests/deploy/test_monitoring.py (names against the verified sets) and the docker tests in
tests/builds/ (names against a served image's real /metrics): both read the generated files, not the
generator, so what is checked is what an operator applies.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from xcforge.config.matrix import load_matrix
from xcforge.deploy import monitoring

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "deploy" / "monitoring"


def target_docs(target: str) -> dict[str, dict]:
    """The documents of deploy/monitoring/<target>.yaml by kind."""
    docs = yaml.safe_load_all((MONITORING / f"{target}.yaml").read_text(encoding="utf-8"))
    return {d["kind"]: d for d in docs}


def adapter_series() -> dict[str, str]:
    """prometheus-adapter's custom metric name → the Prometheus series it is made from."""
    values = yaml.safe_load((MONITORING / monitoring.ADAPTER_VALUES).read_text(encoding="utf-8"))
    out = {}
    for rule in values["rules"]["custom"]:
        (series,) = re.findall(r'__name__="([^"]+)"', rule["seriesQuery"])
        out[rule["name"]["as"]] = series
    return out


def referenced_series(target: str) -> set[str]:
    """Every series the target's dashboard, engine alert rules and HPA read (device rules excluded: they
    read the vendor exporter, not the server)."""
    matrix = load_matrix(REPO / "matrix.yaml")
    dialect = monitoring.dialect_of(matrix.target(target))
    docs = target_docs(target)
    names: set[str] = set()
    for group in docs["PrometheusRule"]["spec"]["groups"]:
        if group["name"].endswith(f".{dialect.name}"):
            for rule in group["rules"]:
                names |= monitoring.metric_names(str(rule["expr"]))
    adapter = adapter_series()
    for metric in docs["HorizontalPodAutoscaler"]["spec"]["metrics"]:
        names.add(adapter[metric["pods"]["metric"]["name"]])
    board = json.loads((MONITORING / "grafana" / f"{dialect.name}.json").read_text(encoding="utf-8"))
    for query in monitoring.dashboard_queries(board):
        names |= monitoring.metric_names(query)
    return names


def served_series(text: str) -> set[str]:
    """Every sample name on a /metrics page (prometheus-client's text parser: a histogram family's
    _bucket/_sum/_count samples, a counter's _total)."""
    from prometheus_client.parser import text_string_to_metric_families

    return {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}


def missing_series(target: str, text: str) -> list[str]:
    """The series monitoring reads for `target` that this /metrics page does not serve."""
    return sorted(referenced_series(target) - served_series(text))
