"""People check the judge: a daily review queue, labels in the store, judge-human agreement as a live metric, and
shadow candidates measured against the labels before anyone promotes them.

- ``queue``: which verdicts are set aside each day, and why (uniform, failing, borderline, flagged);
- ``store``: the queue, labels and shadow verdicts in the result store's database (``ReviewStore``);
- ``agreement``: weighted κ, ±1 and pass/fail agreement of the uniform share's labels, with intervals;
- ``labels_io``: labels in and out as JSON lines or CSV (the format ``calibrate`` reads);
- ``pages`` and ``web``: the review page (server-rendered, every trace byte escaped) on its own listener;
- ``shadow``: a candidate configuration judged on the labelled set and a live sample, never in the metrics;
- ``step``: the daemon's step that fills the queue and publishes agreement each cycle.
"""
