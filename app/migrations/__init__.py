"""Alembic migrations, kept inside the package so ``gpuq db upgrade`` works
from an installed wheel. The repository's top-level ``migrations`` is a
symlink to this folder and ``alembic.ini`` points here, so plain ``alembic``
commands work from a checkout too."""
