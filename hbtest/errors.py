"""Project exceptions. A `UserError` is something the user can fix (bad file, unreachable
instrument, limit exceeded); the CLI prints its message as one line and exits with code 2."""


class UserError(Exception):
    """An error caused by user input; the message names the file, field or instrument."""

    exit_code = 2


class ConfigError(UserError):
    """A sweep or rig definition file is malformed or inconsistent."""

    def __init__(self, source: str, key: str, problem: str):
        self.source, self.key, self.problem = source, key, problem
        where = f"{source}: {key}" if key else source
        super().__init__(f"{where}: {problem}")


class InstrumentError(UserError):
    """An instrument cannot be reached or misbehaves."""


class LimitExceeded(UserError):
    """A rig safety limit (voltage, displacement, ...) would be or was exceeded."""


class RigTrip(LimitExceeded):
    """The rig's safety layer tripped (a limit was reached on a measured channel or an
    output): outputs were zeroed and the trip stays latched until cleared."""


class RigFault(InstrumentError):
    """A run was stopped by the rig (trip, limit, instrument fault, lost connection); the store
    was marked interrupted and can be resumed once the rig is back."""

    exit_code = 3


class StoreWriteError(UserError):
    """The run store could not be written (disk full, permissions); the store was marked
    interrupted where possible."""

    exit_code = 4


class Terminated(KeyboardInterrupt):
    """SIGTERM: stop now, like a second Ctrl-C (exit code 143)."""
