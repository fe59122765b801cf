"""Every Kubernetes API call gpuq makes is bounded in time.

The official client sends a request without any timeout unless the caller passes
``_request_timeout`` (kubernetes/client/rest.py hands urllib3 ``timeout=None``):
against an apiserver, load balancer or proxy that accepts the connection and never
answers, a create, Binding or eviction blocks its thread forever. gpuq's dispatcher
has one decision thread, so one such call would hold the leader lock and stop all
scheduling while ``/healthz`` said ok.

:func:`bound_calls` makes ``request_timeout_s`` the default of every call made
through one ``ApiClient`` (core, policy, custom objects alike); a call that names its
own timeout (a watch: connect and idle-read bounds) keeps it. A call that times out
raises ``urllib3`` ``MaxRetryError``/``ReadTimeoutError``/``ConnectTimeoutError``,
which callers treat like any failed call (:func:`is_timeout` names them).
"""

from __future__ import annotations

import functools
from typing import Any

import urllib3
from kubernetes import client as kclient

_BOUND = "_gpuq_bounded_timeout"


def bound_calls(api_client: kclient.ApiClient, timeout_s: float) -> kclient.ApiClient:
    """Give every call through ``api_client`` a ``(connect, read)`` timeout of
    ``timeout_s`` unless it passes its own; idempotent (the latest bound wins)."""
    original = getattr(api_client, _BOUND, None) or api_client.call_api

    @functools.wraps(original)
    def call_api(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("_request_timeout") is None:
            kwargs["_request_timeout"] = (timeout_s, timeout_s)
        return original(*args, **kwargs)

    setattr(api_client, _BOUND, original)
    api_client.call_api = call_api  # type: ignore[method-assign]
    return api_client


def is_timeout(e: BaseException) -> bool:
    """A call that ran out of time (connect or read), as urllib3 reports it."""
    if isinstance(e, urllib3.exceptions.MaxRetryError):
        return isinstance(e.reason, urllib3.exceptions.TimeoutError)
    return isinstance(e, urllib3.exceptions.TimeoutError)
