"""The authenticated reverse proxy in front of TensorBoard (jupyter-server-proxy's handler).

Requests to ``<base_url>disttrain/tensorboard/<id>/...`` start TensorBoard ``<id>`` on
demand and are forwarded to it unchanged (TensorBoard runs with the same path prefix),
including TensorBoard's POST data endpoints. Jupyter's credentials are not passed on.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from jupyter_server_proxy.handlers import ProxyHandler
from tornado import web

from .context import SETTINGS_KEY, ServerContext
from .handlers import domain_errors
from .tensorboard import LOOPBACK, PROXY_PREFIX

# Headers that carry the user's Jupyter credentials: TensorBoard has no use for them.
_PRIVATE_HEADERS = ("Authorization", "Cookie", "X-Xsrftoken", "X-Csrftoken")
_PATH_SAFE = "/:@!$&'()*+,;=-._~"


class TensorBoardProxyHandler(ProxyHandler):
    """Forwards any verb to the TensorBoard for ``tb_id``, starting it first if needed."""

    _upstream_prefix = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("host_allowlist", [LOOPBACK])
        kwargs.setdefault("absolute_url", True)  # TensorBoard knows its prefix
        super().__init__(*args, **kwargs)

    @property
    def ctx(self) -> ServerContext:
        context: ServerContext = self.settings[SETTINGS_KEY]
        return context

    def get_login_url(self) -> str:
        # As for API handlers: no login redirect, a plain 403 without credentials.
        if not self.current_user:
            raise web.HTTPError(403)
        return str(super().get_login_url())

    def proxy_request_headers(self) -> Any:
        headers = super().proxy_request_headers()
        for name in _PRIVATE_HEADERS:
            headers.pop(name, None)
        return headers

    def get_client_uri(self, protocol: str, host: str, port: int, proxied_path: str) -> str:
        # TensorBoard matches its --path_prefix against the decoded path, so the upstream
        # path is built from the decoded prefix (the base URL may hold %-escapes) and quoted once.
        path = quote(self._upstream_prefix + proxied_path, safe=_PATH_SAFE)
        query = f"?{self.request.query}" if self.request.query else ""
        return f"{protocol}://{host}:{port}{path}{query}"

    async def _forward(self, tb_id: str, path: str | None) -> None:
        manager = self.ctx.tensorboard
        with domain_errors():
            inst = await manager.ensure(tb_id)
        manager.touch(tb_id)
        self.proxy_base = f"{PROXY_PREFIX}/{tb_id}"
        self._upstream_prefix = manager.server_prefix(tb_id)
        await super().proxy(LOOPBACK, inst.port, path or "/")
        if not self._headers_written:
            # The proxy replaced Jupyter's headers with TensorBoard's; put Jupyter's policy
            # back beside TensorBoard's own, so only Jupyter's pages may frame TensorBoard.
            self.add_header("Content-Security-Policy", self.content_security_policy)

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
