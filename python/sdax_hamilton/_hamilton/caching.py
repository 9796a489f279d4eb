"""``Driver(..., cache=)``: Hamilton's caching, decided once per Driver (docs/caching.md).

Everything that makes a cache entry is Hamilton's own: its ``HamiltonCacheAdapter`` (built
from ``cache=``) supplies the metadata and result stores and the behaviour rules
(``_resolve_node_behavior``, the rule ``Builder().with_cache()`` applies to each node);
``hamilton.graph_types.HamiltonNode.version`` is a node's code version,
``hamilton.caching.fingerprinting.hash_value`` a value's data version and
``hamilton.caching.cache_key.create_cache_key`` the key. Large values are fingerprinted, and
Hamilton's result files written and read, in pieces (``cache_io.py``): the same data
versions and files, without holding the interpreter lock through the whole value.

What is not taken from the adapter is its execution half (``pre_graph_execute`` /
``do_node_execute`` / ``post_node_execute``): it calls each node synchronously and keeps
per-run state on the adapter forever, which a service's async runs cannot use
(docs/caching.md, "What is Hamilton's").

``NodeCache.mode`` is the one decision per node: ``LOOKUP`` (Hamilton's ``default``: look
up, compute on a miss, store), ``STORE`` (``recompute`` and ``ignore``: compute and store)
or ``None`` (never cached, ``why`` says why). The run (``_executor/cache.py``) carries it
out and decides nothing.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from .._spec import NodeSpec
from .cache_io import data_version, read_result, write_result

logger = logging.getLogger("sdax_hamilton.cache")

LOOKUP: Final = "lookup"
"""Hamilton's ``default`` behaviour: a stored value is used; a miss computes and stores."""
STORE: Final = "store"
"""``recompute`` / ``ignore``: always computed, then stored."""

# How a node's value enters the keys of the nodes consuming it (Hamilton's own markers).
_AS_VALUE: Final = 0  # its data version (the stored one, or the value's fingerprint)
_AS_IGNORED: Final = 1  # "<ignore>": left out (``ignore``, and resources)
_AS_DISABLED: Final = 2  # "<disable>_<uuid>": every consumer misses (``disable``)

_EXPLICIT: Final = frozenset({"default", "recompute"})


@dataclass(frozen=True, slots=True)
class NodeCache:
    """What caching does for one node of a Driver (decided at ``Driver(...)``)."""

    name: str
    mode: str | None
    """``LOOKUP``, ``STORE`` or ``None`` (never cached)."""
    behavior: str
    """Hamilton's resolved behaviour: ``default``, ``recompute``, ``ignore``, ``disable``."""
    code_version: str | None
    """Hamilton's code version of the node (``None``: its source cannot be read)."""
    format: str | None
    """``@cache(format=...)``: stored through Hamilton's saver/loader of that name."""
    left_out: frozenset[str]
    """Inputs left out of the key: owned resources (and what borrows from them)."""
    why: str | None
    """Why the node is never cached (``mode is None``), for docs/caching.md's table."""
    feeds: int = _AS_VALUE
    """How its value enters its consumers' keys."""


def adapter_of(cache: object) -> Any:
    """``cache=``: ``True`` (Hamilton's default directory), a path, or Hamilton's adapter."""
    from hamilton.caching.adapter import (  # type: ignore[import-untyped, unused-ignore]
        HamiltonCacheAdapter,
    )

    if isinstance(cache, HamiltonCacheAdapter):
        return cache
    if cache is True:
        return HamiltonCacheAdapter()
    if isinstance(cache, (str, os.PathLike)) and not isinstance(cache, bool):
        path = os.fspath(cache)
        if isinstance(path, bytes) or not path:
            raise TypeError("cache= path must be a non-empty str or os.PathLike of str")
        return HamiltonCacheAdapter(path=path)
    raise TypeError(
        "cache= must be True (Hamilton's default directory .hamilton_cache), a directory "
        "path, or a hamilton.caching.adapter.HamiltonCacheAdapter, not "
        f"{type(cache).__name__}"
    )


def _names(value: object, every: Collection[str]) -> Collection[str] | None:
    """One of the adapter's ``default=`` / ``recompute=`` / ... arguments as node names."""
    if value is True:
        return every
    if value is None:
        return None
    return value  # type: ignore[return-value]


def _named(adapter: Any, name: str) -> bool:
    """Whether the adapter names ``name`` in one of its behaviour collections."""
    for value in (adapter._default, adapter._recompute, adapter._ignore, adapter._disable):
        if value is not None and value is not True and name in value:
            return True
    return False


def _owned(spec: NodeSpec) -> bool:
    return spec.release is not None or spec.ownership_required or bool(spec.borrows)


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def executor() -> ThreadPoolExecutor:
    """The threads every cache's store I/O runs in: not the loop's default executor, which
    user code may fill (docs/caching.md, "Off the loop")."""
    global _pool
    pool = _pool
    if pool is None:
        with _pool_lock:
            pool = _pool
            if pool is None:
                pool = _pool = ThreadPoolExecutor(
                    max_workers=min(8, (os.cpu_count() or 1) + 2),
                    thread_name_prefix="sdax_hamilton cache",
                )
    return pool


class Cache:
    """The Driver's cache: Hamilton's adapter and each node's decision."""

    def __init__(self, adapter: Any, nodes: Mapping[str, NodeCache]) -> None:
        self.adapter = adapter
        self.nodes = nodes
        # Which store a key belongs to, for single flight: Drivers on one directory share
        # their flights, Drivers on two directories do not.
        where = getattr(adapter.metadata_store, "_directory", None)
        self.scope: object = str(where) if where is not None else id(adapter)
        self._lock = threading.Lock()
        self._runs: set[str] = set()  # run ids initialized in the metadata store

    @property
    def path(self) -> Path:
        """The cache directory (Hamilton's adapter ``path``)."""
        return Path(self.adapter._path)

    # ------------------------------------------------------------ in store threads

    def key(
        self, node: NodeCache, kwargs: Mapping[str, Any], versions: Mapping[str, str]
    ) -> str | None:
        """Hamilton's cache key of ``node`` called with ``kwargs``: its code version and its
        inputs' data versions (``versions``: those known in this run), with Hamilton's
        marker for ignored inputs. ``None`` when an input is disabled or has no data
        version: Hamilton would make a key no later run can find (a random suffix), so
        nothing is looked up or stored for this call."""
        from hamilton.caching import fingerprinting  # type: ignore[import-untyped, unused-ignore]
        from hamilton.caching.cache_key import (  # type: ignore[import-untyped, unused-ignore]
            create_cache_key,
        )

        deps: dict[str, str] = {}
        nodes = self.nodes
        for name, value in kwargs.items():
            dep = nodes.get(name)
            feeds = _AS_VALUE if dep is None else dep.feeds
            if name in node.left_out:
                feeds = _AS_IGNORED
            if feeds == _AS_IGNORED:
                deps[name] = "<ignore>"
                continue
            if feeds == _AS_DISABLED:
                return None
            version = versions.get(name)
            if version is None:
                version = data_version(value)
            if version == fingerprinting.UNHASHABLE or version.startswith("<unhashable>"):
                return None
            deps[name] = version
        return str(create_cache_key(node.name, node.code_version, deps))

    def read(self, key: str) -> tuple[str, Any] | None:
        """``(data version, value)`` stored under ``key``, or ``None`` (Hamilton's lookup:
        metadata store, then result store; an entry its loader cannot read is deleted)."""
        from hamilton.caching.stores.base import (  # type: ignore[import-untyped, unused-ignore]
            ResultRetrievalError,
        )

        adapter = self.adapter
        version = adapter.metadata_store.get(cache_key=key)
        if version is None or version.startswith("<unhashable>"):
            return None
        results = adapter.result_store
        if not results.exists(version):
            return None
        try:
            path = self._file_of(results, version)
            if path is None:
                value = results.get(data_version=version)
            else:
                try:
                    value = read_result(path)
                except FileNotFoundError:
                    return None  # deleted meanwhile (another process): a miss
        except Exception as exc:
            # Hamilton deletes an entry its loader cannot read (ResultRetrievalError); a
            # result cut short (a killed writer) cannot be unpickled: deleted too, so the
            # next miss writes it whole instead of finding the broken file "existing".
            if not isinstance(exc, ResultRetrievalError):
                logger.warning("cache entry %s unreadable (%s): deleted", key, type(exc).__name__)
            adapter.metadata_store.delete(cache_key=key)
            results.delete(version)
            return None
        return version, value

    def write(self, node: NodeCache, key: str, value: Any, run_id: str) -> str | None:
        """Store ``value`` under ``key`` as Hamilton's adapter does, the result before its
        metadata (so an entry whose write was cut short is never found); returns the
        value's data version (``None`` when it has none: then nothing is stored)."""
        from hamilton.caching import fingerprinting  # type: ignore[import-untyped, unused-ignore]
        from hamilton.caching.stores.base import (  # type: ignore[import-untyped, unused-ignore]
            search_data_adapter_registry,
        )

        version = data_version(value)
        if version == fingerprinting.UNHASHABLE:
            return None
        adapter = self.adapter
        results = adapter.result_store
        saver = loader = None
        materialized_missing = False
        if node.format is not None:
            saver, loader = search_data_adapter_registry(name=node.format, type_=type(value))
            where = getattr(results, "_materialized_path", None)
            materialized_missing = where is not None and not where(version, saver).exists()
        if materialized_missing or not results.exists(version):
            path = None if saver is not None else self._file_of(results, version)
            if path is None:
                results.set(data_version=version, result=value, saver_cls=saver, loader_cls=loader)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                write_result(path, value)
        with self._lock:
            if run_id not in self._runs:
                self._runs.add(run_id)
                adapter.metadata_store.initialize(run_id)
        adapter.metadata_store.set(
            cache_key=key,
            data_version=version,
            run_id=run_id,
            node_name=node.name,
            code_version=node.code_version,
        )
        return str(version)

    @staticmethod
    def _file_of(results: Any, version: str) -> Path | None:
        """The file of ``version`` when ``results`` is Hamilton's ``FileResultStore`` itself
        (its files are read and written here in pieces, ``cache_io.py``); ``None`` for any
        other store, called as it is."""
        from hamilton.caching.stores.file import (  # type: ignore[import-untyped, unused-ignore]
            FileResultStore,
        )

        if type(results) is not FileResultStore:
            return None
        return Path(results._path_from_data_version(version))

    def run_over(self, run_id: str) -> None:
        """Forget a finished run's id (kept only to initialize it once in the store)."""
        if run_id in self._runs:
            with self._lock:
                self._runs.discard(run_id)


def build_cache(
    cache: object, hamilton_nodes: Mapping[str, Any], specs: Mapping[str, NodeSpec]
) -> Cache:
    """Decide, once per Driver, what caching does for each node (docs/caching.md).

    ``ValueError`` when a node that is never cached (an owned acquisition or a node
    borrowing from one) explicitly asks to be (``@cache(behavior="default"|"recompute")``
    or the adapter's ``default=`` / ``recompute=`` naming it).
    """
    from hamilton import graph_types  # type: ignore[import-untyped, unused-ignore]
    from hamilton.caching.adapter import (  # type: ignore[import-untyped, unused-ignore]
        HamiltonCacheAdapter,
    )
    from hamilton.function_modifiers.metadata import (  # type: ignore[import-untyped, unused-ignore]
        cache as cache_decorator,
    )

    adapter = adapter_of(cache)
    every = tuple(hamilton_nodes)
    lists = {
        "default": _names(adapter._default, every),
        "disable": _names(adapter._disable, every),
        "recompute": _names(adapter._recompute, every),
        "ignore": _names(adapter._ignore, every),
    }
    fallback = adapter.default_behavior or "default"
    loader_default = adapter.default_loader_behavior or fallback
    saver_default = adapter.default_saver_behavior or fallback
    resources = frozenset(name for name, spec in specs.items() if _owned(spec))
    decided: dict[str, NodeCache] = {}
    for name, spec in specs.items():
        node_ = hamilton_nodes[name]
        tags = node_.tags
        behavior = HamiltonCacheAdapter._resolve_node_behavior(
            node=node_,
            default_behavior=fallback,
            default_loader_behavior=loader_default,
            default_saver_behavior=saver_default,
            **lists,
        ).name.lower()
        tagged = tags.get(cache_decorator.BEHAVIOR_KEY)
        asked = tagged in _EXPLICIT or (_named(adapter, name) and behavior in _EXPLICIT)
        fmt = tags.get(cache_decorator.FORMAT_KEY)
        if name in resources:
            if asked:
                what = (
                    "is an owned acquisition"
                    if not spec.borrows
                    else f"borrows from the owned acquisition(s) {sorted(spec.borrows)}"
                )
                raise ValueError(
                    f"Node {name!r} ({spec.origin}) {what} and is never cached, but "
                    f"its caching behaviour is {behavior!r}: a resource lives for one run "
                    "and its release runs after it; remove @cache(behavior=...) from it (or "
                    "leave it out of the adapter's default=/recompute=), or mark it "
                    'behavior="ignore"'
                )
            decided[name] = NodeCache(
                name, None, behavior, None, None, frozenset(),
                "an owned resource (or borrows from one): it lives for one run",
                _AS_IGNORED,
            )  # fmt: skip
            continue
        version = graph_types.HamiltonNode.from_node(node_).version
        left_out = frozenset(inp.name for inp in spec.inputs if inp.name in resources)
        feeds = {"ignore": _AS_IGNORED, "disable": _AS_DISABLED}.get(behavior, _AS_VALUE)
        why: str | None = None
        if behavior == "disable":
            why = 'behavior="disable"'
        elif version is None:
            why = "its source cannot be read, so it has no code version"
        elif tags.get("hamilton.data_loader") or tags.get("hamilton.data_saver"):
            why = "a data loader or saver (load_from / save_to / @dataloader / @datasaver)"
        elif left_out and not asked:
            why = (
                "it takes an owned resource as an input; @cache(behavior=...) caches it "
                "with the resource left out of its key"
            )
        mode = None if why is not None else (LOOKUP if behavior == "default" else STORE)
        decided[name] = NodeCache(name, mode, behavior, version, fmt, left_out, why, feeds)
    return Cache(adapter, decided)
