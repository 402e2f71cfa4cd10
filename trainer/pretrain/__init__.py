"""``berttrain pretrain`` and ``berttrain plot``: the pretraining loop (``loop``), what a run starts from, checked
before the first step (``inputs``), the flags a resume must keep (``resume``), and the curves of its metrics
(``plot``)."""
