"""Code that runs inside the training processes. Standard library only: it adds no start-up cost."""
