"""Resolution: a policy file, read against the installed plugins.

The layers of the policy code (pinned by the ``policy-layers`` import contract):

* :mod:`ctxpolicy.policy` — the DSL at the bottom: the pydantic models (the source
  of truth), the YAML/TOML readers and their positions, ``${ENV}`` interpolation,
  ``extends`` merging, the compat readers and the diagnostics. Everything may import
  it; it imports nothing of ctxpolicy outside itself.
* :mod:`ctxpolicy.plugins`, :mod:`ctxpolicy.budget`, :mod:`ctxpolicy.tokens` — the
  registry of components, the budget arithmetic and the token counters, built on the
  models.
* :mod:`ctxpolicy.resolve` (this package) — what needs both: :mod:`.load`
  (``load_policy``, ``validate_file``, ``resolve_all``: files, agents, components),
  :mod:`.lookup` (a component in the registry), :mod:`.checks` (the semantic checks,
  with the budget arithmetic), :mod:`.schema` (the JSON Schema with the plugins'
  options) and :mod:`.docs` (the generated policy reference).

Nothing is re-exported here: ``ctxpolicy.load_policy`` is the public name.
"""
