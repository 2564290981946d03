#!/usr/bin/env python3
"""Turn the PrometheusRule objects of a rendered chart into a plain Prometheus rules file.

    helm template baton charts/baton -n baton-system --set prometheusRule.enabled=true \
      --kube-version 1.36.3 | python3 hack/extract-alert-rules.py > baton-rules.yaml
    promtool check rules baton-rules.yaml
    promtool test rules tests/alerts/baton-alerts.test.yaml   # after copying it beside the rules

Reads multi-document YAML on stdin (or the file named as the first argument); writes
`{groups: [...]}` with the groups of every PrometheusRule found. Exits 1 if there is none.
"""
from __future__ import annotations

import sys

import yaml


def extract(text: str) -> dict[str, object]:
    groups: list[object] = []
    for doc in yaml.safe_load_all(text):
        if isinstance(doc, dict) and doc.get("kind") == "PrometheusRule":
            groups.extend((doc.get("spec") or {}).get("groups") or [])
    return {"groups": groups}


def main(argv: list[str]) -> int:
    text = open(argv[1]).read() if len(argv) > 1 else sys.stdin.read()
    rules = extract(text)
    if not rules["groups"]:
        print("no PrometheusRule in the input (render with prometheusRule.enabled=true)", file=sys.stderr)
        return 1
    yaml.safe_dump(rules, sys.stdout, sort_keys=False, width=1000)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
