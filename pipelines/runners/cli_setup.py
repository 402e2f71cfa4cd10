"""What every ``bertprep`` command sets up before its work: the click context of a command that passes
unknown ``--options`` on to Beam, and Beam's logging turned down (light to import: no Beam yet)."""

from __future__ import annotations

import logging
from typing import Any

HELP: dict[str, Any] = {"help_option_names": ["-h", "--help"]}
# Any other --option of a pipeline command is a Beam pipeline option (ctx.args).
PASSTHROUGH: dict[str, Any] = dict(ignore_unknown_options=True, allow_extra_args=True, **HELP)


def quiet_beam(*, limit_arenas: bool = True) -> None:
    """Mute Beam's import-time chat; ``limit_arenas``: cap glibc's malloc arenas as well (see
    :func:`bertstream.pipelines.runners.runner.limit_malloc_arenas`)."""
    # `import apache_beam` configures root logging at WARNING and chats about optional clients.
    logging.getLogger().setLevel(logging.ERROR)
    # A failing DoFn is logged by Beam with its traceback before the error reaches us; we report it once.
    logging.getLogger("apache_beam").setLevel(logging.CRITICAL)
    if limit_arenas:
        from bertstream.pipelines.runners.runner import limit_malloc_arenas

        limit_malloc_arenas()
