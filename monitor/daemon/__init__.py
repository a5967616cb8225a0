"""The long-running process: the scheduler loop and signal handling (``loop``, ``shutdown``) and the HTTP
endpoints ``/metrics``, ``/healthz``, ``/readyz`` (``http``)."""
