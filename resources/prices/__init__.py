"""Example price sheets for ``vtrain sweep --gpus-from`` (docs/gpu_choice.md)."""
