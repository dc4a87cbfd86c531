"""Megatron-LM launches in and out of sessions (``vtrain import|export megatron-args``).

What belongs here, one module per step (import each name from its module; this package
re-exports nothing):

* :mod:`.arguments`: Megatron-LM's parser as data (``resources/megatron_arguments.json``) and
  the table of arguments vtrain maps to session fields (``ARGUMENTS``), with the error type.
* :mod:`.launch`: a launch script, argument list or printed argument dump into arguments
  (``read_launch``, through :mod:`core.io.shell_reader`).
* :mod:`.mapping`, :mod:`.model_arguments`, :mod:`.plan_arguments`, :mod:`.to_session`: the
  arguments into a session (``session_from_launch``, ``import_file``), one function per concern.
* :mod:`.from_session`: a session into arguments (``export_arguments``).
* :mod:`.export`: the script around them (``export_script``, ``rewrite_script`` for
  ``--into``, the environment).
* :mod:`.rules`: Megatron-LM's start-up checks, which the export and the import apply.

docs/megatron_args.md describes the mapping, argument by argument.
"""
