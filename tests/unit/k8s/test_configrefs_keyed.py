"""configrefs: digests of referenced ConfigMap/Secret data are keyed (HMAC-SHA256 under the
installation's key), and readability alone never changes the config digest."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from baton.k8s import configrefs

pytestmark = pytest.mark.unit

KEY = b"k" * 32
OTHER_KEY = b"o" * 32
PIN = {"data": {"pin": "MTIzNA=="}}  # base64 of "1234"
REF = ("Secret", "db", False)


def old_data_digest(obj: dict[str, Any]) -> str:
    """The digest of the unkeyed scheme (configrefs.data_digest before the key)."""
    content = json.dumps({"data": obj.get("data") or {}, "binaryData": obj.get("binaryData") or {}}, sort_keys=True)
    return hashlib.sha256(content.encode()).hexdigest()


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(configrefs, "_key", None)
    configrefs.install_key(KEY)


def test_data_digest_is_keyed_stable_and_key_dependent() -> None:
    d = configrefs.data_digest(PIN)
    assert d == configrefs.data_digest({"data": {"pin": "MTIzNA=="}, "metadata": {"name": "x"}})  # data only
    assert d == configrefs.data_digest(PIN, key=KEY)
    assert d != configrefs.data_digest(PIN, key=OTHER_KEY)
    assert d != old_data_digest(PIN)
    assert d != configrefs.data_digest({"data": {"pin": "MTIzNQ=="}})
    # Nothing about the data is learnt without the key: the unkeyed guess of every 4-digit PIN misses.
    import base64
    guesses = {old_data_digest({"data": {"pin": base64.b64encode(f"{n:04d}".encode()).decode()}}) for n in range(10000)}
    assert d not in guesses and old_data_digest(PIN) in guesses


def test_parts_are_keyed_and_longer_than_the_unkeyed_ones() -> None:
    p = configrefs.part("Secret/db", configrefs.data_digest(PIN))
    assert len(p) == 20 and configrefs.is_part(p)
    assert p != configrefs.part("Secret/db", configrefs.data_digest(PIN), key=OTHER_KEY)
    old = hashlib.sha256(f"Secret/db:{old_data_digest(PIN)}".encode()).hexdigest()[:16]
    assert not configrefs.is_part(old)
    assert configrefs.is_part(configrefs.UNSEEN)


def test_no_key_installed_is_an_error_never_an_unkeyed_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(configrefs, "_key", None)
    with pytest.raises(RuntimeError, match="no digest key"):
        configrefs.data_digest(PIN)


def test_load_key_names_the_setting(tmp_path: Path) -> None:
    with pytest.raises(configrefs.DigestKeyError, match="BATON_DIGEST_KEY_FILE: cannot read"):
        configrefs.load_key(str(tmp_path / "missing"))
    short = tmp_path / "short"
    short.write_bytes(b"abc\n")
    with pytest.raises(configrefs.DigestKeyError, match="holds 3 bytes, at least 32"):
        configrefs.load_key(str(short))
    good = tmp_path / "good"
    good.write_bytes(KEY + b"\n")
    assert configrefs.load_key(str(good)) == KEY


def read(found: str, before: dict[str, str] | None) -> tuple[str, list[str], list[tuple[str, str]], Any]:
    """read_config_digest with the object's read (configrefs._found: the view, the cache, the GET)
    answering `found`: a digest, ABSENT or UNREADABLE."""
    async def _found(*_args: Any) -> str:
        return found

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(configrefs, "_found", _found)
        digest, _missing, unreadable, each, adopt = asyncio.run(configrefs.read_config_digest(
            "ns", [REF], None, before=before))
    return digest, unreadable, each, adopt


def test_readability_never_changes_the_digest() -> None:
    data = configrefs.data_digest(PIN)
    readable, unreadable, each, adopt = read(data, None)
    assert unreadable == [] and adopt is None
    parts = dict(each)
    # readable -> unreadable -> readable, no data change: one digest throughout, nothing to adopt.
    revoked, unreadable, each2, adopt = read(configrefs.UNREADABLE, parts)
    assert (revoked, unreadable, each2, adopt) == (readable, ["Secret/db"], each, None)
    assert read(data, dict(each2))[0] == readable
    # A data change while unreadable is not seen then; once readable again, it is.
    changed = configrefs.data_digest({"data": {"pin": "NDMyMQ=="}})
    assert read(configrefs.UNREADABLE, parts)[0] == readable
    assert read(changed, parts)[0] != readable


def test_first_sight_unreadable_is_unseen_then_adopted_without_a_digest_change() -> None:
    first, unreadable, each, adopt = read(configrefs.UNREADABLE, None)
    assert unreadable == ["Secret/db"] and each == [("Secret/db", configrefs.UNSEEN)] and adopt is None
    # Readable later: the digest stays (no handoff); its value now is offered for adoption.
    data = configrefs.data_digest(PIN)
    later, unreadable, each2, adopt = read(data, dict(each))
    assert later == first and unreadable == [] and each2 == each
    plain, _, plain_each, _ = read(data, None)
    assert adopt == (plain, plain_each)
    # Once adopted (the parts recorded), a data change is seen.
    assert read(data, dict(adopt[1]))[0] == adopt[0]
    assert read(configrefs.data_digest({"data": {"pin": "NDMyMQ=="}}), dict(adopt[1]))[0] != adopt[0]


def test_an_unkeyed_part_of_the_older_scheme_is_never_kept() -> None:
    old = hashlib.sha256(f"Secret/db:{old_data_digest(PIN)}".encode()).hexdigest()[:16]
    digest, _, each, _ = read(configrefs.UNREADABLE, {"Secret/db": old})
    assert each == [("Secret/db", configrefs.UNSEEN)]
    assert old not in digest
