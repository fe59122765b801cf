"""List + watch one Kubernetes collection into a local cache (an informer).

The official client does the HTTP, auth and TLS; this module owns the
protocol: list to get a ``resourceVersion``, watch from it, keep resuming
from the last version seen (bookmarks included), and relist when the
server says 410 Gone (history compacted). A relist is diffed against the
cache so a Pod deleted while the watch was down still produces DELETED.

What it costs on a large cluster is bounded the way client-go's reflector
bounds it (k8s.io/client-go/tools/cache/reflector.go and tools/pager/pager.go):
the server filters (``label_selector``, ``field_selector``, on the list and the
watch alike), lists come in pages of ``page_size`` (``limit``/``continue``; a
token that expired mid-list, 410, restarts the list in one piece, the pager's
``FullListIfExpired``), and ``transform`` shrinks each object before it is
cached (client-go's ``SetTransform``), so only what the caller reads is kept.

Bounded in time like the reflector: every list page has ``request_timeout_s``, a
watch that sends nothing for ``idle_timeout_s`` (no event, no bookmark) is dropped
and resumed, failed rounds back off exponentially with jitter (app/domain/backoff.py,
the reflector's 800 ms to 30 s), and :meth:`Informer.stale_for` says how long ago the
cache last made progress (a list, an event, a bookmark, a watch the server ended), so
a pass does not plan on a cache that stopped following the cluster.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from app.cluster.k8s_client import is_timeout
from app.cluster.k8s_metrics import WATCH_RELISTS
from app.domain.backoff import Backoff

log = logging.getLogger(__name__)

Handler = Callable[[str, dict, dict | None], None]  # (type, object, previous)
Transform = Callable[[dict], dict]

#: client-go's pager default (tools/pager/pager.go defaultPageSize)
DEFAULT_PAGE_SIZE = 500


def strip_managed_fields(obj: dict) -> dict:
    """Drop ``metadata.managedFields`` (server-side apply's bookkeeping: often half
    an object's size, read by nobody here), the transform client-go's informers
    are commonly given."""
    meta = obj.get("metadata")
    if meta:
        meta.pop("managedFields", None)
    return obj


def object_key(obj: dict) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


def check_status(resp: Any) -> Any:
    """``resp`` (a raw answer, ``_preload_content=False``), or ApiException if it is
    not a 2xx: a raw answer does not raise on its own."""
    code = getattr(resp, "status", 200)
    if isinstance(code, int) and not 200 <= code <= 299:
        body = resp.data.decode() if getattr(resp, "data", None) else ""
        resp.release_conn()
        raise ApiException(status=code, reason=body[:500])
    return resp


class Informer:
    """Cache of one collection, kept current by a background list/watch loop.

    ``list_fn`` is a client method such as ``CoreV1Api.list_node``; the
    handler sees every change (including the synthetic ones of a relist)
    with the previous version of the object, or None.
    """

    def __init__(
        self,
        name: str,
        list_fn: Callable[..., Any],
        handler: Handler | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int | None = DEFAULT_PAGE_SIZE,
        transform: Transform | None = strip_managed_fields,
        timeout_s: int = 300,
        request_timeout_s: float = 10.0,
        idle_timeout_s: float = 90.0,
        backoff: Backoff | None = None,
    ) -> None:
        self.name = name
        self.list_fn = list_fn
        self.handler = handler
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.page_size = page_size
        self.transform = transform
        self.timeout_s = timeout_s
        self.request_timeout_s = request_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.backoff = backoff or Backoff()
        self.failures = 0  # rounds that failed, in a row (0 after a good one)
        # time.monotonic() of the last progress: a list, an event, a bookmark, a watch the
        # server ended; None until the first list
        self.last_progress: float | None = None
        self.cache: dict[str, dict] = {}
        self.resource_version: str | None = None
        self.synced = threading.Event()
        self.lock = threading.RLock()
        self.relists = 0
        self.watches = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._resp: Any = None

    # ------------------------------------------------------------ reading
    def items(self) -> list[dict]:
        with self.lock:
            return list(self.cache.values())

    def get(self, key: str) -> dict | None:
        """One cached object by :func:`object_key` (a bind reads its few nodes so, not
        a copy of the whole cache per job)."""
        with self.lock:
            return self.cache.get(key)

    # ------------------------------------------------------------ protocol
    def _kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"_preload_content": False}
        if self.label_selector:
            kw["label_selector"] = self.label_selector
        if self.field_selector:
            kw["field_selector"] = self.field_selector
        return kw

    def _list_pages(self, page_size: int | None) -> tuple[dict[str, dict], str | None]:
        """Every page of one consistent list: (objects by key, the list's version)."""
        fresh: dict[str, dict] = {}
        token: str | None = None
        rv: str | None = None
        while True:
            kw = self._kwargs()
            if page_size:
                kw["limit"] = page_size
            if token:
                kw["_continue"] = token
            resp = check_status(self.list_fn(**kw, _request_timeout=(self.request_timeout_s,
                                                                self.request_timeout_s)))
            data = json.loads(resp.data)
            del resp
            for o in data.get("items") or []:
                if self.transform is not None:
                    o = self.transform(o)
                fresh[object_key(o)] = o
            meta = data.get("metadata") or {}
            rv = rv or meta.get("resourceVersion")
            token = meta.get("continue")
            if not token:
                return fresh, rv

    def relist(self) -> None:
        """Replace the cache by a fresh list, reporting the differences."""
        try:
            fresh, rv = self._list_pages(self.page_size)
        except ApiException as e:
            if e.status != 410 or not self.page_size:
                raise
            log.info("%s: list continuation expired; listing in one piece", self.name)
            fresh, rv = self._list_pages(None)
        with self.lock:
            old = self.cache
            self.cache = fresh
            self.resource_version = rv
            self.relists += 1
        self._progress()
        WATCH_RELISTS.labels(resource=self.name).inc()
        if self.handler:
            for k, o in old.items():
                if k not in fresh:
                    self.handler("DELETED", o, o)
            for k, o in fresh.items():
                prev = old.get(k)
                if prev is None:
                    self.handler("ADDED", o, None)
                elif (prev.get("metadata") or {}).get("resourceVersion") != (
                    o.get("metadata") or {}
                ).get("resourceVersion"):
                    self.handler("MODIFIED", o, prev)
        self.synced.set()

    def apply(self, type_: str, obj: dict) -> None:
        if self.transform is not None:
            obj = self.transform(obj)
        key = object_key(obj)
        with self.lock:
            prev = self.cache.get(key)
            if type_ == "DELETED":
                self.cache.pop(key, None)
            else:
                self.cache[key] = obj
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if rv:
                self.resource_version = rv
        if self.handler:
            try:
                self.handler(type_, obj, prev)
            except Exception:  # never lose the watch position over a handler bug
                log.exception("%s: handler failed on %s %s", self.name, type_, object_key(obj))

    def watch_once(self) -> None:
        """One watch request from the current version; returns when it ends.

        On 410 Gone the version is dropped so the next round relists.
        """
        kw = self._kwargs()
        kw.update(
            watch=True,
            resource_version=self.resource_version,
            timeout_seconds=int(self.timeout_s),
            allow_watch_bookmarks=True,
            # connect like any call; then at most idle_timeout_s between two reads
            _request_timeout=(self.request_timeout_s, self.idle_timeout_s),
        )
        self.watches += 1
        try:
            resp = check_status(self.list_fn(**kw))
        except ApiException as e:
            if e.status == 410:
                self._gone()
                return
            raise
        self._resp = resp
        try:
            for line in iter_resp_lines(resp):
                if self._stop.is_set():
                    return
                if not line or not line.strip():
                    continue
                ev = json.loads(line)
                type_, obj = ev.get("type"), ev.get("object") or {}
                self._progress()
                if type_ == "ERROR":
                    if obj.get("code") == 410:
                        self._gone()
                        return
                    raise ApiException(status=obj.get("code"), reason=obj.get("message"))
                if type_ == "BOOKMARK":
                    rv = (obj.get("metadata") or {}).get("resourceVersion")
                    if rv:
                        with self.lock:
                            self.resource_version = rv
                    continue
                self.apply(type_, obj)
            self._progress()  # the server ended the watch at its timeout: all is well
        finally:
            self._resp = None
            resp.release_conn()

    def _progress(self) -> None:
        self.last_progress = time.monotonic()

    def stale_for(self, now: float | None = None) -> float | None:
        """Seconds since the cache last made progress; None before the first list."""
        if self.last_progress is None:
            return None
        return (time.monotonic() if now is None else now) - self.last_progress

    def _gone(self) -> None:
        log.info("%s: watch expired (410 Gone), relisting", self.name)
        with self.lock:
            self.resource_version = None

    def step(self) -> None:
        """One round: relist if needed, else one watch."""
        if self.resource_version is None:
            self.relist()
        else:
            self.watch_once()

    # ------------------------------------------------------------ thread
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception as e:  # keep going: the API server may come back
                if self._stop.is_set():
                    return
                if self.resource_version is not None and is_timeout(e) and not self.failures:
                    # a watch silent for idle_timeout_s: resume at once, once
                    log.info("%s: watch silent for %.0f s; resuming", self.name,
                             self.idle_timeout_s)
                    self.failures += 1
                    continue
                self.failures += 1
                delay = self.backoff.next()
                log.warning("%s: list/watch failed (%d in a row): %s; retrying in %.1f s",
                            self.name, self.failures, e, delay)
                self._stop.wait(delay)
            else:
                self.failures = 0
                self.backoff.reset()

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"informer-{self.name}",
                                            daemon=True)
            self._thread.start()

    def stop(self, join_timeout: float = 5.0) -> None:
        self._stop.set()
        resp = self._resp
        if resp is not None:
            # the reading thread may have closed it already
            with contextlib.suppress(Exception):
                resp.shutdown() if hasattr(resp, "shutdown") else resp.close()
        if self._thread is not None:
            self._thread.join(join_timeout)
            self._thread = None
