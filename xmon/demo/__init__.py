"""The demo job ``xmon demo`` runs (``python -m xmon.demo``): a JAX program like a user's, kept
apart from xmon's own code. Importing this package imports nothing; its ``__main__`` imports jax.
"""
