"""Names of Megatron-LM's command-line arguments that vtrain does not map to a session field.

Megatron-LM's ``megatron/training/arguments.py`` builds one ``argparse`` parser
(``allow_abbrev=False``) from groups (``_add_network_size_args``,
``_add_training_args`` ...); ``pretrain_gpt.py`` parses with
``parse_args`` and stops on an argument it does not define. vtrain's
importer (:mod:`core.megatron_args`) does the same: an argument that is
neither mapped (:data:`core.megatron_args.ARGUMENTS`) nor named here is
refused with a close-match suggestion.

The arguments named here are sorted by what they can do to the work of a
training iteration:

* :data:`TIMING_ARGUMENTS` may change the iteration time (kernels, fusions,
  communication schedules, offloading, structures vtrain does not model):
  the importer lists them as *ignored*.
* :data:`NEUTRAL_ARGUMENTS` cannot (logging, paths, checkpointing, data,
  tokenizer files, learning-rate schedule, optimizer hyper-parameters,
  initialization, numerics-only constants such as RoPE's base, norm epsilon,
  YaRN's mscale, loss coefficients): listed apart as not changing the work.

:data:`REMOVED_ARGUMENTS` are names Megatron-LM's ``validate_args`` rejects
("no longer valid") with the argument to use instead.

Only names known to exist in Megatron-LM (core_r0.9 to core_r0.13 and the
pre-core names still met in launch scripts) are listed; a launch with an
argument of another script or fork can be read with ``--allow-unknown``.
"""

from __future__ import annotations

__all__ = ["TIMING_ARGUMENTS", "NEUTRAL_ARGUMENTS", "REMOVED_ARGUMENTS", "GROUPS"]

#: argparse group -> (arguments that may change the iteration time, arguments that cannot),
#: each a whitespace-separated string of names. Arguments vtrain maps are not repeated here.
GROUPS: dict[str, tuple[str, str]] = {
    # _add_network_size_args
    "network size": (
        """--encoder-num-layers --decoder-num-layers --relative-attention-num-buckets
        --relative-attention-max-distance --use-rotary-position-embeddings --no-position-embedding
        --mrope-section --bert-no-binary-head --is-hybrid-model
        --heterogeneous-layers-config-path --heterogeneous-layers-config-encoded-json
        --qk-l2-norm""",
        # --max-position-embeddings only sizes the learned position table (its s*h parameters
        # are counted from --seq-length); RoPE's base, scaling and share of the head, the norms'
        # epsilon and (1 + gamma) form, the GELU variant change numbers, not the work
        """--max-position-embeddings --rotary-base --rotary-percent --rotary-interleaved
        --rotary-seq-len-interpolation-factor --use-rope-scaling --rope-scaling-factor
        --norm-epsilon --apply-layernorm-1p --apply-residual-connection-post-layernorm
        --openai-gelu --onnx-safe"""),
    # _add_mla_args (YaRN's scaling of MLA's rotary part), _add_mtp_args
    "multi-latent attention, multi-token prediction": (
        "",
        "--rotary-scaling-factor --mscale --mscale-all-dim --mtp-loss-scaling-factor"),
    # _add_regularization_args
    "regularization": (
        "",
        """--attention-dropout --hidden-dropout --weight-decay --start-weight-decay
        --end-weight-decay --weight-decay-incr-style --clip-grad --adam-beta1 --adam-beta2
        --adam-eps --sgd-momentum"""),
    # _add_training_args
    "training": (
        """--rampup-batch-size --decrease-batch-size-if-needed --distribute-saved-activations
        --tp-comm-overlap-cfg --disable-tp-comm-overlap-ag --disable-tp-comm-overlap-rs
        --tp-comm-overlap-rs-dgrad --disable-tp-comm-bulk-dgrad --disable-tp-comm-bulk-wgrad
        --disable-tp-comm-split-ag --disable-tp-comm-split-rs --empty-unused-memory-level
        --deterministic-mode --no-masked-softmax-fusion --no-bias-gelu-fusion
        --no-bias-swiglu-fusion --no-bias-dropout-fusion --no-rope-fusion
        --optimizer
        --optimizer-cpu-offload --optimizer-offload-fraction --use-torch-optimizer-for-cpu-offload
        --overlap-cpu-optimizer-d2h-h2d --no-pin-cpu-grads --no-pin-cpu-params
        --use-precision-aware-optimizer --main-grads-dtype --main-params-dtype --exp-avg-dtype
        --exp-avg-sq-dtype --no-async-tensor-model-parallel-allreduce --no-persist-layer-norm
        --no-gradient-accumulation-fusion --use-legacy-models --manual-gc --manual-gc-interval
        --enable-cuda-graph --cuda-graph-warmup-steps --external-cuda-graph --cuda-graph-scope""",
        """--log-interval --exit-interval --exit-duration-in-mins --exit-signal-handler
        --tensorboard-dir --profile --profile-step-start --profile-step-end --profile-ranks
        --use-pytorch-profiler --record-memory-history --memory-snapshot-path
        --check-for-nan-in-loss-and-grad --no-check-for-nan-in-loss-and-grad
        --check-for-spiky-loss --check-for-large-grads --use-cpu-initialization --dataloader-type
        --use-mcore-models --iterations-to-skip --result-rejected-tracker-filename
        --disable-gloo-process-groups --check-weight-hash-across-dp-replicas-interval
        --no-manual-gc-eval --calculate-per-token-loss --no-clone-scatter-output-in-embedding
        --tp-comm-bootstrap-backend"""),
    # _add_rerun_machine_args, _add_initialization_args
    "rerun machine, initialization": (
        "",
        """--rerun-mode --error-injection-rate --error-injection-type --seed
        --data-parallel-random-init --init-method-std --init-method-xavier-uniform"""),
    # _add_learning_rate_args
    "learning rate": (
        "",
        """--lr --lr-decay-style --lr-wsd-decay-style --lr-decay-iters --lr-decay-samples
        --lr-wsd-decay-samples --lr-wsd-decay-iters --lr-warmup-fraction --lr-warmup-iters
        --lr-warmup-samples --lr-warmup-init --min-lr --override-opt_param-scheduler
        --use-checkpoint-opt_param-scheduler --decoupled-lr --decoupled-min-lr"""),
    # _add_checkpointing_args
    "checkpointing": (
        "",
        """--save --save-interval --no-save-optim --no-save-rng --load --no-load-optim
        --no-load-rng --non-persistent-save-interval --non-persistent-ckpt-type
        --non-persistent-global-ckpt-dir --non-persistent-local-ckpt-dir
        --non-persistent-local-ckpt-algo --finetune --pretrained-checkpoint --ckpt-step
        --no-initialization --use-checkpoint-args --use-mp-args-from-checkpoint-args
        --no-use-tokenizer-model-from-checkpoint-args --exit-on-missing-checkpoint
        --use-dist-ckpt --use-persistent-ckpt-worker --auto-detect-ckpt-format
        --dist-ckpt-format --ckpt-format --ckpt-convert-format --ckpt-convert-save
        --ckpt-convert-update-legacy-dist-opt-format --ckpt-fully-parallel-save
        --no-ckpt-fully-parallel-save --async-save --ckpt-fully-parallel-load
        --ckpt-assume-constant-structure --dist-ckpt-strictness"""),
    # _add_mixed_precision_args
    "mixed precision": (
        """--fp32-residual-connection --attention-softmax-in-fp32 --fp16-lm-cross-entropy
        --first-last-layers-bf16 --num-layers-at-start-in-bf16 --num-layers-at-end-in-bf16""",
        """--loss-scale --initial-loss-scale --min-loss-scale --loss-scale-window --hysteresis
        --apply-query-key-layer-scaling"""),
    # _add_distributed_args
    "distributed": (
        """--encoder-tensor-model-parallel-size --encoder-pipeline-model-parallel-size
        --pipeline-model-parallel-split-rank --microbatch-group-size-per-virtual-pipeline-stage
        --no-overlap-p2p-communication --overlap-p2p-communication-warmup-flush
        --defer-embedding-wgrad-compute --wgrad-deferral-limit --no-align-grad-reduce
        --ddp-num-buckets --ddp-bucket-size --ddp-pad-buckets-for-high-nccl-busbw
        --ddp-average-in-collective --overlap-param-gather-with-optimizer-step
        --no-align-param-gather --no-scatter-gather-tensors-in-pipeline --use-ring-exchange-p2p
        --nccl-ub --use-sharp --use-custom-fsdp --data-parallel-sharding-strategy
        --gradient-reduce-div-fusion --suggested-communication-unit-size
        --keep-fp8-transpose-cache-when-using-custom-fsdp
        --nccl-communicator-config-path
        --use-tp-pp-dp-mapping""",
        """--distributed-backend --distributed-timeout-minutes --local-rank --local_rank
        --lazy-mpu-init --init-model-with-meta-device"""),
    # _add_validation_args, _add_autoresume_args
    "validation, autoresume": (
        "",
        "--eval-iters --eval-interval --test-mode --skip-train --adlr-autoresume "
        "--adlr-autoresume-interval"),
    # _add_tokenizer_args (the vocabulary's size comes from --vocab-size or --tokenizer-type;
    # extra ids and tiktoken's special tokens add to it)
    "tokenizer": (
        "--vocab-extra-ids --tiktoken-num-special-tokens --tiktoken-special-tokens",
        "--vocab-file --merge-file --tokenizer-model --tiktoken-pattern"),
    # _add_data_args
    "data": (
        "--encoder-seq-length --decoder-seq-length --retriever-seq-length",
        """--data-path --split --train-data-path --valid-data-path --test-data-path
        --data-args-path --per-split-data-args-path --data-cache-path --no-mmap-bin-files
        --mock-data --num-workers --reset-position-ids --reset-attention-mask --eod-mask-loss
        --no-create-attention-mask-in-dataloader --num-dataset-builder-threads
        --object-storage-cache-path --mid-level-dataset-surplus --s3-cache-path --sample-rate
        --mask-prob --short-seq-prob"""),
    # _add_logging_args, _add_straggler_detector_args, _add_one_logger_args,
    # _add_ft_package_args, _add_config_logger_args, _add_workload_inspector_server_args
    "logging": (
        "",
        """--log-params-norm --log-num-zeros-in-grad --log-throughput --log-progress
        --timing-log-level --timing-log-option --tensorboard-log-interval --tensorboard-queue-size
        --log-timers-to-tensorboard --log-loss-scale-to-tensorboard
        --no-log-loss-scale-to-tensorboard --log-validation-ppl-to-tensorboard
        --log-memory-to-tensorboard --log-world-size-to-tensorboard --wandb-project
        --wandb-exp-name --wandb-save-dir --logging-level --log-energy --log-straggler
        --disable-straggler-on-startup --straggler-ctrlr-port --straggler-minmax-count
        --no-one-logger --one-logger-project --one-logger-run-name --one-logger-async
        --app-tag-run-name --app-tag-run-version --enable-ft-package --calc-ft-timeouts
        --config-logger-dir --run-workload-inspector-server"""),
    # _add_moe_args (the router's score function, groups, bias and loss coefficients act on
    # the router's small (tokens, experts) scores: numbers, not the work)
    "mixture of experts": (
        """--moe-shared-expert-overlap --moe-grouped-gemm --moe-use-legacy-grouped-gemm
        --moe-layer-recompute --moe-extended-tp --moe-use-upcycling --moe-router-dtype
        --moe-router-force-load-balancing --moe-router-padding-for-fp8
        --moe-deepep-num-sms
        --moe-permute-fusion --moe-expert-capacity-factor --moe-pad-expert-input-to-capacity
        --moe-token-drop-policy --moe-apply-probs-on-input""",
        """--moe-router-load-balancing-type --moe-router-score-function --moe-router-pre-softmax
        --moe-router-topk-scaling-factor
        --moe-router-enable-expert-bias --moe-router-bias-update-rate --moe-aux-loss-coeff
        --moe-z-loss-coeff --moe-input-jitter-eps --moe-per-layer-logging"""),
    # _add_experimental_args
    "experimental": (
        """--spec --hybrid-attention-ratio --hybrid-mlp-ratio --hybrid-override-pattern
        --yaml-cfg --enable-experimental --mamba-state-dim --mamba-head-dim --mamba-num-groups""",
        ""),
    # _add_transformer_engine_args (delayed scaling's amax history and margin are numbers;
    # --no-fp8-wgrad runs the weight-gradient GEMMs in higher precision)
    "transformer engine": (
        "--transformer-impl --no-fp8-wgrad",
        """--fp8-margin --fp8-interval --fp8-amax-history-len --fp8-amax-compute-algo
        --te-rng-tracker --inference-rng-tracker"""),
    # _add_inference_args: used by the text-generation server, not by training
    "inference": (
        "",
        """--inference-batch-times-seqlen-threshold --max-tokens-to-oom --output-bert-embeddings
        --bert-embedder-type --flash-decode --inference-max-requests --inference-max-seq-length"""),
    # Megatron-LM before Megatron-Core (2021-2023) names still met in launch scripts
    "pre-core names": (
        """--DDP-impl --no-contiguous-buffers-in-local-ddp --use-contiguous-buffers-in-local-ddp
        --async-tensor-model-parallel-allreduce""",
        "--layernorm-epsilon --data-impl --no-query-key-layer-scaling --seq-length-file"),
}

#: Megatron-LM arguments vtrain does not map that may change the iteration time (listed as ignored).
TIMING_ARGUMENTS = frozenset(w for timing, _ in GROUPS.values() for w in timing.split())
#: Megatron-LM arguments that cannot change the iteration time (listed apart, never mapped).
NEUTRAL_ARGUMENTS = frozenset(w for _, neutral in GROUPS.values() for w in neutral.split())
#: Names Megatron-LM's validate_args rejects as "no longer valid", with the argument to use.
REMOVED_ARGUMENTS = {"--batch-size": "--micro-batch-size", "--warmup": "--lr-warmup-fraction",
                     "--model-parallel-size": "--tensor-model-parallel-size"}
