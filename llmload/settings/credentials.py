"""Credentials written into a target URL (``-H http://user:password@host:port``).

They are sent as the request's ``Authorization: Basic`` header (as Locust's
own HTTP clients do) and nowhere else: every other use of the URL (results,
summary, logs, error messages, the requests log, Prometheus, Locust's HTML
report and web UI) sees it without ``user:password@``. Pure functions, no I/O.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

__all__ = ["TargetURL", "public_header", "public_query", "public_url", "secret_query_names", "split_credentials"]


@dataclass(frozen=True, slots=True)
class TargetURL:
    """A target URL split into what may be shown and what must only be sent.

    Attributes:
        public: the URL without ``user:password@`` (safe to print or write).
        authorization: ``"Basic …"`` for the URL's credentials, or None when it has none.
    """

    public: str
    authorization: str | None


def split_credentials(url: str) -> TargetURL:
    """Split ``url`` into its public form and a Basic ``Authorization`` value.

    A URL that does not parse, or has no user information, is returned as is
    with no authorization. Percent-escapes in the user and password are
    decoded before encoding (``p%40ss`` is the password ``p@ss``).
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return TargetURL(_without_userinfo(url), None)
    if parts.username is None and parts.password is None:
        return TargetURL(url, None)
    netloc = parts.hostname or ""
    if ":" in netloc:  # IPv6 literal: urlsplit dropped its brackets
        netloc = f"[{netloc}]"
    if port is not None:
        netloc = f"{netloc}:{port}"
    public = urlunsplit(parts._replace(netloc=netloc))
    pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
    return TargetURL(public, "Basic " + base64.b64encode(pair.encode("latin-1", "replace")).decode("ascii"))


# Header names whose values are credentials (matched as parts of the lower-cased name).
_SECRET_NAME_PARTS = ("auth", "key", "token", "secret", "cookie", "password", "session", "signature", "credential")
REDACTED = "***"


def public_header(name: str, value: str, secret_names: tuple[str, ...] = ()) -> str:
    """``Name: value`` safe to print: the value of a credential header becomes ``***``.

    Credential headers: ``Authorization``, ``api-key``, ``x-api-key``, cookies,
    anything whose name holds ``auth``, ``key``, ``token``, ``secret``,
    ``password`` …, and every name in ``secret_names`` (``--api-key-header``).
    """
    lowered = name.lower()
    secret = lowered in {n.lower() for n in secret_names} or any(p in lowered for p in _SECRET_NAME_PARTS)
    return f"{name}: {REDACTED if secret and value else value}"


def _is_secret_name(name: str) -> bool:
    lowered = name.lower()
    return lowered in _SECRET_QUERY_NAMES or any(p in lowered for p in _SECRET_NAME_PARTS)


# Query parameters that carry credentials without a telling name (Azure SAS ``sig``, Google ``key``).
_SECRET_QUERY_NAMES = frozenset({"sig", "code", "jwt"})


def secret_query_names(query: str) -> tuple[str, ...]:
    """Names of the parameters in ``query`` (``a=1&api_key=…``) whose values are credentials."""
    return tuple(name for name, _ in parse_qsl(query, keep_blank_values=True) if _is_secret_name(name))


def public_query(query: str) -> str:
    """``query`` with the values of credential parameters (``key``, ``api_key``, ``token``, ``sig`` …) as ``***``.

    Other parameters (``api-version=2024-06-01``) are kept as given; a query
    without credential parameters is returned unchanged.
    """
    if not secret_query_names(query):
        return query
    pairs = parse_qsl(query, keep_blank_values=True)
    return urlencode([(n, REDACTED if _is_secret_name(n) and v else v) for n, v in pairs], safe="*", quote_via=quote)


def public_url(url: str) -> str:
    """``url`` without ``user:password@`` and with credential query values as ``***`` (safe to print or export)."""
    public = split_credentials(url).public
    try:
        parts = urlsplit(public)
    except ValueError:
        return public
    if not parts.query or not secret_query_names(parts.query):
        return public
    return urlunsplit(parts._replace(query=public_query(parts.query)))


def _without_userinfo(url: str) -> str:
    """Best effort for a URL ``urlsplit`` refuses: drop everything between ``//`` and the last ``@``."""
    scheme, sep, rest = url.partition("//")
    if not sep:
        return url
    authority, slash, path = rest.partition("/")
    return f"{scheme}{sep}{authority.rpartition('@')[2]}{slash}{path}"
