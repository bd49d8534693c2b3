"""deploy/monitoring/: ServiceMonitor, PrometheusRule, queue HPA, vendor exporter monitors and dashboards.

Fast (no docker). Standard kinds are checked with kubernetes-validate; the prometheus-operator kinds
against a JSON schema written from its CRDs; every PromQL metric name against the verified set of the
target's dialect (or its exporter's names from the matrix). tests/builds/ then scrapes a served image's
real /metrics for the same names (tests/deploy/monitoring_refs.py).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.deploy import monitoring_refs as refs
from xcforge.config.matrix import DeviceExporter, load_matrix
from xcforge.deploy import monitoring
from xcforge.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[2]
MATRIX = load_matrix(REPO_ROOT / "matrix.yaml")
TARGETS = list(MATRIX.targets)
MONITORING = REPO_ROOT / "deploy" / "monitoring"
# Names upstream moved away from: never queried (vLLM renamed the first kv_cache_usage_perc, the second
# inter_token_latency_seconds; upstream's own Grafana example still reads gpu_cache_usage_perc).
REMOVED = ("gpu_cache_usage_perc", "time_per_output_token_seconds")

# ---------------------------------------------------------------- prometheus-operator CRD schemas
# Written from prometheus-operator/prometheus-operator example/prometheus-operator-crd/
# monitoring.coreos.com_{servicemonitors,podmonitors,prometheusrules}.yaml (v1): field names, the
# duration pattern, ServiceMonitor spec requires endpoints and selector, a rule requires expr, a group
# name. additionalProperties is false where the CRD lists the properties, so a typo fails here as the
# API server's pruning would silently drop it there.
_DURATION = {
    "type": "string",
    "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
}
_STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
_METADATA = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", "maxLength": 253},
        "namespace": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
        "labels": _STRINGS,
        "annotations": _STRINGS,
    },
    "additionalProperties": False,
}
_LABEL_SELECTOR = {
    "type": "object",
    "properties": {"matchLabels": _STRINGS, "matchExpressions": {"type": "array"}},
    "additionalProperties": False,
}
_NAMESPACE_SELECTOR = {
    "type": "object",
    "properties": {"any": {"type": "boolean"}, "matchNames": {"type": "array", "items": {"type": "string"}}},
    "additionalProperties": False,
}
_ENDPOINT = {
    "type": "object",
    "required": ["port"],
    "properties": {
        "port": {"type": "string"},
        "path": {"type": "string", "pattern": "^/"},
        "interval": _DURATION,
        "scrapeTimeout": _DURATION,
        "scheme": {"enum": ["http", "https", "HTTP", "HTTPS"]},
        "honorLabels": {"type": "boolean"},
    },
    "additionalProperties": False,
}


def _crd(kind: str, spec: dict) -> dict:
    return {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": kind},
            "metadata": _METADATA,
            "spec": spec,
        },
        "additionalProperties": False,
    }


_RULE = {
    "type": "object",
    "required": ["expr"],
    "properties": {
        "alert": {"type": "string", "minLength": 1},
        "record": {"type": "string", "pattern": r"^[a-zA-Z_:][a-zA-Z0-9_:]*$"},
        "expr": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        "for": _DURATION,
        "keep_firing_for": _DURATION,
        "labels": _STRINGS,
        "annotations": _STRINGS,
    },
    "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],  # "Only one of `record` and `alert`"
    "additionalProperties": False,
}
SCHEMAS = {
    "ServiceMonitor": _crd(
        "ServiceMonitor",
        {
            "type": "object",
            "required": ["endpoints", "selector"],
            "properties": {
                "selector": _LABEL_SELECTOR,
                "namespaceSelector": _NAMESPACE_SELECTOR,
                "endpoints": {"type": "array", "minItems": 1, "items": _ENDPOINT},
                "jobLabel": {"type": "string"},
            },
            "additionalProperties": False,
        },
    ),
    "PodMonitor": _crd(
        "PodMonitor",
        {
            "type": "object",
            "required": ["selector", "podMetricsEndpoints"],
            "properties": {
                "selector": _LABEL_SELECTOR,
                "namespaceSelector": _NAMESPACE_SELECTOR,
                "podMetricsEndpoints": {"type": "array", "minItems": 1, "items": _ENDPOINT},
                "jobLabel": {"type": "string"},
            },
            "additionalProperties": False,
        },
    ),
    "PrometheusRule": _crd(
        "PrometheusRule",
        {
            "type": "object",
            "properties": {
                "groups": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {
                            "name": {"type": "string", "minLength": 1},
                            "interval": _DURATION,
                            "labels": _STRINGS,
                            "limit": {"type": "integer"},
                            "query_offset": _DURATION,
                            "rules": {"type": "array", "items": _RULE},
                        },
                        "additionalProperties": False,
                    },
                }
            },
            "additionalProperties": False,
        },
    ),
}


def _validate(doc: dict) -> None:
    kind = doc["kind"]
    if kind in SCHEMAS:
        jsonschema.validate(doc, SCHEMAS[kind])
        return
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate not installed")
    kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


def _docs(name: str) -> list[dict]:
    return list(yaml.safe_load_all((MONITORING / f"{name}.yaml").read_text(encoding="utf-8")))


# --------------------------------------------------------------------------- the committed files


def test_committed_monitoring_files_match_the_matrix():
    stale = [r for r in monitoring.write_or_check_monitoring(MATRIX, REPO_ROOT, check=True) if r.status != "unchanged"]
    assert not stale, f"run `python build.py deploy --examples` and commit: {[(str(r.path), r.status) for r in stale]}"
    assert sorted(p.stem for p in MONITORING.glob("*.yaml") if p.name != monitoring.ADAPTER_VALUES) == sorted(TARGETS)


def test_drift_is_detected_and_stale_files_removed(tmp_path):
    assert {r.status for r in monitoring.write_or_check_monitoring(MATRIX, tmp_path, check=True)} == {"missing"}
    monitoring.write_or_check_monitoring(MATRIX, tmp_path)
    assert {r.status for r in monitoring.write_or_check_monitoring(MATRIX, tmp_path, check=True)} == {"unchanged"}
    cpu = tmp_path / "deploy" / "monitoring" / "cpu.yaml"
    cpu.write_text(cpu.read_text() + "# edited\n")
    (tmp_path / "deploy" / "monitoring" / "grafana" / "gone.json").write_text("{}")
    stale = {r.path.name: r.status for r in monitoring.write_or_check_monitoring(MATRIX, tmp_path, check=True)}
    assert stale["cpu.yaml"] == "stale" and stale["gone.json"] == "stale"
    monitoring.write_or_check_monitoring(MATRIX, tmp_path)
    assert not (tmp_path / "deploy" / "monitoring" / "grafana" / "gone.json").exists()


def test_the_examples_command_writes_and_checks_monitoring_too(tmp_path):
    from xcforge.cli import main

    (tmp_path / "docs").mkdir()
    from xcforge.deploy.manifests import DOC_BEGIN, DOC_END

    (tmp_path / "docs" / "operators.md").write_text(f"x\n{DOC_BEGIN}\n{DOC_END}\n")
    argv = ["deploy", "--examples", "--root", str(tmp_path), "--matrix", str(REPO_ROOT / "matrix.yaml")]
    assert main([*argv, "--check"]) == 4
    assert main(argv) == 0
    assert (tmp_path / "deploy" / "monitoring" / "grafana" / "vllm.json").is_file()
    assert main([*argv, "--check"]) == 0


@pytest.mark.parametrize("name", TARGETS)
def test_every_document_validates(name):
    docs = _docs(name)
    kinds = [d["kind"] for d in docs]
    assert kinds[:3] == ["ServiceMonitor", "PrometheusRule", "HorizontalPodAutoscaler"]
    for doc in docs:
        _validate(doc)


def test_the_crd_schemas_catch_mistakes():
    doc = _docs("cpu")[0]
    doc["spec"]["endpoints"][0]["intervall"] = "15s"
    with pytest.raises(jsonschema.ValidationError):
        _validate(doc)
    rule = _docs("cpu")[1]
    rule["spec"]["groups"][0]["rules"][0]["for"] = "ten minutes"
    with pytest.raises(jsonschema.ValidationError):
        _validate(rule)
    both = _docs("cpu")[1]
    both["spec"]["groups"][0]["rules"][0]["record"] = "x:y"
    with pytest.raises(jsonschema.ValidationError):
        _validate(both)


@pytest.mark.parametrize("name", TARGETS)
def test_the_service_monitor_selects_the_example_service_on_its_port(name):
    example = {d["kind"]: d for d in yaml.safe_load_all((REPO_ROOT / "deploy/examples" / f"{name}.yaml").read_text())}
    monitor = refs.target_docs(name)["ServiceMonitor"]
    service = example["Service"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"


@pytest.mark.parametrize("name", TARGETS)
def test_the_hpa_replaces_the_example_one_and_scales_on_the_queue(name):
    example = {d["kind"]: d for d in yaml.safe_load_all((REPO_ROOT / "deploy/examples" / f"{name}.yaml").read_text())}
    hpa = refs.target_docs(name)["HorizontalPodAutoscaler"]
    assert hpa["metadata"]["name"] == example["HorizontalPodAutoscaler"]["metadata"]["name"]
    assert hpa["spec"]["scaleTargetRef"] == example["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods" and metric["pods"]["target"]["type"] == "AverageValue"
    dialect = monitoring.dialect_of(MATRIX.target(name))
    assert refs.adapter_series()[metric["pods"]["metric"]["name"]] == dialect.queue
    if dialect is monitoring.VLLM:
        assert dialect.queue == "vllm:num_requests_waiting"


# --------------------------------------------------------------------------- metric names


@pytest.mark.parametrize("name", TARGETS)
def test_rules_dashboard_and_hpa_name_only_verified_series(name):
    target = MATRIX.target(name)
    dialect = monitoring.dialect_of(target)
    names = refs.referenced_series(name)
    assert names and names <= monitoring.series_names(dialect), sorted(names - monitoring.series_names(dialect))
    assert not names & dialect.forbidden
    exporter = target.runtime.device_exporter
    for group in refs.target_docs(name)["PrometheusRule"]["spec"]["groups"]:
        if group["name"].endswith(f".{dialect.name}"):
            continue
        assert exporter is not None, group["name"]
        for rule in group["rules"]:
            assert monitoring.metric_names(rule["expr"]) <= set(exporter.metrics.values())


def test_the_vllm_dashboard_covers_the_issue_metrics_and_never_the_removed_ones():
    board = json.loads((MONITORING / "grafana" / "vllm.json").read_text())
    families = {
        monitoring.family_of(n, monitoring.VLLM)
        for q in monitoring.dashboard_queries(board)
        for n in monitoring.metric_names(q)
    }
    assert {
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:request_queue_time_seconds",
        "vllm:prompt_tokens",
        "vllm:generation_tokens",
    } <= families
    for path in MONITORING.rglob("*"):
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            assert not any(removed in text for removed in REMOVED), path


def test_the_llamacpp_dashboard_reads_llamacpp_names_only():
    board = json.loads((MONITORING / "grafana" / "llamacpp.json").read_text())
    names = {n for q in monitoring.dashboard_queries(board) for n in monitoring.metric_names(q)}
    assert names and all(n.startswith("llamacpp:") for n in names)
    assert {"llamacpp:requests_deferred", "llamacpp:tokens_predicted_total"} <= names


def test_dashboards_are_grafana_json_with_a_datasource_variable():
    for dialect in monitoring.used_dialects(MATRIX):
        board = json.loads((MONITORING / "grafana" / f"{dialect.name}.json").read_text())
        assert board["uid"] == f"xcforge-{dialect.name}" and board["panels"]
        assert board["templating"]["list"][0] == {
            "name": "datasource",
            "label": "Prometheus",
            "type": "datasource",
            "query": "prometheus",
            "current": {},
        }
        assert len({p["id"] for p in board["panels"]}) == len(board["panels"])
        for panel in board["panels"]:
            assert panel["datasource"]["uid"] == "${datasource}" and panel["targets"]


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("sum by (pod) (vllm:num_requests_running{SEL})", {"vllm:num_requests_running"}),
        (
            'histogram_quantile(0.95, sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket{a="b"}[5m])))',
            {"vllm:e2e_request_latency_seconds_bucket"},
        ),
        ("rate(a:b_total[5m]) == 0 and on (namespace, pod) max by (pod) (c > 0)", {"a:b_total", "c"}),
        ('label_values(vllm:num_requests_running{namespace="$namespace"}, service)', {"vllm:num_requests_running"}),
        ("absent(npu_chip_info_utilization)", {"npu_chip_info_utilization"}),
        ("npu_chip_info_health_status != 1", {"npu_chip_info_health_status"}),
    ],
)
def test_metric_names_of_promql(expr, names):
    assert monitoring.metric_names(expr) == names


def test_series_and_families():
    series = monitoring.series_names(monitoring.VLLM)
    assert {"vllm:prompt_tokens_total", "vllm:time_to_first_token_seconds_count", "vllm:kv_cache_usage_perc"} <= series
    assert "vllm:prompt_tokens" not in series
    assert monitoring.family_of("vllm:inter_token_latency_seconds_bucket", monitoring.VLLM) == (
        "vllm:inter_token_latency_seconds"
    )


def test_a_query_on_a_removed_name_is_refused_before_anything_is_written():
    panel = monitoring.Panel("old", "percentunit", (("x", "max(vllm:gpu_cache_usage_perc{SEL})"),))
    broken = dataclasses.replace(monitoring.VLLM, panels=(*monitoring.VLLM.panels, panel))
    with pytest.raises(ConfigError, match="gpu_cache_usage_perc"):
        monitoring.dashboard(broken)


def test_a_target_without_a_known_dialect_is_a_config_error():
    target = MATRIX.target("cpu")
    odd = target.model_copy(update={"smoke": target.smoke.model_copy(update={"metrics_prefix": "sglang:"})})
    with pytest.raises(ConfigError, match="sglang:"):
        monitoring.dialect_of(odd)


# --------------------------------------------------------------------------- device exporters


@pytest.mark.parametrize("name", TARGETS)
def test_the_device_exporter_is_wired_in_from_the_matrix(name):
    exporter = MATRIX.target(name).runtime.device_exporter
    docs = refs.target_docs(name)
    groups = [g["name"] for g in docs["PrometheusRule"]["spec"]["groups"]]
    if exporter is None:
        assert len(groups) == 1 and "PodMonitor" not in docs
        return
    assert groups[1].endswith(f".{exporter.name}")
    # Exactly one way to scrape it: the vendor's own ServiceMonitor, or xcforge's PodMonitor.
    if exporter.vendor_monitor:
        assert "PodMonitor" not in docs
    else:
        monitor = docs["PodMonitor"]
        assert monitor["metadata"]["namespace"] == exporter.pods.namespace
        assert monitor["spec"]["selector"]["matchLabels"] == exporter.pods.selector
        assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == exporter.pods.port
    header = (MONITORING / f"{name}.yaml").read_text().split("\n---", 1)[0]
    assert f"port {exporter.port_number}" in header


def test_the_vendors_exporters_are_the_published_ones():
    by_resource = {
        t.runtime.k8s_resource: t.runtime.device_exporter for t in MATRIX.targets.values() if t.runtime.device_exporter
    }
    assert by_resource["nvidia.com/gpu"].metrics["utilization"] == "DCGM_FI_DEV_GPU_UTIL"
    assert by_resource["nvidia.com/gpu"].port_number == 9400
    assert by_resource["huawei.com/Ascend910"].metrics["utilization"] == "npu_chip_info_utilization"
    assert by_resource["huawei.com/Ascend910"].pods.port == "http"
    assert by_resource["cambricon.com/mlu"].port_number == 30108


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"metrics": {"utilization": "x"}}, "exactly one of vendor_monitor"),
        (
            {
                "metrics": {"utilization": "x"},
                "vendor_monitor": "v",
                "pods": {"namespace": "n", "selector": {"a": "b"}, "port": "p"},
            },
            "exactly one of vendor_monitor",
        ),
        ({"metrics": {"utilization": "x", "health": "h"}, "vendor_monitor": "v"}, "healthy_value"),
        ({"metrics": {"power": "x"}, "vendor_monitor": "v"}, "utilization is required"),
        ({"metrics": {"utilization": "not a name"}, "vendor_monitor": "v"}, "Prometheus metric name"),
    ],
)
def test_a_malformed_device_exporter_is_refused(body, message):
    with pytest.raises(ValueError, match=message):
        DeviceExporter.model_validate({"name": "e", "source": "s", "port_number": 1, **body})


# --------------------------------------------------------------------------- the scrape helpers themselves


def _vllm_page() -> str:
    """A /metrics page as vLLM's PrometheusStatLogger writes it (prometheus_client, labels model_name/engine)."""
    prometheus_client = pytest.importorskip("prometheus_client")
    registry = prometheus_client.CollectorRegistry()
    labels = ["model_name", "engine"]
    for family, kind in monitoring.VLLM.families.items():
        extra = ["finished_reason"] if family == "vllm:request_success" else []
        cls = {"gauge": prometheus_client.Gauge, "counter": prometheus_client.Counter}.get(kind)
        metric = (cls or prometheus_client.Histogram)(family, "doc", labels + extra, registry=registry)
        child = metric.labels("tiny", "0", *(["stop"] if extra else []))
        (child.observe if kind == "histogram" else child.inc)(1)
    return prometheus_client.generate_latest(registry).decode()


def test_a_vllm_page_with_every_family_covers_the_cpu_target():
    assert refs.missing_series("cpu", _vllm_page()) == []
    assert "vllm:kv_cache_usage_perc" in refs.missing_series("cpu", _vllm_page().replace("kv_cache_usage", "x"))


def test_a_llamacpp_page_as_to_metrics_writes_it_covers_feiteng():
    pytest.importorskip("prometheus_client")
    lines = []
    for family, kind in monitoring.LLAMACPP.families.items():
        name = family + ("_total" if kind == "counter" else "")
        lines += [f"# HELP {name} doc", f"# TYPE {name} {kind}", f"{name} 1"]
    assert refs.missing_series("feiteng", "\n".join(lines) + "\n") == []
    assert refs.missing_series("feiteng", "") == sorted(refs.referenced_series("feiteng"))
