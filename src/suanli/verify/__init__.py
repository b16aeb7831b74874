"""``suanli verify``: check a node's GPUs against the datasheet catalog it is sold by.

Four parts, each testable on its own:

- ``judge``: pure. Thresholds, the catalog comparison and the verdict with its reasons
  (wrong model, vGPU, too little memory, too few TFLOPS). No I/O, no torch.
- ``datasheet``: the catalog numbers a GPU model promises (the advisor's ``gpus.csv``).
- ``identity``: what NVML says each GPU is (nvidia-ml-py), and recordings of those
  answers (``RecordedNvml``) so the parsing is tested with real GPUs' outputs.
- ``measure``: PyTorch kernels timed the same way on ``cuda`` or ``cpu`` tensors: a
  memory pattern test, dense matmul TFLOPS, device copy, host<->device, peer-to-peer
  and an all-reduce. torch is imported there only, when a measurement runs.
- ``run``: puts them together into the ``suanli verify --json`` report.
"""
