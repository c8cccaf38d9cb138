"""Dead-letter tools: read ``T.dlq`` (list, show) and redrive dead letters to ``T``.

The wire form of a dead letter is spectral/kafka/dlq.py. Redrive keeps each record's original
key, value and headers (so its idempotency key, and with it the consumer's dedup, is unchanged)
and adds the failure history; which dead letters were redriven is recorded in
``core.dlq_redrives`` so none is redriven twice (see redrive.py).
"""
