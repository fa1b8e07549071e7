"""The SGLang Model Gateway's control plane (``sglang-router`` 0.3.2, ``/workers``).

Only ``/workers`` manages workers in 0.3.2 (the old ``/add_worker`` family answers 404):

- ``POST /workers {"url"}`` -> 202 ``{"worker_id"}`` at once; the add runs in the background and
  the worker is listed (``is_healthy: true``) only once its ``/health`` answered 200. A failing
  worker is retried until the gateway's start-up timeout, then ``GET /workers/{id}`` shows
  ``job_status.status == "failed"``.
- ``DELETE /workers/{id}`` (by id, not URL) -> 202; the worker leaves routing at once, requests in
  flight finish. A DELETE while the add is still pending does not cancel it: the worker appears
  later and must be deleted again (the executor's reconcile does that every tick).
- A URL with a trailing slash makes the gateway probe ``//health`` for half an hour: URLs are
  normalised here. Re-adding a removed URL gives a new id.

Every call has a timeout and raises a typed ``GatewayError`` naming the URL. The control-plane
key (``--control-plane-api-keys``) is sent as a bearer token; it is never logged or stored.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import Any

import httpx

from autoscaler.errors import RuntimeFailure


class GatewayError(RuntimeFailure):
    """The gateway could not do what was asked. ``url`` is the request's URL."""

    def __init__(self, url: str, message: str) -> None:
        super().__init__(f"gateway {url}: {message}")
        self.url = url


class GatewayUnreachable(GatewayError):
    """No answer: connection refused, timeout, DNS."""


class GatewayUnauthorized(GatewayError):
    """401 (no or wrong key) or 403 (a key without the admin role)."""


class GatewayRefused(GatewayError):
    """A non-2xx answer other than 401/403 (the status and the start of the body are in the text)."""

    def __init__(self, url: str, status: int, body: str) -> None:
        super().__init__(url, f"HTTP {status}: {body[:200]}")
        self.status = status


class GatewayUnexpected(GatewayError):
    """A 2xx answer whose body is not what 0.3.2 sends."""


def normalise_url(url: str) -> str:
    """``http://h:p/`` -> ``http://h:p``: the gateway appends ``/health`` to the URL as given."""
    return url.strip().rstrip("/")


@dataclass(frozen=True, slots=True)
class GatewayWorker:
    id: str
    url: str
    healthy: bool
    job_status: str | None = None  # "failed" when the gateway gave up adding it
    job_message: str | None = None

    @classmethod
    def from_json(cls, data: Any, where: str) -> GatewayWorker:
        if not isinstance(data, dict) or not isinstance(data.get("id"), str) or not isinstance(data.get("url"), str):
            raise GatewayUnexpected(where, f"a worker entry without id and url: {str(data)[:200]}")
        status = data.get("job_status")
        job = status if isinstance(status, dict) else {}
        return cls(
            id=data["id"],
            url=normalise_url(data["url"]),
            healthy=bool(data.get("is_healthy")),
            job_status=job.get("status"),
            job_message=job.get("message"),
        )


class GatewayClient:
    """A client for one gateway. ``api_key``: the control-plane bearer token, or None."""

    def __init__(self, base_url: str, *, api_key: str | None = None, timeout_s: float = 5.0) -> None:
        self.base_url = normalise_url(base_url)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(timeout=timeout_s, headers=headers, trust_env=False)

    def close(self) -> None:
        self._http.close()

    def __repr__(self) -> str:  # never show the key
        return f"GatewayClient({self.base_url!r})"

    # ---------------------------------------------------------------------------- calls
    def add(self, worker_url: str) -> str:
        """Ask the gateway to add ``worker_url``; returns the new worker id (the add is pending)."""
        data = self._call("POST", "/workers", json={"url": normalise_url(worker_url)}, expect=(200, 201, 202))
        worker_id = data.get("worker_id") if isinstance(data, dict) else None
        if not isinstance(worker_id, str):
            raise GatewayUnexpected(self.base_url + "/workers", f"no worker_id in {str(data)[:200]}")
        return worker_id

    def list(self) -> list[GatewayWorker]:
        """Every worker the gateway routes to (only those whose add finished)."""
        where = self.base_url + "/workers"
        data = self._call("GET", "/workers")
        if not isinstance(data, dict) or not isinstance(data.get("workers"), list):
            raise GatewayUnexpected(where, f"no workers list in {str(data)[:200]}")
        return [GatewayWorker.from_json(w, where) for w in data["workers"]]

    def get(self, worker_id: str) -> GatewayWorker | None:
        """One worker (listed or with a job status), or None when the gateway does not know it."""
        where = f"{self.base_url}/workers/{worker_id}"
        try:
            data = self._call("GET", f"/workers/{worker_id}")
        except GatewayRefused as exc:
            if exc.status == 404:
                return None
            raise
        if isinstance(data, dict) and "id" not in data and "job_status" in data:
            data = {**data, "id": worker_id, "url": data.get("url", "")}
        return GatewayWorker.from_json(data, where)

    def remove(self, worker_id: str) -> bool:
        """Take a worker out of routing. False when the gateway did not know the id (already gone)."""
        try:
            self._call("DELETE", f"/workers/{worker_id}", expect=(200, 202, 204))
        except GatewayRefused as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def find(self, worker_url: str) -> builtins.list[GatewayWorker]:  # `list` here is the method above
        url = normalise_url(worker_url)
        return [w for w in self.list() if w.url == url]

    # ---------------------------------------------------------------------------- plumbing
    def _call(self, method: str, path: str, *, json: Any = None, expect: tuple[int, ...] = (200,)) -> Any:
        url = self.base_url + path
        try:
            response = self._http.request(method, url, json=json)
        except httpx.TimeoutException as exc:
            raise GatewayUnreachable(url, f"no answer within {self._http.timeout.read} s") from exc
        except httpx.HTTPError as exc:
            raise GatewayUnreachable(url, f"unreachable ({type(exc).__name__}: {exc})") from exc
        if response.status_code in (401, 403):
            what = "no valid control-plane key" if response.status_code == 401 else "the key is not an admin key"
            raise GatewayUnauthorized(url, f"HTTP {response.status_code}: {what} (AUTOSCALER_GATEWAY_API_KEY)")
        if response.status_code not in expect:
            raise GatewayRefused(url, response.status_code, response.text.strip().replace("\n", " "))
        if not response.content:
            return {}
        try:
            return response.json()
        except ValueError as exc:
            raise GatewayUnexpected(url, f"not JSON: {response.text[:200]!r}") from exc
