"""The online monitor (``citemon run``): built by :func:`~citemon.service.monitor.build_monitor`.

One answer's path, Kafka record to Prometheus counter (``docs/architecture.md`` draws it):
:mod:`~citemon.service.intake` takes the record into the :mod:`~citemon.service.ledger` and
decodes it; :mod:`~citemon.service.answers` scores the answer (held by
:mod:`~citemon.service.gate` while the judge is down) and finishes it in the ledger;
:mod:`~citemon.service.pipeline` commits it with its :mod:`~citemon.service.outputs` and counts
it once confirmed.
"""
