"""Alembic migrations of the store's schema, shipped inside the package so an installed wheel can upgrade its
database (``rubric-monitor db upgrade``). ``versions/0001_initial.py`` is the schema of release 0.1.0."""
