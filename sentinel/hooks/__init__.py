"""Training-side hooks: code that runs inside a user's job and answers Sentinel's checkpoint requests.

``sentinel.hooks.ack`` is the file protocol both sides share (no dependency beyond msgspec);
``sentinel.hooks.torch`` is the PyTorch hook (optional extra ``torch``).
"""
