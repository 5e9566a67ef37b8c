"""The authenticated reverse proxy in front of TensorBoard (jupyter-server-proxy's handler).

Requests to ``<base_url>disttrain/tensorboard/<id>/...`` start TensorBoard ``<id>`` on
demand and are forwarded to its private Unix socket (TensorBoard runs with the same path
prefix), including TensorBoard's POST data endpoints. Jupyter's rules apply as for any API:
auth on every verb, XSRF and Origin checks on the ones that change things (jupyter-server-proxy
defers those to the proxied app, and TensorBoard has none), errors as JSON. Jupyter's
credentials (token, Authorization, cookies) are not passed on.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from jupyter_server.base.handlers import JupyterHandler
from jupyter_server_proxy.handlers import ProxyHandler
from tornado import web

from .context import SETTINGS_KEY, ServerContext
from .handlers import domain_errors, write_json_error
from .tensorboard import PROXY_PREFIX, UPSTREAM_HOST

# Headers that carry the user's Jupyter credentials: TensorBoard has no use for them.
_PRIVATE_HEADERS = ("Authorization", "Cookie", "X-Xsrftoken", "X-Csrftoken")
_PRIVATE_QUERY = frozenset({"token", "_xsrf"})
_PATH_SAFE = "/:@!$&'()*+,;=-._~"
_SAFE_VERBS = frozenset({"GET", "HEAD", "OPTIONS"})
_ANGULAR_XSRF_COOKIE, _ANGULAR_XSRF_HEADER = "XSRF-TOKEN", "X-XSRF-TOKEN"
# TensorBoard's page loads its Roboto fonts from the site's root (``url(/font-roboto/...)`` in
# its index.html, whatever its --path_prefix): behind the proxy that root is Jupyter's, which
# answers 404. They are served under the prefix like the rest of TensorBoard.
_ROOT_FONTS = b"url(/font-roboto/"
_PAGE_BYTES = 4 * 1024 * 1024  # a page larger than this (index.html is ~0.2 MB) is passed as is


def fonts_under(prefix: str) -> Callable[[Any], None]:
    """A ``rewrite_response`` of jupyter-server-proxy that points TensorBoard's page at its fonts
    under ``prefix`` (the URL path TensorBoard is proxied under); other answers pass as they are."""
    target = f"url({prefix}/font-roboto/".encode()

    def rewrite(response: Any) -> None:
        headers = response.headers
        if response.code != 200 or "text/html" not in headers.get("Content-Type", ""):
            return
        gzipped = headers.get("Content-Encoding") == "gzip"
        if len(response.body) > _PAGE_BYTES:
            return
        page = gzip.decompress(response.body) if gzipped else response.body
        if _ROOT_FONTS in page and len(page) <= _PAGE_BYTES:
            page = page.replace(_ROOT_FONTS, target)
            response.body = gzip.compress(page) if gzipped else page

    return rewrite


class TensorBoardProxyHandler(ProxyHandler):
    """Forwards any verb to the TensorBoard for ``tb_id``, starting it first if needed."""

    _upstream_prefix = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("host_allowlist", [UPSTREAM_HOST])
        kwargs.setdefault("absolute_url", True)  # TensorBoard knows its prefix
        super().__init__(*args, **kwargs)

    @property
    def ctx(self) -> ServerContext:
        context: ServerContext = self.settings[SETTINGS_KEY]
        return context

    def check_xsrf_cookie(self) -> None:
        # jupyter-server-proxy's is a no-op ("defer to proxied apps"); use Jupyter's own:
        # token-authenticated requests pass, cookie-authenticated ones need the _xsrf token.
        # TensorBoard's page (Angular) sends it as X-XSRF-TOKEN, read from the XSRF-TOKEN
        # cookie that ``_forward`` sets: the same token under Angular's names.
        # Its other plugins' POSTs (HParams) send no token: a browser's word that the request
        # comes from this origin (TensorBoard's own frame) is enough.
        if self._from_this_origin():
            return
        angular = self.request.headers.get(_ANGULAR_XSRF_HEADER)
        if angular and "X-Xsrftoken" not in self.request.headers:
            self.request.headers["X-Xsrftoken"] = angular
        JupyterHandler.check_xsrf_cookie(self)

    def _from_this_origin(self) -> bool:
        """A browser says the request comes from a page of this very origin: ``Sec-Fetch-Site:
        same-origin``, which browsers set and no page can (not ``same-site``: another host of
        the site); without it (an older browser), an ``Origin`` naming this host. A cross-site
        page can claim neither, so its writes still need the XSRF token (and are refused by
        ``prepare``'s Origin check besides)."""
        headers = self.request.headers
        site = headers.get("Sec-Fetch-Site")
        if site is not None:
            return site == "same-origin"
        origin = headers.get("Origin")
        return origin is not None and urlsplit(origin).netloc == self.request.host

    async def prepare(self, *args: Any, **kwargs: Any) -> None:
        await super().prepare(*args, **kwargs)
        # As APIHandler does: a cross-origin request that changes things is refused, token or not.
        if self.request.method not in _SAFE_VERBS and not self.check_origin():
            raise web.HTTPError(403, "cross-origin request refused")

    def get_login_url(self) -> str:
        # As for API handlers: no login redirect, a plain 403 without credentials.
        if not self.current_user:
            raise web.HTTPError(403)
        return str(super().get_login_url())

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        write_json_error(self, **kwargs)

    def proxy_request_headers(self) -> Any:
        headers = super().proxy_request_headers()
        for name in _PRIVATE_HEADERS:
            headers.pop(name, None)
        return headers

    def proxy_request_options(self) -> dict[str, Any]:
        # Forward what the client sent, e.g. a DELETE with a body (tornado refuses it otherwise).
        return {**super().proxy_request_options(), "allow_nonstandard_methods": True}

    def get_client_uri(self, protocol: str, host: str, port: int, proxied_path: str) -> str:
        # TensorBoard matches its --path_prefix against the decoded path, so the upstream
        # path is built from the decoded prefix (the base URL may hold %-escapes) and quoted once.
        path = quote(self._upstream_prefix + proxied_path, safe=_PATH_SAFE)
        pairs = parse_qsl(self.request.query, keep_blank_values=True)
        kept = [(k, v) for k, v in pairs if k not in _PRIVATE_QUERY]
        query = f"?{urlencode(kept)}" if kept else ""
        return f"{protocol}://{host}{path}{query}"

    async def _forward(self, tb_id: str, path: str | None) -> None:
        manager = self.ctx.tensorboard
        with domain_errors():
            inst = await manager.ensure(tb_id)
        manager.touch(tb_id)
        self.proxy_base = f"{PROXY_PREFIX}/{tb_id}"
        self._upstream_prefix = manager.server_prefix(tb_id)
        self.unix_socket = str(inst.socket_path)  # jupyter-server-proxy connects there
        self.rewrite_response = fonts_under(manager.prefix(tb_id))
        await super().proxy(UPSTREAM_HOST, 0, path or "/")
        if not self._headers_written:
            # The proxy replaced Jupyter's headers with TensorBoard's; put Jupyter's policy
            # back beside TensorBoard's own, so only Jupyter's pages may frame TensorBoard.
            self.add_header("Content-Security-Policy", self.content_security_policy)
            if self.request.method == "GET":  # the page's POSTs carry it back (see above)
                token = self.xsrf_token.decode()
                self.set_cookie(_ANGULAR_XSRF_COOKIE, token, path=self.ctx.tensorboard.prefix(tb_id))

    @web.authenticated
    async def http_get(self, tb_id: str, path: str | None = None) -> None:
        if not path:  # TensorBoard's page uses relative URLs: they need the trailing slash
            query = f"?{self.request.query}" if self.request.query else ""
            self.redirect(f"{self.request.path}/{query}")
            return
        await self._forward(tb_id, path)

    async def open(self, tb_id: str, path: str | None = None) -> None:
        raise web.HTTPError(400, "TensorBoard does not use WebSockets")

    @web.authenticated
    async def post(self, tb_id: str, path: str | None = None) -> None:
        await self._forward(tb_id, path)

    @web.authenticated
    async def put(self, tb_id: str, path: str | None = None) -> None:
        await self._forward(tb_id, path)

    @web.authenticated
    async def delete(self, tb_id: str, path: str | None = None) -> None:
        await self._forward(tb_id, path)

    @web.authenticated
    async def head(self, tb_id: str, path: str | None = None) -> None:
        await self._forward(tb_id, path)

    @web.authenticated
    async def patch(self, tb_id: str, path: str | None = None) -> None:
        await self._forward(tb_id, path)

    @web.authenticated
    async def options(self, tb_id: str, path: str | None = None) -> None:
        await self._forward(tb_id, path)
