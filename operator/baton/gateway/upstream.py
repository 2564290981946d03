"""Dialling a pod through aiohttp's client: by UID (the name `<pod uid>.<POD_DOMAIN>` resolves
to the IP the API gave for that pod, and nothing else resolves), with the headers as a
multidict; and the answer as the call path reads it (`Answer`), from either client. Does no I/O
of its own (aiohttp's connector calls the resolver; `AiohttpAnswer` reads through aiohttp).
"""

from __future__ import annotations

import collections
import socket
from typing import Protocol

import aiohttp
import aiohttp.abc
import multidict


POD_DOMAIN = "pod.baton.invalid"
POD_ADDRESSES_CAP = 65536


class PodResolver(aiohttp.abc.AbstractResolver):
    """Resolves `<pod uid>.<POD_DOMAIN>` to the IP the API gave for that pod, and nothing
    else. Dialling by that name keys the connection pool by pod UID: a kept-alive connection
    opened to one pod is never reused for its successor, even when the successor got the same
    IP (pod IPs are reused)."""

    def __init__(self) -> None:
        self.addresses: collections.OrderedDict[str, str] = collections.OrderedDict()

    def name(self, uid: str, ip: str) -> str:
        self.addresses[uid] = ip
        self.addresses.move_to_end(uid)
        while len(self.addresses) > POD_ADDRESSES_CAP:
            self.addresses.popitem(last=False)
        return f"{uid}.{POD_DOMAIN}"

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[aiohttp.abc.ResolveResult]:
        uid, _, domain = host.partition(".")
        ip = self.addresses.get(uid) if domain == POD_DOMAIN else None
        if ip is None:
            raise OSError(f"not a pod this gateway forwards to: {host}")
        fam = socket.AF_INET6 if ":" in ip else socket.AF_INET
        return [{"hostname": host, "host": ip, "port": port, "family": fam, "proto": 0, "flags": socket.AI_NUMERICHOST}]

    async def close(self) -> None:
        pass


def multidict_of(pairs: list[tuple[str, str]]) -> multidict.CIMultiDict[str]:
    return multidict.CIMultiDict(pairs)


class Answer(Protocol):
    """A pod's answer as the call path reads it: `baton.gateway.http1conn.Connection` or `AiohttpAnswer`."""

    status: int
    reason: str
    headers: list[tuple[str, str]]

    def content_length(self) -> int | None: ...

    def arrived(self) -> bool:
        """The whole answer is in hand: reading it waits for nothing."""

    async def read_chunk(self) -> bytes: ...

    async def read_whole(self) -> bytes: ...

    def release(self) -> None: ...

    def cut(self) -> None:
        """End it from the gateway's side: a read waiting on it fails, the connection closes."""


class AiohttpAnswer:
    """aiohttp's response as an `Answer` (streamed uploads and HEAD)."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status
        self.reason = response.reason or ""
        self.headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.raw_headers]

    def content_length(self) -> int | None:
        return self._response.content_length

    def arrived(self) -> bool:
        return False  # not asked of aiohttp: its answers are read under the idle timeout

    async def read_chunk(self) -> bytes:
        return await self._response.content.readany()

    async def read_whole(self) -> bytes:
        return await self._response.read()

    def cut(self) -> None:
        self._response.close()

    def release(self) -> None:
        if self._response.content.at_eof():
            self._response.release()
        else:
            # Not read in full (the client left, the call was cut): the connection to the pod is
            # closed, never pooled, so the pod sees the call end.
            self._response.close()
