"""The online monitor (``citemon run``): built by :func:`~citemon._service.monitor.build_monitor`.

One answer's path, Kafka record to Prometheus counter (``docs/architecture.md`` draws it):
:mod:`~citemon._service.intake` takes the record into the :mod:`~citemon._service.ledger` and
decodes it; :mod:`~citemon._service.answers` scores the answer (held by
:mod:`~citemon._service.answers` while the judge is down) and finishes it in the ledger;
:mod:`~citemon._service.pipeline` commits it with its :mod:`~citemon._service.outputs` and counts
it once confirmed. Each stage wakes the tasks waiting on it through a
:class:`~citemon._service.lifecycle.Signal` of its own (the architecture page says who wakes
whom).
"""
