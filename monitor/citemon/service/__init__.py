"""The online monitor (``citemon run``): the pipeline, offset tracking and delivery, bad batches,
sampling, the results-topic reader and the settings.

Data flows one way: Kafka → spans (:mod:`citemon.otlp`) → records → claims → judge → scores
(:mod:`citemon.engine`) → metrics (:mod:`citemon.metrics`) and the results topic.
"""
