"""Ray helpers: the lazy import, Dataset conversion and actor-pool options."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from fastrag.errors import ConfigError, missing_extra


def require_ray(feature: str) -> Any:
    """The ``ray`` module (with Ray Data), or MissingExtraError naming the ``[ray]`` extra."""
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise missing_extra("ray[data]", "ray", feature) from None
    return ray


def init_if_needed(ray: Any) -> None:
    """Start a local Ray cluster when none is running (as Ray Data itself would)."""
    if not ray.is_initialized():
        ray.init(include_dashboard=False, log_to_driver=False)


def to_dataset(ray: Any, data: Any, column: str, batch_size: int, *, index: bool = True) -> Any:
    """A Ray Dataset from a Dataset (as is), an Arrow table, or a list of values (one column
    ``column``). Tables and lists gain a ``query_index`` column (their row number) when they
    have none, and are cut into blocks of ``batch_size`` rows so actors share the work."""
    if isinstance(data, ray.data.Dataset):
        if column not in data.schema().names:
            raise ConfigError(
                f"the Dataset has no column {column!r}; its columns are {data.schema().names}"
            )
        return data
    if isinstance(data, pa.Table):
        table = data
    elif isinstance(data, Sequence) and not isinstance(data, (str, bytes)):
        # a value that is not a string becomes null: its row comes back as an error row
        table = pa.table(
            {column: pa.array([x if isinstance(x, str) else None for x in data], pa.string())}
        )
    else:
        raise ConfigError(
            f"expected a ray.data.Dataset, an Arrow table or a list, got {type(data).__name__}"
        )
    if column not in table.column_names:
        raise ConfigError(
            f"the table has no column {column!r}; its columns are {table.column_names}"
        )
    if index and "query_index" not in table.column_names:
        table = table.append_column("query_index", pa.array(range(table.num_rows), pa.int64()))
    blocks = [table.slice(lo, batch_size) for lo in range(0, table.num_rows, batch_size)]
    return ray.data.from_arrow(blocks or [table])


def actor_options(concurrency: int) -> dict[str, Any]:
    """map_batches options: a fixed pool of ``concurrency`` actors. Ray Data restarts an actor
    that dies and retries its batch (its actor pools default to ``max_restarts=-1`` and
    ``max_task_retries=-1``; the tests kill one mid-job)."""
    import ray.data

    return {"compute": ray.data.ActorPoolStrategy(size=concurrency)}
