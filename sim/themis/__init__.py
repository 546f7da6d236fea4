"""Golden models of Themis (Themis-S, Themis-D, the wire pipelines), its closed-loop network (``net``) and its
random traces (``traffic``)."""
