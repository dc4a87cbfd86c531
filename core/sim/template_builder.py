"""The task order of one stage's templates: which tasks one micro-batch's forward, backward and
weight gradient on one virtual stage run, and in what order.

What belongs here: :func:`stage_templates` (the cached entry point) and
:class:`_TemplateBuilder`, whose methods are its steps (the embedding, a layer's forward and
backward, an MoE layer's MLP half, multi-token prediction, the output layer) and the
helpers they share (tensor-parallel collectives around an op, the context-parallel ring,
the data-parallel gathers and reductions of a bucket). The template vocabulary, the
:class:`core.sim.templates.StageStructure` that shapes a template and the timing of templates
stay in :mod:`core.sim.templates`.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable

from core.sim.op_times import SAC_GATHERS, TP_OVERLAP_BLOCKS, W_OPS
from core.sim.pipeline_graph import COMM, COMPUTE, CP_RING, EP, K, OP
from core.sim.templates import SOURCE_INDEX, StageStructure, Template, TemplateUnit

# no public names: core.sim.stages imports what it uses
__all__: list[str] = []

#: A unit's parts: each unit with the layers it is repeated for (-1: not a layer's).
_Parts = list[tuple[TemplateUnit, list[int]]]


@lru_cache(maxsize=4096)
def stage_templates(st: StageStructure) -> tuple[Template, Template, Template]:
    """Untimed forward, backward (B when split) and weight-gradient (W; empty unless split)
    templates of one micro-batch on a virtual stage (see :func:`core.sim.graph.build_graph`;
    :meth:`Template.timed` gives them durations). Cached by the structure: a sweep's plans
    share a few hundred structures.

    Built by :meth:`_TemplateBuilder.build`, in the order the tasks run (embedding, the
    layers' forwards, MTP, output layer, then the backwards in reverse)."""
    return _TemplateBuilder(st).build()


class _TemplateBuilder:
    """Builds the templates of one :class:`StageStructure`: one method per piece of a template,
    sharing the structure's flags and the parts built so far.

    ``fwd_parts``, ``bwd_parts``, ``w_parts``: the units of the forward, backward and
    weight-gradient templates, each with the layers it repeats for; ``wunit``: where the
    backward unit being built puts its W tasks (a split backward), None otherwise.
    """

    def __init__(self, st: StageStructure) -> None:
        self.st = st
        self.sp = st.sp
        self.zero = st.zero_stage if st.dp else 0
        self.wunit: TemplateUnit | None = None
        self.layers = list(range(*st.layers))
        self.first, self.last = st.vstage == 0, st.vstage == st.num_vstages - 1
        self.fwd_parts: _Parts = []
        self.bwd_parts: _Parts = []
        self.w_parts: _Parts = []
        self.moe_set = set(st.moe_layers)
        self.swa_set = set(st.window_layers)
        self.mods = set(st.modules)
        self.mtp_list = [st.layers[1] + j for j in range(st.mtp)]  # global indices after the decoder's

    def build(self) -> tuple[Template, Template, Template]:
        """The forward, backward and weight-gradient templates, built in program order."""
        st = self.st
        if self.first:
            self.embedding_forward()
        for is_moe, swa, run in self.runs(self.layers):
            self.fwd_parts.append((self.layer_fwd(is_moe, swa), run))
        self.mtp_forward()
        if self.last:
            self.output_layer()
        self.mtp_backward()
        self.layers_backward()
        if self.first:
            self.embedding_backward()
        if not self.layers and not self.first and not self.last and not st.mtp:
            self.pass_through()
        return (Template.assemble(self.fwd_parts), Template.assemble(self.bwd_parts),
                Template.assemble(self.w_parts))

    # ------------------------------------------------------------------ shared helpers

    def comm(self, out: TemplateUnit, kind: str) -> None:
        """A blocking tensor-parallel collective ``tp_<kind>``; an MLA attention's latent
        collectives (source ``tp_mla_*``) are ``tp_*`` collectives."""
        out.add(K["tp_comm"], COMM, "tp_" + kind, "tp_" + kind.removeprefix("mla_"))

    def ring(self, out: TemplateUnit, kind: int, phase: str, pre: str | None) -> None:
        """Context parallelism: an attention op as its part outside the ring (``pre``, when
        given), the ring's core steps and the exposed part of their K/V exchange, which blocks
        compute; the hidden part of the exchange runs on the "CP exchange" stream beside the core
        (:func:`core.sim.stage_comm._cp_ring_times`)."""
        if pre is not None:
            out.add(kind, COMPUTE, pre, "attention_fwd" if phase == "fwd" else "attention_bwd")
        out.side.append((K["cp_p2p"], SOURCE_INDEX[f"cp_{phase}_hidden"], OP["cp_send_recv"],
                         len(out.tasks) - 1, -1))
        out.add(kind, COMPUTE, f"attention_core_{phase}", f"attention_core_{phase}")
        out.add(K["cp_p2p"], CP_RING, f"cp_{phase}_exposed", "cp_send_recv")

    def compute(self, out: TemplateUnit, kind: int, source: str, op: str) -> None:
        """One compute op (an attention op as its ring under context parallelism)."""
        if self.st.cp and op in ("attention_fwd", "attention_bwd"):
            self.ring(out, kind, "fwd" if op == "attention_fwd" else "bwd", source + ":pre")
        else:
            out.add(kind, COMPUTE, source, op)

    def block(self, out: TemplateUnit, kind: int, op: str, before: bool, after: bool) -> None:
        """The op with the tensor-parallel collectives around it: with sequence parallelism an
        all-gather before (``before``) and a reduce-scatter after (``after``); without, an
        all-reduce after (``after``). A split backward gives the op's W part to ``wunit``."""
        st, sp = self.st, self.sp
        # MLA (Megatron-Core MLASelfAttention): the forward gathers the latents, not the
        # input; the backward reduces the latents' gradients (core.model.mla.mla_tp_latent_width;
        # validation refuses MLA with tp_comm_overlap)
        latent = "mla_" if st.mla and op in ("attention_fwd", "attention_bwd") else ""
        if st.tp_overlap and op in TP_OVERLAP_BLOCKS:
            # --tp-comm-overlap: what the GEMMs do not hide blocks; the hidden parts run beside
            # the op (tp_overlap_split), drawn from its start
            ag = out.add(K["tp_comm"], COMM, f"tp_all_gather@{op}", "tp_all_gather")
            for coll in ("all_gather", "reduce_scatter"):
                out.side.append((K["tp_comm"], SOURCE_INDEX[f"tp_{coll}@{op}:hidden"], OP["tp_" + coll],
                                 ag, -1))
        elif st.tp and sp and before:
            self.comm(out, ("" if op == "attention_bwd" else latent) + "all_gather")
        if st.split and self.wunit is not None and op in W_OPS:
            self.wunit.add(K["wgrad"], COMPUTE, op + ":W", op)
            if op != "embedding_bwd":  # all weight gradient: no B task
                self.compute(out, kind, op + ":B", op)
        else:
            self.compute(out, kind, op, op)
        if st.tp_overlap and op in TP_OVERLAP_BLOCKS:
            out.add(K["tp_comm"], COMM, f"tp_reduce_scatter@{op}", "tp_reduce_scatter")
        elif st.tp and after:
            self.comm(out, ("" if op == "attention_fwd" else latent)
                      + ("reduce_scatter" if sp else "all_reduce"))

    def gather(self, out: TemplateUnit, bucket: str) -> None:
        """ZeRO-3: the parameters are all-gathered before they are used (Rajbhandari et al.
        2020, Sec. 5.3), blocking or prefetched on the communication stream."""
        if self.zero < 3:
            return
        if self.st.overlap_param_gather:
            out.side.append((K["dp_comm"], SOURCE_INDEX[bucket + "_ag"], OP["dp_all_gather"], -1,
                             len(out.tasks)))
        else:
            out.add(K["dp_comm"], COMM, bucket + "_ag", "dp_all_gather")

    def reduce(self, out: TemplateUnit, bucket: str) -> None:
        """Gradients of what just ran backward (its W part when split): ZeRO 2/3 reduce-scatter
        them every micro-batch (sharded gradients cannot accumulate locally), blocking or
        overlapped; ZeRO 0/1 with --overlap-grad-reduce reduce them bucket by bucket in the
        chunk's last backward only."""
        st, zero = self.st, self.zero
        if zero >= 2:
            if st.overlap_grad_reduce:
                out.side.append((K["dp_comm"], SOURCE_INDEX[bucket + "_rs"], OP["dp_reduce_scatter"],
                                 len(out.tasks) - 1, -1))
            else:
                out.add(K["dp_comm"], COMM, bucket + "_rs", "dp_reduce_scatter")
        elif st.dp and st.overlap_grad_reduce:
            src, op = (("_rs", "dp_reduce_scatter") if zero == 1 else ("_ar", "dp_all_reduce"))
            out.last.append((K["dp_comm"], SOURCE_INDEX[bucket + src], OP[op], len(out.tasks) - 1))

    def prefetch(self, out: TemplateUnit, bucket: str) -> None:
        """ZeRO 1/2 with --overlap-param-gather: the updated parameters of this bucket are
        all-gathered from the iteration's start, under the first forward."""
        if self.st.dp and self.zero in (1, 2) and self.st.overlap_param_gather:
            out.start.append((K["dp_comm"], SOURCE_INDEX[bucket + "_ag"], OP["dp_all_gather"],
                              len(out.tasks)))

    def backward_unit(self, layer_list: list[int], build: Callable[[TemplateUnit], None], bucket: str,
                      reduces: bool = True) -> None:
        """One backward unit built by ``build`` (and its W unit when split), repeated over
        ``layer_list``; ``reduces``: its gradients complete bucket ``bucket``."""
        st = self.st
        u, w = TemplateUnit(), TemplateUnit()
        self.wunit = w if st.split else None
        build(u)
        # the gradients are complete after the W part when split, after the backward otherwise
        reducer = w if st.split else u
        if reducer.tasks and reduces:
            self.reduce(reducer, bucket)
        self.bwd_parts.append((u, layer_list))
        if st.split:
            self.w_parts.append((w, layer_list))
        self.wunit = None

    def runs(self, layer_list: list[int]) -> list[tuple[bool, bool, list[int]]]:
        """``layer_list`` cut into runs of layers alike (dense or MoE, windowed attention or
        not), in order."""
        out: list[tuple[bool, bool, list[int]]] = []
        for x in layer_list:
            is_moe, swa = x in self.moe_set, x in self.swa_set
            if out and out[-1][:2] == (is_moe, swa):
                out[-1][2].append(x)
            else:
                out.append((is_moe, swa, [x]))
        return out

    def a2a(self, out: TemplateUnit, op: str, phase: str) -> None:
        """An expert all-to-all (its exposed part's own source under ``ep_overlap``)."""
        out.add(K["ep_all_to_all"], EP, f"ep_all_to_all@{phase}" if self.st.ep_overlap
                else "ep_all_to_all", op)

    # ------------------------------------------------------------------ the pieces, in order

    def embedding_forward(self) -> None:
        """The first stage's embedding: its bucket's gathers, then the vocab-parallel
        embedding with its all-reduce (reduce-scatter into the sequence-parallel region)."""
        u = TemplateUnit()
        self.prefetch(u, "first")
        self.gather(u, "first")
        self.block(u, K["embedding"], "embedding_fwd", before=False, after=True)
        self.fwd_parts.append((u, [-1]))

    def moe_fwd(self, u: TemplateUnit, kind: int, module: bool = False) -> None:
        """An MoE layer's MLP half (Megatron-Core MoELayer, all-to-all dispatcher): router,
        permutation, dispatch all-to-all over ep, all-gather over etp, the experts,
        reduce-scatter over etp, combine all-to-all, un-permutation, shared experts.
        ``module``: the ``MoELayer`` module alone (what ``--recompute-modules moe`` runs
        again): the router and un-permutation without the pre-MLP norm and residual add."""
        st = self.st
        router, unpermute = (("router_gate_fwd", "moe_unpermute_core_fwd") if module
                             else ("router_fwd", "moe_unpermute_fwd"))
        u.add(kind, COMPUTE, router, router)
        u.add(kind, COMPUTE, "moe_permute_fwd", "moe_permute_fwd")
        if st.ep:
            self.a2a(u, "ep_dispatch", "fwd")
        if st.etp_mode == "gather":
            u.add(K["tp_comm"], COMM, "etp_all_gather", "etp_all_gather")
        u.add(kind, COMPUTE, "experts_fwd", "experts_fwd")
        if st.etp_mode == "gather":
            u.add(K["tp_comm"], COMM, "etp_reduce_scatter", "etp_reduce_scatter")
        if st.ep:
            self.a2a(u, "ep_combine", "fwd")
        u.add(kind, COMPUTE, unpermute, unpermute)
        if st.etp_mode == "all_reduce":
            self.comm(u, "all_reduce")
        if st.shared:
            self.block(u, kind, "shared_experts_fwd", True, True)

    def moe_bwd(self, u: TemplateUnit) -> None:
        """The backward of :meth:`moe_fwd`, in reverse (the all-to-alls again, four per layer
        and micro-batch in all). Selective recomputation of ``shared_experts`` runs the shared
        experts' forward (with its tensor-parallel collectives) before their backward, of
        ``moe_act`` the experts' activation before their backward."""
        st, mods = self.st, self.mods
        if st.shared:
            if "shared_experts" in mods and "moe" not in mods:
                self.block(u, K["recompute"], "shared_experts_fwd", True, True)
            self.block(u, K["backward"], "shared_experts_bwd", True, True)
        u.add(K["backward"], COMPUTE, "moe_unpermute_bwd", "moe_unpermute_bwd")
        if st.ep:
            self.a2a(u, "ep_combine", "bwd")
        if st.etp_mode == "gather":
            u.add(K["tp_comm"], COMM, "etp_all_gather", "etp_all_gather")
        if "moe_act" in mods and "moe" not in mods:
            u.add(K["recompute"], COMPUTE, "experts_act_fwd", "experts_act_fwd")
        self.block(u, K["backward"], "experts_bwd", False, False)
        if st.etp_mode == "gather":
            u.add(K["tp_comm"], COMM, "etp_reduce_scatter", "etp_reduce_scatter")
        if st.ep:
            self.a2a(u, "ep_dispatch", "bwd")
        u.add(K["backward"], COMPUTE, "moe_permute_bwd", "moe_permute_bwd")
        if st.etp_mode == "all_reduce":
            self.comm(u, "all_reduce")
        self.block(u, K["backward"], "router_bwd", False, False)

    def layer_fwd(self, is_moe: bool, swa: bool) -> TemplateUnit:
        """One layer's forward (attention, then the MLP or MoE half), with its bucket's
        gathers."""
        u = TemplateUnit()
        bucket = "moe" if is_moe else "layer"
        self.prefetch(u, bucket)
        self.gather(u, bucket)
        self.block(u, K["forward"], "attention_swa_fwd" if swa else "attention_fwd", True, True)
        if is_moe:
            self.moe_fwd(u, K["forward"])
        else:
            self.block(u, K["forward"], "mlp_fwd", True, True)
        return u

    def mtp_comm(self, u: TemplateUnit, phase: str) -> None:
        """The tensor-parallel collective of an MTP layer's ``eh_proj`` (``tp_mtp_<phase>``)."""
        if self.st.tp:
            op = "tp_all_gather" if phase == "fwd" or self.sp else "tp_all_reduce"
            u.add(K["tp_comm"], COMM, f"tp_mtp_{phase}", op)

    def mtp_forward(self) -> None:
        """Multi-token prediction (Megatron-Core MultiTokenPredictionBlock on the last stage):
        each MTP layer embeds the tokens shifted once more, projects them with the previous
        hidden state (eh_proj and its tensor-parallel collectives, tp_mtp_*) and runs its
        transformer layer; the output layer and loss then run once per prediction (1 + N).
        Under context parallelism each MTP layer's forward first waits for its four
        ``roll_tensor`` boundary exchanges (``cp_mtp_roll``: the input and position ids rolled
        here, the labels and loss mask rolled before its loss, all on the last stage in the
        same forward, so charged together; :meth:`core.sim.stage_comm.StageComm.cp_mtp_roll`)."""
        st = self.st
        for j, x in enumerate(self.mtp_list):
            u = TemplateUnit()
            if j == 0:
                self.prefetch(u, "mtp")
                self.gather(u, "mtp")
            if st.cp:  # roll_tensor's boundary exchanges with the neighbouring cp ranks
                u.add(K["cp_p2p"], CP_RING, "cp_mtp_roll", "cp_send_recv")
            self.block(u, K["embedding"], "embedding_fwd", before=False, after=True)
            u.add(K["forward"], COMPUTE, "mtp_proj_fwd", "mtp_proj_fwd")
            self.mtp_comm(u, "fwd")
            self.fwd_parts.append((u, [x]))
            self.fwd_parts.append((self.layer_fwd(st.mtp_moe, False), [x]))

    def output_layer(self) -> None:
        """The last stage's output layer and loss, once per prediction (1 + N with N MTP
        layers): its forward, and its backward as the first backward unit."""
        st = self.st
        u = TemplateUnit()
        self.prefetch(u, "last")
        self.gather(u, "last")
        for _ in range(1 + st.mtp):
            self.block(u, K["output"], "output_fwd", before=True, after=False)
        self.fwd_parts.append((u, [-1]))

        def out_bwd(u: TemplateUnit) -> None:
            self.gather(u, "last")
            for _ in range(1 + st.mtp):
                self.block(u, K["output"], "output_bwd", before=False, after=True)

        self.backward_unit([-1], out_bwd, "last")

    def layer_backward(self, u: TemplateUnit, with_recompute: bool, is_moe: bool, swa: bool) -> None:
        """One layer's backward (its recomputed forward first under full recomputation or the
        selective modules), with its bucket's ZeRO-3 gather."""
        st, mods, sp = self.st, self.mods, self.sp
        attn = "attention_swa" if swa else "attention"  # a windowed layer's ops
        self.gather(u, "moe" if is_moe else "layer")
        if st.selective_op:  # torchtitan's per-op checkpointing: the block's forward
            # ops it did not save run again when its backward starts; with tensor parallelism
            # the all-gathers before the column-parallel linears too (not in the save list;
            # the reduce-scatters are), on the TP lane as in the forward, pipelined with the
            # recomputed GEMM they feed under tp_comm_overlap (torchtitan's async TP)
            for op in SAC_GATHERS:
                if st.tp_overlap:
                    ag = u.add(K["tp_comm"], COMM, f"tp_all_gather@{op}", "tp_all_gather")
                    u.side.append((K["tp_comm"], SOURCE_INDEX[f"tp_all_gather@{op}:hidden"],
                                   OP["tp_all_gather"], ag, -1))
                elif st.tp and sp:
                    self.comm(u, "all_gather")
                u.add(K["recompute"], COMPUTE, op, op)
        if with_recompute:
            self.block(u, K["recompute"], attn + "_fwd", True, True)
            if is_moe:
                self.moe_fwd(u, K["recompute"])
            else:
                self.block(u, K["recompute"], "mlp_fwd", True, True)
        # selective recomputation by module (Megatron-Core --recompute-modules): the
        # checkpointed module runs again when the backward reaches its output
        if is_moe and "moe" in mods:
            self.moe_fwd(u, K["recompute"], module=True)
        elif not is_moe and "mlp" in mods:
            if not st.norms[1]:  # the pre-MLP norm fused into fc1 runs with it
                u.add(K["recompute"], COMPUTE, "layernorm_fwd", "layernorm_fwd")
            self.block(u, K["recompute"], "mlp_core_fwd", True, True)
        # only the norms that are modules of their own (model_math.norms_separate)
        if "layernorm" in mods and (is_moe or st.norms[1]):  # the pre-MLP norm's output
            u.add(K["recompute"], COMPUTE, "layernorm_fwd", "layernorm_fwd")
        if is_moe:
            self.moe_bwd(u)
        else:
            self.block(u, K["backward"], "mlp_bwd", True, True)
        if "layernorm" in mods and st.norms[0]:  # the input norm's output, QKV's input
            u.add(K["recompute"], COMPUTE, "layernorm_fwd", "layernorm_fwd")
        if "mla_up_proj" in mods:  # MLA's Q, K, V rebuilt from the kept latents
            u.add(K["recompute"], COMPUTE, "mla_up_proj_fwd", "mla_up_proj_fwd")
        if st.selective and st.cp:  # the core recomputed runs its ring again
            self.ring(u, K["recompute"], "fwd", None)
        elif st.selective:
            core = "attention_core_swa_fwd" if swa else "attention_core_fwd"
            u.add(K["recompute"], COMPUTE, core, core)
        self.block(u, K["backward"], attn + "_bwd", True, True)

    def mtp_backward(self) -> None:
        """The MTP layers' backward first (they ran last): the transformer layer (recomputed
        under full recomputation of every layer: Megatron-Core's MTP layer checkpoints it by the
        uniform method, ``st.mtp_recompute``), then eh_proj, its
        collectives and the shifted tokens' embedding; the "mtp" bucket completes with the
        first."""
        st = self.st
        for j in reversed(range(st.mtp)):
            x = self.mtp_list[j]

            def mtp_layer_bwd(u: TemplateUnit) -> None:
                self.layer_backward(u, st.mtp_recompute, st.mtp_moe, False)

            self.backward_unit([x], mtp_layer_bwd, "moe" if st.mtp_moe else "layer")

            def mtp_pre_bwd(u: TemplateUnit, j: int = j) -> None:
                if j == st.mtp - 1:
                    self.gather(u, "mtp")
                self.mtp_comm(u, "bwd")
                self.block(u, K["backward"], "mtp_proj_bwd", before=False, after=False)
                self.block(u, K["embedding"], "embedding_bwd", before=True, after=False)

            self.backward_unit([x], mtp_pre_bwd, "mtp", reduces=j == 0)

    def layers_backward(self) -> None:
        """The layers' backwards in reverse layer order: those not recomputed, then the
        chunk's first ``recomputed`` layers with their forwards again (Megatron's block
        method)."""
        st = self.st
        for with_recompute in (False, True):
            layers = self.layers
            chosen = layers[st.recomputed:] if not with_recompute else layers[:st.recomputed]
            if not chosen:
                continue
            for is_moe, swa, run in self.runs(chosen[::-1]):
                def layer_bwd(u: TemplateUnit, with_recompute: bool = with_recompute,
                              is_moe: bool = is_moe, swa: bool = swa) -> None:
                    self.layer_backward(u, with_recompute, is_moe, swa)

                self.backward_unit(run, layer_bwd, "moe" if is_moe else "layer")

    def embedding_backward(self) -> None:
        """The first stage's embedding backward: it scatters gradients and needs no weights
        (no ZeRO-3 gather)."""
        def emb_bwd(u: TemplateUnit) -> None:
            self.block(u, K["embedding"], "embedding_bwd", before=True, after=False)

        self.backward_unit([-1], emb_bwd, "first")

    def pass_through(self) -> None:
        """A virtual stage without layers (a custom pipeline layout may leave one empty, as
        Megatron-Core allows): it receives and sends each micro-batch on, in no time."""
        for kind, parts in ((K["forward"], self.fwd_parts), (K["backward"], self.bwd_parts)):
            u = TemplateUnit()
            u.add(kind, COMPUTE, "pass_through", "pass_through")
            parts.append((u, [-1]))
