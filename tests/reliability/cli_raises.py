"""A user module that fails on import (the CLI must say so, not print a traceback)."""
raise RuntimeError("this module is broken on purpose")
