"""Write deploy/k8s/prometheusrule.yaml from deploy/prometheus/rules.yml (one source of truth).

    python deploy/k8s/gen_prometheusrule.py          # rewrite the file
    python deploy/k8s/gen_prometheusrule.py --check  # exit 1 when it is stale

tests/deploy/test_manifests.py fails when the checked-in file differs from this output.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
RULES = HERE.parent / "prometheus" / "rules.yml"
OUT = HERE / "prometheusrule.yaml"
HEADER = (
    "# Generated from deploy/prometheus/rules.yml by deploy/k8s/gen_prometheusrule.py: do not edit.\n"
    "# The Prometheus Operator loads it into every Prometheus whose ruleSelector matches the labels.\n"
)


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def render() -> str:
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    doc = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "loopwarden",
            "namespace": "loopwarden",
            "labels": {"app.kubernetes.io/name": "loopwarden", "role": "alert-rules"},
        },
        "spec": {"groups": groups},
    }
    return HEADER + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=1000, allow_unicode=True)


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        return 0 if OUT.read_text(encoding="utf-8") == text else 1
    OUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
