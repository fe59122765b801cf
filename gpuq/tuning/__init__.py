"""The weight tuner's decisions, pure (no DB, no clock): see :mod:`gpuq.tuning.tuner`."""
