"""httpx as the tests call it, with the request bound the platform's own client has.

httpx waits 5 s for an answer by default. A test server on a machine at load 10 can take
longer than that for one request (the five-run check of session 18: a proxy fixture's
first instance create timed out after 5 s on PostgreSQL), while ``SuanliClient`` and the
CLI wait 60 s. A test that means to bound a request still passes ``timeout`` itself.
"""

from __future__ import annotations

from typing import Any

import httpx

#: Seconds a request may take before the test fails (SuanliClient's default).
TIMEOUT = 60.0


def request(method: str, url: str, **kwargs: Any) -> httpx.Response:
    kwargs.setdefault("timeout", TIMEOUT)
    return httpx.request(method, url, **kwargs)


def get(url: str, **kwargs: Any) -> httpx.Response:
    return request("GET", url, **kwargs)


def head(url: str, **kwargs: Any) -> httpx.Response:
    return request("HEAD", url, **kwargs)


def post(url: str, **kwargs: Any) -> httpx.Response:
    return request("POST", url, **kwargs)


def put(url: str, **kwargs: Any) -> httpx.Response:
    return request("PUT", url, **kwargs)


def client(**kwargs: Any) -> httpx.Client:
    kwargs.setdefault("timeout", TIMEOUT)
    return httpx.Client(**kwargs)
