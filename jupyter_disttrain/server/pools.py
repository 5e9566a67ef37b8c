"""REST handlers of the warm pools (docs/rest-api.md "Warm pools"): list them, release one. A
release waits (bounded) for the pool's steps to end: in the threads cancels use, never in the
shared pool that listings and log reads need."""

from __future__ import annotations

from tornado import web

from ..payloads import to_json
from .handlers import DistTrainHandler


class PoolsHandler(DistTrainHandler):
    """Every pool of every backend that keeps them: a ``PoolList``."""

    @web.authenticated
    async def get(self) -> None:
        listing = await self.call(self.ctx.service.manager.pools.list_pools)
        self.write_json(to_json(listing))


class PoolHandler(DistTrainHandler):
    """``DELETE``: release the pool now (``?force=true``: even while a job runs in it, which then
    fails); a ``ReleaseAnswer``. 404 for an unknown id, 409 for a busy pool not forced."""

    @web.authenticated
    async def delete(self, pool_id: str) -> None:
        force = self.bool_argument("force")
        pools = self.ctx.service.manager.pools
        answer = await self.call_in(self.ctx.cancel_executor, pools.release, pool_id, force)
        self.write_json(to_json(answer))
