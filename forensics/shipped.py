"""Where the data shipped with the package lies: rules, schema, message catalogue.

Installed, it is the package `forensics.rules_data` (the checkout's `rules/`
folder, mapped by pyproject.toml). Imported straight from a source tree
without that mapping (the docs build imports the checkout beside a plain
`pip install .`), it is the checkout's `rules/` folder itself.
"""

from __future__ import annotations

import functools
import os

PACKAGE = "forensics.rules_data"
_CHECKOUT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "rules"))


@functools.lru_cache(maxsize=1)
def rules_folder():
    """The shipped rules folder, as an importlib Traversable (a Path from a checkout)."""
    from importlib import resources

    try:
        return resources.files(PACKAGE)
    except ModuleNotFoundError:
        from pathlib import Path

        return Path(_CHECKOUT)
