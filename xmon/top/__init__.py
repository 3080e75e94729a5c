"""``xmon top``: the interactive terminal view. Imports textual, never jax."""
