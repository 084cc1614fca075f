"""Scaffolds (agent harnesses). Each is registered by name here, one line per scaffold; the class is
imported only when a run asks for it (`load_scaffold(name)`)."""

from legorl.agents.base import register_scaffold

register_scaffold("builtin", "legorl.agents.builtin:BuiltinScaffold")
register_scaffold("oracle", "legorl.agents.harbor_like:OracleScaffold")
register_scaffold("nop", "legorl.agents.harbor_like:NopScaffold")
register_scaffold("mini-swe-agent", "legorl.agents.mini_swe:MiniSweAgent")
register_scaffold("claude-code", "legorl.agents.claude_code:ClaudeCode")
register_scaffold("opencode", "legorl.agents.opencode:OpenCode")
register_scaffold("codex", "legorl.agents.codex:Codex")
register_scaffold("qwen-code", "legorl.agents.qwen_code:QwenCode")
register_scaffold("openhands", "legorl.agents.openhands:OpenHands")
