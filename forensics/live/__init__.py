"""Live parts: capturing a running job (`collect`)."""
