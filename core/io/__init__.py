"""Files in and out: session files, vTrain JSON, Hugging Face configs, Megatron-LM launches
(reading, argument table, export and rules), torchtitan, Perfetto traces (written), PyTorch
profiler (Kineto) traces (read: kineto, kineto_classes), price sheets of GPU kinds (price_sheet).

A new input or output format goes here; it builds sessions and reads results, never times.
"""
