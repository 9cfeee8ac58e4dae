"""The Redis backend: ``redis.asyncio`` with a pool, short socket timeouts, no retries
(the guard bounds and short-circuits calls), and one Lua script per rate decision."""

from __future__ import annotations

from types import TracebackType
from typing import Any
from urllib.parse import unquote, urlsplit

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.backoff import NoBackoff
from redis.exceptions import RedisClusterException, RedisError

from gateway.errors import StoreUnavailable
from gateway.store.base import Granted, RateDecision, RateMode, Spend, Window

# The same steps as ``base.gcra``, atomically, on the server's clock (shared by all
# replicas). KEYS[1]: the TAT key. ARGV: limit, period (ms), cost, mode (0 acquire,
# 1 charge, 2 peek). Returns allowed, remaining, reset (ms), retry-after (ms).
# Delete a key only while it holds the value given (a lock released by its holder only).
DELETE_IF_LUA = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
"""

GCRA_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local limit = tonumber(ARGV[1])
local period = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local mode = tonumber(ARGV[4])
local interval = period / limit
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local new_tat = tat + cost * interval
local allowed = 1
if mode ~= 1 and new_tat - now > period + 0.001 then allowed = 0 end
local after = tat
if allowed == 1 and mode ~= 2 then
  after = new_tat
  redis.call('SET', KEYS[1], string.format('%.3f', new_tat), 'PX',
             math.max(1, math.ceil(new_tat - now)))
end
local remaining = math.max(0, math.floor((period - (after - now)) / interval))
local retry_after = 0
if allowed == 0 then retry_after = new_tat - period - now end
return {allowed, remaining, math.ceil(after - now), math.ceil(retry_after)}
"""

# The same steps as ``base.spend_counters``, atomically on every window. KEYS: the
# windows' counters (hashes: t tokens, n nano-USD), in one hash slot. ARGV: settle
# tokens, settle nanos, tokens, nanos, out pico-USD per token, max out, min out, then
# per window: its token limit, nano limit (-1: none) and TTL (ms). Returns allowed,
# out, refused-by (0-based, -1 none), then each window's tokens and nanos after.
SPEND_LUA = """
local st, sn = tonumber(ARGV[1]), tonumber(ARGV[2])
local ft, fn = tonumber(ARGV[3]), tonumber(ARGV[4])
local pico, maxo, mino = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local reserves = ft ~= 0 or fn ~= 0 or maxo ~= 0
local t, n = {}, {}
local out, refused = maxo, -1
for i, key in ipairs(KEYS) do
  local base = 7 + (i - 1) * 3
  local lt, ln = tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2])
  t[i] = tonumber(redis.call('HGET', key, 't') or '0') + st
  n[i] = tonumber(redis.call('HGET', key, 'n') or '0') + sn
  local fits = out
  if lt >= 0 then fits = math.min(fits, lt - t[i] - ft) end
  if ln >= 0 then
    local room = ln - n[i] - fn
    if pico > 0 then
      fits = math.min(fits, math.floor(room * 1000 / pico))
    elseif room < 0 then
      fits = -1
    end
  end
  if fits < out then
    out = fits
    if out < mino and refused < 0 then refused = i - 1 end
  end
end
local allowed = 1
if reserves and out < mino then allowed = 0 end
local dt, dn = st, sn
if allowed == 1 then
  if not reserves or out < 0 then out = 0 end
  dt = st + ft + out
  dn = sn + fn + math.ceil(out * pico / 1000)
else
  out = 0
end
local reply = {allowed, out, refused}
for i, key in ipairs(KEYS) do
  local ttl = tonumber(ARGV[7 + (i - 1) * 3 + 3])
  if dt ~= 0 then redis.call('HINCRBY', key, 't', string.format('%d', dt)) end
  if dn ~= 0 then redis.call('HINCRBY', key, 'n', string.format('%d', dn)) end
  if redis.call('PTTL', key) == -1 then redis.call('PEXPIRE', key, string.format('%d', ttl)) end
  table.insert(reply, t[i] + dt - st)
  table.insert(reply, n[i] + dn - sn)
end
return reply
"""

_MODES = {"acquire": 0, "charge": 1, "peek": 2}


def redis_client(
    url: str, max_connections: int = 200, timeout_s: float = 0.1
) -> Redis | RedisCluster:
    """A client for ``redis://``, ``rediss://``, ``unix://``, ``redis+cluster://`` and
    ``redis+sentinel://host:port[,host:port]/service[/db]``."""
    # The socket's own timeouts are the store's (``store.timeout_s``): the guard bounds
    # each call with the same, and a shorter socket timeout would cut it first.
    timeouts = {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s}
    options: dict[str, Any] = {**timeouts, "retry": Retry(NoBackoff(), 0)}
    scheme = urlsplit(url).scheme
    if scheme in ("redis+cluster", "rediss+cluster"):
        plain = url.replace("+cluster", "", 1)
        # A connection error makes redis-py's async cluster client read the topology
        # again, closing connections other calls are using (seen with 64 concurrent
        # calls on a fresh 3-node cluster: a few "Connection closed by server"). Those
        # calls are retried on the new connections; ``store.timeout_s`` still bounds
        # each call as a whole (the guard).
        return RedisCluster.from_url(plain, **{**options, "retry": Retry(NoBackoff(), 3)})
    if scheme in ("redis+sentinel", "rediss+sentinel"):
        hosts, service, db, password = parse_sentinel_url(url)
        sentinel = Sentinel(hosts, sentinel_kwargs=dict(timeouts), **options)
        master: Redis = sentinel.master_for(service, db=db, password=password)
        return master
    return Redis.from_url(url, max_connections=max_connections, **options)


def parse_sentinel_url(url: str) -> tuple[list[tuple[str, int]], str, int, str | None]:
    """``redis+sentinel://[:password@]h1:26379,h2:26379/mymaster/0`` → its parts."""
    rest = url.split("://", 1)[1]
    password = None
    if "@" in rest:
        credentials, rest = rest.rsplit("@", 1)
        password = unquote(credentials.split(":", 1)[-1]) or None
    netloc, _, path = rest.partition("/")
    hosts = []
    for item in netloc.split(","):
        host, _, port = item.rpartition(":")
        hosts.append((host or item, int(port) if host else 26379))
    parts = [p for p in path.split("/") if p]
    if not parts:
        raise ValueError("a sentinel URL names the service: redis+sentinel://host:port/service")
    return hosts, parts[0], int(parts[1]) if len(parts) > 1 else 0, password


class _RedisErrors:
    """The context manager of ``redis_errors`` (a class: it runs on every call)."""

    __slots__ = ("_message",)

    def __init__(self, message: str) -> None:
        self._message = message

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if isinstance(exc, RedisError | RedisClusterException):
            raise StoreUnavailable(self._message) from exc


def redis_errors(message: str = "The shared store failed.") -> _RedisErrors:
    """Re-raise redis-py's errors (a cluster's, which are not ``RedisError``s, too) as
    ``StoreUnavailable``: the one place the store's I/O errors join the gateway's tree
    (``GuardedStore`` adds the timeouts)."""
    return _RedisErrors(message)


def _ms(ttl_s: float) -> int:
    return max(1, int(ttl_s * 1000))


def _limit(value: int | None) -> int:
    return -1 if value is None else value


def _text(name: bytes | str) -> str:
    return name.decode() if isinstance(name, bytes) else name


class RedisStore:
    def __init__(self, client: Redis | RedisCluster) -> None:
        self._client = client
        self._gcra = client.register_script(GCRA_LUA)
        self._spend = client.register_script(SPEND_LUA)
        self._delete_if = client.register_script(DELETE_IF_LUA)

    async def rate(
        self, key: str, limit: int, period_s: float, cost: int, mode: RateMode
    ) -> RateDecision:
        with redis_errors():
            reply = await self._gcra(keys=[key], args=[limit, period_s * 1000, cost, _MODES[mode]])
        allowed, remaining, reset_ms, retry_ms = (int(v) for v in reply)
        return RateDecision(bool(allowed), limit, remaining, reset_ms / 1000, retry_ms / 1000)

    async def get(self, key: str) -> bytes | None:
        with redis_errors():
            value = await self._client.get(key)
        return value.encode() if isinstance(value, str) else value

    async def get_many(self, keys: list[str]) -> list[bytes | None]:
        if not keys:
            return []
        with redis_errors():
            if isinstance(self._client, RedisCluster):
                values = await self._client.mget_nonatomic(keys)
            else:
                values = await self._client.mget(keys)
        return [v.encode() if isinstance(v, str) else v for v in values]

    async def put(self, key: str, value: bytes, ttl_s: float) -> None:
        with redis_errors():
            await self._client.set(key, value, px=_ms(ttl_s))

    async def delete(self, keys: list[str]) -> None:
        if not keys:
            return
        with redis_errors():
            await self._client.delete(*keys)  # split by slot on a cluster

    async def take(self, key: str) -> bytes | None:
        with redis_errors():
            value = await self._client.getdel(key)
        return value.encode() if isinstance(value, str) else value

    async def delete_if(self, key: str, value: bytes) -> bool:
        with redis_errors():
            return bool(await self._delete_if(keys=[key], args=[value]))

    async def put_new(self, key: str, value: bytes, ttl_s: float) -> bool:
        with redis_errors():
            return bool(await self._client.set(key, value, px=_ms(ttl_s), nx=True))

    async def field_put(self, key: str, name: str, value: bytes, ttl_s: float) -> None:
        with redis_errors():
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.hset(key, name, value)
                pipe.pexpire(key, _ms(ttl_s))
                await pipe.execute()

    async def fields(self, key: str) -> dict[str, bytes]:
        with redis_errors():
            found = await self._client.hgetall(key)
        return {_text(k): v.encode() if isinstance(v, str) else v for k, v in found.items()}

    async def field_delete(self, key: str, name: str) -> None:
        with redis_errors():
            await self._client.hdel(key, name)

    async def field_add(self, key: str, increments: dict[str, int], ttl_s: float) -> None:
        with redis_errors():
            async with self._client.pipeline(transaction=True) as pipe:
                for name, amount in increments.items():
                    pipe.hincrby(key, name, amount)
                pipe.pexpire(key, _ms(ttl_s))
                await pipe.execute()

    async def push_capped(self, key: str, value: bytes, keep: int, ttl_s: float) -> None:
        with redis_errors():
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.lpush(key, value)
                pipe.ltrim(key, 0, keep - 1)
                pipe.pexpire(key, _ms(ttl_s))
                await pipe.execute()

    async def newest(self, key: str, count: int, skip: int = 0) -> list[bytes]:
        if count <= 0:
            return []
        with redis_errors():
            found = await self._client.lrange(key, skip, skip + count - 1)
        return [v.encode() if isinstance(v, str) else v for v in found]

    async def spend(self, windows: list[Window], spend: Spend) -> Granted:
        args: list[int] = [
            spend.settle_tokens,
            spend.settle_nanos,
            spend.tokens,
            spend.nanos,
            spend.out_pico,
            spend.max_out,
            spend.min_out,
        ]
        for window in windows:
            args += [_limit(window.tokens), _limit(window.nanos), _ms(window.ttl_s)]
        with redis_errors():
            reply = await self._spend(keys=[w.key for w in windows], args=args)
        allowed, out, refused, *rest = (int(v) for v in reply)
        used = tuple((rest[i], rest[i + 1]) for i in range(0, len(rest), 2))
        return Granted(bool(allowed), out, used, refused)

    async def counters(self, keys: list[str]) -> list[tuple[int, int]]:
        if not keys:
            return []
        with redis_errors():
            async with self._client.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.hmget(key, ["t", "n"])
                replies = await pipe.execute()
        return [(int(t or 0), int(n or 0)) for t, n in replies]

    async def ping(self) -> None:
        with redis_errors("The shared store does not answer."):
            await self._client.ping()

    async def connect(self) -> None:
        """A cluster client learns the topology now: left to the first requests, their
        concurrency races redis-py's own start (calls sent before the slots are known
        are redirected, and the client's rebuild closes connections others are using)."""
        if isinstance(self._client, RedisCluster):
            with redis_errors("The shared store does not answer."):
                await self._client.initialize()

    async def aclose(self) -> None:
        pool = getattr(self._client, "connection_pool", None)
        await self._client.aclose()
        if isinstance(pool, SentinelConnectionPool):  # its sentinels' connections too
            for sentinel in pool.sentinel_manager.sentinels:
                await sentinel.aclose()
