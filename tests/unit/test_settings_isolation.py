"""BATON_ISOLATE_TOOL_PODS and BATON_OPERATOR_POD_LABELS (docs/gateway.md, "Closing the direct
path"): parsed, bounds-checked, and refused naming the variable."""

from __future__ import annotations

import pytest

from baton import settings


def test_off_by_default_and_labels_parsed() -> None:
    default = settings.Settings.from_env({})
    assert not default.isolate_tool_pods and default.operator_pod_labels == ()
    on = settings.Settings.from_env({"BATON_ISOLATE_TOOL_PODS": "true",
                                     "BATON_OPERATOR_POD_LABELS": " app.kubernetes.io/name=baton, app.kubernetes.io/instance=rel "})
    assert on.isolate_tool_pods
    assert on.operator_pod_labels == (("app.kubernetes.io/name", "baton"), ("app.kubernetes.io/instance", "rel"))


@pytest.mark.parametrize("env,variable", [
    ({"BATON_ISOLATE_TOOL_PODS": "true"}, "BATON_OPERATOR_POD_LABELS"),
    ({"BATON_ISOLATE_TOOL_PODS": "maybe"}, "BATON_ISOLATE_TOOL_PODS"),
    ({"BATON_OPERATOR_POD_LABELS": "app"}, "BATON_OPERATOR_POD_LABELS"),
    ({"BATON_OPERATOR_POD_LABELS": "a=b=c"}, "BATON_OPERATOR_POD_LABELS"),
    ({"BATON_OPERATOR_POD_LABELS": "-bad=x"}, "BATON_OPERATOR_POD_LABELS"),
    ({"BATON_OPERATOR_POD_LABELS": "k=" + "v" * 64}, "BATON_OPERATOR_POD_LABELS"),
])
def test_bad_values_name_the_variable(env: dict[str, str], variable: str) -> None:
    with pytest.raises(settings.SettingsError) as err:
        settings.Settings.from_env(env)
    assert err.value.variable == variable
