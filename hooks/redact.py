"""PostToolUse hook of the example: redact e-mail addresses from database results.

Declared on an agent as `python: redact:RedactEmails` (module hooks/redact.py, class
RedactEmails); `with:` options arrive as keyword arguments.
"""

from __future__ import annotations

import re

from fim.hooks.base import PostToolUseHook
from fim.types import HookContext, HookResult

EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")


class RedactEmails(PostToolUseHook):
    """Replace every e-mail address in a tool result with `<email>` (keeps the domain when
    `keep_domain: true`), so customer addresses do not reach the model."""

    async def __call__(self, context: HookContext) -> HookResult:
        if not context.tool_result:
            return self.allow()
        keep_domain = bool(self.options.get("keep_domain", False))

        def replace(match: re.Match[str]) -> str:
            return "<email>@" + match.group(0).split("@", 1)[1] if keep_domain else "<email>"

        redacted = EMAIL.sub(replace, context.tool_result)
        if redacted == context.tool_result:
            return self.allow()
        return self.allow(modified_result=redacted)
