"""What an operator asks its Flink runtime context, whichever Python execution mode it runs in."""
from __future__ import annotations

from pyflink.datastream.functions import RuntimeContext


def subtask_index(runtime_context: RuntimeContext) -> int:
    """The subtask's index. In `thread` mode PyFlink 2.2 asks the Java context for a method Flink 2 moved
    to its TaskInfo (AttributeError 'getIndexOfThisSubtask'), so that is asked instead."""
    try:
        return runtime_context.get_index_of_this_subtask()
    except AttributeError:
        return runtime_context._runtime_context.getTaskInfo().getIndexOfThisSubtask()
