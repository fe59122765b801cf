"""The weight tuner's decisions, pure (no DB, no clock): see :mod:`app.tuning.tuner`."""
