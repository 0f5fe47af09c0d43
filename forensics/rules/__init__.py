"""Built-in rules. Each module is one pluggy plugin, registered through the
same hooks a team's plugin uses (see `forensics.hookspecs`)."""
