"""Human-readable reports of an opencl device's allocator statistics.

``memory_summary(stats, device_index, abbreviated)`` turns the flat dictionary returned by
``torch.opencl.memory_stats()`` (keys such as ``allocated_bytes.large_pool.peak``) into a text
table in the spirit of ``torch.cuda.memory_summary``: one row per statistic, sub-rows per pool,
columns for the current value, the peak, and the running totals of what was allocated and freed.

Promises: the function only reads `stats`; a key that is missing reads as 0, so a report can be
made from an empty dictionary (an allocator that was never used). Pure function, thread-safe.
"""

# (title, key prefix, whether the values are byte counts)
_ROWS = (
    ("Allocated memory", "allocated_bytes", True),
    ("Active memory", "active_bytes", True),
    ("Requested memory", "requested_bytes", True),
    ("Device reserved memory", "reserved_bytes", True),
    ("Non-releasable memory", "inactive_split_bytes", True),
    ("Allocations", "allocation", False),
    ("Active allocs", "active", False),
    ("Device reserved segments", "segment", False),
    ("Non-releasable allocs", "inactive_split", False),
)

_POOLS = (("all", None), ("large_pool", "from large pool"), ("small_pool", "from small pool"))
_COLUMNS = (("current", "Cur Usage"), ("peak", "Peak Usage"),
            ("allocated", "Tot Alloc"), ("freed", "Tot Freed"))

_NAME_WIDTH = 26
_CELL_WIDTH = 14


def format_bytes(count: int) -> str:
    """`count` bytes with a 1024-based unit: ``0 B``, ``1023 B``, ``1.50 KiB``, ``64.00 MiB``."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _format_count(count: int) -> str:
    return f"{count:,}"


def memory_summary(stats: dict, device_index: int, abbreviated: bool = False) -> str:
    """The report for `stats` (a memory_stats() dictionary) of device `device_index`.

    With `abbreviated` only the aggregate row of each statistic is shown; otherwise the large-
    and small-pool sub-rows follow it."""
    def get(key: str) -> int:
        return int(stats.get(key, 0))

    width = _NAME_WIDTH + 2 + len(_COLUMNS) * (_CELL_WIDTH + 3) - 1
    heavy = "=" * width
    light = "-" * width

    lines = [heavy,
             f" oclvm memory summary, device opencl:{device_index}",
             light,
             f" num_alloc_retries: {get('num_alloc_retries'):<10}  num_ooms: {get('num_ooms'):<10}"
             f"  num_device_alloc: {get('num_device_alloc'):<8}  "
             f"num_device_free: {get('num_device_free')}",
             light,
             " " + "Metric".ljust(_NAME_WIDTH) + "".join(
                 " | " + title.rjust(_CELL_WIDTH) for _, title in _COLUMNS),
             light]

    pools = _POOLS[:1] if abbreviated else _POOLS
    for title, prefix, is_bytes in _ROWS:
        render = format_bytes if is_bytes else _format_count
        for pool, pool_title in pools:
            name = title if pool_title is None else "      " + pool_title
            cells = "".join(" | " + render(get(f"{prefix}.{pool}.{column}")).rjust(_CELL_WIDTH)
                            for column, _ in _COLUMNS)
            lines.append(" " + name.ljust(_NAME_WIDTH) + cells)
        lines.append(light)

    oversize = " | ".join(f"{label}: {get(f'oversize_{kind}.current')} cur /"
                          f" {get(f'oversize_{kind}.peak')} peak"
                          for kind, label in (("allocations", "Oversize allocations"),
                                              ("segments", "Oversize segments")))
    lines.append(" " + oversize)
    lines.append(heavy)
    return "\n".join(lines) + "\n"
