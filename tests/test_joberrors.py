"""The error a failed job raises: the root-cause rank's own exception type where the kernel can
import it, a ``JobFailedError`` all the same (jobs/errors.py). The real kernel's cell:
tests/test_kernel_values.py."""

from __future__ import annotations

import json

import pytest

from jupyter_disttrain.jobs.errors import JobCancelledError, JobFailedError, job_error, rank_type
from jupyter_disttrain.notebook.magics import JobFailedError as FromTheMagic
from jupyter_disttrain.payloads.jobs import Failure


def story(exception: str | None, message: str | None, traceback: str = "Cell In[2], line 6\n...") -> Failure:
    return Failure("rank-1", f"rank-1: {exception}", exception, "In [2]", 6, traceback, "raw", [], message)


class NotebookError(Exception):
    """A class the notebook defined (its traceback names it without a module)."""


def test_the_ranks_type_is_raised_and_is_a_job_failed_error_too() -> None:
    err = job_error(
        "%%distrun: job x Failed (root cause: rank-1)", story("ZeroDivisionError", "division by zero")
    )
    assert (
        isinstance(err, ZeroDivisionError)
        and isinstance(err, JobFailedError)
        and FromTheMagic is JobFailedError
    )
    assert type(err).__name__ == "ZeroDivisionError" and type(err).__module__ == "builtins"
    assert str(err) == "division by zero" and err.args == ("division by zero",)
    assert err.job_message == "%%distrun: job x Failed (root cause: rank-1)" and err.story is not None
    # The cell shows the rank's traceback, mapped to the cells, then the line naming the job.
    shown = err._render_traceback_()
    assert (
        shown[0] == "Cell In[2], line 6"
        and shown[-1] == "\x1b[2mJobFailedError: %%distrun: job x Failed (root cause: rank-1)\x1b[0m"
    )
    with pytest.raises(ZeroDivisionError):
        raise err
    with pytest.raises(JobFailedError):
        raise err
    # One class per type: two failures of the same kind raise the same class.
    assert type(job_error("m", story("ZeroDivisionError", "again"))) is type(err)


def test_keys_messages_libraries_and_the_notebooks_own_classes() -> None:
    key = job_error("m", story("KeyError", "'lr'"))
    assert isinstance(key, KeyError) and key.args == ("lr",) and str(key) == "'lr'"
    decoder = job_error(
        "m", story("json.decoder.JSONDecodeError", "Expecting value: line 1 column 1 (char 0)")
    )
    assert isinstance(decoder, json.JSONDecodeError) and isinstance(decoder, ValueError)
    own = job_error("m", story("NotebookError", "bad lr"), {"NotebookError": NotebookError})
    assert isinstance(own, NotebookError) and str(own) == "bad lr"
    assert type(own).__name__ == "NotebookError"


@pytest.mark.parametrize(
    "name",
    [
        "NoSuchError",  # neither built in nor the notebook's
        "no_such_package.Error",  # not installed here
        "json.NoSuchError",  # no such class in an installed module
        "SystemExit",  # not an Exception: never raised for a failed job
        "KeyboardInterrupt",
        "json.dumps",  # not a class
        "__import__('os').system('x')",  # not a name at all
        "jupyter_disttrain.jobs.errors.JobFailedError",  # our own error: no double
    ],
)
def test_a_type_the_kernel_cannot_have_falls_back_to_job_failed_error(name: str) -> None:
    assert rank_type(name) is None
    err = job_error("%%distrun: job x Failed", story(name, "it broke"))
    assert type(err) is JobFailedError and str(err) == "%%distrun: job x Failed"


class Final(Exception):
    def __init_subclass__(cls, **kwargs: object) -> None:
        raise TypeError("no subclasses")


class NeedsArgs(Exception):
    def __init__(self, a: int, b: int) -> None:
        super().__init__(a, b)


def test_a_type_that_cannot_be_combined_falls_back_and_one_with_arguments_does_not() -> None:
    assert type(job_error("m", story("Final", "x"), {"Final": Final})) is JobFailedError
    err = job_error("m", story("NeedsArgs", "(1, 2)"), {"NeedsArgs": NeedsArgs})  # its __init__ is not called
    assert isinstance(err, NeedsArgs) and str(err) == "(1, 2)"


def test_without_a_traceback_or_a_type_the_error_is_todays() -> None:
    assert type(job_error("m", None)) is JobFailedError
    assert type(job_error("m", story(None, None, traceback=""))) is JobFailedError
    err = job_error("%%distrun: job x Failed", story("ValueError", "bad", traceback=""))
    assert isinstance(err, ValueError)
    assert err._render_traceback_() == ["JobFailedError: %%distrun: job x Failed (ValueError: bad)"]
    cancelled = JobCancelledError("%%distrun: job x cancelled")
    assert isinstance(cancelled, JobFailedError) and cancelled._render_traceback_() == [str(cancelled)]
