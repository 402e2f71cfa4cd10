"""Apache Beam pipelines that write what ``schemas`` defines; never imports ``trainer``."""
