"""How far to trust the judge. In: labelled conversations and the judge's verdicts on them. Out: agreement
statistics (``agreement``) and the drift canaries' runs and gauges (``canary``)."""
