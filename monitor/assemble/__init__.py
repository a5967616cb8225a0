"""② Spans → conversations. In: the stored spans of one conversation key. Out: ``Conversation`` objects (messages,
tool calls and results, system instructions, tokens) and the spans rejected, by reason."""

from monitor.assemble.assembler import (
    Assembly,
    TraceTranscript,
    assemble,
    conversation_key,
    message_key,
    operation_of,
    trace_transcript,
)

__all__ = [
    "Assembly", "TraceTranscript", "assemble", "conversation_key", "message_key", "operation_of", "trace_transcript",
]
