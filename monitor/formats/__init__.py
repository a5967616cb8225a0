"""File and wire formats, read without side effects: OTLP JSON (``otlp``), the GenAI message conventions
(``genai`` over ``genai_schema``), OpenAI-chat JSONL (``chat``), input files of either kind (``input_files``), JSON
text as traces carry it (``json_text``) and size-bounded YAML/JSON documents (``documents``)."""
