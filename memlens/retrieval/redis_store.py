"""Redis behind the storage protocols (optional extra ``memlens[redis]``): the short-term
cache with Redis's own expiry, and a document store, for a deployment whose agents share one
server or must keep the cache across a restart.

Values and documents are stored as JSON (``orjson``) under ``prefix + key``, so several
sessions can share a database without colliding.  A time to live is Redis's ``PX`` (whole
milliseconds, rounded up so that a positive TTL never becomes "no expiry").
"""

from __future__ import annotations

import math

import orjson


def _client(url: str | None, client):
    if client is not None:
        return client
    try:
        import redis
    except ImportError:
        raise ImportError("the Redis backend needs the redis package: pip install "
                          "'memlens[redis]'") from None  # fmt: skip
    return redis.Redis.from_url(url or "redis://127.0.0.1:6379/0")


class RedisCache:
    """``ShortTermCache`` on Redis: ``get``, ``set`` with a time to live in seconds."""

    def __init__(self, url: str | None = None, prefix: str = "memlens:stc:", client=None) -> None:
        self._r, self.prefix = _client(url, client), prefix

    def get(self, key: str) -> object | None:
        raw = self._r.get(self.prefix + key)
        return None if raw is None else orjson.loads(raw)

    def set(self, key: str, value: object, ttl_s: float | None = None) -> None:
        if ttl_s is not None and not (isinstance(ttl_s, (int, float)) and ttl_s > 0
                                      and math.isfinite(ttl_s)):  # fmt: skip
            raise ValueError(f"ttl_s: must be a positive number of seconds or None, got {ttl_s!r}")
        px = None if ttl_s is None else max(1, math.ceil(ttl_s * 1000))
        self._r.set(self.prefix + key, orjson.dumps(value), px=px)

    def close(self) -> None:
        self._r.close()


class RedisDocuments:
    """``DocumentStore`` on Redis: one JSON string per key."""

    def __init__(self, url: str | None = None, prefix: str = "memlens:doc:", client=None) -> None:
        self._r, self.prefix = _client(url, client), prefix

    def put(self, key: str, doc: dict) -> None:
        self._r.set(self.prefix + key, orjson.dumps(doc))

    def get(self, key: str) -> dict | None:
        raw = self._r.get(self.prefix + key)
        return None if raw is None else orjson.loads(raw)

    def delete(self, key: str) -> None:
        self._r.delete(self.prefix + key)

    def close(self) -> None:
        self._r.close()
