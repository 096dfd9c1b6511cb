"""Python functions the example workflows call with ``py>``."""
