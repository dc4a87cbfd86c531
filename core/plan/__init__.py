"""The session record and its rules: what a simulation is asked (model, parallel plan,
cluster, cost, reliability), each field's metadata, and the rules between fields.

Modules, lowest first (each imports only those above it in this list):

* :mod:`core.plan.fields`: field metadata (:data:`~core.plan.fields.BOUNDS`, the unit/help
  helper), the check of one value (:func:`~core.plan.fields.check_value`) and the error types
  (:class:`~core.plan.fields.FieldError`, :class:`~core.plan.fields.ConfigError`).
* :mod:`core.plan.model_config`: :class:`~core.plan.model_config.ModelConfig` and the model's
  enumerations.
* :mod:`core.plan.parallel`: :class:`~core.plan.parallel.ParallelPlan`, the plan's
  enumerations (schedules, recomputation, precisions ...) and quantities derived from a plan.
* :mod:`core.plan.layout`: the split of the layers over pipeline stages and virtual stages,
  custom pipeline layouts.
* :mod:`core.plan.cluster`: cluster, cost and reliability records; GPU kinds and their tables.
* :mod:`core.plan.presets`: model families (GPT, Llama) and the published model presets.
* :mod:`core.plan.session`: :class:`~core.plan.session.Session`, the record a session file
  holds.
* :mod:`core.plan.model_rules`: the rules of a model alone.
* :mod:`core.plan.rules`: :func:`~core.plan.rules.validate` and every rule that involves the
  plan (the schedule rules among them), :func:`~core.plan.rules.inactive_fields`.
* :mod:`core.plan.verdicts`: :class:`~core.plan.verdicts.PlanVerdicts`, validate's verdict on
  many plans of one model and cluster, each rule memoized by the fields it reads (a sweep's
  candidates).

A change to what a session holds (a new field, a new rule between fields) goes here. Readers of
other formats are in :mod:`core.io` (the vTrain authors' JSON: :mod:`core.io.vtrain_json`). It
imports only :mod:`core.schedules` and :mod:`core.util`.
"""
