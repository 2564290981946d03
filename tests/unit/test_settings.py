"""Settings from the environment (pydantic): defaults, bind addresses with IPv6 brackets, and a
bad value refused with an error naming the variable."""
from __future__ import annotations

import ipaddress

import pytest

from baton import settings


def test_defaults() -> None:
    s = settings.Settings.from_env({"BATON_INSTANCE_ID": "op-1"})
    assert (s.identity, s.namespaces, s.lease_seconds, s.workers, s.log_level) == ("op-1", (), 15, 8, "INFO")
    # Every address of both families (asyncio binds 0.0.0.0 and :: for an empty host).
    assert s.metrics_bind == ("", 8080) and s.health_bind == ("", 8081)
    assert s.probe_allowed == (ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0"))
    assert s.watch_configmaps and s.watch_secrets and s.system_namespace == "default"


@pytest.mark.parametrize("text,bind", [
    ("127.0.0.1:8080", ("127.0.0.1", 8080)),
    ("0.0.0.0:8080", ("0.0.0.0", 8080)),
    ("[::1]:18090", ("::1", 18090)),
    ("[::]:8080", ("::", 8080)),
    (":8080", ("", 8080)),
    ("8080", ("", 8080)),
    ("localhost:9000", ("localhost", 9000)),
])
def test_bind_addresses(text: str, bind: tuple[str, int]) -> None:
    assert settings.parse_bind(text) == bind
    assert settings.Settings.from_env({"BATON_METRICS_BIND": text}).metrics_bind == bind


@pytest.mark.parametrize("text", ["::1:8080", "[::1]8080", "[nothost]:80", "host:http", "host:70000", "[::1]:"])
def test_bad_bind_addresses_name_the_variable(text: str) -> None:
    with pytest.raises(settings.SettingsError) as err:
        settings.Settings.from_env({"BATON_HEALTH_BIND": text})
    assert err.value.variable == "BATON_HEALTH_BIND" and repr(text) in err.value.problem


@pytest.mark.parametrize("env,variable", [
    ({"BATON_LEASE_SECONDS": "abc"}, "BATON_LEASE_SECONDS"),
    ({"BATON_LEASE_SECONDS": "2"}, "BATON_LEASE_SECONDS"),
    ({"BATON_BACKOFF_BASE_SECONDS": "soon"}, "BATON_BACKOFF_BASE_SECONDS"),
    ({"BATON_BACKOFF_BASE_SECONDS": "nan"}, "BATON_BACKOFF_BASE_SECONDS"),
    ({"BATON_SHUTDOWN_GRACE_SECONDS": "-1"}, "BATON_SHUTDOWN_GRACE_SECONDS"),
    ({"BATON_PROBE_ALLOWED_CIDRS": "10.0.0.0/8,pods"}, "BATON_PROBE_ALLOWED_CIDRS"),
    ({"BATON_LOG_LEVEL": "loud"}, "BATON_LOG_LEVEL"),
    ({"BATON_WATCH_SECRETS": "maybe"}, "BATON_WATCH_SECRETS"),
    ({"BATON_WORKERS": "0"}, "BATON_WORKERS"),
    ({"BATON_SHARD_RANGES": "3"}, "BATON_SHARD_RANGES"),
    ({"BATON_SHARD_RANGES": "512"}, "BATON_SHARD_RANGES"),
    ({"BATON_SHARD_RANGES": "-2"}, "BATON_SHARD_RANGES"),
])
def test_a_bad_value_names_the_variable_and_what_was_given(env: dict[str, str], variable: str) -> None:
    with pytest.raises(settings.SettingsError) as err:
        settings.Settings.from_env({**env, "BATON_WORKERS": env.get("BATON_WORKERS", "4")})
    assert err.value.variable == variable, err.value
    assert repr(env[variable]) in err.value.problem, err.value.problem
    assert str(err.value).startswith(variable + ": ")


def test_empty_is_unset_except_for_the_cidr_lists() -> None:
    s = settings.Settings.from_env({"BATON_LEASE_SECONDS": "", "BATON_LOG_LEVEL": " ", "BATON_PROBE_ALLOWED_CIDRS": ""})
    assert s.lease_seconds == 15 and s.log_level == "INFO" and s.probe_allowed == ()
    assert settings.Settings.from_env({"BATON_LOG_LEVEL": "debug"}).log_level == "DEBUG"


def test_gateway_admin_address_brackets_an_ipv6_pod_ip() -> None:
    g = settings.GatewaySettings.from_env({"POD_IP": "fd00::5"})
    assert g.admin_bind == ("", 8082) and g.admin_address == "[fd00::5]:8082"
    g = settings.GatewaySettings.from_env({"BATON_GATEWAY_ADMIN_BIND": "[::1]:9001"})
    assert g.admin_bind == ("::1", 9001) and g.admin_address == "[::1]:9001"
    with pytest.raises(settings.SettingsError, match="BATON_GATEWAY_LEASE_SECONDS"):
        settings.GatewaySettings.from_env({"BATON_GATEWAY_LEASE_SECONDS": "abc"})


def test_shard_ranges_are_off_or_a_power_of_two_up_to_the_label_buckets() -> None:
    for good in ("0", "1", "2", "16", "256"):
        assert settings.Settings.from_env({"BATON_SHARD_RANGES": good}).shard_ranges == int(good)
    with pytest.raises(settings.SettingsError) as err:
        settings.Settings.from_env({"BATON_SHARD_RANGES": "12"})
    assert "power of two up to 256" in err.value.problem, err.value.problem
