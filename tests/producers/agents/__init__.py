"""Agent programs run as subprocesses with a producer venv's python (see ``tests/producers/run.py``)."""
