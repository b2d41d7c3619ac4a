"""The device the backfill plan placed a feature on, as the feature's UDF sees it.

The router (:func:`omni_iceberg.backfill.planner.route`) decides where a feature runs:
a stage's route is ``cpu`` or ``gpu``. The engine running the stage hands that decision
to the UDF explicitly, so a UDF never picks a GPU on its own when the plan said CPU:

- :func:`placed` sets the planned device (``"cpu"`` or ``"cuda"``) while a stage's UDFs
  are set up and called (``FeatureRunner`` does this on every engine);
- :func:`planned_device` is what the UDF's model loader reads
  (:func:`omni_iceberg.features.library.models.device` for the built-ins);
- a class UDF whose ``setup`` takes a ``device`` parameter receives it there.

Outside a plan (a UDF called directly, in a notebook or a unit test) nothing is planned
and :func:`planned_device` is None: the loaders then look for a GPU themselves.

A context variable, not a process global: a Spark Python worker or a local worker
process runs one stage's calls at a time, but a process running two stages in threads
(tests, an embedding application) keeps each call's own placement.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

CPU, CUDA = "cpu", "cuda"
#: a stage's route (PlannedFeature.engine / Stage.engine) -> the device its UDFs are given
ROUTE_DEVICES = {"cpu": CPU, "gpu": CUDA}

_planned: contextvars.ContextVar[str | None] = contextvars.ContextVar("omni_planned_device", default=None)


def device_of_route(route: str) -> str:
    """The device a stage routed ``route`` (``cpu``/``gpu``) runs its UDFs on."""
    try:
        return ROUTE_DEVICES[route]
    except KeyError:
        raise ValueError(f"unknown route {route!r}: a plan routes a feature to one of "
                         f"{', '.join(sorted(ROUTE_DEVICES))}") from None


def planned_device() -> str | None:
    """The device the running plan placed the current UDF call on; None outside a plan."""
    return _planned.get()


@contextlib.contextmanager
def placed(device: str | None) -> Iterator[None]:
    """Run the block with ``device`` as the planned device (None: leave it as it is)."""
    if device is None:
        yield
        return
    if device != CPU and not device.startswith(CUDA):
        raise ValueError(f"unknown device {device!r}: use {CPU!r} or {CUDA!r}")
    token = _planned.set(device)
    try:
        yield
    finally:
        _planned.reset(token)
