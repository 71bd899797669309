"""A sweep's points on a Dask cluster (dask.distributed, the optional extra `npusim[dask]`).

    with dask_executor("tcp://HOST:8786") as executor:
        result = sweep("examples/bottleneck.yaml", "bm1684", grid, executor=executor)

The scheduler and workers run elsewhere (`dask scheduler`, `dask worker tcp://HOST:8786`, each
worker with npusim installed); the client only connects, so an address that does not answer,
or a scheduler without a worker, fails within `timeout` seconds as a ClusterError rather than
leaving the sweep waiting. The points travel as sim.sweep.run_point calls on plain strings, so
each worker reads the graph file and a chip YAML given by path itself.
"""

from collections.abc import Iterator
from concurrent.futures import Executor
from contextlib import contextmanager

from isa.errors import ClusterError

CONNECT_TIMEOUT = 10.0  # seconds to reach the scheduler, and again for a worker to be there
INSTALL = "pip install 'npusim[dask]'"


@contextmanager
def dask_executor(address: str, timeout: float | None = None) -> Iterator[Executor]:
    """A concurrent.futures Executor on the Dask scheduler at `address` (tcp://HOST:8786), its
    client closed on leaving. A worker that dies running a point (dask gives up on it after its
    retries) ends the sweep with a ClusterError naming the address."""
    timeout = CONNECT_TIMEOUT if timeout is None else timeout
    try:
        from distributed import Client, KilledWorker
    except ImportError:
        raise ClusterError(f"scheduler {address}: dask.distributed is not installed; {INSTALL}") from None
    _check_address(address)
    try:
        client = Client(address, timeout=timeout)
    except (OSError, TimeoutError, ValueError) as exc:
        raise ClusterError(f"scheduler {address}: cannot connect within {timeout:g} s: {_reason(exc)}") from None
    try:
        client.wait_for_workers(1, timeout=timeout)
    except TimeoutError:
        client.close()
        raise ClusterError(f"scheduler {address}: no worker joined within {timeout:g} s; start one with `dask worker {address}`") from None
    try:
        yield client.get_executor()
    except KilledWorker as exc:
        raise ClusterError(f"scheduler {address}: a worker died running a point: {exc}") from None
    finally:
        client.close()


def _check_address(address: str) -> None:
    """A malformed address (an unknown scheme, no port) is refused before a client starts its
    IO loop for it, naming what is wrong."""
    from distributed.comm.addressing import parse_address
    from distributed.comm.registry import get_backend

    try:
        scheme, location = parse_address(address)
        backend = get_backend(scheme)
        if scheme != "inproc":  # an in-process cluster's address names no host
            backend.get_address_host_port(location)
    except ValueError as exc:
        raise ClusterError(f"scheduler {address}: not a scheduler's address: {exc}") from None


def _reason(exc: BaseException) -> str:
    """The exception's message, and its cause's where that says more (a host name that does not resolve)."""
    cause = exc.__cause__
    return f"{exc} ({cause})" if cause is not None and str(cause) else str(exc)
