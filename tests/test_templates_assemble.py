""":meth:`core.sim.templates.Template.assemble`: units repeated once per layer, each
repetition's local task indices shifted by the tasks before it (the arrays written out by hand
for two small units)."""

from __future__ import annotations

from core.sim.templates import Template, TemplateUnit


def _unit(tasks, side=(), last=(), start=()) -> TemplateUnit:
    u = TemplateUnit()
    u.tasks, u.side, u.last, u.start = list(tasks), list(side), list(last), list(start)
    return u


def test_assemble_repeats_each_unit_per_layer_with_shifted_indices():
    layer = _unit([(1, 0, 10, 20), (2, 0, 11, 21)],
                  side=[(3, 12, 22, 0, 1), (4, 13, 23, 1, -1)], last=[(5, 14, 24, 1)])
    head = _unit([(6, 1, 15, 25)], start=[(7, 16, 26, 0)])
    t = Template.assemble([(layer, [3, 4]), (head, [-1]), (layer, [])])
    assert t.kind.tolist() == [1, 2, 1, 2, 6] and str(t.kind.dtype) == "int8"
    assert t.stream.tolist() == [0, 0, 0, 0, 1]
    assert t.src.tolist() == [10, 11, 10, 11, 15] and str(t.src.dtype) == "int64"
    assert t.op.tolist() == [20, 21, 20, 21, 25] and str(t.op.dtype) == "int16"
    assert t.layer.tolist() == [3, 3, 4, 4, -1] and str(t.layer.dtype) == "int32"
    assert t.side_kind.tolist() == [3, 4, 3, 4]
    assert t.side_src.tolist() == [12, 13, 12, 13] and t.side_op.tolist() == [22, 23, 22, 23]
    assert t.side_layer.tolist() == [3, 3, 4, 4]
    # after / before: local index + 2 tasks per earlier repetition; -1 stays -1
    assert t.side_after.tolist() == [0, 1, 2, 3] and t.side_before.tolist() == [1, -1, 3, -1]
    assert t.last_kind.tolist() == [5, 5] and t.last_after.tolist() == [1, 3]
    assert t.last_src.tolist() == [14, 14] and t.last_layer.tolist() == [3, 4]
    # the head's start task: before its own task, after the layers' 4
    assert t.start_kind.tolist() == [7] and t.start_before.tolist() == [4]
    assert t.start_src.tolist() == [16] and t.start_op.tolist() == [26]
    assert t.start_layer.tolist() == [-1]
