"""One HTTP conversation with an OCI registry host, through oras-py's session and authentication.

oras-py (``karchive[oci]``) owns the protocol pieces it has: the ``requests`` session, credentials
(``~/.docker/config.json`` and credential helpers, or a username and password), the bearer-token
dance, blob upload sessions and the container URL grammar. karchive adds what it lacks, in one
place: one attempt per call (oras' own decorator sleeps 3 s to 83 s between five attempts and never
reads ``Retry-After``: karchive's :class:`~.retry.RetryPolicy` retries instead, within the operation's
deadline), the choice between Basic and bearer authentication from the registry's own challenge,
range reads, and answers turned into karchive errors (a missing object is ``FileNotFoundError``).
"""

from __future__ import annotations

import email.utils
import os
import threading
import time
from typing import Any

from ..errors import RegistryError
from .deadline import current as current_deadline

#: Seconds one request may wait for a connection or a byte when no operation deadline is running.
DEFAULT_REQUEST_TIMEOUT = 60.0


class OciHttpError(Exception):
    """An answer that is not success. ``status`` drives the retry policy (5xx, 408 and 429 are retried);
    ``retry_after`` (seconds) is the registry's own ``Retry-After``, which the policy honours."""

    def __init__(self, status: int, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


def retry_after(value: str | None) -> float | None:
    """``Retry-After`` as seconds: delta-seconds or an HTTP date (RFC 9110 §10.2.3); None if absent or bad."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _oras(url: str) -> Any:
    try:
        import oras.provider
    except ImportError as exc:
        raise RegistryError(
            f"oci:// registries need oras-py, which is not installed ({exc}): pip install 'karchive[oci]'", registry=url
        ) from None
    return oras.provider


class OciClient:
    """Requests to one registry host (``host[:port]``), authenticated as the registry asks.

    ``username``/``password`` come from storage options (never from karchive's own settings); without
    them, oras reads the Docker credential configuration for the host.
    """

    def __init__(
        self,
        host: str,
        *,
        url: str,
        plain_http: bool,
        username: str | None = None,
        password: str | None = None,
        tls_verify: bool | str = True,
    ) -> None:
        self.host = host
        self.url = url
        self.scheme = "http" if plain_http else "https"
        self._username, self._password = username, password
        self._tls_verify = tls_verify
        self._client: Any = None
        self._lock = threading.Lock()

    # -- the oras session, made on first use ------------------------------------------------------
    @property
    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = self._make()
        return self._client

    def _make(self) -> Any:
        provider = _oras(self.url)
        import oras.auth

        token_auth = oras.auth.TokenAuth
        timeout = self._timeout

        class _OneAttempt(provider.Registry):  # type: ignore[name-defined]
            """oras' request with its authentication, minus its fixed-sleep retry decorator, and with
            Basic credentials sent up front where the registry wants Basic (not a 401 first each time)."""

            def do_request(
                self,
                url: str,
                method: str = "GET",
                data: Any = None,
                headers: Any = None,
                json: Any = None,
                stream: bool = False,
            ) -> Any:
                headers = dict(headers or {})
                basic = getattr(self.auth, "_basic_auth", None)
                if basic and not isinstance(self.auth, token_auth):
                    headers.setdefault("Authorization", f"Basic {basic}")
                return provider.Registry.do_request.__wrapped__(self, url, method, data, headers, json, stream)

        def make(backend: str) -> Any:
            client = _OneAttempt(
                hostname=self.host, insecure=self.scheme == "http", tls_verify=self._tls_verify, auth_backend=backend
            )
            original = client.session.request

            def bounded(*args: Any, **kwargs: Any) -> Any:  # oras passes no timeout: the deadline is ours
                kwargs.setdefault("timeout", timeout())
                return original(*args, **kwargs)

            client.session.request = bounded
            return client

        # The registry's challenge says which scheme it wants (as `docker login` asks /v2/ first):
        # htpasswd registries want Basic, hosted ones a bearer token fetched with Basic credentials.
        client = make("basic")
        answer = client.session.get(f"{self.scheme}://{self.host}/v2/", verify=self._tls_verify)
        if not answer.headers.get("Www-Authenticate", "basic").lower().startswith("basic"):
            client = make("token")
        client.auth._basic_auth = None
        if self._username is not None and self._password is not None:
            client.auth.set_basic_auth(self._username, self._password)
        else:  # Docker's credential configuration: ~/.docker/config.json, or $DOCKER_CONFIG/config.json as Docker reads it
            docker = os.environ.get("DOCKER_CONFIG")
            client.auth.load_configs(
                client.get_container(f"{self.host}/library/x"),
                [os.path.join(docker, "config.json")] if docker else None,
            )
        return client

    def _timeout(self) -> float:
        deadline = current_deadline()
        return DEFAULT_REQUEST_TIMEOUT if deadline is None else max(0.001, deadline.remaining())

    def has_credentials(self) -> bool:
        """Whether credentials are in use (given, or found in Docker's configuration); never connects."""
        if self._client is None:
            return self._username is not None
        return bool(getattr(self._client.auth, "_basic_auth", None))

    # -- one request --------------------------------------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        *,
        headers: dict[str, str] | None = None,
        data: bytes | None = None,
        ok: tuple[int, ...] = (200,),
        stream: bool = False,
        params: dict[str, str] | None = None,
    ) -> Any:
        """One attempt at ``METHOD /v2/<path>`` (or an absolute URL). 404 raises ``FileNotFoundError``;
        401/403 a :class:`RegistryError` saying whether credentials were missing or refused; any other
        answer outside ``ok`` an :class:`OciHttpError` (the retry policy decides)."""
        client = self.client
        url = path if "://" in path else f"{self.scheme}://{self.host}/v2/{path}"
        if params:
            import urllib.parse

            url += ("&" if "?" in url else "?") + urllib.parse.urlencode(params)
        try:
            response = client.do_request(url, method, data=data, headers=dict(headers or {}), stream=stream)
        except ValueError as exc:  # oras: "Cannot respond to request for authentication."
            raise self._denied(401, str(exc)) from None
        status = response.status_code
        if status in ok:
            return response
        body = "" if stream else response.text[:300]
        response.close()
        if status == 404:
            raise FileNotFoundError(f"{method} {url}: 404 {body}")
        if status in (401, 403):
            raise self._denied(status, body)
        raise OciHttpError(
            status, f"{method} {url}: HTTP {status} {body}".strip(), retry_after(response.headers.get("Retry-After"))
        )

    def _denied(self, status: int, body: str) -> RegistryError:
        if not self.has_credentials():
            why = (
                "it asks for credentials and none were given: pass them as storage options "
                '({"username": ..., "password": ...} in $KARCHIVE_STORAGE_OPTIONS) or `docker login` to it'
            )
        else:
            why = "it refused the credentials given (wrong username or password, or no access to this repository)"
        return RegistryError(f"registry {self.url}: access denied (HTTP {status}): {why}", registry=self.url)
