"""GatewaySettings from the environment: defaults, and errors that name the variable."""

from __future__ import annotations

import ipaddress

import pytest

from baton import settings


def test_defaults_never_allow_loopback_link_local_or_public() -> None:
    s = settings.GatewaySettings.from_env({"POD_IP": "10.1.2.3"})
    assert s.bind == ("", 8000) and s.admin_bind == ("", 8082)
    assert s.admin_address == "10.1.2.3:8082" and s.system_namespace == "default"
    assert s.lease_seconds == 15 and s.cluster_domain == "cluster.local"
    for ip in ("127.0.0.1", "169.254.169.254", "8.8.8.8", "::1"):
        addr = ipaddress.ip_address(ip)
        assert not any(addr.version == n.version and addr in n for n in s.allowed), ip
    assert any(ipaddress.ip_address("10.244.1.5") in n for n in s.allowed if n.version == 4)


def test_explicit_values() -> None:
    s = settings.GatewaySettings.from_env({
        "BATON_GATEWAY_BIND": "127.0.0.1:9000", "BATON_GATEWAY_ADMIN_BIND": "127.0.0.1:9001",
        "BATON_GATEWAY_ALLOWED_CIDRS": "127.0.0.0/8", "BATON_GATEWAY_LEASE_SECONDS": "6",
        "BATON_SYSTEM_NAMESPACE": "baton", "BATON_CLUSTER_DOMAIN": "corp.example.", "BATON_INSTANCE_ID": "gw-1"})
    assert s.admin_address == "127.0.0.1:9001" and s.allowed == (ipaddress.ip_network("127.0.0.0/8"),)
    assert (s.lease_seconds, s.system_namespace, s.cluster_domain, s.identity) == (6, "baton", "corp.example", "gw-1")


@pytest.mark.parametrize("env,name", [
    ({"BATON_GATEWAY_LEASE_SECONDS": "2"}, "BATON_GATEWAY_LEASE_SECONDS"),
    ({"BATON_GATEWAY_ALLOWED_CIDRS": "not-a-cidr"}, "BATON_GATEWAY_ALLOWED_CIDRS"),
    ({"BATON_GATEWAY_MAX_HELD": "0"}, "BATON_GATEWAY_MAX_HELD"),
])
def test_bad_values_name_the_variable(env: dict[str, str], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        settings.GatewaySettings.from_env(env)
