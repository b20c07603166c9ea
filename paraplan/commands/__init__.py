"""Subcommands of ``paraplan``, one module each.

A module here that defines a module attribute ``command`` (a ``click.Command`` or
``click.Group``) is added to the ``paraplan`` group automatically (see ``paraplan.cli``); a
module whose imports fail (a missing optional dependency) is skipped. Names starting with ``_``
are private helpers, not commands.
"""
