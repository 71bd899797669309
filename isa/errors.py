"""The errors npusim raises on purpose.

Every one derives from `SimError`, so a caller (or the CLI) can catch them all and show a
single line. Messages name what went wrong, where, the limit and the value. `sim` re-exports
these names (`sim.SimError`); they live here because `isa` is the lowest layer and must not
import `sim`.
"""


class SimError(Exception):
    """Base class of every error the simulator raises on purpose."""


class ConfigError(SimError):
    """A chip YAML, an override or a graph file is malformed: names the file and key or line."""


class GraphError(SimError):
    """A graph is built wrongly: unknown or duplicate tensor names, tensors of another graph."""


class ShapeError(SimError):
    """Operand shapes do not match what the op requires."""


class UnsupportedError(SimError):
    """The op, dtype or parameter is not supported (by the op or by the chip)."""


class OutOfMemoryError(SimError):
    """A buffer does not fit in a memory: names the tensor, the bytes asked and the bytes free."""


class ProgramError(SimError):
    """A lowered program is malformed: bad text, unknown engine, access outside a memory."""


class IndexRangeError(SimError):
    """An index read at run time (a gather's, a scatter's) is out of range, or a scatter writes
    one place twice: names the op, the position and the value. `at`: the (memory, byte address)
    the bad index was read from, for the machine to name the graph tensor holding it."""

    def __init__(self, message: str, at: tuple[str, int] | None = None) -> None:
        super().__init__(message)
        self.at = at


class DeadlockError(SimError):
    """A program whose waits can never be met; lists the stuck instructions."""


class InputError(SimError):
    """Run inputs are missing or do not match the graph's inputs."""


class ClusterError(SimError):
    """A sweep's Dask cluster cannot be used: the scheduler is unreachable, has no worker, or its
    workers died; names the scheduler's address and the reason."""
