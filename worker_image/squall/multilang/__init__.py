"""Storm's multilang protocol: components in other languages (docs/topology.md, "Components in
other languages"). `ShellBolt` and `ShellSpout` run a command per task and speak Storm's
protocol with it; `adapters` finds Storm's published adapters (storm.js, storm.py, storm.rb)."""

from squall.multilang.shell import SHELL_CONFIG, ShellBolt, ShellError, ShellSpout

__all__ = ["SHELL_CONFIG", "ShellBolt", "ShellError", "ShellSpout"]
