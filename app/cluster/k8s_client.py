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

The same wrapper keeps connections alive. gpuq asks for the raw response
(``_preload_content=False``) on most calls, to skip the client's model classes; the
client then hands back the urllib3 response unread, which holds its connection until
its body is read, and a create, Binding or eviction whose answer nobody reads dropped
its connection instead of returning it to the pool, so every call paid a new TCP
connection and TLS handshake (measured with ``bench/throughput_kube.py --profile``:
599 handshakes for 603 calls, half of a bind's time). Every answer except a watch's
stream is now read when the call returns (urllib3 caches it, so callers that parse
``resp.data`` still can), which puts the connection back; and :func:`pool_for` sizes
the pool for the threads that call at once.
"""

from __future__ import annotations

import functools
from typing import Any

import urllib3
from kubernetes import client as kclient
from kubernetes.client.exceptions import ApiException

_BOUND = "_gpuq_bounded_timeout"


def bound_calls(api_client: kclient.ApiClient, timeout_s: float) -> kclient.ApiClient:
    """Give every call through ``api_client`` a ``(connect, read)`` timeout of
    ``timeout_s`` unless it passes its own; idempotent (the latest bound wins)."""
    original = getattr(api_client, _BOUND, None) or api_client.call_api

    @functools.wraps(original)
    def call_api(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("_request_timeout") is None:
            kwargs["_request_timeout"] = (timeout_s, timeout_s)
        resp = original(*args, **kwargs)
        if not _is_watch(args, kwargs):
            resp.read()  # the body read (and cached) puts the connection back in the pool
        return resp

    setattr(api_client, _BOUND, original)
    api_client.call_api = call_api  # type: ignore[method-assign]
    return api_client


def _is_watch(args: tuple, kwargs: dict) -> bool:
    """A streamed answer (``watch=true`` in the URL): its reader consumes it line by
    line. ``ApiClient.call_api(method, url, header_params, body, ...)``."""
    url = str(kwargs.get("url", args[1] if len(args) > 1 else ""))
    query = url.partition("?")[2].lower()
    return "watch=true" in query.split("&") or "watch=1" in query.split("&")


def pool_for(api_client: kclient.ApiClient, connections: int) -> kclient.ApiClient:
    """Let ``api_client`` keep ``connections`` open connections per host (the client's
    default is 5 per core): a connection beyond the pool's size is closed after its
    call, and the next call opens and handshakes a new one. Takes effect for pools
    not created yet (call it before the first request)."""
    pm = getattr(api_client.rest_client, "pool_manager", None)
    if pm is not None and pm.connection_pool_kw.get("maxsize", 1) < connections:
        pm.connection_pool_kw["maxsize"] = connections
        pm.clear()
    return api_client


#: what gpuq sends and reads: JSON (the client asks for it too, but sends no Content-Type)
JSON_HEADERS = {"Accept": "application/json", "Content-Type": "application/json"}


def post_json(api_client: kclient.ApiClient, path: str, body: dict,
              query: list[tuple[str, str]] | None = None, **path_params: str) -> Any:
    """POST ``body`` (a dict) to ``path`` (``/api/v1/namespaces/{namespace}/pods``, its
    ``{names}`` filled from ``path_params``; ``query``: its query parameters) as JSON,
    and return the raw answer, read; a non-2xx answer raises :class:`ApiException` as
    the client's own methods do.

    The client's generated methods (``CoreV1Api.create_namespaced_pod`` ...) validate a
    dict body into their model classes (pydantic) and serialize the model back into the
    same dict before encoding it: for a bind's Pod that was a third of the create's CPU
    in gpuq's process (0.5 of 1.6 ms per create in one thread, measured against the real
    API server; ``bench/throughput_kube.py`` binds 10,000). This sends the dict as it is,
    through the same ``ApiClient`` (its host, TLS, credentials and refresh hook, headers,
    connection pool) and :func:`bound_calls`' timeout; the API server validates the
    object, as it does anyway (ask it for ``fieldValidation=Strict`` to be refused a
    field it does not know, as the client's models refused one)."""
    method, url, headers, _, _ = api_client.param_serialize(
        "POST", path, path_params=path_params, query_params=query,
        header_params=dict(JSON_HEADERS), auth_settings=["BearerToken"])
    resp = api_client.call_api(method, url, headers, body=body)
    if not 200 <= resp.status <= 299:
        resp.read()
        raise ApiException.from_response(http_resp=resp, body=None, data=None)
    return resp.response


def is_timeout(e: BaseException) -> bool:
    """A call that ran out of time (connect or read), as urllib3 reports it."""
    if isinstance(e, urllib3.exceptions.MaxRetryError):
        return isinstance(e.reason, urllib3.exceptions.TimeoutError)
    return isinstance(e, urllib3.exceptions.TimeoutError)
