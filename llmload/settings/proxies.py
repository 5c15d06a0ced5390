"""Which forward proxy, if any, carries the requests to a target (``HTTP_PROXY`` and friends).

The environment rules are the standard library's, as ``urllib.request`` and
other Python HTTP clients apply them: ``<scheme>_proxy`` variables in either
case (lower case wins; ``HTTP_PROXY`` is ignored under CGI), ``ALL_PROXY`` as
the fallback for any scheme (as ``requests`` and ``httpx`` do), and
``NO_PROXY`` (host names, domain suffixes, ``host:port``, or ``*``) matched by
``urllib.request.proxy_bypass_environment``. A proxy URL without a scheme
means ``http://`` (as curl and ``requests`` read it).

Only ``http://`` proxies are supported: plain-http targets are sent to them
in absolute form, ``https://`` targets through a ``CONNECT`` tunnel. The
proxy's ``user:password@`` becomes the ``Proxy-Authorization: Basic`` header
and never appears in what is printed (``ProxyChoice.public``). Pure functions;
the caller reads the environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit
from urllib.request import proxy_bypass_environment  # type: ignore[attr-defined]  # public since 2.x, not in typeshed

from llmload.errors import ConfigError
from llmload.settings.credentials import public_url

__all__ = ["ProxyChoice", "Route", "choose_proxy", "route"]


@dataclass(frozen=True, slots=True)
class ProxyChoice:
    """The forward proxy for a target.

    Attributes:
        public: the proxy URL without ``user:password@`` (safe to print or write).
        host: proxy host name or address (IPv6 without brackets).
        port: proxy TCP port (default 80 when the URL names none).
        variable: the environment variable it came from, e.g. ``HTTPS_PROXY``.
        user: user name for ``Proxy-Authorization: Basic`` (percent-decoded), or None.
        password: password for it (percent-decoded), or None.
    """

    public: str
    host: str
    port: int
    variable: str
    user: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class Route:
    """How requests reach a target: through ``proxy``, or directly when it is None.

    Attributes:
        proxy: the forward proxy, or None.
        note: one start-up line saying which proxy is used, or why a proxy
            variable that is set is not; None when no proxy variable applies.
    """

    proxy: ProxyChoice | None
    note: str | None


def route(target_url: str, proxies: Mapping[str, str], *, ignore: bool) -> Route:
    """Decide how requests reach ``target_url``; preflight and users both use this one choice.

    Args:
        target_url: the target base URL, without credentials.
        proxies: the environment's proxy settings (``urllib.request.getproxies_environment()``).
        ignore: ``--ignore-proxy-env``: connect directly whatever the variables say.

    Raises:
        ConfigError: as for ``choose_proxy`` (not when ``ignore``).
    """
    scheme = urlsplit(target_url).scheme.lower()
    key = scheme if proxies.get(scheme) else "all"
    if not proxies.get(key):
        return Route(None, None)
    variable = f"{key.upper()}_PROXY"
    if ignore:
        return Route(None, f"--ignore-proxy-env: {variable} ignored; connecting to {target_url} directly")
    proxy = choose_proxy(target_url, proxies)
    if proxy is None:
        return Route(None, f"{variable} is set but NO_PROXY matches {target_url}; connecting directly")
    how = "CONNECT tunnel" if scheme == "https" else "absolute-form requests"
    return Route(
        proxy,
        f"requests to {target_url} go through the proxy {proxy.public} (from {variable}, {how}); "
        "its delay is part of every measured time",
    )


def choose_proxy(target_url: str, proxies: Mapping[str, str]) -> ProxyChoice | None:
    """The proxy that requests to ``target_url`` go through, or None to connect directly.

    Args:
        target_url: the target base URL (``http://HOST[:PORT]...`` or ``https://...``).
        proxies: the environment's proxy settings (``urllib.request.getproxies_environment()``).

    Raises:
        ConfigError: the proxy URL that applies is not an ``http://HOST[:PORT]`` URL
            (the message names the variable, shows the URL without credentials and the fix).
    """
    parts = urlsplit(target_url)
    scheme = parts.scheme.lower()
    key = scheme if proxies.get(scheme) else "all"
    raw = proxies.get(key)
    if not raw or not parts.hostname:
        return None
    netloc = parts.netloc.rpartition("@")[2]
    if proxy_bypass_environment(netloc, dict(proxies)):
        return None
    variable = f"{key.upper()}_PROXY"
    url = raw if "://" in raw else f"http://{raw}"
    shown = public_url(url)
    fix = f"set {variable}=http://HOST:PORT, add the target to NO_PROXY, or pass --ignore-proxy-env"
    proxy = urlsplit(url)
    if proxy.scheme.lower() != "http":
        raise ConfigError(
            f"{variable}={shown}: only http:// proxies are supported (CONNECT is used for https:// targets); {fix}"
        )
    try:
        port = proxy.port or 80
    except ValueError:
        raise ConfigError(f"{variable}={shown} has an invalid port; {fix}") from None
    if not proxy.hostname or proxy.path.strip("/") or proxy.query:
        raise ConfigError(f"{variable}={shown} is not a proxy address; {fix}")
    return ProxyChoice(
        public=shown.rstrip("/"),
        host=proxy.hostname,
        port=port,
        variable=variable,
        user=None if proxy.username is None else unquote(proxy.username),
        password=None if proxy.password is None else unquote(proxy.password),
    )
