"""MkDocs hooks: the generated pages are brought up to date before each build.

`mkdocs build` runs docs/gen_pages.py (the rule and message reference, the
report schema and examples, the benchmarks page) before it reads docs/, so a
build always shows what the code and the recorded benchmark runs say. With
FORENSICS_DOCS_CHECK=1 (the test suite) it changes nothing and fails the
build when a committed page is not current instead.
"""

import logging
import os
import sys

log = logging.getLogger("mkdocs.hooks.forensics")


def on_pre_build(config, **kwargs):
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    import gen_pages
    from mkdocs.exceptions import PluginError

    os.environ.setdefault("FORENSICS_DISABLE_PLUGIN_AUTOLOAD", "1")
    if os.environ.get("FORENSICS_DOCS_CHECK") == "1":
        found = gen_pages.differences(config["docs_dir"])
        wrong = [f"{kind}: {path}" for kind, paths in found.items() for path in paths]
        if wrong:
            raise PluginError("generated pages are not current (run python docs/gen_pages.py): " + "; ".join(wrong[:20]))
        return
    for path in gen_pages.write(config["docs_dir"]):
        log.info("generated %s", path)
